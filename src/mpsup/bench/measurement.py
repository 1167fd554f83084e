"""One workload's measurement while the bench runner takes it: typed and mutable, written out by `to_json()`.

The runner fills these in place (samples arrive in batches, a later visit adds rounds). `to_json()` is the
only way out and gives exactly the record's `workloads[i]` and `workloads[i].envs[label]` objects
(docs/reference/run-record.md): the same keys in the same order, each optional key left out where the record
has always left it out. Reading a record back is mpsup.runs.schema's job (the frozen WorkloadRun and
EnvRun); these types only write one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from mpsup.stats import finite_or_none, median_ci, round_ratio_ci
from mpsup.workloads import Workload


def _figure(v: object) -> float | None:
    """A per-call figure from the worker's ready answer: a number as sent (an int stays an int, so the
    record's bytes do not change), else nothing; the protocol check does not look at these."""
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _op_names(v: object) -> list[str] | None:
    """The worker's fallback op names, as text, at most a hundred: anything else is not an answer to keep."""
    if not isinstance(v, list):
        return None
    return [str(op)[:200] for op in v if isinstance(op, str)][:100] or None


@dataclass
class Summary:
    median: float
    ci_low: float | None  # None: unbounded at this many samples (JSON has no infinity)
    ci_high: float | None


@dataclass(frozen=True)
class EnergyTurn:
    """One worker turn as the parent's meter saw it: the calls it ran (the discarded block's too), its seconds
    between the two readings and the joules per part (the record's `envs[label].energy[i]`)."""

    warmup: bool
    calls: int
    seconds: float
    joules: dict[str, float]
    # Which of the environment's measuring turns it was (0, 1, ...), read or not: in a paired run, its round.
    turn: int | None = None

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"warmup": self.warmup, "calls": self.calls, "s": self.seconds}
        if self.turn is not None:
            doc["round"] = self.turn
        doc["j"] = dict(self.joules)
        return doc


@dataclass(frozen=True)
class EnergyWindow:
    """One energy window (bench/energy_windows.py): a build's calls run back to back, the meter read at the idle
    edges around them (the record's `workloads[i].energy_windows[k]`)."""

    env: str  # the label whose worker ran it
    calls: int  # every call of the window, the switch block's too
    seconds: float  # between the two edge readings: the work and the idle gap after it
    work_s: float  # the worker's request alone
    joules: dict[str, float]

    def to_json(self) -> dict[str, object]:
        return {"env": self.env, "calls": self.calls, "s": self.seconds, "work_s": self.work_s, "j": dict(self.joules)}


@dataclass
class EnvMeasurement:
    """One environment's part of one workload (the record's `envs[label]`)."""

    status: str  # "ok", or why it ended: "crash", "error", "oom", "unsupported"...
    reason: str | None = None
    stderr: str | None = None  # the worker's last output, when it died during setup
    # None: setup never finished, so the record holds only status, reason and stderr.
    calls: int | None = None
    bytes_per_call: float | None = None
    flops_per_call: float | None = None
    items_per_call: float | None = None
    warmup: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    device_samples: list[float] = field(default_factory=list)
    memory: dict[str, object] = field(default_factory=dict)  # the worker's teardown reading, kept as sent
    stop: str | None = None  # the stopping rule's reason
    summary: Summary | None = None
    device_median: float | None = None
    summary_error: str | None = None
    phase: dict[str, Any] | None = None  # a whole model's setup facts (worker/whole_model.py), kept as sent
    fallback_ops: list[str] | None = None  # ops the build or first call ran on the CPU (no MPS kernel)
    needs_metal: bool = False  # setup failed for a Metal kernel off MPS (the worker's `needs_metal` field)
    energy: list[EnergyTurn] = field(default_factory=list)  # each read turn, in order (bench/energy_turns.py)
    measuring_turns: int = field(default=0, repr=False)  # taken so far, read or not: the next turn's number
    setup_s: list[float] = field(default_factory=list)  # each visit's setup as the runner waited for it (the build)
    # What one sample costs by the latest setup's estimate: it sizes the batches. Never saved.
    sample_s: float = field(default=0.0, repr=False)

    @classmethod
    def ready(cls, ans: Mapping[str, Any]) -> EnvMeasurement:
        """From a setup's `ready` answer (its `calls` already checked by the worker protocol)."""
        calls = int(ans["calls"])
        per_call = _figure(ans.get("per_call_s"))
        return cls(
            status="ok",
            calls=calls,
            bytes_per_call=_figure(ans.get("bytes_per_call")),
            flops_per_call=_figure(ans.get("flops_per_call")),
            items_per_call=_figure(ans.get("items_per_call")),
            sample_s=float(per_call or 0.0) * calls,
            phase=ans["phase"] if isinstance(ans.get("phase"), dict) else None,
            fallback_ops=_op_names(ans.get("fallback_ops")),
        )

    @classmethod
    def failed(
        cls, status: str, reason: str, stderr: str | None = None, *, needs_metal: bool = False
    ) -> EnvMeasurement:
        """A setup that did not finish: nothing was measured."""
        return cls(status=status, reason=reason, stderr=stderr, needs_metal=needs_metal)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def fail(self, status: str, reason: str) -> None:
        """Measuring stopped after setup; what was sampled stays (and is summarized)."""
        self.status, self.reason = status, reason

    def summarize(self) -> None:
        """Median and interval from the raw samples. A failure here costs the summary, never the samples:
        they stay in the record, where a later mpsup can summarize them."""
        if not self.samples:
            return
        try:
            ci = median_ci(self.samples)
            self.summary = Summary(ci.estimate, finite_or_none(ci.low), finite_or_none(ci.high))
            if self.device_samples:
                self.device_median = median(self.device_samples)
        except Exception as exc:
            self.summary_error = f"{type(exc).__name__}: {exc}"[:300]

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"status": self.status}
        if self.calls is None:
            if self.reason is not None:
                doc["reason"] = self.reason
            if self.stderr is not None:
                doc["stderr"] = self.stderr
            if self.needs_metal:
                doc["needs_metal"] = True
            return doc
        doc.update(
            calls=self.calls,
            bytes_per_call=self.bytes_per_call,
            flops_per_call=self.flops_per_call,
            items_per_call=self.items_per_call,
            warmup=list(self.warmup),
            samples=list(self.samples),
            device_samples=list(self.device_samples),
            memory=dict(self.memory),
        )
        if self.phase is not None:
            doc["phase"] = dict(self.phase)
        if self.fallback_ops:
            doc["fallback_ops"] = list(self.fallback_ops)
        if self.stop is not None:
            doc["stop"] = self.stop
        # A failure after setup is written after `stop`: the order the record has always had.
        if self.reason is not None:
            doc["reason"] = self.reason
        if self.summary is not None:
            doc.update(median=self.summary.median, ci_low=self.summary.ci_low, ci_high=self.summary.ci_high)
        if self.device_median is not None:
            doc["device_median"] = self.device_median
        if self.summary_error is not None:
            doc["summary_error"] = self.summary_error
        if self.energy:
            doc["energy"] = [t.to_json() for t in self.energy]
        if self.setup_s:
            doc["setup_s"] = [round(x, 4) for x in self.setup_s]
        return doc


