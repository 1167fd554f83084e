"""What bench reports while it works: one frozen dataclass per event (mpsup.progress.Event).

The renderers (bench/progress_bar.py for a run, bench/listing.py for `--list`) dispatch on these types; an
event a renderer does not know raises, so a new event without a rendering fails its test instead of vanishing
from the screen."""

from __future__ import annotations

from mpsup.progress import Event


class BenchStarted(Event):
    """The workers are up and measuring begins: `total` workloads (what --list shows), `smoke` smoke steps,
    and `visits` planned per workload (two where paired rounds are split over two pairs of processes)."""

    total: int
    smoke: int = 0
    visits: int = 1


class SmokeStepDone(Event):
    """One environment ran one smoke test."""

    feature: str
    env: str
    status: str


class WorkloadStarted(Event):
    """A workload's first visit begins; `eta_s`: every pass still planned, this visit included."""

    name: str
    eta_s: float | None = None


class SamplesTaken(Event):
    """One slow request for samples inside a workload (warmup or measured): which side, how many so far, and
    what the request took."""

    env: str
    warmup: bool
    samples: int
    took_s: float


class WorkloadDone(Event):
    """A workload's first visit ended with `status` ("ok", or why it was not measured)."""

    name: str
    status: str


class WorkloadsAdded(Event):
    """`count` workloads (`what`: the whole-model phases' ops) joined the run, which then holds `total`."""

    count: int
    total: int
    what: str = "ops"


class SecondVisitsPlanned(Event):
    """`count` workloads get a second visit by fresh workers; the rest (failed, unsupported) are done."""

    count: int


class WorkersRestarting(Event):
    """Fresh worker processes start before further visits."""

    eta_s: float | None = None


class VisitStarted(Event):
    """A later visit of a measured workload begins (its second, or leftover time for a wide interval)."""

    name: str
    eta_s: float | None = None


class VisitDone(Event):
    """A workload's later visit ended, with more planned (a whole-model run's visits, each in fresh processes)."""

    name: str


class SecondVisitDone(Event):
    """A workload's second visit ended: all its planned visits are done."""

    name: str


class CensusStarted(Event):
    """`bench --list` takes the op census of `phases` whole-model phases on `device`, in the interpreter
    `python`."""

    phases: int
    device: str
    python: str


class NumericsStarted(Event):
    """The float64 reference judges `count` workloads' answers (each build's against float64)."""

    count: int


class NumericsDone(Event):
    """One workload's answers judged: `status` "compared", or "not_compared"."""

    name: str
    status: str
