"""Run records -> per-workload speedups, suite and model figures, smoke changes, and the verdict."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from mpsup.errors import UserError
from mpsup.host.hygiene import noisy_conditions
from mpsup.model.coverage import census as census_of
from mpsup.report.attribution import PhaseAttribution, attribute, op_classes
from mpsup.report.phases import (
    HOW_TO_RUN_WHOLE,
    LAYERS_LABEL,
    PhaseChange,
    phase_changes,
    phase_verdict,
    stack_sentence,
    with_width,
)
from mpsup.runs.schema import Environment, EnvRun, RunRecord, as_record
from mpsup.stats import (
    METHOD,
    METHOD_UNPAIRED,
    PRACTICAL_THRESHOLD,
    Interval,
    benjamini_hochberg,
    block_ratios,
    classify_change,
    decide,
    finite_or_none,
    geometric_mean,
    percentile_interval,
    round_ratio_ci,
    sign_test_p,
    suite_geomean_ci,
    usable_ratio,
)
from mpsup.units import fmt_bytes
from mpsup.workloads import END_TO_END

PUBLISHED_SUITE_CLAIM = 1.23  # geometric mean over 96 BF16 layer shapes, torch 2.15 release notes

# Allocator and page granularity, not the workload: a tiny model measured against itself peaked at 8192 and
# 49152 bytes ("peak memory 0.63x"), a small VAE conv at 0.44 and 1.21 MiB ("2.78x"). Peaks under it on both
# sides leave the workload out of the memory comparison, and a difference under it is no change (1x); a real
# one stays whole (0.5 MiB -> 400 MiB is 800x). Where no workload is left there is no memory figure.
MEMORY_NOISE_FLOOR = 2**20


def memory_ratio(baseline: float | None, candidate: float | None) -> float | None:
    """Candidate / baseline peak, 1 where they differ by less than the floor, None where both are under it."""
    if not baseline or not candidate or max(baseline, candidate) < MEMORY_NOISE_FLOOR:
        return None
    return 1.0 if abs(candidate - baseline) < MEMORY_NOISE_FLOOR else candidate / baseline


# What the row times are, on every surface: the report's candidate column is derived, bench's is measured.
# A paired speedup is the median of per-round ratios, not the ratio of two pooled medians, and where the
# two medians came from mixtures (two visits, two placements) a row read 93.3 us | 45.2 us | 1.004x.
TIME_NOTE = (
    "baseline_s: the baseline's own median over all its samples (as bench shows it); candidate_s: the "
    "report's candidate column, baseline_s / speedup where the row has a speedup, so the row agrees with the "
    "speedup (the median of the per-round baseline / candidate ratios, not the ratio of the two medians), "
    "else the candidate's own median; candidate_measured_s: the candidate's own median over all its samples "
    "(as bench shows it)"
)


@dataclass
class WorkloadChange:
    name: str
    part: str
    tags: list[str]
    count: int
    baseline_s: float | None
    candidate_s: float | None
    speedup: Interval | None
    # faster, slower, same; n/a (not measured in both, or too few rounds to bound); uncalled (two separate runs)
    change: str
    size: float  # flops (or bytes) per call, for plots
    share: float = 0.0  # of the baseline's estimated total time
    memory_ratio: float | None = None
    ratios: list[float] = field(default_factory=list)
    status: str = "ok"
    p_value: float | None = None
    units: int = 0  # independent units behind the interval (ABBA blocks, or rounds when few)
    candidate_measured_s: float | None = None  # the candidate's pooled median; candidate_s agrees with the speedup
    # Two separate runs: `ratios` holds bootstrap draws of the ratio of medians, not rounds.
    unpaired: bool = False

    @property
    def significant(self) -> bool:
        return self.change in ("faster", "slower")

    @property
    def share_text(self) -> str:
        """Its share of the layers' time; a phase is the whole model those layers sit in, no share of them."""
        return "whole" if self.part == "phase" else f"{self.share:.1%}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "part": self.part,
            "tags": self.tags,
            "count": self.count,
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "speedup": self.speedup.estimate if self.speedup else None,
            "low": finite_or_none(self.speedup.low) if self.speedup else None,
            "high": finite_or_none(self.speedup.high) if self.speedup else None,
            "significant": self.significant,
            "change": self.change,
            "share": None if self.part == "phase" else self.share,
            "memory_ratio": self.memory_ratio,
            "status": self.status,
            "p_value": self.p_value,
            "units": self.units,
            "rounds": 0 if self.unpaired else len(self.ratios),
            "bounded": bool(self.speedup and math.isfinite(self.speedup.low) and math.isfinite(self.speedup.high)),
            "candidate_measured_s": self.candidate_measured_s,
            "time_note": TIME_NOTE,
        }


