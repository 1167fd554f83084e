"""One session of a bisect: from its journal's steps, measure what bisect/logic.py asks for next, journal each
finished step, and stop at the answer or at a signal.

Each step is what `bench --candidate` does (bench.command.run over the same plan, smoke tests off) and what
`report` calls of it (report.analysis.analyze, with a stored A/A floor where one matches)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mpsup.bench.command import BUDGET_RANGE_S, BenchPlan
from mpsup.bench.run import Interrupted
from mpsup.bisect import journal
from mpsup.bisect.events import Resumed, StepFinished, StepStarted
from mpsup.bisect.logic import (
    BAD,
    Done,
    Figure,
    Measure,
    Outcome,
    classify,
    classify_numerics,
    max_paired_runs,
    next_action,
)
from mpsup.bisect.request import BisectRequest
from mpsup.bisect.results import VERDICTS, BisectResult, EnvFacts, Step, exit_code, notes
from mpsup.errors import OperationFailed, UserError
from mpsup.progress import Progress
from mpsup.stats import finite_or_none

if TYPE_CHECKING:
    from mpsup.report.analysis import Analysis

# What bench.command.run reports a step's progress through: the bars bench draws are driven by bench's own events,
# which the bisect passes through untouched.
BenchProgress = Progress
# A step's bars: entered around each paired run, handing bench the progress it reports to.
StepBars = Callable[[], AbstractContextManager[BenchProgress]]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Environments(Protocol):
    """The bisect's environments as interpreters, by index: resolved up front, or installed when first asked for."""

    @property
    def n(self) -> int: ...

    def python(self, i: int) -> Path: ...  # may install (--nightlies)

    def known(self, i: int) -> Path | None: ...  # without installing anything

    def probed(self, i: int) -> dict[str, Any] | None: ...  # the probe an install just ran there, if any

    def release(self, keep: set[int]) -> None: ...  # what the bisect will not ask for again may go (--nightlies)


@dataclass(frozen=True)
class Listed:
    """Environments the user named: interpreters resolved before the bisect starts."""

    pythons: tuple[Path, ...]

    @property
    def n(self) -> int:
        return len(self.pythons)

    def python(self, i: int) -> Path:
        return self.pythons[i]

    def known(self, i: int) -> Path | None:
        return self.pythons[i]

    def probed(self, i: int) -> dict[str, Any] | None:
        return None

    def release(self, keep: set[int]) -> None:
        return None  # the user's own environments stay as they are


def _journaled_steps(doc: dict[str, Any], n: int) -> tuple[list[Step], dict[int, EnvFacts], float]:
    """The journal's steps, facts and time spent, each step one this bisect's logic can read, or one line."""
    path = journal.journal_path(str(doc["key"]))
    try:
        steps = [Step.from_json(s) for s in doc["steps"]]
        facts = {int(k): EnvFacts.from_json(v) for k, v in doc["facts"].items() if str(k).isdigit()}
        elapsed = float(doc.get("elapsed_s") or 0.0)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: a bisect journal with damaged steps; rerun with --fresh to start over") from None
    # A step the logic would misread is refused, not bisected on (load_journal checks each step's own fields;
    # which environments exist is this bisect's to say).
    for i, s in enumerate(steps, 1):
        if not 0 < s.index < n:
            why = f"index {s.index} names no environment of this bisect (1 to {n - 1})"
        elif s.verdict not in VERDICTS:
            why = f"verdict {s.verdict[:40]!r} is not {', '.join(VERDICTS[:-1])} or {VERDICTS[-1]}"
        elif s.attempt < 1:
            why = f"attempt {s.attempt} is not a number from 1"
        else:
            continue
        raise UserError(f"{path}: step {i}: {why}; rerun with --fresh to start over")
    return steps, facts, elapsed


