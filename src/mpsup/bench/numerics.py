"""Same answers? Each build's answer to a workload's first call, kept at setup, judged against a float64 truth.

While the run is timed, every setup of a workload that has a float answer saves that answer (worker/outputs.py)
with the digest of the values it computed on. After the last timed visit, one more worker, on the CPU, in the
baseline's interpreter (or `--reference`), builds each workload in float64 from the same values and compares
every saved answer with it (worker/truth.py): nothing the builds under test compute enters the truth, and no
timing runs while it works. The record's workload entry gets `numerics` (docs/reference/run-record.md); the
report decides (report/numerics.py).

Bounded: the reference takes at most `share` of the time the run has taken so far, phases first (they are the
verdict), then the ops that explain them, then the rest; what is left over is "not compared" with that reason."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.bench.events import NumericsDone, NumericsStarted
from mpsup.bench.workerproc import WorkerDied
from mpsup.paths import tmp_dir
from mpsup.progress import Progress
from mpsup.workloads import Workload

# The kinds whose answer is a tensor the reference can recompute; the rest (Metal kernels, a program run end to
# end) are not compared. A phase's other calls replayed together are judged one call at a time (`calls`).
KINDS = frozenset(
    {
        "model_phase",
        "op_replay",
        "op_group",
        "linear",
        "matmul",
        "conv",
        "pad",
        "copy",
        "embedding",
        "grouped_mm",
        "scaled_mm",
        "int_mm",
        "fp8_cast",
    }
)
# Parts whose sizes are picked to saturate the machine, not taken from a model: float64 copies of them are
# seconds each on a laptop's CPU and say nothing about a user's model.
SKIPPED_PARTS = frozenset({"roofline"})
MAX_ELEMENTS = 1 << 20  # compared per output (worker/outputs.py samples evenly past this)
DEFAULT_SHARE = 0.25  # of the run's time so far, the most the reference may take
TRUTH_TIMEOUT_S = 1800.0
# The least the reference may take: a short run's quarter would not cover one phase of a small model.
MIN_BUDGET_S = 10.0


def _order(w: Workload) -> int:
    return {"model_phase": 0, "op_replay": 1, "op_group": 2}.get(w.kind, 3)


@dataclass
class Saved:
    path: Path
    answer: dict[str, Any]  # the worker's `numerics` answer: saved, outputs, digest, reason


@dataclass
class NumericsCapture:
    """Where each setup saves its answer, and what came back. One per run; its folder goes at the end."""

    folder: Path
    share: float = DEFAULT_SHARE
    saved: dict[str, dict[str, list[Saved]]] = field(default_factory=dict)  # workload -> side -> visits
    count: int = 0
    summary: dict[str, Any] = field(default_factory=dict)  # what the pass did (the record's `numerics_pass`)

    @classmethod
    def create(cls, share: float = DEFAULT_SHARE) -> NumericsCapture:
        root = tmp_dir()
        root.mkdir(parents=True, exist_ok=True)
        return cls(Path(tempfile.mkdtemp(prefix="numerics-", dir=root)), share)

    def request(self, w: Workload, label: str) -> dict[str, Any] | None:
        """The setup request's `numerics` field for this workload and side, or None where it is not compared."""
        if w.kind not in KINDS or w.part in SKIPPED_PARTS:
            return None
        self.count += 1
        path = self.folder / f"{self.count}.pt"
        # A language model's extra answers (logits over the prompt, a greedy continuation) are compared from each
        # side's first visit only: a later visit does not compute them again.
        first = not self.saved.get(w.name, {}).get(label)
        return {"path": str(path), "max_elements": MAX_ELEMENTS, "extra": first}

    def note(self, w: Workload, label: str, want: dict[str, Any] | None, answer: Any) -> None:
        if want is None:
            return
        doc = answer if isinstance(answer, dict) else {"saved": False, "reason": "the worker kept no answer"}
        self.saved.setdefault(w.name, {}).setdefault(label, []).append(Saved(Path(want["path"]), doc))

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _text(v: Any, limit: int = 300) -> str:
    return " ".join(str(v).split())[:limit]


def _not_compared(reason: str, **extra: Any) -> dict[str, Any]:
    return {"status": "not_compared", "reason": reason, **extra}


def _usable(sides: dict[str, list[Saved]], labels: list[str]) -> tuple[dict[str, list[Saved]], str | None]:
    """Each side's saved visits, or why the workload cannot be compared."""
    kept: dict[str, list[Saved]] = {}
    for label in labels:
        visits = sides.get(label) or []
        good = [v for v in visits if v.answer.get("saved") is True and v.path.is_file()]
        if not good:
            why = next((_text(v.answer.get("reason")) for v in visits if v.answer.get("reason")), "no answer was kept")
            return {}, f"{label}: {why}"
        kept[label] = good
    digests = {label: {v.answer.get("digest") for v in good} for label, good in kept.items()}
    seen = set().union(*digests.values())
    if len(seen) != 1:
        return kept, "the builds computed on different values (their input digests differ)"
    return kept, None