@dataclass(frozen=True)
class Analysis:
    run_ids: list[str]
    machine: str
    baseline_torch: str
    candidate_torch: str
    device: str
    mode: str
    workloads: list[WorkloadChange]
    suite_geomean: Interval | None
    suite_split: dict[str, Interval]
    model_speedup: Interval | None
    peak_memory_ratio: float | None
    smoke_changes: list[dict[str, str]]
    noise: list[str]
    verdict: str
    sentence: str
    threshold: float
    device_time: dict[str, Any] = field(default_factory=dict)  # see device_time_semantics
    method: str = METHOD
    notes: list[str] = field(default_factory=list)  # what the figures rest on (an A/A floor, ...)
    model_source: str | None = None  # "whole-model" (phases or an end-to-end forward) or "layers"
    model_phases: list[PhaseChange] = field(default_factory=list)
    layer_estimate: Interval | None = None  # beside phases: what the layers alone would have said
    census: dict[str, Any] = field(default_factory=dict)  # each phase's op census (baseline), for the HTML
    stacks: dict[str, str] = field(default_factory=dict)  # each side's stack and version, where one is MLX
    attribution: dict[str, PhaseAttribution] = field(default_factory=dict)  # which ops moved each phase

    def to_json(self) -> dict[str, Any]:
        def iv(i: Interval | None) -> dict[str, float | None] | None:
            return i.to_json() if i else None

        return {
            "schema": "mpsup.report/1",
            "runs": self.run_ids,
            "machine": self.machine,
            "device": self.device,
            "mode": self.mode,
            "baseline_torch": self.baseline_torch,
            "candidate_torch": self.candidate_torch,
            "verdict": self.verdict,
            "sentence": self.sentence,
            "threshold": self.threshold,
            "method": self.method,
            "notes": self.notes,
            # One shape whatever the source: phases have no single figure, so theirs is null, not absent.
            "model_speedup": (
                {
                    **(iv(self.model_speedup) or {"estimate": None, "low": None, "high": None}),
                    "source": self.model_source,
                    "phases": [p.phase for p in self.model_phases],
                }
                if self.model_source
                else None
            ),
            "layer_estimate": iv(self.layer_estimate),
            "model_phases": {p.phase: p.to_json() for p in self.model_phases},
            "layer_coverage": {p.phase: p.coverage for p in self.model_phases if p.coverage is not None},
            "phase_attribution": {k: v.to_json() for k, v in self.attribution.items()},
            "phase_attribution_remainder": {k: v.remainder_json() for k, v in self.attribution.items()},
            "suite_geomean": iv(self.suite_geomean),
            "suite_split": {k: v.to_json() for k, v in self.suite_split.items()},
            "published_suite_claim": PUBLISHED_SUITE_CLAIM,
            "peak_memory_ratio": self.peak_memory_ratio,
            "smoke_changes": self.smoke_changes,
            "conditions": self.noise,
            "workloads": [w.to_json() for w in self.workloads],
            **({"stacks": self.stacks} if self.stacks else {}),
        }


def _peak(env: EnvRun) -> float | None:
    # This workload's own peak: the allocator's (MPS, CUDA), else the CPU worker's per-workload figure.
    # Never peak_rss (the process's high-water mark only grows, so later workloads inherit earlier ones')
    # nor driver_allocated (one reading at teardown): a record with neither shows no memory figure.
    return env.peak


def device_time_semantics(
    env_a: Environment | Mapping[str, Any], env_b: Environment | Mapping[str, Any]
) -> dict[str, Any]:
    """What each environment's device_samples measure (its worker's `event_timing`): an MPS event up
    to torch 2.14 is a CPU clock read in a completion callback, from 2.15 the GPU's end time. Device
    samples are only ever compared when both sides time the same thing; unknown never matches."""
    a, b = (e.event_timing if isinstance(e, Environment) else e.get("event_timing") for e in (env_a, env_b))
    return {"baseline": a, "candidate": b, "comparable": a is not None and a == b}


def _size(env: EnvRun) -> float:
    return float(env.flops_per_call or env.bytes_per_call or 1.0)


def _median_ratio(a: list[float], b: list[float]) -> float:
    mb = median(b)
    return median(a) / mb if mb > 0 else math.inf


def _unpaired_ratio(a: list[float], b: list[float], seed: int) -> tuple[Interval, list[float]] | None:
    """Two single runs: bootstrap the ratio of medians, each side resampled on its own. None when the
    medians are no measurement (a record may hold samples of 0 or 5e-324 s): a ratio of those is 0 or inf."""
    rng = random.Random(seed)
    est = _median_ratio(a, b)
    draws = (_median_ratio(rng.choices(a, k=len(a)), rng.choices(b, k=len(b))) for _ in range(2000))
    boots = sorted(r for r in draws if usable_ratio(r))
    if not usable_ratio(est) or len(boots) < 1000:
        return None
    return percentile_interval(est, boots), boots


def _labels(record: RunRecord) -> tuple[str, str]:
    labels = record.labels
    if len(labels) < 2:
        raise UserError(
            f"run {record.id} measured one environment; for a verdict run `mpsup bench --candidate ...` "
            "(both torches in one run), or put it beside another for estimates only "
            "(`mpsup report --baseline ID --candidate ID`)"
        )
    return labels[0], labels[1]


