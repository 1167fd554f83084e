"""The bench screen's tables: smoke tests, one table per part, and the workloads that take the most time."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from mpsup.bench.phase_table import status_text
from mpsup.bench.run_view import RunView
from mpsup.bench.screen_text import is_narrow
from mpsup.console import safe
from mpsup.runs.schema import EnvRun, Memory, SmokeResult, WorkloadRun
from mpsup.stats import geometric_mean
from mpsup.units import fmt_bytes, fmt_rate, fmt_span, fmt_time

PART_TITLES = {
    "linear": "BF16 linear layers of real models",
    "moe": "MoE grouped matmul vs per-expert loop",
    "fp8": "FP8",
    "pad": "Constant padding (Wan2.2 VAE decoder)",
    "int8": "INT8 matmul (torch._int_mm)",
    "conv3d": "3D convolutions (Wan2.2 VAE)",
    "roofline": "Roofline probes",
    "model": "Your model's workloads",
}

TOP_WORKLOADS = 5  # the main view's workloads: those that take the most time


def smoke_cell(status: str | None, message: str | None) -> str:
    """`unsupported: Metal kernels need...`, not `unsupported: Unsupported: Metal kernels need...`."""
    shown = "?" if status is None else status
    return shown if shown == "pass" else status_text(shown, message)


def _ci(env: EnvRun) -> tuple[float | None, float | None]:
    """The median's 95% interval, as bench summarized it (none where nothing was measured)."""
    low, high = env.extra.get("ci_low"), env.extra.get("ci_high")
    return low, high


def rate_cell(env: EnvRun) -> str:
    med = env.median
    if not med:
        return "-"
    flops, moved = env.flops_per_call, env.bytes_per_call
    parts = []
    if flops:
        parts.append(fmt_rate(flops / med, "FLOP/s"))
    if moved:
        parts.append(fmt_rate(moved / med, "B/s"))
    return ", ".join(parts) or "-"


def memory_cell(env: EnvRun) -> str:
    # The workload's own peak or nothing: peak_rss is the worker process's high-water mark and
    # driver_allocated one reading at teardown, so neither says what this workload took.
    m = env.memory or Memory()
    return fmt_bytes(m.peak_allocated or m.workload_peak)


def rate_narrow(env: EnvRun) -> str:
    # One figure fits: the one that bounds this workload (bytes for low arithmetic intensity, FLOP otherwise).
    med, flops, moved = env.median, env.flops_per_call, env.bytes_per_call
    if not med or not (flops or moved):
        return "-"
    if flops and (not moved or flops / moved > 50):
        return fmt_rate(flops / med, "FLOP/s")
    return fmt_rate((moved or 0.0) / med, "B/s")  # moved is set here: flops alone took the branch above


def is_measured(w: WorkloadRun, label: str) -> bool:
    return bool(w.env(label).median)


_SMOKE_STYLES = {"pass": "green", "fail": "red", "crash": "red", "unsupported": "yellow", "fallback": "yellow"}


def smoke_table(view: RunView, console: Console) -> None:
    run = view.run
    if not run.smoke:
        return
    t = Table(title="Smoke tests (device vs CPU reference)", title_justify="left")
    t.add_column("feature")
    for label in run.labels:
        t.add_column(safe(label))
    for s in run.smoke:
        cells = []
        for label in run.labels:
            r = s.envs.get(label) or SmokeResult()
            style = _SMOKE_STYLES.get(r.status or "", "")
            msg = safe(smoke_cell(r.status, r.message))
            cells.append(f"[{style}]{msg}[/]" if style else msg)
        t.add_row(safe(s.feature), *cells)
    console.print(t)


def part_tables(view: RunView, console: Console) -> None:
    run, first = view.run, view.first
    parts: dict[str, list[WorkloadRun]] = {}
    for w in run.workloads:
        parts.setdefault(w.part or "other", []).append(w)
    for part, ws in parts.items():
        if part != "phase":  # shown whole by render_phases
            console.print(_part_table(part, ws, run.labels, is_narrow(console)))
    linear = [med for w in run.workloads if w.part == "linear" and (med := w.env(first).median)]
    if linear:
        whose = f" ({safe(first)})" if view.paired else ""
        console.print(
            f"Suite geometric mean time over {len(linear)} linear shapes{whose}: {fmt_time(geometric_mean(linear))}"
        )


