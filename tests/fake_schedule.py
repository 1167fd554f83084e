"""What the two-pass schedule (bench/run.py `_two_passes`) needs around it in a test: no interrupt to wait for,
and workers on a fake clock. A subclass says how one visit takes its rounds (`_visit`)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from types import SimpleNamespace

from mpsup.bench.measurement import EnvMeasurement, WorkloadMeasurement
from mpsup.workloads import Workload


class NoStops:
    """The schedule's interrupt guard, with nothing to guard against."""

    def critical(self) -> AbstractContextManager[None]:
        return nullcontext()


class FakeWorkers:
    """Two workers of `stacks` on `clock` (one mutable float): measure and extend run `_visit`, a restart costs
    `restart_s` of the clock. `labels`: the two environments' names in the record."""

    labels = ("baseline", "candidate")
    restart_s = 2.0

    def __init__(self, clock: list[float], stacks: tuple[str, str] = ("torch", "torch")) -> None:
        self.clock = clock
        self.sessions = [SimpleNamespace(env=SimpleNamespace(stack=s)) for s in stacks]
        self.restarts = 0

    def _visit(self, w: Workload, m: WorkloadMeasurement, share_s: float, least: int) -> None:
        raise NotImplementedError

    def measure(self, w: Workload, share_s: float, min_rounds: int | None = None) -> WorkloadMeasurement:
        m = WorkloadMeasurement(w, {label: EnvMeasurement("ok") for label in self.labels}, rounds=[], status="ok")
        self._visit(w, m, share_s, min_rounds or 12)
        return m

    def extend(self, w: Workload, m: WorkloadMeasurement, share_s: float, min_new: int = 2) -> bool:
        self._visit(w, m, share_s, min_new)
        return True

    def restart(self) -> None:
        self.clock[0] += self.restart_s
        self.restarts += 1