def _smoke_changes(record: RunRecord, a: str, b: str) -> list[dict[str, str]]:
    out = []
    for s in record.smoke:
        sa, sb = s.status(a), s.status(b)
        if sa is None or sb is None or sa == sb:
            continue
        if sa == "unsupported" and sb == "pass":
            kind = "newly supported"
        elif sa in ("fail", "crash") and sb == "pass":
            kind = "fixed"
        elif sa == "pass" and sb in ("fail", "crash"):
            kind = "newly broken"
        elif sb == "unsupported":
            kind = "no longer supported"
        elif sa == "fallback" and sb == "pass":
            kind = "now on the device"
        elif sa == "pass" and sb == "fallback":
            kind = "now on the CPU"
        else:
            kind = "changed"
        out.append({"feature": s.feature, "baseline": sa, "candidate": sb, "change": kind})
    return out


# Workloads that are no layer of the model: a phase holds its layers, and an op replayed from a phase's census
# is a piece of a phase, not one more layer to add to them.
NOT_LAYERS = ("phase", "op")


def mover_clause(phase: str, attr: PhaseAttribution) -> str | None:
    """ "64% of the decode change is cat 1x8x1024x128 (float16), 64 calls per token, 0.42x" (an op called with
    several shapes is named once, all its calls added up), or None where no op carries a fifth of the change."""
    movers = [c for c in op_classes(attr) if c.share_of_change is not None and c.share_of_change >= 0.2][:2]
    if not movers:
        return None
    per = "per token" if phase.split("/")[0] == "decode" else f"per {phase}"
    parts = []
    for cls in movers:
        assert cls.share_of_change is not None
        top = cls.calls[0]
        nb, nc = cls.count_baseline, cls.count_candidate
        counts = f"{nc} calls {per}" if nb == nc else f"{nb} -> {nc} calls {per}"
        if len(cls.calls) == 1:
            sp = f", {top.speedup.estimate:.2f}x" if top.speedup else ""
            what = f"{top.op} {top.shapes} ({top.dtypes})"
        else:
            speeds = sorted(c.speedup.estimate for c in cls.calls if c.speedup)
            sp = f", {speeds[0]:.2f}-{speeds[-1]:.2f}x" if speeds else ""
            what = f"{cls.op} in {len(cls.calls)} shapes (the largest move: {top.shapes}, {top.dtypes})"
        parts.append(f"{cls.share_of_change:.0%} of the {phase} change is {what}, {counts}{sp}")
    return "; ".join(parts)


def mover_sentence(phases: list[PhaseChange], attribution: dict[str, PhaseAttribution]) -> str:
    """What the verdict sentence adds for each phase that changed: its top mover(s), or that no op explains it."""
    said = []
    for p in phases:
        attr = attribution.get(p.phase)
        if attr is None or p.change not in ("faster", "slower") or p.too_wide:
            continue
        clause = mover_clause(p.phase, attr)
        said.append(clause or f"no single op carries a fifth of the {p.phase} change")
    return (" Which op: " + "; ".join(said) + ".") if said else ""


def _model_speedup(changes: list[WorkloadChange], seed: int) -> Interval | None:
    """The forward's speedup from its layers' (time-weighted harmonic mean). A layer too short of rounds
    to bound makes the whole figure n/a: the bootstrap of a 3-round median covers ~75%, not 95%, and
    leaving the layer out would weigh the rest wrongly."""
    layers = [
        (c, c.speedup, c.count * c.baseline_s)
        for c in changes
        if c.speedup and c.baseline_s and c.baseline_s > 0 and c.ratios and c.part not in NOT_LAYERS
    ]
    if not layers:
        return None
    # Each layer's share of the slowest one's time, not seconds: a record's absurd times (5e-324 s)
    # cannot underflow the sums below to 0.
    biggest = max(t for _, _, t in layers)
    usable = [(c, t / biggest, sp.estimate) for c, sp, t in layers]
    total_base = sum(t for _, t, _ in usable)
    est = total_base / sum(t / s for _, t, s in usable)
    short = [sp.n for _, sp, _ in layers if not sp.bounded]
    if short:
        return Interval(est, -math.inf, math.inf, min(short))
    rng = random.Random(seed)
    boots = []
    for _ in range(1000):
        forward = 0.0
        for c, t, _ in usable:
            # Unpaired: one bootstrap draw of the workload's ratio is already a resample of it.
            forward += t / (rng.choice(c.ratios) if c.unpaired else median(rng.choices(c.ratios, k=len(c.ratios))))
        boots.append(total_base / forward)
    return percentile_interval(est, boots)


def _geomean_ci(changes: list[WorkloadChange], seed: int) -> Interval:
    """The geometric mean over workloads: paired, from their rounds (suite_geomean_ci); unpaired, from each
    workload's own bootstrap draws, one per replicate, with the workloads resampled too."""
    if not any(c.unpaired for c in changes):
        return suite_geomean_ci([c.ratios for c in changes], seed=seed)
    usable = [c for c in changes if c.speedup and c.speedup.estimate > 0]
    est = geometric_mean([c.speedup.estimate for c in usable])  # type: ignore[union-attr]
    rng = random.Random(seed)
    boots = []
    for _ in range(1000):
        picked = rng.choices(usable, k=len(usable))
        boots.append(math.exp(sum(math.log(rng.choice(c.ratios)) for c in picked) / len(picked)))
    return percentile_interval(est, boots)


