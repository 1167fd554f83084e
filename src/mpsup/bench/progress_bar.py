"""A bench run's progress on stderr: smoke steps and workloads as two bars, moved by the typed events of
bench/events.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from mpsup.bench.events import (
    BenchStarted,
    NumericsDone,
    NumericsStarted,
    SamplesTaken,
    SecondVisitDone,
    SecondVisitsPlanned,
    SmokeStepDone,
    VisitDone,
    VisitStarted,
    WorkersRestarting,
    WorkloadDone,
    WorkloadsAdded,
    WorkloadStarted,
)
from mpsup.console import safe
from mpsup.progress import Event
from mpsup.units import fmt_time


def fmt_eta(seconds: float) -> str:
    """`~45 s`, `~3 min`: an estimate, shown as one."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"~{max(1, round(s))} s"
    return f"~{round(s / 60)} min"


class BenchBar:
    """The two bars and what they count. The workload bar moves per visit (a paired workload gets two, in two
    pairs of processes); its count shows workloads whose visits are all done, out of what --list shows."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[current]}"),
            console=console,
            transient=False,
        )
        self.smoke: TaskID | None = None
        self.bench: TaskID | None = None
        self.numerics: TaskID | None = None
        self.visits = 1
        self.total = 0
        self.visits_done = 0
        self.first_done = 0
        self.workloads_done = 0
        self.name = ""  # the workload whose samples a slow request's line names

    def __call__(self, event: Event) -> None:
        match event:
            case BenchStarted():
                self._start(event)
            case SmokeStepDone():
                self._smoke_step(event)
            case (
                WorkloadStarted()
                | SamplesTaken()
                | WorkloadDone()
                | SecondVisitDone()
                | VisitDone()
                | SecondVisitsPlanned()
                | WorkloadsAdded()
                | WorkersRestarting()
                | VisitStarted()
            ):
                # Events before the bar started (none in a run) have nothing to move.
                if self.bench is not None:
                    self._workload_event(self.bench, event)
            case NumericsStarted(count=count):
                self.numerics = self.progress.add_task(
                    "numerics", total=count, current="float64 reference", eta="", count=f"0/{count}"
                )
            case NumericsDone(name=name):
                if self.numerics is not None:
                    self.progress.advance(self.numerics)
                    task = self.progress.tasks[self.numerics]
                    self.progress.update(self.numerics, current=safe(name), count=f"{task.completed:g}/{task.total:g}")
            case _:
                raise TypeError(f"the bench progress bar has no rendering for {type(event).__name__}")

    def _start(self, event: BenchStarted) -> None:
        # Shown only once measuring starts: an error before then stays one line, not a line and an empty bar.
        self.progress.start()
        self.visits, self.total = max(1, event.visits), event.total
        if event.smoke:
            n = event.smoke
            self.smoke = self.progress.add_task("smoke", total=n, current="", eta="", count=f"0/{n}")
        self.bench = self.progress.add_task("workloads", total=event.total, current="", eta="", count=self._count())

    def _smoke_step(self, event: SmokeStepDone) -> None:
        # The bar counts each smoke test once: the first environment's step stands for every environment's.
        if self.smoke is None or event.env != "baseline":
            return
        self.progress.advance(self.smoke)
        task = self.progress.tasks[self.smoke]
        self.progress.update(self.smoke, current=safe(event.feature), count=f"{task.completed:g}/{task.total:g}")

    def _workload_event(self, task: TaskID, event: Event) -> None:
        eta = getattr(event, "eta_s", None)
        extra: dict[str, Any] = {"eta": f"ETA {fmt_eta(eta)}"} if eta is not None else {}
        match event:
            case WorkloadStarted(name=name):
                self.name = safe(name)
                self.progress.update(task, current=self.name, **extra)
            case SamplesTaken():
                # Inside one slow workload: which side, how many samples so far and what one request took.
                what = "warmup" if event.warmup else "samples"
                current = f"{self.name}: {safe(event.env)} {what} {event.samples}"
                self.progress.update(task, current=f"{current} ({fmt_time(event.took_s)} a request)")
            case WorkloadDone():
                self.first_done += 1
                self._visit_done(task, workloads=1 if self.visits == 1 else 0)
            case SecondVisitDone():
                self._visit_done(task, workloads=1)
            case VisitDone():
                self._visit_done(task)
            case SecondVisitsPlanned(count=count):
                if self.visits > 1:
                    # Workloads that failed on their first visit get no second one: they are done here.
                    skipped = max(0, self.first_done - count)
                    self._visit_done(task, skipped, skipped)
            case WorkloadsAdded(total=total):
                self.total = total or self.total
                self.progress.update(task, total=self.total, count=self._count())
            case WorkersRestarting():
                self.progress.update(task, current="more time for the widest intervals: new workers", **extra)
            case VisitStarted(name=name):
                self.name = safe(name)  # a later visit's slow samples are this workload's
                self.progress.update(task, current="more time: " + self.name, **extra)

    def _count(self) -> str:
        return f"{self.workloads_done}/{self.total}"

    def _visit_done(self, task: TaskID, visits: int = 1, workloads: int = 0) -> None:
        self.visits_done += visits
        self.workloads_done += workloads
        # Never quite full while running: a full bar stops rich's clock, and leftover visits may follow.
        done = min(self.visits_done / self.visits, self.total - 1e-3)
        self.progress.update(task, completed=done, count=self._count())

    def finish(self) -> None:
        if self.bench is not None and self.total and self.workloads_done >= self.total:
            # The last frame stays on screen: no time left to estimate, nothing current.
            self.progress.update(self.bench, completed=self.total, eta="", current="done")
        self.progress.stop()


@contextmanager
def bench_progress(console: Console) -> Iterator[BenchBar]:
    """Smoke steps and workloads as two bars: the workload bar's total is what `--list` shows for the
    same options. The ETA covers every pass still planned (the runner's events carry it)."""
    bar = BenchBar(console)
    try:
        yield bar
    finally:
        bar.finish()
