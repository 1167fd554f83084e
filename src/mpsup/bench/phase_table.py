"""The whole-model phases of a run, as the first table a user reads: each phase's time, tokens/s, peak
memory, how much of it the layer workloads explain, and what ran on the CPU instead of the device."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from mpsup.console import safe
from mpsup.model.coverage import OVER_WHOLE_NOTE, fit_note, phase_figures
from mpsup.units import fmt_time


def _bytes(v: Any) -> str:
    return f"{v / 2**30:.2f} GiB" if isinstance(v, int | float) and v else "-"


# Where either build predates 2.15, what MPSGraph allocates on its own (a video VAE's pad, which 2.15 moved)
# shows only in the driver's figure: the allocator's peak alone can read the same on both sides there.
DRIVER_BESIDE_BEFORE = (2, 15)


def _release(version: object) -> tuple[int, int] | None:
    parts = str(version or "").split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


def peak_label(device: object) -> str:
    """What the peak column holds: the allocator's peak on a GPU, the workload's resident-set peak on the CPU."""
    return "peak RSS" if device == "cpu" else "allocator peak"


def driver_beside(record: dict[str, Any]) -> bool:
    """On MPS, the driver's maximum goes beside the allocator's peak wherever either side predates 2.15 (or its
    version cannot be read)."""
    if record.get("device") != "mps":
        return False
    releases = [_release(e.get("torch_version")) for e in record.get("environments") or []]
    return any(r is None or r < DRIVER_BESIDE_BEFORE for r in releases)


DRIVER_NOTE = (
    "allocator peak: torch's allocated_bytes.all.peak (blocks in the MPS allocator's pools); driver max: the "
    "Metal driver's currentAllocatedSize, the largest read at setup and after each timed block, which includes "
    "MPSGraph's own allocations"
)


def render_phases(record: dict[str, Any], console: Console) -> None:
    envs = record["environments"]
    figures = {e["label"]: phase_figures(record, e["label"]) for e in envs}
    first = figures[envs[0]["label"]]
    if not first:
        return
    t = Table(title="Your model, run whole (median per call)", title_justify="left")
    t.add_column("phase")
    for e in envs:
        t.add_column(safe(e["label"]), justify="right")
    t.add_column("tokens/s", justify="right")
    t.add_column(peak_label(record.get("device")), justify="right")
    driver = driver_beside(record)
    if driver:
        t.add_column("driver max", justify="right")
    t.add_column("layers explain", justify="right")
    notes: list[str] = [DRIVER_NOTE] if driver else []
    whole_said = False
    for phase, doc in first.items():
        cells = []
        for e in envs:
            d = figures[e["label"]].get(phase, {})
            cells.append(fmt_time(d["median_s"]) if d.get("median_s") else safe(d.get("status") or "-"))
        tps = f"{doc['tokens_per_s']:,.1f}" if doc.get("tokens_per_s") else "-"
        cov = f"{doc['layer_coverage']:.0%}" if doc.get("layer_coverage") is not None else "n/a"
        if (doc.get("layer_coverage") or 0) > 1 and OVER_WHOLE_NOTE not in notes:
            notes.append(OVER_WHOLE_NOTE)
        driver_cells = []
        if driver:
            seen = [_bytes(figures[e["label"]].get(phase, {}).get("driver_memory_max_bytes")) for e in envs]
            driver_cells = [" / ".join(seen)]
        t.add_row(safe(phase), *cells, tps, _bytes(doc.get("peak_memory_bytes")), *driver_cells, cov)
        scaled = doc.get("scaled_from_blocks")
        if doc.get("fit") and not doc.get("depth_forced") and (scaled or not whole_said):
            # Whole: said once for the model; a prefix: said for each phase, whose activations differ.
            notes.append(fit_note(phase, doc["fit"], scaled, len(envs)))
            whole_said = whole_said or not scaled
        elif scaled:
            why = "--depth" if doc.get("depth_forced") else "the model did not fit whole"
            notes.append(f"{phase}: scaled from {scaled} blocks ({why})")
        if doc.get("fallback_ops"):
            notes.append(f"{phase}: ran on the CPU (no MPS kernel): {', '.join(doc['fallback_ops'][:8])}")
        for e in envs:
            d = figures[e["label"]].get(phase, {})
            if d.get("status") not in (None, "ok") and d.get("reason"):
                notes.append(f"{phase} ({e['label']}): {status_text(d['status'], d['reason'])}")
                break
    console.print(t)
    for note in notes:
        console.print(f"  {safe(note)}", highlight=False, soft_wrap=True)


def status_text(status: object, reason: object) -> str:
    """`unsupported: transformers is not installed`, not `unsupported: Unsupported: transformers ...`: a
    workload's or smoke test's status and its reason, the reason's own leading status word dropped."""
    status, reason = str(status), str(reason or "")
    if reason.lower().startswith(status.lower()):
        reason = reason[len(status) :].lstrip(" :-")
    return f"{status}: {reason}" if reason else status