# A visit needs this many rounds before its median counts as that visit's lean.
VISIT_MIN_ROUNDS = 3


def visits_disagree(change: str, visit_medians: list[float]) -> bool:
    """Whether the visits that measured a workload contradict a call. Each visit sets the workload up
    afresh in both workers, the two in alternating order (the first two visits also in different worker
    processes): a torch change moves every visit the same way, while a placement effect (which worker set
    up first, where its memory landed) flips with them. On the H200 a grouped MoE layer and, on one
    machine, a conv3d measured 0.83-0.87x in one setup order and 1.13-1.18x in the other in A/A runs."""
    if change not in ("faster", "slower") or len(visit_medians) < 2:
        return False
    return any((m <= 1.0) if change == "faster" else (m >= 1.0) for m in visit_medians)


def _aggregate(group: list[WorkloadChange], seed: int) -> Interval | None:
    """The geometric mean over the workloads whose own interval is bounded; n/a (unbounded, with the
    fewest units) when none is: bootstrapping medians of 3 rounds would give a 95% interval that is not."""
    intervals = [(c, c.speedup) for c in group if c.speedup]
    if not intervals:
        return None
    bounded = [c for c, sp in intervals if sp.bounded]
    if bounded:
        return _geomean_ci(bounded, seed)
    est = geometric_mean([sp.estimate for _, sp in intervals])
    return Interval(est, -math.inf, math.inf, min(sp.n for _, sp in intervals))


def _apply_fdr(
    changes: list[WorkloadChange], threshold: float, floors: dict[str, float], visits: dict[str, list[float]]
) -> list[str]:
    """Benjamini-Hochberg over every paired workload of the report: with ~120 workloads, 5% per
    workload would flag about six when nothing changed. Unpaired comparisons make no calls at all.
    A call also needs every visit (with enough rounds) to lean its way; returns the workloads held back
    because they did not."""
    tested = [c for c in changes if c.speedup and c.p_value is not None]
    held: list[str] = []
    for c, hit in zip(tested, benjamini_hochberg([c.p_value or 1.0 for c in tested]), strict=True):
        assert c.speedup is not None
        if not c.speedup.bounded:
            continue  # stays n/a: too few units to bound, so nothing to call
        t = max(threshold, math.expm1(floors.get(c.name, 0.0)))
        c.change = decide(c.speedup, hit, t)
        if visits_disagree(c.change, visits.get(c.name, [])):
            c.change = "same"
            held.append(c.name)
    return held


def _verdict(
    main: Interval | None,
    changes: list[WorkloadChange],
    noise: list[str],
    threshold: float,
    memory_ratio: float | None,
    what: str,
    baseline_torch: str,
    candidate_torch: str,
) -> tuple[str, str]:
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
    if main is None:
        return "inconclusive", "Inconclusive: no workload was measured in both environments."
    if not main.bounded:
        return "inconclusive", (
            f"Inconclusive: too few rounds to bound {what} (n/a: {main.n} rounds; raise --budget); "
            f"its estimate {main.estimate:.2f}x, torch {candidate_torch} vs {baseline_torch}."
        )
    cls = classify_change(main, threshold)
    span = f"{main.estimate:.2f}x (95% CI {main.low:.2f}-{main.high:.2f}x)"
    mem = ""
    if memory_ratio and abs(memory_ratio - 1) >= 0.05:
        mem = f" and peak memory {'falls' if memory_ratio < 1 else 'rises'} {abs(1 - memory_ratio):.0%}"
    vs = f"torch {candidate_torch} vs {baseline_torch}"
    # The suite interval carries between-workload spread: when workloads really move both ways it is
    # wide because of them, which is a mixed result, not noise.
    too_wide = main.rel_half_width > 2 * threshold and not (faster and slower)
    if cls == "same" and (too_wide or noise):
        why = ", ".join(noise) if noise else f"the interval {main.low:.2f}-{main.high:.2f}x is too wide"
        return "inconclusive", f"Inconclusive: too noisy to tell ({why}); {what} {span}, {vs}."
    top = sorted(faster, key=lambda c: -c.share)[:1]
    where = f"; the gain comes mostly from {top[0].name}" if top else ""
    if cls == "faster":
        if slower:
            return "mixed", (
                f"Mixed: {what} is {span} faster with {vs}{mem}, but {len(slower)} workload(s) got "
                f"slower (e.g. {slower[0].name})."
            )
        return "benefit", f"Upgrade: {what} is estimated {span} faster with {vs}{mem}{where}."
    if cls == "slower":
        return "regression", f"Regression: {what} is {span} with {vs} (slower){mem}."
    if faster and slower:
        return "mixed", (
            f"Mixed: no overall change in {what}, {span}; but {len(faster)} workload(s) got faster "
            f"and {len(slower)} slower with {vs}."
        )
    return "no-change", f"No measurable benefit for {what}: {span}, with {vs}{mem}.{set_aside}"


