"""`mpsup bench` as one call: environments + workloads -> a journaled run -> a saved run record.

Whatever stops the run (Ctrl-C, SIGTERM, SIGHUP, a second Ctrl-C, a worker crash, a full disk, a
bug of ours), the measurements that finished are on disk: in the record, or else in the journal,
which the next bench or report turns into a record marked partial."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from mpsup.bench.measurement import WorkloadMeasurement
from mpsup.bench.policy import (
    PHASE_BUDGET_FACTOR,
    converged,
    eta_s,
    net_of_overrun,
    next_allotment,
    predict_visits,
    widest_first,
    within_reach,
)
from mpsup.bench.runner import BenchOptions, EnvSpec, Progress, Runner, _no_progress
from mpsup.bench.workerproc import check_interpreter
from mpsup.errors import OperationFailed
from mpsup.host.hygiene import conditions_changed, hygiene_now
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
        """From now on, signals are noted and never raise (the run is being finished)."""
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
    progress: Progress = _no_progress,
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
    try:
        with StopSignals(exiting=exiting) as stops:
            record = _measure(runner, workloads, options, mode, model, progress, journal, stops, expand)
            return record, _finish(record, runner, journal)
    finally:
        runner.close(force=True)
        if journal is not None:
            journal.close()


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
) -> dict[str, Any]:
    try:
        before = hygiene_now()
        t0 = options.clock()
        facts = runner.start()
        start_s = options.clock() - t0
    except KeyboardInterrupt:
        stops.hold()
        if journal is not None:
            journal.discard_unused()
        raise Interrupted("interrupted while the workers were starting; nothing was measured", stops.first) from None
    except BaseException:
        if journal is not None:
            journal.discard_unused()
        raise
    record = new_record(
        mode,
        options.device,
        facts,
        {
            "budget_s": options.policy.budget_s,
            "threads": options.threads,
            "cpus": list(options.cpus) if options.cpus else None,
            "thread_cpus": list(options.thread_cpus) if options.thread_cpus else None,
            "memory_share": options.memory_share,
            "allow_cpu_fallback": options.allow_cpu_fallback,
            "policy": dict(asdict(options.policy).items()),
        },
    )
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
        visits = options.policy.visits(len(runner.sessions) == 2)
        progress("start", {"total": len(workloads), "smoke": smoke_steps, "visits": visits})
        if options.smoke:
            from mpsup.metal import load_manifest

            kernels = load_manifest()
            for feature in runner.smoke_features():
                keep("smoke", runner.smoke_one(feature, kernels))
        _two_passes(runner, list(workloads), options, record, keep, progress, journal, stops, start_s, expand)
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


def _two_passes(
    runner: Runner,
    workloads: list[Workload],
    options: BenchOptions,
    record: dict[str, Any],
    keep: Callable[[str, dict[str, object]], None],
    progress: Progress,
    journal: Journal | None,
    stops: StopSignals,
    start_s: float = 0.0,
    expand: Expand | None = None,
) -> None:
    """First pass: every workload until its interval is within target or its first share is spent.
    Paired, with `split_pairs`: the first pass takes half the rounds, then fresh worker processes take
    the other half of every workload (its units span two process pairs). Last pass: what unconverged
    workloads did not spend goes to them again, widest interval first. `start_s`: what starting the workers
    took, the cost the progress ETA expects of each restart."""
    pol = options.policy
    clock = options.clock
    budget, first = pol.budget_s, pol.first_share_s
    paired = len(runner.sessions) == 2
    visits = pol.visits(paired)
    split = visits == 2
    half_rounds = math.ceil(pol.min_rounds / 2)
    share1 = first / 2 if split else first
    n = len(workloads)
    base = len(record["workloads"])  # workload i is record["workloads"][base + i]
    measured: list[WorkloadMeasurement] = []
    took: list[float] = []  # each first visit, as the run's clock saw it
    spent: list[float] = []  # each workload's visits so far, as the runner timed them
    open_: list[bool] = []  # unconverged after its latest visit
    pool = 0.0
    sizes = [float(w.memory_bytes) for w in workloads]  # what the ETA scales an unvisited workload's time by
    extra_weight: dict[str, float] = {}  # budget units of the workloads `expand` added
    last_phase = max((k for k, w in enumerate(workloads) if w.part == "phase"), default=-1) if expand else -1

    def weight(w: Workload) -> float:
        # A whole-model phase is the verdict, and each of its calls is a whole forward: it gets the budget of
        # PHASE_BUDGET_FACTOR workloads, so it reaches the rounds a call needs (six bound nothing at q=0.05).
        if w.name in extra_weight:
            return extra_weight[w.name]
        return PHASE_BUDGET_FACTOR if w.part == "phase" else 1.0

    def eta(unvisited: int, revisit: Sequence[int] = (), restart: bool = False) -> float:
        """Everything still planned: `unvisited` first visits, the second visits of `revisit` (measured
        workloads), a `restart` of the workers still to come, and the leftover pass they all lead to."""
        ahead = predict_visits(sizes[: len(took)], took, sizes[n - unvisited :], share1)
        ok_share = sum(m.status == "ok" for m in measured) / len(measured) if measured else 1.0
        # Only the first pass has unvisited workloads, and there open_ is still each first visit's outcome.
        open_share = sum(open_) / len(open_) if open_ else 1.0
        # The pool as it will stand after every planned visit: a second visit still to come will take
        # about what the first one did.
        later = set(revisit)
        pool_s = (
            sum(max(0.0, budget - spent[i] * (visits if i in later else 1)) for i, o in enumerate(open_) if o)
            if pol.leftover
            else 0.0
        )
        # Fresh workers come before the second visits, or (paired, unsplit) before a leftover pass.
        restarts = restart and (split or (pol.leftover and (pool_s > 0 or unvisited > 0)))
        return eta_s(
            budget,
            ahead,
            visits=visits,
            ok_share=ok_share,
            open_share=open_share if pol.leftover else 0.0,
            revisits_s=sum(took[i] for i in later),
            restart_s=start_s if restarts else 0.0,
            pool_s=pool_s,
        )

    for i, w in enumerate(workloads):
        revisit = [k for k, m in enumerate(measured) if m.status == "ok"] if split else []
        progress("workload", {"name": w.name, "eta_s": eta(n - i, revisit, restart=paired), "pass": 1})
        t0 = clock()
        m = runner.measure(w, share1 * weight(w), half_rounds if split else None)
        keep("workloads", m.to_json())
        measured.append(m)
        took.append(clock() - t0)
        spent.append(took[-1] if m.elapsed_s is None else m.elapsed_s)
        unconverged = m.status == "ok" and not converged(m.interval_width(), pol.target_rel_ci)
        open_.append(unconverged)
        if unconverged:
            pool += max(0.0, budget - spent[-1])
        progress("done", {"name": w.name, "status": m.status})
        if i == last_phase and expand is not None:
            phases = [d for d in record["workloads"][base : base + i + 1] if d.get("part") == "phase"]
            known = {x.name for x in workloads}
            added = [(x, u) for x, u in expand(phases, sum(weight(x) for x in workloads)) if x.name not in known]
            extra_weight.update((x.name, u) for x, u in added)
            workloads.extend(x for x, _ in added)
            sizes.extend(float(x.memory_bytes) for x, _ in added)
            n = len(workloads)
            progress("more", {"count": len(added), "total": n, "what": "ops"})

    def extend(i: int, share_s: float, min_new: int = 2) -> bool:
        try:
            extended = runner.extend(workloads[i], measured[i], share_s, min_new=min_new)
        finally:
            # Whatever stops the visit, the record holds what it took (as the saved record always has);
            # the journal only gets a finished visit.
            record["workloads"][base + i] = measured[i].to_json()
        if extended and journal is not None:
            # Its own kind, with the workload's position: a recovery puts the visit in its place, and a
            # journal cut off before it still has the first visit's entry, whole.
            with stops.critical():
                journal.append("workload-extended", {"index": base + i, "workload": record["workloads"][base + i]})
        return extended

    per = sum(took) / len(took) if took else first
    if split:
        ok = [i for i, m in enumerate(measured) if m.status == "ok"]
        progress("second-visits", {"count": len(ok)})  # the others (failed, unsupported) are done
        if not ok:
            return
        progress("restart", {"eta_s": eta(0, ok, restart=True)})
        runner.restart()
        for j, i in enumerate(ok):
            progress("extend", {"name": measured[i].name, "eta_s": eta(0, ok[j:])})
            # As many rounds as the first visit reached (six, or fewer for a slow workload that hit its
            # overrun cap), so both process pairs weigh alike and the caps still bound the time.
            extend(i, share1 * weight(workloads[i]), min_new=min(half_rounds, len(measured[i].ratios)))
            spent[i] = measured[i].elapsed_s or spent[i]
            open_[i] = not converged(measured[i].interval_width(), pol.target_rel_ci)
            progress("visited", {"name": measured[i].name})
        pool = sum(
            max(0.0, budget - (m.elapsed_s or 0.0))
            for m in measured
            if m.status == "ok" and not converged(m.interval_width(), pol.target_rel_ci)
        )
    # Without this a CPU main job whose slow workloads had overrun still spent 6-10 s on second visits.
    pool = net_of_overrun(
        pool, [budget * weight(w) for w in workloads[: len(measured)]], [m.elapsed_s or 0.0 for m in measured]
    )
    if not pol.leftover or pool <= 0:
        return
    widths = {str(i): m.interval_width() for i, m in enumerate(measured) if m.status == "ok"}
    order = [int(k) for k in widest_first(widths, pol.target_rel_ci)]

    def reachable(i: int, more_s: float) -> bool:
        spent_i = measured[i].elapsed_s or 0.0
        return not pol.leftover_reachable_only or within_reach(widths[str(i)], spent_i, more_s, pol.target_rel_ci)

    order = [i for i in order if reachable(i, pol.max_extension * budget)]
    # Too little time for a visit to add anything: a setup and two rounds cost about this much.
    least = max(0.1 * budget, 0.05)
    if not order or next_allotment(pool, [widths[str(i)] for i in order], pol.max_extension * budget) < least:
        return
    if paired and not split:
        progress(
            "restart",
            {"eta_s": eta_s(budget, restart_s=start_s, pool_s=pool, leftover_visits=len(order), per_visit_s=per)},
        )
        runner.restart()
    for j, i in enumerate(order):
        allot = next_allotment(pool, [widths[str(k)] for k in order[j:]], pol.max_extension * budget)
        if allot < least:
            break
        m = measured[i]
        if m.elapsed_s and m.visits and allot < 0.5 * m.elapsed_s / m.visits:
            continue  # a setup and two rounds of this workload alone cost more than it would be given
        if not reachable(i, allot):
            continue  # its share flows to the ones after it
        progress(
            "extend",
            {"name": m.name, "eta_s": eta_s(budget, pool_s=pool, leftover_visits=len(order) - j, per_visit_s=per)},
        )
        t0 = clock()
        extend(i, allot)
        pool -= clock() - t0
        if pool <= 0:
            break


def _finish(record: dict[str, Any], runner: Runner, journal: Journal | None) -> Path | None:
    """Workers gone, conditions re-read, the record written; if any of it fails, the journal stays."""
    try:
        runner.close(force=bool(record.get("partial")))
        after = hygiene_now()
        record["hygiene"]["after"] = after
        record["hygiene"]["changed"] = conditions_changed(record["hygiene"].get("before") or {}, after)
        record["crashes"] = {s.env.label: s.crashes for s in runner.sessions}
        if journal is None:
            return None
        end = {
            k: record[k]
            for k in ("partial", "interrupted", "signal", "failure", "failure_traceback", "hygiene", "crashes")
            if k in record
        }
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
