"""The verdict's decision, as kinds: a paired run's from its main figure and calls, an A/A run's from its noise."""

from __future__ import annotations

import math
from dataclasses import replace

from mpsup.report.changes import WorkloadChange
from mpsup.report.findings import AACall, LayerCall, MainFigure, SetAside, StackCall, VerdictKind
from mpsup.report.phases import PhaseChange
from mpsup.runs.schema import RunRecord
from mpsup.stats import Interval, classify_change


def layer_call(
    main: Interval | None,
    changes: list[WorkloadChange],
    noise: list[str],
    threshold: float,
    memory: float | None,
    figure: MainFigure,
    torches: tuple[str, str],
) -> tuple[VerdictKind, LayerCall]:
    """A paired run's verdict from its main figure and the workloads called around it."""
    # A handful of "significant" workloads is what noise alone produces (5% of them by design), so a
    # direction only counts when its workloads carry a real share of the time.
    floor = max(1, math.ceil(0.05 * len(changes)))
    faster = [c for c in changes if c.change == "faster"]
    slower = [c for c in changes if c.change == "slower"]
    set_aside = _set_aside(faster, slower)
    if len(faster) <= floor and sum(c.share for c in faster) < 0.05:
        faster = []
    if len(slower) <= floor and sum(c.share for c in slower) < 0.05:
        slower = []
    call = LayerCall("none-measured", main, figure, torches, tuple(noise))
    if main is None:
        return "inconclusive", call
    if not main.bounded:
        return "inconclusive", replace(call, case="unbounded")
    cls = classify_change(main, threshold)
    top = sorted(faster, key=lambda c: -c.share)[:1]
    call = replace(
        call,
        memory_ratio=memory if memory and abs(memory - 1) >= 0.05 else None,
        top_faster=top[0].name if top else None,
        faster=len(faster),
        slower=len(slower),
        first_slower=slower[0].name if slower else None,
        set_aside=set_aside,
    )
    # The suite interval carries between-workload spread: when workloads really move both ways it is
    # wide because of them, which is a mixed result, not noise.
    too_wide = main.rel_half_width > 2 * threshold and not (faster and slower)
    if cls == "same" and (too_wide or noise):
        return "inconclusive", replace(call, case="too-noisy")
    if cls == "faster":
        if slower:
            return "mixed", replace(call, case="faster-but-some-slower")
        return "benefit", replace(call, case="faster")
    if cls == "slower":
        return "regression", replace(call, case="slower")
    if faster and slower:
        return "mixed", replace(call, case="split")
    return "no-change", replace(call, case="no-change")


def _set_aside(faster: list[WorkloadChange], slower: list[WorkloadChange]) -> tuple[SetAside, ...]:
    """The called workloads a no-change verdict leaves out: a reader of the sentence alone would otherwise miss
    two layers 30% slower among 60. Each passed its own test; together they are too few and too small a share
    to be told from the false discoveries a run of that size allows, or too little to move the suite's figure."""
    out = []
    for direction, called in (("slower", slower), ("faster", faster)):
        if called:
            top = max(called, key=lambda c: abs(math.log(c.speedup.estimate)) if c.speedup else 0.0)
            est = top.speedup.estimate if top.speedup else None
            out.append(SetAside(direction, len(called), top.name, est))  # type: ignore[arg-type]
    return tuple(out)


def aa_call(
    verdict: VerdictKind,
    main: Interval | None,
    figure: MainFigure,
    phases: list[PhaseChange],
    changes: list[WorkloadChange],
    noise: list[str],
    side: str,
) -> tuple[VerdictKind, AACall]:
    """An A/A run measures one torch against itself: what it shows is this machine's noise floor, never an
    upgrade's benefit or regression. A difference it calls is noise or the workers' setup, so the verdict
    is inconclusive there. Only for one torch on both sides: the caller reads a record marked A/A with two
    torches as the paired run it is."""
    bounded_main = main is not None and main.bounded
    measured = any(p.speedup and p.change != "n/a" for p in phases) if phases else bounded_main
    call = AACall(
        "none-measured",
        side,
        tuple(phases),
        main,
        figure,
        measured,
        sum(c.significant for c in changes),
        tuple(noise),
    )
    if not phases and main is None:
        return "inconclusive", call
    if verdict in ("no-change", "inconclusive"):
        return verdict, replace(call, case=verdict)
    return "inconclusive", replace(call, case="differ")


def stack_call(record: RunRecord, phases: list[PhaseChange], a: str, b: str, *, mlx_is_candidate: bool) -> StackCall:
    """torch against MLX: each phase as MLX's speed over torch's, then each side's highest phase peak (MLX first)."""
    envs = record.environments
    mlx_env, torch_env = (envs[1], envs[0]) if mlx_is_candidate else (envs[0], envs[1])
    mlx_label, torch_label = (b, a) if mlx_is_candidate else (a, b)

    def peak(label: str) -> float | None:
        peaks = [p for w in record.workloads if w.part == "phase" and (p := w.env(label).peak) is not None]
        return max(peaks) if peaks else None

    bits = mlx_env.extra.get("mlx_bits")
    return StackCall(
        tuple(phases),
        device=str(record.device),
        mlx_side=mlx_env.side,
        torch_side=torch_env.side,
        mlx_is_candidate=mlx_is_candidate,
        peaks=(peak(mlx_label), peak(torch_label)),
        mlx_bits=bits if isinstance(bits, int) and not isinstance(bits, bool) else None,
    )