def _part_table(part: str, ws: list[WorkloadRun], labels: list[str], narrow: bool) -> Table:
    t = Table(
        title=PART_TITLES.get(part, safe(part)),
        title_justify="left",
        box=None if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        header_style="bold",
    )
    # The name is what --only takes: never cut (rich shrinks even no_wrap columns unless given a floor).
    t.add_column("workload", no_wrap=True, min_width=max((len(w.name) for w in ws), default=8))
    if not narrow:
        t.add_column("source", overflow="fold", max_width=28)
    for label in labels:
        t.add_column(safe(label) if narrow else f"{safe(label)} median", justify="right", no_wrap=True)
    # Paired, the interval is the first environment's median's alone: the comparison's own interval is
    # over the rounds' ratios, which only the report shows. Narrow, on two lines: no wider than its cells.
    sep = "\n" if narrow else " "
    t.add_column(f"95% CI{sep}({safe(labels[0])})" if len(labels) > 1 else "95% CI", justify="right", no_wrap=narrow)
    t.add_column("achieved", justify="right", no_wrap=narrow)
    if not narrow:
        t.add_column("peak mem", justify="right")
    skipped: dict[str, list[str]] = {}
    for w in ws:
        first = w.env(labels[0])
        source = [] if narrow else [safe(w.source or "")]
        if w.status != "ok" and not first.median:
            why = smoke_cell(w.status, w.reason)
            if narrow:
                skipped.setdefault(why, []).append(w.name)
                continue
            status = [f"[yellow]{safe(w.status)}[/]"] + [""] * (len(labels) - 1)
            t.add_row(safe(w.name), *source, *status, safe(why), "", "")
            continue
        meds = [fmt_time(w.env(label).median) for label in labels]
        tail = [rate_narrow(first)] if narrow else [rate_cell(first), memory_cell(first)]
        t.add_row(safe(w.name), *source, *meds, fmt_span(*_ci(first)), *tail)
    if narrow:
        # Not measured: one line per reason under the table, not a reason squeezed into a column.
        notes = [f"[yellow]{safe(why)}[/]: {safe(', '.join(names))}" for why, names in skipped.items()]
        t.caption = "\n".join(["medians; sources, peak memory: 100+ columns or --json", *notes])
        t.caption_justify = "left"
    return t


def top_workloads(view: RunView, console: Console) -> None:
    """The few workloads that take the most time (count x median): where a change would show most."""
    run, label = view.run, view.first
    timed = [
        (w, w.count * (w.env(label).median or 0.0))
        for w in run.workloads
        # A phase holds its layers, and an op replayed from a phase is a piece of one: `mpsup report` ranks those.
        if w.part not in ("phase", "op") and is_measured(w, label)
    ]
    total = sum(t for _, t in timed)
    if not timed or not total:
        return
    top = sorted(timed, key=lambda wt: -wt[1])[:TOP_WORKLOADS]
    headers = ["workload", *([safe(x) for x in run.labels] if view.paired else ["median"]), "+-95%", "rate", "share"]
    rows = [
        [
            safe(w.name),
            *[fmt_time(w.env(x).median) for x in run.labels],
            _half_width(w.env(label)),
            rate_narrow(w.env(label)),
            f"{spent / total:.0%}",
        ]
        for w, spent in top
    ]
    # Names are what --only takes and are never cut: where the row is too wide, the rate goes, then the interval.
    for drop in ("rate", "+-95%"):
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        if sum(widths) + 2 * (len(widths) - 1) <= console.width:
            break
        i = headers.index(drop)
        headers.pop(i)
        for r in rows:
            r.pop(i)
    # A model's phases are workloads too, but not among these: say which kind these are.
    kind = "layer workload" if any(w.part == "phase" for w in run.workloads) else "workload"
    # A line of its own, not the table's title: rich wraps a title at the table's width, however wide the console.
    console.print(
        f"The one measured {kind}"
        if len(timed) == 1
        else f"The {len(top)} of {len(timed)} measured {kind}s that take the most time",
        highlight=False,
    )
    t = Table(box=None, pad_edge=False, header_style="bold")
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r)
    console.print(t)


def _half_width(env: EnvRun) -> str:
    med, (low, high) = env.median, _ci(env)
    if not med or low is None or high is None:
        return "n/a"
    return f"{max(med - low, high - med) / med:.1%}"