@dataclass
class Round:
    """One paired round: each environment's samples, taken back to back."""

    first: str  # the label that sampled first in this round
    visit: int
    samples: dict[str, list[float]]  # by label, in the environments' order

    def to_json(self) -> dict[str, object]:
        return {"first": self.first, "visit": self.visit, **{k: list(v) for k, v in self.samples.items()}}


@dataclass
class WorkloadMeasurement:
    """One workload over every environment and visit (the record's `workloads[i]`)."""

    workload: Workload
    envs: dict[str, EnvMeasurement] = field(default_factory=dict)  # by label, in the environments' order
    # None until a paired visit begins; from then on the record has `rounds` and `ratios`, even empty.
    rounds: list[Round] | None = None
    ratios: list[float] = field(default_factory=list)  # one baseline/candidate ratio per round
    samples_per_round: int | None = None
    status: str = "running"  # decided when the first visit ends
    reason: str | None = None
    elapsed_s: float | None = None  # None: skipped before any setup
    visits: int = 0
    extend_error: str | None = None  # why a later visit failed; the earlier figures stand
    # status "too_slow": one call's time, timed in the first environment's setup or predicted from a like
    # workload's rate (call_predicted)
    call_s: float | None = None
    call_predicted: bool = False
    budget_needed_s: float | None = None  # the --budget at which it would be measured
    # bench --energy: each build's windows of work, in the order taken (A B B A ...), apart from the rounds
    energy_windows: list[EnergyWindow] = field(default_factory=list)
    # The machine at each visit's start and end, beside each build's median of it (bench/visit_watch.py)
    visit_states: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.workload.name

    def interval_width(self) -> float:
        """The relative half-width the stopping rule watches: the paired-ratio interval the report prints,
        or the median's interval for one environment; inf while it is unbounded or nothing was measured."""
        try:
            if self.ratios:
                return float(round_ratio_ci(self.ratios).rel_half_width)
            first = next(iter(self.envs.values()), None)
            samples = first.samples if first is not None else []
            return float(median_ci(samples).rel_half_width) if samples else math.inf
        except (ValueError, ZeroDivisionError):
            return math.inf

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {**self.workload.to_json(), "envs": {k: e.to_json() for k, e in self.envs.items()}}
        if self.rounds is not None:
            # A signal between a round's two appends leaves one list a step ahead: write only whole rounds,
            # so that rounds[i] (and its visit) always belongs to ratios[i].
            whole = min(len(self.rounds), len(self.ratios))
            doc["rounds"] = [r.to_json() for r in self.rounds[:whole]]
            doc["ratios"] = list(self.ratios[:whole])
        if self.samples_per_round is not None:
            doc["samples_per_round"] = self.samples_per_round
        doc["status"] = self.status
        if self.reason is not None:
            doc["reason"] = self.reason
        if self.elapsed_s is not None:
            doc["elapsed_s"] = self.elapsed_s
        if self.visits:
            doc["visits"] = self.visits
        if self.extend_error is not None:
            doc["extend_error"] = self.extend_error
        if self.call_s is not None:
            doc["call_s"] = self.call_s
            doc["call_predicted"] = self.call_predicted
        if self.budget_needed_s is not None:
            doc["budget_needed_s"] = self.budget_needed_s
        if self.energy_windows:
            doc["energy_windows"] = [x.to_json() for x in self.energy_windows]
        if self.visit_states:
            doc["visit_states"] = list(self.visit_states)
        return doc
