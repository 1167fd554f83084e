"""Run records -> per-workload speedups, suite and model figures, smoke changes, and the verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from mpsup.errors import UserError
from mpsup.host.hygiene import noisy_conditions
from mpsup.host.moved import RunConditions, run_conditions
from mpsup.model.coverage import census as census_of
from mpsup.report.aggregate import aggregate, model_speedup, unpaired_ratio
from mpsup.report.attribution import PhaseAttribution, attribute
from mpsup.report.changes import NOT_LAYERS, WorkloadChange
from mpsup.report.energy import EnergyFigures, energy_clause, energy_figures
from mpsup.report.findings import (
    AAFloorNote,
    Call,
    Finding,
    HeldNote,
    MainFigure,
    Note,
    PhaseCall,
    ProcessFloorNote,
    ShortSuiteNote,
    TooSlowNote,
    UnpairedCall,
    UnpairedNote,
    VerdictKind,
)
from mpsup.report.floor_run import matching_aa as matching_aa  # bisect and the report command take it from here
from mpsup.report.floor_run import side_version as _version
from mpsup.report.floors import (
    VISIT_MIN_ROUNDS,
    aa_floors,
    process_floors,
)
from mpsup.report.numerics import PhaseNumerics, WorkloadNumerics, model_numerics
from mpsup.report.numerics import judge as judge_numerics
from mpsup.report.phases import PhaseChange, phase_changes, phase_verdict, with_width
from mpsup.report.training import phase_doc
from mpsup.report.verdict import aa_call, layer_call, stack_call
from mpsup.report.wording import note_text, numerics_clause, one_environment, sides_vs, verdict_sentence
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
    geometric_mean,
    median_ci,
    round_ratio_ci,
    sign_test_p,
)
from mpsup.workloads import END_TO_END

PUBLISHED_SUITE_CLAIM = 1.23  # geometric mean over 96 BF16 layer shapes, torch 2.15 release notes

# Allocator and page granularity, not the workload: peaks under it on both sides leave the workload out of the
# memory comparison, and a difference under it is no change (1x); a real one stays whole (0.5 MiB -> 400 MiB is
# 800x). Where no workload is left there is no memory figure.
MEMORY_NOISE_FLOOR = 2**20


def memory_ratio(baseline: float | None, candidate: float | None) -> float | None:
    """Candidate / baseline peak, 1 where they differ by less than the floor, None where both are under it."""
    if not baseline or not candidate or max(baseline, candidate) < MEMORY_NOISE_FLOOR:
        return None
    return 1.0 if abs(candidate - baseline) < MEMORY_NOISE_FLOOR else candidate / baseline


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
    verdict: VerdictKind
    finding: Finding  # what the verdict sentence says, as facts (wording.verdict_sentence words them)
    threshold: float
    device_time: dict[str, Any] = field(default_factory=dict)  # see device_time_semantics
    method: str = METHOD
    note_facts: list[Note] = field(default_factory=list)  # what the figures rest on (an A/A floor, ...)
    model_source: str | None = None  # "whole-model" (phases or an end-to-end forward) or "layers"
    model_phases: list[PhaseChange] = field(default_factory=list)
    layer_estimate: Interval | None = None  # beside phases: what the layers alone would have said
    census: dict[str, Any] = field(default_factory=dict)  # each phase's op census (baseline), for the HTML
    stacks: dict[str, str] = field(default_factory=dict)  # each side's stack and version, where one is MLX
    attribution: dict[str, PhaseAttribution] = field(default_factory=dict)  # which ops moved each phase
    # Same answers? Each phase's numerics (its ops ranked) and every compared workload's, by name.
    model_numerics: dict[str, PhaseNumerics] = field(default_factory=dict)
    numerics: dict[str, WorkloadNumerics] = field(default_factory=dict)
    energy: EnergyFigures | None = None  # None: a record from before energy was read
    # Did the machine move during the run (host/moved.py): the line every surface shows, and its JSON
    conditions: RunConditions = field(default_factory=RunConditions)

    @property
    def sentence(self) -> str:
        return verdict_sentence(self.finding)

    @property
    def notes(self) -> list[str]:
        return [note_text(n) for n in self.note_facts]

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
            "conditions": self.conditions.to_json(),
            # null where the run did not look (a single run, --no-numerics, an older record)
            "model_numerics": {p.phase: phase_doc(self.model_numerics.get(p.phase)) for p in self.model_phases} or None,
            "workloads": [{**w.to_json(), "numerics": _doc(self.numerics.get(w.name))} for w in self.workloads],
            **({"stacks": self.stacks} if self.stacks else {}),
            **(self.energy.to_json() if self.energy else {}),
        }


def _doc(value: PhaseNumerics | WorkloadNumerics | None) -> dict[str, Any] | None:
    return value.to_json() if value else None


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


def _labels(record: RunRecord) -> tuple[str, str]:
    labels = record.labels
    if len(labels) < 2:
        raise UserError(one_environment(record.id))
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


# Visits (fresh process pairs) from which a workload's interval is over its visit medians (bench gives a whole-model
# or torch-against-MLX run this many: SamplingPolicy.phase_visits), and the rounds a visit needs to count: one
# ABBA pair, whose median cancels the visit's own first-mover effect.
VISIT_CI_MIN_VISITS = 6
VISIT_CI_MIN_ROUNDS = 2


def visit_ci(by_visit: list[list[float]]) -> Interval | None:
    """The order-statistic 95% interval of the median visit, over each visit's median round ratio, where at
    least VISIT_CI_MIN_VISITS visits have VISIT_CI_MIN_ROUNDS rounds; else None (the rounds' interval holds).
    The rounds of one pair of processes share whatever that pair has (a process that reads slow for its whole
    life, a stack's allocator state): their interval measures the pair, not the run. Over visit medians that
    spread is inside the interval; six medians give min to max, 96.9% (docs/explanation/methodology.md)."""
    medians = [median(v) for v in by_visit if len(v) >= VISIT_CI_MIN_ROUNDS]
    if len(medians) < VISIT_CI_MIN_VISITS:
        return None
    return median_ci(medians)


def visits_disagree(change: str, visit_medians: list[float], speedup: float | None = None) -> bool:
    """Whether the visits that measured a workload contradict a call. Each visit sets the workload up
    afresh in both workers, the two in alternating order (the first two visits also in different worker
    processes): a torch change moves every visit the same way, while a placement effect (which worker set
    up first, where its memory landed) flips with them; A/A runs show such layers leaning opposite ways in the
    two setup orders (docs/explanation/methodology.md). With `speedup`, visits that lean one way but differ
    from each other by more than the change itself contradict it too: a 131 MB weight's matrix-vector product
    leaned 0.85-0.88x in one pair of workers and 0.95-1.05x in the next, a placement effect as large as the
    call, in A/A runs where the run-wide floor of its neighbours in duration was far smaller."""
    if change not in ("faster", "slower") or len(visit_medians) < 2:
        return False
    if any((m <= 1.0) if change == "faster" else (m >= 1.0) for m in visit_medians):
        return True
    if speedup is None or speedup <= 0 or min(visit_medians) <= 0:
        return False
    return math.log(max(visit_medians) / min(visit_medians)) > abs(math.log(speedup))


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
        if visits_disagree(c.change, visits.get(c.name, []), c.speedup.estimate):
            c.change = "same"
            held.append(c.name)
    return held


def _positive(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
    return float(x) if ok else None


def _too_slow_note(record: RunRecord) -> TooSlowNote | None:
    """The workloads bench's time guard skipped: how many, and the budget that would measure them, so a
    report's `too_slow` rows say what to do rather than only that nothing was measured."""
    slow = [w for w in record.workloads if w.status == "too_slow"]
    if not slow:
        return None
    needed = [n for w in slow if (n := _positive(w.extra.get("budget_needed_s"))) is not None]
    return TooSlowNote(len(slow), slow[0].name, _positive(record.options.get("budget_s")), max(needed, default=None))


def _workload_change(record: RunRecord, i: int, a: str, b: str, seed: int, threshold: float) -> WorkloadChange:
    """One workload's speedup, its interval and its call before the run-wide rules (FDR, floors, visits)."""
    w = record.workloads[i]
    unpaired = record.mode == "unpaired"
    ea, eb = w.env(a), w.env(b)
    speedup: Interval | None = None
    over_visits: Interval | None = None
    ratios: list[float] = []
    if w.ratios:
        ratios = w.paired_ratios
        if ratios:
            over_visits = visit_ci(w.ratios_by_visit)
            speedup = over_visits or round_ratio_ci(ratios)
    elif ea.timed and eb.timed:
        speedup, ratios = unpaired_ratio(ea.timed, eb.timed, seed + i) or (None, [])
    status = (w.status or "ok") if speedup is None else "ok"
    if speedup is None and status == "ok" and (w.ratios or (ea.timed and eb.timed)):
        status = "no usable ratio"  # measured, but every ratio was 0, inf or a million-fold
    return WorkloadChange(
        name=w.name,
        part=w.part or "",
        tags=list(w.tags),
        count=w.count,
        baseline_s=ea.median,
        candidate_s=eb.median,
        speedup=speedup,
        # Unpaired: the interval shows each run's own noise, not the drift between the runs.
        # Too few units to bound an interval: no call either way, and the report says how many.
        change=(
            ("uncalled" if unpaired else classify_change(speedup, threshold)) if speedup and speedup.bounded else "n/a"
        ),
        # The test counts rounds, not blocks: twice the units, and an order effect only makes it
        # conservative (A-first and B-first rounds lean opposite ways, so signs balance).
        p_value=sign_test_p(ratios) if w.ratios and ratios else None,
        # Over visit medians the units are the visits.
        units=(over_visits.n if over_visits else len(block_ratios(ratios))) if w.ratios else 0,
        size=_size(ea if ea != EnvRun() else eb),  # an environment that ran nothing has no size
        memory_ratio=memory_ratio(_peak(ea), _peak(eb)),
        ratios=ratios,
        status=status,
        unpaired=unpaired,
        reason=w.reason,
        budget_needed_s=_positive(w.extra.get("budget_needed_s")),
    )


def _settle_times_and_shares(changes: list[WorkloadChange]) -> None:
    """The candidate column that agrees with the speedup, and each layer's share of the layers' time."""
    for c in changes:
        # A paired speedup is the median of per-round ratios, not the ratio of pooled medians: show a
        # candidate time that agrees with it, and keep the pooled one beside it.
        c.candidate_measured_s = c.candidate_s
        if c.units and c.speedup and c.baseline_s and c.speedup.estimate > 0:
            c.candidate_s = c.baseline_s / c.speedup.estimate
    # Shares are of the layers' time: a whole-model phase holds those layers, so it is no share beside them.
    total = sum(c.count * c.baseline_s for c in changes if c.baseline_s and c.part not in NOT_LAYERS) or 1.0
    for c in changes:
        c.share = c.count * c.baseline_s / total if c.baseline_s and c.part not in NOT_LAYERS else 0.0


@dataclass(frozen=True)
class _Figures:
    """The run-wide figures: the suite's, the model's, and the one the verdict rests on."""

    suite: Interval | None
    split: dict[str, Interval]
    linear: int
    short_linear: int
    layer_estimate: Interval | None
    model: Interval | None
    model_source: str | None
    main: Interval | None
    figure: MainFigure
    memory: float | None


def _figures(record: RunRecord, changes: list[WorkloadChange], phases: list[PhaseChange], seed: int) -> _Figures:
    linear = [c for c in changes if c.part == "linear" and c.ratios]
    suite = aggregate(linear, seed)
    split = {}
    for tag in ("small", "large", "output-head"):
        group = [c for c in linear if tag in c.tags]
        if group and (agg := aggregate(group, seed)):
            split[tag] = agg
    end_to_end = next((c for c in changes if c.name == END_TO_END and c.speedup), None)
    layer_estimate = model_speedup(changes, seed) if record.model and not end_to_end else None
    mem_ratios = [c.memory_ratio for c in changes if c.memory_ratio]
    # Run whole, the phases are the answer, each on its own: no blended figure stands beside them.
    model = end_to_end.speedup if end_to_end else None if phases else layer_estimate
    main: Interval | None
    figure: MainFigure
    if model is not None:
        main, figure = model, "forward" if end_to_end else "layers"
    elif suite is not None:
        main, figure = suite, "suite"
    else:
        main, figure = aggregate([c for c in changes if c.ratios], seed), "measured"
    return _Figures(
        suite=suite,
        split=split,
        linear=len(linear),
        short_linear=sum(1 for c in linear if c.speedup and not c.speedup.bounded),
        layer_estimate=layer_estimate,
        model=model,
        model_source="whole-model" if end_to_end or phases else "layers" if model is not None else None,
        main=main,
        figure=figure,
        memory=geometric_mean(mem_ratios) if mem_ratios else None,
    )


def _with_answers(p: PhaseChange, pn: PhaseNumerics | None, baseline_torch: str) -> PhaseChange:
    """The phase with its numerics verdict and clause, where the run compared its answers."""
    return replace(p, accuracy=pn.verdict, accuracy_clause=numerics_clause(pn, baseline_torch)) if pn else p


def _with_energy(p: PhaseChange, energy: EnergyFigures | None) -> PhaseChange:
    """The phase's energy clause joins its sentence, where a meter was read."""
    clause = energy_clause(energy.model_energy.get(p.phase)) if energy and energy.meter else None
    return replace(p, clauses=(*p.clauses, clause)) if clause else p


def _decide(
    record: RunRecord,
    fig: _Figures,
    phases: list[PhaseChange],
    attribution: dict[str, PhaseAttribution],
    changes: list[WorkloadChange],
    noise: list[str],
    threshold: float,
) -> tuple[VerdictKind, Finding]:
    """The verdict and the facts its sentence states, by the run's kind: separate runs, phases, layers, A/A, MLX."""
    envs = record.environments
    a, b = envs[0].label, envs[1].label
    torches = (_version(envs[0]), _version(envs[1]))
    call: Call
    verdict: VerdictKind
    phase_call = PhaseCall(tuple(phases), tuple(noise), (envs[0].side, envs[1].side), threshold)
    decided = phase_verdict(phases, noise, sides_vs(phase_call.sides), threshold)
    if record.mode == "unpaired":
        verdict, call = "inconclusive", UnpairedCall(fig.main, fig.figure, torches)
    elif decided is not None:
        verdict, call = decided[0], phase_call  # type: ignore[assignment]
    else:
        verdict, call = layer_call(fig.main, changes, noise, threshold, fig.memory, fig.figure, torches)
    mlx_sides = [e.stack == "mlx" for e in envs[:2]]
    two_torches = None
    if phases and record.mode != "unpaired" and mlx_sides[0] != mlx_sides[1]:
        call = stack_call(record, phases, a, b, mlx_is_candidate=mlx_sides[1])
    elif record.mode == "aa" and torches[0] == torches[1]:
        verdict, call = aa_call(verdict, fig.main, fig.figure, phases, changes, noise, envs[0].side)
    elif record.mode == "aa":
        # Two torches are no A/A, whatever the record says (edited by hand, or damaged): read as the paired
        # run it is, so a real regression between them is still called one.
        two_torches = torches
    movers = tuple(
        (p, attribution[p.phase])
        for p in phases
        if p.phase in attribution and p.change in ("faster", "slower") and not p.too_wide
    )
    hint = fig.model_source == "layers" and not phases
    return verdict, Finding(call, two_torches_as_aa=two_torches, run_whole_hint=hint, movers=movers)


def _notes(
    record: RunRecord,
    changes: list[WorkloadChange],
    fig: _Figures,
    floors: tuple[RunRecord | None, dict[str, float]],
    process: tuple[dict[str, float], float],
    held: list[str],
    threshold: float,
) -> list[Note]:
    """What the figures rest on: the rules that kept a call back, and what was left out."""
    notes: list[Note] = []
    if record.mode == "unpaired":
        notes.append(UnpairedNote())
    aa, aa_floor = floors
    if aa_floor and aa:
        raised = sum(1 for c in changes if math.expm1(aa_floor.get(c.name, 0.0)) > threshold)
        notes.append(AAFloorNote(aa.id, threshold, raised, len(aa_floor)))
    if fig.suite and fig.suite.bounded and fig.short_linear:
        notes.append(ShortSuiteNote(fig.short_linear, fig.linear))
    if held:
        notes.append(HeldNote(len(held), held[0]))
    slow = _too_slow_note(record)
    if slow:
        notes.append(slow)
    by_process, worst = process
    raised_by_process = [f for f in by_process.values() if math.expm1(f) > threshold]
    if raised_by_process:
        notes.append(ProcessFloorNote(worst, len(raised_by_process), max(raised_by_process)))
    return notes


def _noise(record: RunRecord) -> list[str]:
    hyg = record.hygiene
    return sorted(set(noisy_conditions(dict(hyg.before)) + noisy_conditions(dict(hyg.after)) + list(hyg.changed)))


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
    changes = [_workload_change(record, i, a, b, seed, threshold) for i in range(len(record.workloads))]
    # Each floor is a lower bound on what this run cannot tell from noise: the higher one holds.
    combined = {n: max(floors.get(n, 0.0), by_process.get(n, 0.0)) for n in {*floors, *by_process}}
    held: list[str] = []
    if not unpaired:
        visit_medians = {
            w.name: [median(v) for v in w.ratios_by_visit if len(v) >= VISIT_MIN_ROUNDS] for w in record.workloads
        }
        held = _apply_fdr(changes, threshold, combined, visit_medians)
    _settle_times_and_shares(changes)
    phases = with_width(phase_changes(record, {c.name: c for c in changes}, a, b), threshold)
    attribution = attribute(record.to_json(), {c.name: c for c in changes}, a, b) if phases else {}
    answers = model_numerics(record.to_json(), {p.phase: p.workload for p in phases}, a, b) if phases else {}
    phases = [_with_answers(p, answers.get(p.phase), _version(record.environments[0])) for p in phases]
    energy = energy_figures(record, a, b)
    phases = [_with_energy(p, energy) for p in phases]
    judged = {w.name: judge_numerics(w.extra.get("numerics"), w.name, a, b) for w in record.workloads}
    fig = _figures(record, changes, phases, seed)
    noise = _noise(record)
    verdict, finding = _decide(record, fig, phases, attribution, changes, noise, threshold)
    # The phases first, as the answer; then the layers that explain them, by their share of the time.
    changes.sort(key=lambda c: (c.part != "phase", -c.share))
    envs = record.environments
    mlx = any(e.stack == "mlx" for e in envs[:2])
    return Analysis(
        run_ids=[record.id],
        machine=str(envs[0].device_name or record.device),
        baseline_torch=_version(envs[0]),
        candidate_torch=_version(envs[1]),
        stacks={"baseline": envs[0].side, "candidate": envs[1].side} if mlx else {},
        device=record.device,
        mode=record.mode or "",
        workloads=changes,
        suite_geomean=fig.suite,
        suite_split=fig.split,
        model_speedup=fig.model,
        model_source=fig.model_source,
        layer_estimate=fig.layer_estimate if phases else None,
        model_phases=phases,
        census=census_of(record.to_json(), a) if phases else {},
        attribution=attribution,
        model_numerics=answers,
        numerics={k: v for k, v in judged.items() if v is not None},
        peak_memory_ratio=fig.memory,
        smoke_changes=_smoke_changes(record, a, b),
        noise=noise,
        verdict=verdict,
        finding=finding,
        threshold=threshold,
        device_time=device_time_semantics(envs[0], envs[1]),
        method=METHOD_UNPAIRED if unpaired else METHOD,
        note_facts=_notes(record, changes, fig, (aa, floors), (by_process, worst_disagreement), held, threshold),
        energy=energy,
        conditions=run_conditions(record),
    )