class Session:
    def __init__(
        self,
        req: BisectRequest,
        plan: BenchPlan,
        envs: Environments,
        doc: dict[str, Any],
        progress: Progress,
        bars: StepBars,
        warn: Callable[[str], None],
    ) -> None:
        self.req, self.plan, self.envs, self.doc = req, plan, envs, doc
        self.progress, self.bars, self.warn = progress, bars, warn
        self.n = envs.n
        # Shown as first typed, also when `--resume` alone resolved them from the journal's absolute paths.
        typed = [str(e) for e in doc.get("environments", [])]
        self.names = typed if len(typed) == self.n else list(req.environments)
        self.steps, self.facts, self.elapsed0 = _journaled_steps(doc, self.n)
        self.resumed = len(self.steps)
        self.t0 = time.monotonic()

    # -- journal ---------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.elapsed0 + (time.monotonic() - self.t0)

    def save(self, done: Done | None = None) -> None:
        self.doc["steps"] = [s.to_json() for s in self.steps]
        self.doc["facts"] = {str(k): v.to_json() for k, v in self.facts.items()}
        self.doc["updated"] = now_iso()
        self.doc["elapsed_s"] = self.elapsed()
        if done is not None:
            self.doc["status"] = "done"
            self.doc["result"] = {
                "status": done.status,
                "last_good": done.last_good,
                "first_bad": done.first_bad,
                "unresolved": list(done.unresolved),
            }
        journal.save_journal(self.doc)

    # -- the loop --------------------------------------------------------------------------------------

    def outcomes(self) -> list[Outcome]:
        return [Outcome(s.index, s.attempt, s.verdict) for s in self.steps]

    def reference(self) -> dict[str, float]:
        """Each workload the ends step called slower, with how much: what the later steps are held against."""
        ends = [s for s in self.steps if s.index == self.n - 1 and s.verdict == BAD]
        if not ends:
            return {}
        return {f.name: f.speedup for f in ends[-1].figures if f.change == "slower" and f.speedup}

    def run_to_answer(self) -> BisectResult:
        """Measure step after step, journaling each, until the logic has its answer or a signal stops it."""
        if self.resumed:
            self.progress(Resumed(self.resumed, str(journal.journal_path(self.doc["key"]))))
        try:
            while True:
                action = next_action(self.n, self.outcomes())
                if not self.req.keep_envs:
                    ends = (action.last_good, action.first_bad) if isinstance(action, Done) else (action.index,)
                    self.envs.release({0, *ends})
                if isinstance(action, Done):
                    for i in (action.last_good, action.first_bad):
                        self.probe(i)
                    self.save(action)
                    return self.result(action)
                self.install_and_probe(action.index)
                stopped = self.measure(action)
                self.save()
                if stopped:
                    return self.result(None, interrupted=stopped)
        except KeyboardInterrupt:
            # Between steps (an install, a probe, the analysis): what is journaled stands; this step is measured again.
            self.save()
            return self.result(None, interrupted="SIGINT")
        except Interrupted as exc:
            # Stopped while a step's workers were starting: bench's one line would not say the bisect goes on.
            self.save()
            signum = exc.exit_code - 128
            name = signal.Signals(signum).name if signum in {s.value for s in signal.Signals} else "SIGINT"
            return self.result(None, interrupted=name)

    def probe(self, i: int) -> EnvFacts:
        if i not in self.facts or self.facts[i].torch is None:
            from mpsup.probe import run_interpreter_probe

            python = self.envs.python(i)
            self.facts[i] = EnvFacts.from_probe(self.envs.probed(i) or run_interpreter_probe(python))
        return self.facts[i]

    def install_and_probe(self, i: int) -> None:
        """Environment 0 and `i` there and probed; with --nightlies each is installed here the first time."""
        for k in (0, i):
            self.envs.python(k)
            self.probe(k)

    def measure(self, action: Measure) -> str | None:
        """One paired run of environment 0 against `action.index`; the signal's name if it was stopped."""
        from mpsup.bench.command import run as bench_run

        i = action.index
        budget = min(self.req.budget * 2 ** (action.attempt - 1), BUDGET_RANGE_S[1])
        number = len(self.steps) + 1
        self.progress(
            StepStarted(
                number=number,
                index=i,
                attempt=action.attempt,
                budget_s=budget,
                environment=self.names[i],
                good=self.names[0],
                torch=self.facts[i].torch,
                planned=max_paired_runs(self.n),
            )
        )
        request = replace(
            self.plan.request,
            baseline=str(self.envs.python(0)),
            candidate=str(self.envs.python(i)),
            aa=False,
            budget=budget,
        )
        t0 = time.monotonic()
        with self.bars() as bench_progress:
            result = bench_run(replace(self.plan, request=request), progress=bench_progress, warn=self.warn)
        seconds = time.monotonic() - t0
        record = result.record
        if record.get("interrupted"):
            return str(record.get("signal") or "SIGINT")
        if record.get("failure"):
            raise OperationFailed(f"step {number} ({self.names[i]}): {record['failure']}")
        reference = self.reference()
        figures = self.figures(self.analyze(record), reference if i != self.n - 1 else None)
        if self.req.numerics:
            verdict = classify_numerics(figures)
        else:
            verdict = classify(figures, self.req.threshold, reference if i != self.n - 1 else None)
        step = Step(i, action.attempt, budget, str(record.get("id") or "") or None, verdict, figures, seconds)
        self.steps.append(step)
        self.progress(StepFinished(step, self.names[i], number))
        return None

    def analyze(self, record: dict[str, Any]) -> Analysis:
        """What `report` calls of a step's record, with the stored A/A floor report would use for it."""
        from mpsup.report.analysis import analyze, matching_aa
        from mpsup.runs import select
        from mpsup.runs.schema import as_record

        typed = as_record(record)
        aa = matching_aa(typed, select.stored_aa_runs(self.warn))
        return analyze(typed, threshold=self.req.threshold, aa_reference=aa)

    def figures(self, analysis: Analysis, reference: dict[str, float] | None) -> tuple[Figure, ...]:
        """The figures a step is called on: the workloads the ends step called slower, or all at the ends."""
        # --numerics: every workload asked for is judged by its answers, whatever the ends' timing said.
        wanted = set(reference) if reference and not self.req.numerics else {w.name for w in self.plan.workloads}
        answers = analysis.numerics
        return tuple(
            Figure(
                c.name,
                c.change,
                c.speedup.estimate if c.speedup else None,
                finite_or_none(c.speedup.low) if c.speedup else None,
                finite_or_none(c.speedup.high) if c.speedup else None,
                answers[c.name].verdict if self.req.numerics and c.name in answers else None,
            )
            for c in sorted(analysis.workloads, key=lambda c: c.name)
            if c.name in wanted
        )

    def result(self, done: Done | None, interrupted: str | None = None) -> BisectResult:
        return BisectResult(
            environments=tuple(self.names),
            pythons=tuple(str(self.envs.known(i) or "") for i in range(self.n)),
            device=self.plan.device,
            workloads=tuple(w.name for w in self.plan.workloads),
            targets=tuple(sorted(self.reference())),
            budget_s=self.req.budget,
            threshold=self.req.threshold,
            steps=tuple(self.steps),
            facts=dict(self.facts),
            done=done,
            journal=journal.journal_path(self.doc["key"]),
            resumed_steps=self.resumed,
            elapsed_s=self.elapsed(),
            interrupted=interrupted,
            exit_code=exit_code(done, interrupted),
            notes=tuple(notes(done, self.facts, tuple(self.names))) if done is not None else (),
        )