def _depth(entry: dict[str, Any]) -> int | None:
    """The blocks the builds ran (a model too large for the device runs a prefix): the reference runs as many."""
    for env in (entry.get("envs") or {}).values():
        phase = env.get("phase") if isinstance(env, dict) else None
        depth = phase.get("depth") if isinstance(phase, dict) else None
        if isinstance(depth, int) and depth > 0:
            return depth
    return None


@dataclass
class Reference:
    """The reference worker: started on first use, asked one workload at a time."""

    request: Callable[[dict[str, Any], float], dict[str, Any]]
    facts: Callable[[], dict[str, Any]]


def judge(
    capture: NumericsCapture,
    workloads: list[Workload],
    entries: list[dict[str, Any]],
    labels: list[str],
    reference: Reference,
    *,
    elapsed_s: float,
    progress: Progress,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[int, dict[str, Any]]:
    """Each compared workload's `numerics` entry, by its index in `entries` (the record's workloads)."""
    by_name = {w.name: w for w in workloads}
    todo = [
        (i, by_name[e["name"]])
        for i, e in enumerate(entries)
        if isinstance(e, dict) and e.get("name") in capture.saved and e.get("name") in by_name
    ]
    todo.sort(key=lambda iw: _order(iw[1]))
    if not todo:
        return {}
    progress(NumericsStarted(len(todo)))
    # The reference's start (an interpreter, torch, the user's transformers) is not its work: started first.
    with contextlib.suppress(Exception):
        reference.facts()
    budget = max(capture.share * elapsed_s, MIN_BUDGET_S)
    spent = 0.0  # on what the share bounds: everything but the phases
    out: dict[int, dict[str, Any]] = {}
    took: dict[str, list[float]] = {}  # by kind, what each judged workload took
    skipped: list[tuple[int, Workload]] = []
    for i, w in todo:
        entry = entries[i]
        kept, why = _usable(capture.saved[w.name], labels)
        if entry.get("status") != "ok" and not kept:
            doc = _not_compared(why or "the workload was not measured")
        elif why is not None:
            doc = _not_compared(why, digests={label: [v.answer.get("digest") for v in s] for label, s in kept.items()})
        elif spent > budget and w.kind != "model_phase":
            doc = _not_compared(SHARE_SPENT.format(share=capture.share))
            skipped.append((i, w))
        else:
            t0 = clock()
            doc = _ask(reference, w, kept, entry)
            took_s = clock() - t0
            # The phases are the verdict: always judged, whatever they cost (an 8B prefill of 512 tokens is about
            # 8 TFLOP in float64); the share bounds what follows them.
            spent += took_s if w.kind != "model_phase" else 0.0
            doc["took_s"] = round(took_s, 3)
            took.setdefault(w.kind, []).append(took_s)
        out[i] = doc
        progress(NumericsDone(w.name, str(doc["status"])))
    capture.summary = _summary(capture.share, budget, spent, elapsed_s, took, skipped)
    more, share_for_all = capture.summary.get("skipped_estimate_s"), capture.summary.get("share_for_all")
    for i, _ in skipped:
        out[i]["reason"] += (
            f"; about {_duration(more)} more would judge every workload (--reference-share {share_for_all:g})"
            if more is not None and share_for_all is not None
            else "; a larger --reference-share judges the rest"
        )
    return out


SHARE_SPENT = "the float64 reference had used its share of the run ({share:.0%} of its time) on the workloads before it"


def _estimate(w: Workload, took: dict[str, list[float]]) -> float:
    """What judging `w` would take: its kind's mean so far; a group of calls as that many single ops (each call is
    judged alone); else the mean of every workload but the phases (a phase's whole forward says nothing of an op)."""

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    if took.get(w.kind):
        return mean(took[w.kind])
    if w.kind == "op_group" and took.get("op_replay"):
        return mean(took["op_replay"]) * len(w.params.get("op_group") or [])
    rest = [x for kind, xs in took.items() if kind != "model_phase" for x in xs]
    return mean(rest) if rest else 0.0


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _summary(
    share: float,
    budget: float,
    spent: float,
    elapsed_s: float,
    took: dict[str, list[float]],
    skipped: list[tuple[int, Workload]],
) -> dict[str, Any]:
    """The pass in figures (the record's `numerics_pass`): the phases' time, what the rest was allowed and took, and
    for the workloads it left for lack of time, what judging them would take (`_estimate`) and the
    --reference-share that would have given it."""
    every = [x for xs in took.values() for x in xs]
    estimate = sum(_estimate(w, took) for _, w in skipped)
    doc: dict[str, Any] = {
        "share": share,
        "phases_s": round(sum(took.get("model_phase", [])), 2),
        "budget_s": round(budget, 2),
        "spent_s": round(spent, 2),
        "judged": len(every),
        "skipped_for_share": len(skipped),
    }
    if skipped and estimate > 0:  # nothing of their kinds judged yet: no estimate rather than a wrong one
        doc["skipped_estimate_s"] = round(estimate, 1)
        # The share at which the same run would have judged them all, rounded up to a tenth.
        doc["share_for_all"] = math.ceil((spent + estimate) / max(elapsed_s, 1e-9) * 10) / 10
    return doc


ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
REFERENCE_MEMORY_SHARE = 0.5  # of the machine's memory, the most a float64 copy may take (a Mac shares it with its GPU)


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def too_large(w: Workload, memory: int | None) -> str | None:
    """Why the float64 copy of this workload must not be built here, or None: its tensors at 8 bytes an element,
    over half the machine's memory (unified on a Mac: overcommitting it can freeze the machine). A whole model is
    never copied whole (the reference draws one module at a time, and says itself when one module is too much)."""
    if w.kind == "model_phase":
        return None
    need = w.memory_bytes * 8 // ITEMSIZE.get(w.dtype, 4)
    if memory and need > REFERENCE_MEMORY_SHARE * memory:
        return (
            f"its float64 copy would need {need / 2**30:.1f} GiB, over {REFERENCE_MEMORY_SHARE:.0%} of this machine's "
            f"{memory / 2**30:.1f} GiB"
        )
    return None


def _ask(reference: Reference, w: Workload, kept: dict[str, list[Saved]], entry: dict[str, Any]) -> dict[str, Any]:
    big = too_large(w, _machine_memory())
    if big is not None:
        return _not_compared(big)
    req = {
        "op": "truth",
        "workload": w.spec(),
        "outputs": {label: [str(v.path) for v in visits] for label, visits in kept.items()},
        "max_elements": MAX_ELEMENTS,
        "depth": _depth(entry),
    }
    try:
        facts = reference.facts()
        ans = reference.request(req, TRUTH_TIMEOUT_S)
    except WorkerDied as exc:
        return _not_compared(f"the float64 reference died: {_text(exc)}")
    except Exception as exc:  # the reference could not start (its interpreter, its torch): said, never raised
        return _not_compared(f"the float64 reference could not run: {_text(exc)}")
    where: dict[str, Any] = {"python": str(facts.get("python", "")), "torch": str(facts.get("torch_version", ""))}
    peak = ans.get("peak_rss_bytes")
    if isinstance(peak, int) and not isinstance(peak, bool) and peak > 0:
        where["peak_rss_bytes"] = peak  # the reference process's largest resident size so far
    if ans.get("type") != "truth":
        return _not_compared(f"float64 cannot compute it on the CPU: {_text(ans.get('message'))}", reference=where)
    first = {label: visits[0].answer for label, visits in kept.items()}
    described = {o["name"]: o for a in first.values() for o in a.get("outputs") or [] if isinstance(o, dict)}
    outputs = []
    for o in ans.get("outputs") or []:
        if not isinstance(o, dict):
            continue
        d = described.get(o.get("name"), {})
        outputs.append({**o, "shape": d.get("shape"), "dtype": d.get("dtype")})
    digest = next(iter(first.values())).get("digest")
    if not outputs:
        return _not_compared("the float64 reference returned none of the builds' outputs", reference=where)
    doc: dict[str, Any] = {"status": "compared", "reference": where, "outputs": outputs, "digest": digest}
    if w.kind == "op_group":
        doc.pop("outputs")
        doc["calls"] = by_call(outputs)
    if isinstance(ans.get("language"), dict):
        doc["language"] = ans["language"]
    if ans.get("digest") != digest:
        # The truth computed on other values than the builds: its errors would measure that, not the builds.
        return _not_compared("the float64 reference computed on other values than the builds", reference=where)
    return doc


def by_call(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group's compared outputs ("c3.output") as one entry per call: its index in the group's calls and its
    outputs under their own names."""
    calls: dict[int, list[dict[str, Any]]] = {}
    for o in outputs:
        prefix, _, name = str(o.get("name")).partition(".")
        if prefix[:1] == "c" and prefix[1:].isdigit() and name:
            calls.setdefault(int(prefix[1:]), []).append({**o, "name": name})
    return [{"call": i, "outputs": outs} for i, outs in sorted(calls.items())]


def cleanup(capture: NumericsCapture | None) -> None:
    if capture is not None:
        with contextlib.suppress(OSError):
            capture.remove()
