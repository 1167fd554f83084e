"""`mpsup bench` as one call: environments + workloads -> a journaled run -> a saved run record.

Whatever stops the run (Ctrl-C, SIGTERM, SIGHUP, a second Ctrl-C, a worker crash, a full disk, a
bug of ours), the measurements that finished are on disk: in the record, or else in the journal,
which the next bench or report turns into a record marked partial."""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from mpsup.bench import events
from mpsup.bench.energy_turns import start_energy
from mpsup.bench.measurement import WorkloadMeasurement
from mpsup.bench.numerics import cleanup, judge
from mpsup.bench.policy import (
    PHASE_BUDGET_FACTOR,
    SamplingPolicy,
    converged,
    eta_s,
    net_of_overrun,
    next_allotment,
    predict_visits,
    widest_first,
    within_reach,
)
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.bench.visit_watch import watch_for
from mpsup.bench.workerproc import check_interpreter
from mpsup.errors import OperationFailed
from mpsup.host.hygiene import conditions_changed, hygiene_now, start_warnings
from mpsup.progress import Progress, ignore
from mpsup.runs.journal import Journal, JournalWriteError, Warn, recover_journals
from mpsup.runs.store import new_record, new_run_id, save_record
from mpsup.workloads import Workload

# The phases' record entries and the planned workloads' budget units -> workloads to add, each with its units.
Expand = Callable[[list[dict[str, Any]], float], list[tuple[Workload, float]]]

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(OperationFailed):
    """Stopped by a signal before anything was measured: exit 128 + the signal's number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP all mean "stop and keep what is done".

    The first one raises KeyboardInterrupt, except inside a `critical()` section (a result being
    appended to the record and the journal), where it waits for the section's end. Every later one
    is noted and otherwise ignored: a second Ctrl-C must not cut the saving of the record short.

    With `exiting` (the CLI, whose process ends with the run), a run stopped by a signal keeps ignoring
    them afterwards, so that one more Ctrl-C cannot turn the final output into a traceback."""

    def __init__(self, *, exiting: bool = False) -> None:
        self.exiting = exiting
        self.received: list[int] = []
        self.stopping = False
        self._depth = 0
        self._pending = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, signal.SIG_IGN if self.exiting and self.received else old)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.stopping:
            return
        if self._depth:
            self._pending = True
            return
        self.stopping = True
        raise KeyboardInterrupt

    def hold(self) -> None:
        """From here on, signals are noted and never raise (the run is being finished)."""
        self.stopping = True

    @property
    def first(self) -> int:
        return self.received[0] if self.received else signal.SIGINT

    def critical(self) -> _Critical:
        return _Critical(self)


class _Critical:
    def __init__(self, stops: StopSignals) -> None:
        self.stops = stops

    def __enter__(self) -> None:
        self.stops._depth += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        st = self.stops
        st._depth -= 1
        if not st._depth and st._pending and not st.stopping and exc_type is None:
            st._pending = False
            st.stopping = True
            raise KeyboardInterrupt


def _no_warn(_msg: str) -> None:
    return None