def _set_aside(faster: list[WorkloadChange], slower: list[WorkloadChange]) -> str:
    """The called workloads a no-change verdict leaves out, named: a reader of the sentence alone would
    otherwise miss two layers 30% slower among 60. Each passed its own test; together they are too few and
    too small a share to be told from the false discoveries a run of that size allows, or too little to
    move the suite's figure."""
    parts = []
    for word, called in (("slower", slower), ("faster", faster)):
        if called:
            top = max(called, key=lambda c: abs(math.log(c.speedup.estimate)) if c.speedup else 0.0)
            est = f" {top.speedup.estimate:.2f}x" if top.speedup else ""
            parts.append(f"{len(called)} workload(s) called {word} (e.g. {top.name}{est})")
    if not parts:
        return ""
    return f" {' and '.join(parts)}: not enough to move the verdict; see the table."


def _unpaired_verdict(main: Interval | None, what: str, baseline_torch: str, candidate_torch: str) -> tuple[str, str]:
    """Two separate runs: the estimate, never a call (see METHOD_UNPAIRED), and how to get one."""
    if main is None:
        return "inconclusive", "Inconclusive: no workload was measured in both runs."
    span = f"{main.estimate:.2f}x (95% CI {main.low:.2f}-{main.high:.2f}x)"
    return "inconclusive", (
        f"Inconclusive: two separate runs, not measured side by side: {what} is {span} with torch "
        f"{candidate_torch} vs {baseline_torch}; that interval holds each run's own noise, not the drift "
        f"between runs, which is not measured here (two H200 runs of one torch, minutes apart, sat up to 11% "
        f"apart). For a verdict, measure both in one run: mpsup bench --candidate NAME|VERSION|PATH."
    )


def _aa_verdict(
    verdict: str,
    main: Interval | None,
    what: str,
    phases: list[PhaseChange],
    changes: list[WorkloadChange],
    noise: list[str],
    torches: tuple[str, str],
    side: str | None = None,
) -> tuple[str, str]:
    """An A/A run measures one torch against itself: what it shows is this machine's noise floor, never an
    upgrade's benefit or regression. A difference it calls is noise or the workers' setup, so the verdict
    is inconclusive there, and the sentence says which. Only for one torch on both sides: the caller reads a
    record marked A/A with two torches as the paired run it is."""
    side = side or f"torch {torches[0]}"
    stack = side.split()[0]
    lead = f"A/A run ({side} against itself, the noise floor)"
    if not phases and main is None:
        return "inconclusive", f"{lead}: inconclusive, no workload was measured on both sides."
    if phases:
        figure = "; ".join(p.text() for p in phases)
        measured = any(p.speedup and p.change != "n/a" for p in phases)
    elif main is not None and main.bounded:
        figure = f"{what} {main.estimate:.2f}x (95% CI {main.low:.2f}-{main.high:.2f}x)"
        measured = True
    else:
        figure = f"{what} n/a ({main.n if main else 0} rounds; raise --budget)"
        measured = False
    called = sum(c.significant for c in changes)
    calls = f"; {called} workload(s) called faster or slower" if called else ""
    if verdict == "no-change":
        return verdict, f"{lead}: no measurable difference; {figure}{calls}."
    if verdict == "inconclusive":
        if not measured:
            why = "too few rounds to bound it"
        else:
            why = f"too noisy to tell ({', '.join(noise)})" if noise else "the interval is too wide to tell"
        return verdict, f"{lead}: inconclusive, {why}; {figure}{calls}."
    return "inconclusive", (
        f"{lead}: the two sides differ ({figure}{calls}) although both run the same {stack}: that is this "
        f"machine's noise or the workers' setup (placement, warm-up, load), not {'an' if stack == 'MLX' else 'a'} "
        f"{stack} change; an A/A run calls none."
    )


def _version(env: Environment) -> str:
    """The torch version, or an MLX environment's `MLX 0.32.4` (its torch_version is none)."""
    return env.side if env.stack == "mlx" else str(env.torch_version)


def _stack_sentence(record: RunRecord, phases: list[PhaseChange], a: str, b: str, *, mlx_is_candidate: bool) -> str:
    """torch against MLX: each phase as MLX's speed over torch's, then each side's highest phase peak (MLX first)."""
    envs = record.environments
    mlx_env, torch_env = (envs[1], envs[0]) if mlx_is_candidate else (envs[0], envs[1])
    mlx_label, torch_label = (b, a) if mlx_is_candidate else (a, b)

    def peak(label: str) -> str:
        peaks = [p for w in record.workloads if w.part == "phase" and (p := _peak(w.env(label))) is not None]
        return fmt_bytes(max(peaks)) if peaks else "-"

    bits = mlx_env.extra.get("mlx_bits")
    quantized = (
        f" The MLX side ran {bits}-bit weights (group size 64), torch the checkpoint's dtype: different numerics and "
        "different memory, as most Mac users run MLX."
        if isinstance(bits, int) and not isinstance(bits, bool)
        else ""
    )
    return stack_sentence(
        phases,
        device=str(record.device),
        mlx_side=mlx_env.side,
        torch_side=torch_env.side,
        mlx_is_candidate=mlx_is_candidate,
        peaks=(peak(mlx_label), peak(torch_label)),
        quantized=quantized,
    )


