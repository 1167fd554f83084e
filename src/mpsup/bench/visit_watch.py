"""The machine read at each visit's start and end, beside each build's median of that visit, in time order.

A paired visit sets up both builds, takes their rounds in turns and tears both down, so one reading at its start
and one at its end serve both builds. Each visit adds one entry to its workload's `visit_states` (the record's
`workloads[i].visit_states`): when it began and ended (seconds from the run's start), both readings, what reading
them took, and each build's median of the samples this visit took, with its 95% interval. `summary()` is the
record's `machine_state`: what was read, what is not known here and why, and what the reads cost."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from mpsup.bench.measurement import WorkloadMeasurement
from mpsup.host.machine_state import MachineState, open_state
from mpsup.stats import finite_or_none, median_ci


@dataclass(frozen=True)
class VisitStart:
    t: float  # seconds from the run's start
    reading: dict[str, Any]
    read_s: float
    taken: dict[str, int]  # each build's samples before the visit


@dataclass
class VisitWatch:
    """Reads nothing until given a MachineState (bench/run.py does, for the run's device)."""

    state: MachineState | None = None
    clock: Callable[[], float] = time.perf_counter
    origin: float = field(default_factory=time.perf_counter)
    reads_s: list[float] = field(default_factory=list)  # each visit's two reads together

    def now(self) -> dict[str, Any]:
        """One reading outside the visits (the run's start and end)."""
        return self.state.read() if self.state is not None else {}

    def _read(self) -> tuple[dict[str, Any], float]:
        assert self.state is not None
        t0 = self.clock()
        doc = self.state.read()
        return doc, self.clock() - t0

    def begin(self, m: WorkloadMeasurement) -> VisitStart | None:
        if self.state is None:
            return None
        reading, took = self._read()
        taken = {label: len(r.samples) for label, r in m.envs.items()}
        return VisitStart(self.clock() - self.origin, reading, took, taken)

    def end(self, m: WorkloadMeasurement, start: VisitStart | None) -> None:
        """The visit's entry, where it took samples (a visit that failed at setup measured nothing)."""
        if start is None or self.state is None:
            return
        medians = {}
        for label, r in m.envs.items():
            new = r.samples[start.taken.get(label, 0) :]
            if new:
                medians[label] = _median_doc(new)
        if not medians:
            return
        reading, took = self._read()
        read_s = start.read_s + took
        self.reads_s.append(read_s)
        m.visit_states.append(
            {
                "visit": m.visits + 1,  # called before the runner counts this visit, as its rounds are labelled
                "t0": round(start.t, 4),
                "t1": round(self.clock() - self.origin, 4),
                "start": start.reading,
                "end": reading,
                "read_s": read_s,
                "medians": medians,
            }
        )

    def summary(self) -> dict[str, Any]:
        """The record's `machine_state`; what reading cost, per visit, and as a share of the run so far."""
        doc: dict[str, Any] = self.state.describe() if self.state is not None else {"reads": [], "absent": {}}
        run_s = self.clock() - self.origin
        if self.reads_s:
            doc["read_s"] = {
                "visits": len(self.reads_s),
                "median": median(self.reads_s),
                "max": max(self.reads_s),
                "total": sum(self.reads_s),
                "share_of_run": sum(self.reads_s) / run_s if run_s > 0 else None,
            }
        return doc

    def close(self) -> None:
        if self.state is not None:
            self.state.close()
            self.state = None


def _median_doc(samples: list[float]) -> dict[str, Any]:
    """A visit's median and its 95% interval (None where too few samples bound it)."""
    doc: dict[str, Any] = {"median": median(samples), "n": len(samples), "low": None, "high": None}
    try:
        ci = median_ci(samples)
        doc["low"], doc["high"] = finite_or_none(ci.low), finite_or_none(ci.high)
    except (ValueError, ZeroDivisionError):
        pass
    return doc


def watch_for(device: str, clock: Callable[[], float] = time.perf_counter) -> VisitWatch:
    """The watch a run on `device` keeps: this machine's readers for it, the clock started now. Readers that
    cannot start cost their figures (said under `absent`), never the run."""
    try:
        state = open_state(device)
    except Exception as exc:
        state = MachineState(absent={"machine state": f"the readers could not start ({type(exc).__name__})"})
    return VisitWatch(state, clock, clock())