def run_bench(
    envs: list[EnvSpec],
    workloads: list[Workload],
    options: BenchOptions,
    *,
    mode: str = "single",
    model: dict[str, object] | None = None,
    progress: Progress = ignore,
    save: bool = True,
    warn: Warn = _no_warn,
    exiting: bool = False,
    expand: Expand | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Measure, journal as it goes, save the record. `exiting`: the caller's process ends with the run
    (see StopSignals). `expand`: given the record entries of the run's whole-model phases once each had its
    first visit, the workloads to measure after the planned ones (each phase's ops), with their budget units."""
    envs = [replace(e, python=check_interpreter(e.python, "--" + e.label.split("-")[0])) for e in envs]
    journal = None
    if save:
        recover_journals(warn)
        journal = Journal.create(new_run_id())  # also the writability check, before any work
    runner = Runner(envs, options, progress)
    runner.watch = watch_for(options.device, options.clock)
    try:
        with StopSignals(exiting=exiting) as stops:
            record = _measure(runner, workloads, options, mode, model, progress, journal, stops, expand, warn)
            return record, _finish(record, runner, journal)
    finally:
        runner.close(force=True)
        runner.watch.close()
        cleanup(runner.capture)
        if journal is not None:
            journal.close()


def _start_workers(
    runner: Runner, options: BenchOptions, journal: Journal | None, stops: StopSignals, warn: Warn = _no_warn
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """The conditions before the run (what is wrong with them said first, with the fix), the workers' facts and
    what starting them took. A run stopped here measured nothing: its journal goes."""
    try:
        before = hygiene_now(runner.watch.now())
        for line in start_warnings(before):
            warn(line)
        t0 = options.clock()
        facts = runner.start()
        return before, facts, options.clock() - t0
    except KeyboardInterrupt:
        stops.hold()
        if journal is not None:
            journal.discard_unused()
        raise Interrupted("interrupted while the workers were starting; nothing was measured", stops.first) from None
    except BaseException:
        if journal is not None:
            journal.discard_unused()
        raise


def _options_doc(options: BenchOptions) -> dict[str, Any]:
    """The record's `options`: what the run was asked to do."""
    return {
        "budget_s": options.policy.budget_s,
        "threads": options.threads,
        "cpus": list(options.cpus) if options.cpus else None,
        "thread_cpus": list(options.thread_cpus) if options.thread_cpus else None,
        "memory_share": options.memory_share,
        "allow_cpu_fallback": options.allow_cpu_fallback,
        "numerics": options.numerics,
        "energy": options.energy,
        "policy": dict(asdict(options.policy).items()),
    }


def _measure(
    runner: Runner,
    workloads: list[Workload],
    options: BenchOptions,
    mode: str,
    model: dict[str, object] | None,
    progress: Progress,
    journal: Journal | None,
    stops: StopSignals,
    expand: Expand | None = None,
    warn: Warn = _no_warn,
) -> dict[str, Any]:
    t_start = options.clock()
    before, facts, start_s = _start_workers(runner, options, journal, stops, warn)
    record = new_record(mode, options.device, facts, _options_doc(options))
    if options.energy:  # idle power, the workers up and waiting
        runner.energy, record["energy_meter"] = start_energy(options.device)
    if journal is not None:
        record["id"] = journal.run_id
    record["model"] = model
    record["hygiene"]["before"] = before

    def keep(kind: str, doc: dict[str, object]) -> None:
        with stops.critical():
            record[kind].append(doc)
            if journal is not None:
                journal.append("smoke" if kind == "smoke" else "workload", doc)

    try:
        if journal is not None:
            with stops.critical():
                journal.append("header", record)
        smoke_steps = len(runner.smoke_features()) if options.smoke else 0
        # The bar counts a workload once all its planned visits are done.
        visits = options.policy.visits(len(runner.sessions) == 2, whole_run(runner, workloads, expand))
        progress(events.BenchStarted(len(workloads), smoke_steps, visits))
        if options.smoke:
            from mpsup.metal import load_manifest

            kernels = load_manifest()
            for feature in runner.smoke_features():
                keep("smoke", runner.smoke_one(feature, kernels))
        planned = list(workloads)
        _two_passes(runner, planned, options, record, keep, progress, journal, stops, start_s, expand)
        _numerics_pass(runner, planned, record, progress, journal, stops, options.clock() - t_start)
        stops.hold()  # inside the try: a signal that lands before this line is still caught below
    except KeyboardInterrupt:
        stops.hold()
        record.update(partial=True, interrupted=True, signal=signal.Signals(stops.first).name)
    except JournalWriteError as exc:
        stops.hold()
        record.update(partial=True, failure=f"the run stopped: {exc}")
    except Exception as exc:
        # A bug of ours (in the statistics, say) must not cost the measurements already taken.
        stops.hold()
        record.update(
            partial=True,
            failure=f"the run stopped on an internal error: {type(exc).__name__}: {exc}"[:500],
            failure_traceback=traceback.format_exc(limit=8),
        )
    return record


Keep = Callable[[str, dict[str, object]], None]


def _numerics_pass(
    runner: Runner,
    workloads: list[Workload],
    record: dict[str, Any],
    progress: Progress,
    journal: Journal | None,
    stops: StopSignals,
    elapsed_s: float,
) -> None:
    """Each compared workload's answers against float64 (bench/numerics.py), into its record entry; journaled as a
    later visit is, so a run stopped here keeps what was judged."""
    capture = runner.capture
    if capture is None:
        return
    try:
        labels = [s.env.label for s in runner.sessions]
        # The timed work is done: the workers go (each may still hold the last model it built), so the
        # reference has the machine's memory to itself.
        for s in runner.sessions:
            s.close()
        judged = judge(
            capture,
            workloads,
            record["workloads"],
            labels,
            runner.reference(),
            elapsed_s=elapsed_s,
            progress=progress,
            clock=runner.options.clock,
        )
        for i, doc in judged.items():
            with stops.critical():
                record["workloads"][i]["numerics"] = doc
                if journal is not None:
                    journal.append("workload-extended", {"index": i, "workload": record["workloads"][i]})
        if capture.summary:
            record["numerics_pass"] = capture.summary
    finally:
        cleanup(capture)


def _two_passes(
    runner: Runner,
    workloads: list[Workload],
    options: BenchOptions,
    record: dict[str, Any],
    keep: Keep,
    progress: Progress,
    journal: Journal | None,
    stops: StopSignals,
    start_s: float = 0.0,
    expand: Expand | None = None,
) -> None:
    """Every pass the policy plans over `workloads` (see Schedule)."""
    Schedule(runner, workloads, options, record, keep, progress, journal, stops, start_s, expand).run()


def whole_run(runner: Runner, workloads: Sequence[Workload], expand: Expand | None) -> bool:
    """Whether a run gets `phase_visits` visits: torch against MLX, or every workload a whole-model phase with
    no ops to be added (`--no-ops`, or `--only` naming phases). Between two stacks nothing cancels, and a
    phase's every call is a whole forward, where one process that reads slow leans the whole figure."""
    stacks = {s.env.stack for s in runner.sessions}
    phases_only = bool(workloads) and expand is None and all(w.part == "phase" for w in workloads)
    return len(stacks) > 1 or phases_only


@dataclass
class Schedule:
    """First pass: every workload until its interval is within target or its first share is spent.
    Paired, with `split_pairs`: the first pass takes half the rounds, then fresh worker processes take
    the other half of every workload (its units span two process pairs). A run that is `whole` (every
    workload a whole-model phase, or torch against MLX) takes `phase_visits` such visits, each in fresh
    processes started in alternating order, and no leftover pass: its interval is over the visit medians
    (report/analysis.py), so a further visit in the last pair of processes would count that pair twice.
    Last pass: what unconverged workloads did not spend goes to them again, widest interval first.
    `start_s`: what starting the workers took, the cost the progress ETA expects of each restart. Workload i
    is record["workloads"][base + i]."""

    runner: Runner
    workloads: list[Workload]
    options: BenchOptions
    record: dict[str, Any]
    keep: Keep
    progress: Progress
    journal: Journal | None
    stops: StopSignals
    start_s: float = 0.0
    expand: Expand | None = None
    # Per workload, by its index in `workloads`:
    measured: list[WorkloadMeasurement] = field(default_factory=list, init=False)
    took: list[float] = field(default_factory=list, init=False)  # its first visit, as the run's clock saw it
    spent: list[float] = field(default_factory=list, init=False)  # its visits so far, as the runner timed them
    open_: list[bool] = field(default_factory=list, init=False)  # unconverged after its latest visit
    sizes: list[float] = field(default_factory=list, init=False)  # what the ETA scales its unvisited time by
    extra_weight: dict[str, float] = field(default_factory=dict, init=False)  # budget units of what `expand` added
    pool: float = field(default=0.0, init=False)  # leftover seconds the unconverged workloads did not spend
    base: int = field(default=0, init=False)
    last_phase: int = field(default=-1, init=False)  # the first pass's index after which `expand` adds ops
    whole: bool = field(default=False, init=False)  # every visit of its own (see the class)

    def __post_init__(self) -> None:
        self.sizes = [float(w.memory_bytes) for w in self.workloads]
        self.whole = whole_run(self.runner, self.workloads, self.expand)
        self.base = len(self.record["workloads"])
        if self.expand is not None:
            self.last_phase = max((k for k, w in enumerate(self.workloads) if w.part == "phase"), default=-1)

    @property
    def pol(self) -> SamplingPolicy:
        return self.options.policy

    @property
    def paired(self) -> bool:
        return len(self.runner.sessions) == 2

    @property
    def visits(self) -> int:
        return self.pol.visits(self.paired, self.whole)

    @property
    def split(self) -> bool:
        return self.visits >= 2

    @property
    def many(self) -> bool:
        """More than two visits: every visit in fresh processes, no leftover pass."""
        return self.visits > 2

    @property
    def half_rounds(self) -> int:
        """The rounds each visit takes at least (half of them on each of two visits)."""
        return self.pol.visit_rounds(self.visits)

    @property
    def share1(self) -> float:
        """A visit's share of the budget: the first pass's share over the visits; with many visits the whole
        budget over them, as no leftover pass follows."""
        if self.many:
            return self.pol.budget_s / self.visits
        return self.pol.first_share_s / 2 if self.split else self.pol.first_share_s

    def run(self) -> None:
        self.first_pass()
        if not self.split:
            self.leftover_pass()
            return
        for visit in range(2, self.visits + 1):
            if not self.second_pass(visit):
                return
        if not self.many:
            self.leftover_pass()

    def weight(self, w: Workload) -> float:
        # A whole-model phase is the verdict, and each of its calls is a whole forward: it gets the budget of
        # PHASE_BUDGET_FACTOR workloads, so it reaches the rounds a call needs (six bound nothing at q=0.05).
        if w.name in self.extra_weight:
            return self.extra_weight[w.name]
        return PHASE_BUDGET_FACTOR if w.part == "phase" else 1.0

    def eta(
        self, unvisited: int, revisit: Sequence[int] = (), restart: bool = False, passes: int | None = None
    ) -> float:
        """Everything still planned: `unvisited` first visits, the second visits of `revisit` (measured
        workloads), a `restart` of the workers still to come, and the leftover pass they all lead to.
        `passes`: later passes still to come after the one under way, each a restart and a visit of every
        measured workload (with many visits); by default every one after the first."""
        pol, budget, n = self.pol, self.pol.budget_s, len(self.workloads)
        ahead = predict_visits(self.sizes[: len(self.took)], self.took, self.sizes[n - unvisited :], self.share1)
        ok_share = sum(m.status == "ok" for m in self.measured) / len(self.measured) if self.measured else 1.0
        # Only the first pass has unvisited workloads, and there open_ is still each first visit's outcome.
        open_share = sum(self.open_) / len(self.open_) if self.open_ else 1.0
        # The pool as it will stand after every planned visit: a second visit still to come will take
        # about what the first one did.
        later = set(revisit)
        pool_s = (
            sum(
                max(0.0, budget - self.spent[i] * (self.visits if i in later else 1))
                for i, o in enumerate(self.open_)
                if o
            )
            if pol.leftover
            else 0.0
        )
        if self.many:
            # No leftover pass. In the first pass (`passes` None) every measured workload has all its later
            # visits to come, each after a restart; in a later one, `revisit` the rest of this pass (after a
            # `restart`, if it is still to come), then `passes` more, each a restart and every measured workload.
            took = sum(self.took[i] for i in later)
            if passes is None:
                more = self.visits - 1
                return eta_s(
                    budget,
                    ahead,
                    visits=self.visits,
                    ok_share=ok_share,
                    revisits_s=more * took,
                    restart_s=more * self.start_s,
                )
            every = sum(self.took[i] for i, m in enumerate(self.measured) if m.status == "ok")
            return took + passes * every + (passes + restart) * self.start_s
        # Fresh workers come before the second visits, or (paired, unsplit) before a leftover pass.
        restarts = restart and (self.split or (pol.leftover and (pool_s > 0 or unvisited > 0)))
        return eta_s(
            budget,
            ahead,
            visits=self.visits,
            ok_share=ok_share,
            open_share=open_share if pol.leftover else 0.0,
            revisits_s=sum(self.took[i] for i in later),
            restart_s=self.start_s if restarts else 0.0,
            pool_s=pool_s,
        )

    def first_pass(self) -> None:
        # The list grows while it is walked: `expand` appends the phases' ops after the last phase.
        for i, w in enumerate(self.workloads):
            self._first_visit(i, w)
            if i == self.last_phase and self.expand is not None:
                self._add_ops(i, self.expand)

    def _first_visit(self, i: int, w: Workload) -> None:
        revisit = [k for k, m in enumerate(self.measured) if m.status == "ok"] if self.split else []
        n = len(self.workloads)
        self.progress(events.WorkloadStarted(w.name, self.eta(n - i, revisit, restart=self.paired)))
        t0 = self.options.clock()
        m = self.runner.measure(w, self.share1 * self.weight(w), self.half_rounds if self.split else None)
        self.keep("workloads", m.to_json())
        self.measured.append(m)
        self.took.append(self.options.clock() - t0)
        self.spent.append(self.took[-1] if m.elapsed_s is None else m.elapsed_s)
        unconverged = m.status == "ok" and not converged(m.interval_width(), self.pol.target_rel_ci)
        self.open_.append(unconverged)
        if unconverged:
            self.pool += max(0.0, self.pol.budget_s - self.spent[-1])
        self.progress(events.WorkloadDone(w.name, m.status))

    def _add_ops(self, i: int, expand: Expand) -> None:
        """The workloads `expand` derives from the phases measured so far, each with its budget units."""
        entries = self.record["workloads"][self.base : self.base + i + 1]
        phases = [d for d in entries if d.get("part") == "phase"]
        known = {x.name for x in self.workloads}
        units = sum(self.weight(x) for x in self.workloads)
        added = [(x, u) for x, u in expand(phases, units) if x.name not in known]
        self.extra_weight.update((x.name, u) for x, u in added)
        self.workloads.extend(x for x, _ in added)
        self.sizes.extend(float(x.memory_bytes) for x, _ in added)
        self.progress(events.WorkloadsAdded(len(added), len(self.workloads), "ops"))

    def extend(self, i: int, share_s: float, min_new: int = 2) -> bool:
        try:
            extended = self.runner.extend(self.workloads[i], self.measured[i], share_s, min_new=min_new)
        finally:
            # Whatever stops the visit, the record holds what it took (as the saved record always has);
            # the journal only gets a finished visit.
            self.record["workloads"][self.base + i] = self.measured[i].to_json()
        if extended and self.journal is not None:
            # Its own kind, with the workload's position: a recovery puts the visit in its place, and a
            # journal cut off before it still has the first visit's entry, whole.
            with self.stops.critical():
                entry = {"index": self.base + i, "workload": self.record["workloads"][self.base + i]}
                self.journal.append("workload-extended", entry)
        return extended

    def second_pass(self, visit: int = 2) -> bool:
        """Fresh workers visit every measured workload again (its `visit`-th visit); False where none was
        measured."""
        ok = [i for i, m in enumerate(self.measured) if m.status == "ok"]
        if visit == 2:
            self.progress(events.SecondVisitsPlanned(len(ok)))  # the others (failed, unsupported) are done
        if not ok:
            return False
        left = self.visits - visit  # passes after this one
        self.progress(events.WorkersRestarting(self.eta(0, ok, restart=True, passes=left if self.many else None)))
        self.runner.restart()
        target = self.pol.target_rel_ci
        for j, i in enumerate(ok):
            m = self.measured[i]
            self.progress(events.VisitStarted(m.name, self.eta(0, ok[j:], passes=left if self.many else None)))
            # As many rounds as the first visit reached (six, or fewer for a slow workload that hit its
            # overrun cap), so both process pairs weigh alike and the caps still bound the time.
            self.extend(i, self.share1 * self.weight(self.workloads[i]), min_new=min(self.half_rounds, len(m.ratios)))
            self.spent[i] = m.elapsed_s or self.spent[i]
            self.open_[i] = not converged(m.interval_width(), target)
            if visit == self.visits:
                self.progress(events.SecondVisitDone(m.name))
            else:
                self.progress(events.VisitDone(m.name))
        self.pool = sum(
            max(0.0, self.pol.budget_s - (m.elapsed_s or 0.0))
            for m in self.measured
            if m.status == "ok" and not converged(m.interval_width(), target)
        )
        return True

    def leftover_pass(self) -> None:
        """What unconverged workloads did not spend goes to them again, widest interval first."""
        pol, budget = self.pol, self.pol.budget_s
        per = sum(self.took) / len(self.took) if self.took else pol.first_share_s
        # A workload that overran its share already spent time the pool counted as left.
        allowances = [budget * self.weight(w) for w in self.workloads[: len(self.measured)]]
        pool = net_of_overrun(self.pool, allowances, [m.elapsed_s or 0.0 for m in self.measured])
        if not pol.leftover or pool <= 0:
            return
        widths = {i: m.interval_width() for i, m in enumerate(self.measured) if m.status == "ok"}
        cap = pol.max_extension * budget
        order = [int(k) for k in widest_first({str(i): w for i, w in widths.items()}, pol.target_rel_ci)]
        order = [i for i in order if self._reachable(widths[i], i, cap)]
        # Too little time for a visit to add anything: a setup and two rounds cost about this much.
        least = max(0.1 * budget, 0.05)
        if not order or next_allotment(pool, [widths[i] for i in order], cap) < least:
            return
        if self.paired and not self.split:
            eta = eta_s(budget, restart_s=self.start_s, pool_s=pool, leftover_visits=len(order), per_visit_s=per)
            self.progress(events.WorkersRestarting(eta))
            self.runner.restart()
        for j, i in enumerate(order):
            allot = next_allotment(pool, [widths[k] for k in order[j:]], cap)
            if allot < least:
                break
            m = self.measured[i]
            if m.elapsed_s and m.visits and allot < 0.5 * m.elapsed_s / m.visits:
                continue  # a setup and two rounds of this workload alone cost more than it would be given
            if not self._reachable(widths[i], i, allot):
                continue  # its share flows to the ones after it
            eta = eta_s(budget, pool_s=pool, leftover_visits=len(order) - j, per_visit_s=per)
            self.progress(events.VisitStarted(m.name, eta))
            t0 = self.options.clock()
            self.extend(i, allot)
            pool -= self.options.clock() - t0
            if pool <= 0:
                break

    def _reachable(self, width: float, i: int, more_s: float) -> bool:
        spent_i = self.measured[i].elapsed_s or 0.0
        return not self.pol.leftover_reachable_only or within_reach(width, spent_i, more_s, self.pol.target_rel_ci)


# What the journal's end line holds: what a recovered run has that its workload entries do not.
END_KEYS = (
    "partial",
    "interrupted",
    "signal",
    "failure",
    "failure_traceback",
    "hygiene",
    "crashes",
    "machine_state",
    "numerics_pass",
)


def _finish(record: dict[str, Any], runner: Runner, journal: Journal | None) -> Path | None:
    """Workers gone, conditions re-read, the record written; if any of it fails, the journal stays."""
    try:
        runner.close(force=bool(record.get("partial")))
        after = hygiene_now(runner.watch.now())
        record["hygiene"]["after"] = after
        record["hygiene"]["changed"] = conditions_changed(record["hygiene"].get("before") or {}, after)
        record["machine_state"] = runner.watch.summary()
        record["crashes"] = {s.env.label: s.crashes for s in runner.sessions}
        if (record.get("energy_meter") or {}).get("name"):
            record["energy_meter"].update(runner.energy.summary())
        if journal is None:
            return None
        end = {k: record[k] for k in END_KEYS if k in record}
        # The record below is what counts; without this line a recovery would only mark the run partial.
        with contextlib.suppress(JournalWriteError):
            journal.append("end", end)
        path = save_record(record)
    except Exception as exc:
        where = (
            f"; every finished measurement is kept in {journal.path} (`mpsup report --list` turns it into a record)"
            if journal
            else ""
        )
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        raise OperationFailed(f"could not save the run record ({why}){where}") from None
    journal.discard()
    return path