def _fingerprint(record: RunRecord) -> tuple[str, str, str, str]:
    envs = record.environments or (Environment(label=""),)
    return (str(record.device), str(envs[0].device_name), _version(envs[0]), _version(envs[-1]))


def matching_aa(record: RunRecord, stored: list[RunRecord]) -> RunRecord | None:
    """The newest `--aa` run of the same device, machine, baseline torch and model that measured every paired
    workload of `record`, in the same dtype (stored runs are oldest first)."""
    # By name, dtype and a phase's size, of the same model: another model's `model/prefill`, the fp32 run of a
    # model now measured in bf16, or its step at another resolution has the same names and says nothing about
    # this run's noise.
    names = {w.identity for w in record.workloads if w.ratios}
    model = record.model.fingerprint if record.model else None
    envs = record.environments or (Environment(label=""),)
    # torch against MLX: MLX's own A/A first (its noise is the one no torch A/A shows), else torch's.
    sides = sorted(envs[:2], key=lambda e: e.stack != "mlx") if envs[0].stack != envs[-1].stack else envs[:1]
    for env in sides:
        want = (str(record.device), str(env.device_name), _version(env), model)
        for cand in reversed(stored):
            theirs = (*_fingerprint(cand)[:3], cand.model.fingerprint if cand.model else None)
            if cand.mode != "aa" or cand.id == record.id or theirs != want:
                continue
            have = {w.identity for w in cand.workloads if w.ratios}
            if names and names <= have:
                return cand
    return None


# No floor above a thousand-fold: beyond it every call is off anyway, and exp() of a hostile record's
# log-distances (ratios of 1e-300) would overflow.
FLOOR_CAP = math.log(1000.0)


def aa_floors(aa: RunRecord) -> dict[str, float]:
    """Per workload, how far from 1x an A/A run of the same setup lands: the farther end of its 95%
    interval. A systematic difference between two worker processes (placement, caches) shows here, and
    no torch change can be told apart from it in one run."""
    floors = {}
    for w in aa.workloads:
        rs = w.paired_ratios
        if not rs:
            continue
        ci = round_ratio_ci(rs)
        if ci.bounded:
            floors[w.name] = min(max(abs(math.log(ci.low)), abs(math.log(ci.high))), FLOOR_CAP)
    return floors


# Workloads of similar duration that pool their evidence about between-process spread, and the factor
# that turns the median disagreement |d| between two process pairs into a floor: d ~ N(0, 2 s_b^2) for a
# per-process effect of spread s_b, median |d| = 0.674 * sqrt(2) s_b, and the estimate (both pairs
# together) carries s_b / sqrt(2); three of those (what ~120 workloads under multiplicity need) is
# 1.5 * median|d| / 0.674 = 2.2 * median|d|.
PROCESS_NEIGHBOURS = 15
PROCESS_FLOOR_FACTOR = 1.5 / 0.6745


def process_floors(record: RunRecord, label: str) -> tuple[dict[str, float], float]:
    """Per workload, a floor (in log units) from the run itself: bench measures each workload with two
    pairs of fresh worker processes, and how far the pairs disagree on workloads of similar duration
    shows how much a process's placement (addresses, caches, library state) moves the result. On the
    H200, 20 us layers disagreed by a median 1-13% between pairs (the same kernel, on the GPU clock),
    layers above 100 us by ~1%. Returns the floors and the largest median disagreement seen."""
    points: list[tuple[float, float]] = []  # (log baseline time, |log disagreement|)
    for w in record.workloads:
        visits = w.ratios_by_visit
        base = w.env(label).median
        if len(visits) < 2 or min(len(visits[0]), len(visits[1])) < VISIT_MIN_ROUNDS or not base or base <= 0:
            continue
        points.append((math.log(base), abs(math.log(median(visits[0])) - math.log(median(visits[1])))))
    if len(points) < PROCESS_NEIGHBOURS:
        return {}, 0.0
    floors: dict[str, float] = {}
    worst = 0.0
    for w in record.workloads:
        base = w.env(label).median
        if not base or base <= 0 or not w.ratios:
            continue
        here = math.log(base)
        nearest = sorted(points, key=lambda p: abs(p[0] - here))[:PROCESS_NEIGHBOURS]
        typical = median(d for _, d in nearest)
        worst = max(worst, min(typical, FLOOR_CAP))
        floors[w.name] = min(PROCESS_FLOOR_FACTOR * typical, FLOOR_CAP)
    return floors, worst


def _positive(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
    return float(x) if ok else None


def _too_slow_note(record: RunRecord) -> str | None:
    """The workloads bench's time guard skipped: how many, and the budget that would measure them, so a
    report's `too_slow` rows say what to do rather than only that nothing was measured."""
    slow = [w for w in record.workloads if w.status == "too_slow"]
    if not slow:
        return None
    budget = _positive(record.options.get("budget_s"))
    at = f" at --budget {budget:g}" if budget else ""
    needed = [n for w in slow if (n := _positive(w.extra.get("budget_needed_s"))) is not None]
    hint = f"`mpsup bench --budget {max(needed):g}` measures them all, " if needed else ""
    return (
        f"Not measured: {len(slow)} workload(s) too slow to measure{at} on this machine (e.g. {slow[0].name}); "
        f"{hint}`--only NAME` measures one."
    )


def analyze(
    record: RunRecord | Mapping[str, Any],
    *,
    threshold: float = PRACTICAL_THRESHOLD,
    seed: int = 0,
    aa_reference: RunRecord | Mapping[str, Any] | None = None,
) -> Analysis:
    """`aa_reference`: an A/A run of the same setup (see `matching_aa`); its per-workload spread becomes
    a floor under the practical threshold. A record document (a dict, as a bench just built it) is
    checked and typed first."""
    record = as_record(record)
    aa = as_record(aa_reference, "A/A record") if aa_reference is not None else None
    a, b = _labels(record)
    unpaired = record.mode == "unpaired"
    floors = aa_floors(aa) if aa and record.mode != "aa" else {}
    by_process, worst_disagreement = process_floors(record, a)
    changes: list[WorkloadChange] = []
    for i, w in enumerate(record.workloads):
        ea, eb = w.env(a), w.env(b)
        base_s, cand_s = ea.median, eb.median
        speedup: Interval | None = None
        ratios: list[float] = []
        if w.ratios:
            ratios = w.paired_ratios
            if ratios:
                speedup = round_ratio_ci(ratios)
        elif ea.timed and eb.timed:
            speedup, ratios = _unpaired_ratio(ea.timed, eb.timed, seed + i) or (None, [])
        status = (w.status or "ok") if speedup is None else "ok"
        if speedup is None and status == "ok" and (w.ratios or (ea.timed and eb.timed)):
            status = "no usable ratio"  # measured, but every ratio was 0, inf or a million-fold
        pa, pb = _peak(ea), _peak(eb)
        changes.append(
            WorkloadChange(
                name=w.name,
                part=w.part or "",
                tags=list(w.tags),
                count=w.count,
                baseline_s=base_s,
                candidate_s=cand_s,
                speedup=speedup,
                # Unpaired: the interval shows each run's own noise, not the drift between the runs.
                # Too few units to bound an interval: no call either way, and the report says how many.
                change=(
                    ("uncalled" if unpaired else classify_change(speedup, threshold))
                    if speedup and speedup.bounded
                    else "n/a"
                ),
                # The test counts rounds, not blocks: twice the units, and an order effect only makes it
                # conservative (A-first and B-first rounds lean opposite ways, so signs balance).
                p_value=sign_test_p(ratios) if w.ratios and ratios else None,
                units=len(block_ratios(ratios)) if w.ratios else 0,
                size=_size(ea if ea != EnvRun() else eb),  # an environment that ran nothing has no size
                memory_ratio=memory_ratio(pa, pb),
                ratios=ratios,
                status=status,
                unpaired=unpaired,
            )
        )
    # Each floor is a lower bound on what this run cannot tell from noise: the higher one holds.
    combined = {n: max(floors.get(n, 0.0), by_process.get(n, 0.0)) for n in {*floors, *by_process}}
    held: list[str] = []
    if not unpaired:
        visit_medians = {
            w.name: [median(v) for v in w.ratios_by_visit if len(v) >= VISIT_MIN_ROUNDS] for w in record.workloads
        }
        held = _apply_fdr(changes, threshold, combined, visit_medians)
    for c in changes:
        # A paired speedup is the median of per-round ratios, not the ratio of pooled medians: show a
        # candidate time that agrees with it (93.3 us | 45.2 us | 1.004x appeared before), keep the pooled one.
        c.candidate_measured_s = c.candidate_s
        if c.units and c.speedup and c.baseline_s and c.speedup.estimate > 0:
            c.candidate_s = c.baseline_s / c.speedup.estimate
    # Shares are of the layers' time: a whole-model phase holds those layers, so it is no share beside them.
    total = sum(c.count * c.baseline_s for c in changes if c.baseline_s and c.part not in NOT_LAYERS) or 1.0
    for c in changes:
        c.share = c.count * c.baseline_s / total if c.baseline_s and c.part not in NOT_LAYERS else 0.0
    phases = with_width(phase_changes(record, {c.name: c for c in changes}, a, b), threshold)
    attribution = attribute(record.to_json(), {c.name: c for c in changes}, a, b) if phases else {}
    linear = [c for c in changes if c.part == "linear" and c.ratios]
    suite = _aggregate(linear, seed)
    split = {}
    for tag in ("small", "large", "output-head"):
        group = [c for c in linear if tag in c.tags]
        if group and (agg := _aggregate(group, seed)):
            split[tag] = agg
    short_linear = sum(1 for c in linear if c.speedup and not c.speedup.bounded)
    end_to_end = next((c for c in changes if c.name == END_TO_END and c.speedup), None)
    layer_estimate = _model_speedup(changes, seed) if record.model and not end_to_end else None
    mem_ratios = [c.memory_ratio for c in changes if c.memory_ratio]
    mem = geometric_mean(mem_ratios) if mem_ratios else None
    hyg = record.hygiene
    noise = sorted(set(noisy_conditions(dict(hyg.before)) + noisy_conditions(dict(hyg.after)) + list(hyg.changed)))
    main: Interval | None
    # Run whole, the phases are the answer, each on its own: no blended figure stands beside them.
    model = end_to_end.speedup if end_to_end else None if phases else layer_estimate
    model_source = "whole-model" if end_to_end or phases else "layers" if model is not None else None
    if model is not None:
        main, what = model, "your model's forward" if end_to_end else LAYERS_LABEL
    elif suite is not None:
        main, what = suite, "the geometric mean of the suite's BF16 linear layers"
    else:
        main = _aggregate([c for c in changes if c.ratios], seed)
        what = "the geometric mean of the measured workloads"
    envs = record.environments
    torches = (_version(envs[0]), _version(envs[1]))
    verdict, sentence = (
        _unpaired_verdict(main, what, *torches)
        if unpaired
        else phase_verdict(phases, noise, f"{envs[1].side} vs {envs[0].side}", threshold)
        or _verdict(main, changes, noise, threshold, mem, what, *torches)
    )
    mlx_sides = [e.stack == "mlx" for e in envs[:2]]
    if phases and not unpaired and mlx_sides[0] != mlx_sides[1]:
        sentence = _stack_sentence(record, phases, a, b, mlx_is_candidate=mlx_sides[1])
    elif record.mode == "aa" and torches[0] == torches[1]:
        verdict, sentence = _aa_verdict(verdict, main, what, phases, changes, noise, torches, envs[0].side)
    elif record.mode == "aa":
        # Two torches are no A/A, whatever the record says (edited by hand, or damaged): read as the paired
        # run it is, so a real regression between them is still called one.
        sentence += f" (Recorded as an A/A run, yet its two sides ran torch {torches[0]} and {torches[1]}.)"
    if model_source == "layers" and not phases:
        sentence += " " + HOW_TO_RUN_WHOLE
    sentence += mover_sentence(phases, attribution)
    # The phases first, as the answer; then the layers that explain them, by their share of the time.
    changes.sort(key=lambda c: (c.part != "phase", -c.share))
    notes = []
    if unpaired:
        notes.append(
            "Unpaired: no workload is called faster or slower. Each interval shows one run's own noise; two runs "
            "of the same torch can sit further apart than that (on the H200, single workloads 0.58-2.04x)."
        )
    if floors and aa:
        raised = sum(1 for c in changes if math.expm1(floors.get(c.name, 0.0)) > threshold)
        notes.append(
            f"A/A floor from run {aa.id}: a workload's threshold is the larger of {threshold:.0%} "
            f"and how far that A/A run landed from 1x ({raised} of {len(floors)} raised)."
        )
    if suite and suite.bounded and short_linear:
        notes.append(
            f"The suite figure leaves out {short_linear} of {len(linear)} linear shape(s) too short of rounds to "
            "bound (n/a); raise --budget to include them."
        )
    if held:
        notes.append(
            f"Not called: {len(held)} workload(s) whose visits (fresh setups, in alternating order) disagreed on "
            f"the direction (e.g. {held[0]}); a change in torch moves every visit the same way, which worker set "
            "up first does not."
        )
    slow_note = _too_slow_note(record)
    if slow_note:
        notes.append(slow_note)
    raised_by_process = [f for f in by_process.values() if math.expm1(f) > threshold]
    if raised_by_process:
        notes.append(
            f"Between-process floor: two fresh pairs of worker processes disagreed by up to a median "
            f"{math.expm1(worst_disagreement):.1%} on workloads of similar duration, so {len(raised_by_process)} "
            f"workload(s) need a change beyond their floor (up to {math.expm1(max(raised_by_process)):.0%}) "
            f"before it is called; one run cannot tell a smaller change there from process placement."
        )
    return Analysis(
        run_ids=[record.id],
        machine=str(envs[0].device_name or record.device),
        baseline_torch=torches[0],
        candidate_torch=torches[1],
        stacks={"baseline": envs[0].side, "candidate": envs[1].side} if any(mlx_sides) else {},
        device=record.device,
        mode=record.mode or "",
        workloads=changes,
        suite_geomean=suite,
        suite_split=split,
        model_speedup=model,
        model_source=model_source,
        layer_estimate=layer_estimate if phases else None,
        model_phases=phases,
        census=census_of(record.to_json(), a) if phases else {},
        attribution=attribution,
        peak_memory_ratio=mem,
        smoke_changes=_smoke_changes(record, a, b),
        noise=noise,
        verdict=verdict,
        sentence=sentence,
        threshold=threshold,
        device_time=device_time_semantics(envs[0], envs[1]),
        method=METHOD_UNPAIRED if unpaired else METHOD,
        notes=notes,
    )
