"""`mpsup bisect` as one call: an ordered list of environments (good first, bad last) and the workloads that
regressed -> paired steps against the good one, journaled -> the last good and first bad environment.
With --nightlies the list is the nightly builds between two, each installed into a throwaway environment when
the bisect first probes it (bisect/nightlies.py).

The request and its journal form are bisect/request.py's, one session of steps bisect/session.py's, the answer's
types bisect/results.py's; the choice of the next step and the reading of a step are pure functions
(bisect/logic.py)."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from mpsup.bench.command import BenchPlan, BenchRequest, prepare, same_environment
from mpsup.bisect import journal
from mpsup.bisect.events import NightliesListed, ThrowawaysRemoved
from mpsup.bisect.logic import max_paired_runs
from mpsup.bisect.request import BisectRequest, check, journal_args, leftovers, nightly_args
from mpsup.bisect.results import BisectResult, EnvFacts, Step
from mpsup.bisect.session import BenchProgress, Listed, Session, StepBars, now_iso
from mpsup.errors import UserError
from mpsup.progress import Progress, ignore

__all__ = ["BisectRequest", "BisectResult", "EnvFacts", "Step", "check", "check_torch_only", "run"]

# The names tests/test_bisect*.py reach the journal's arguments and the session by.
_args = journal_args
_Session = Session


@contextlib.contextmanager
def _no_bars() -> Iterator[BenchProgress]:
    yield ignore


def _journal_to_continue(path: Path, req: BisectRequest) -> dict[str, Any] | None:
    """This bisect's journal, unless --fresh; None where there is none (which --resume refuses)."""
    if path.exists() and not req.fresh:
        doc = journal.load_journal(path)
        if doc.get("status") != "done":
            journal.check_room(doc, path)
        return doc
    if req.resume:
        raise UserError("--resume: no journal for these arguments; run without --resume to start this bisect")
    return None


def run(
    req: BisectRequest,
    progress: Progress = ignore,
    bars: StepBars = _no_bars,
    warn: Callable[[str], None] = lambda _m: None,
) -> BisectResult:
    """Bisect, or continue the journal of the same arguments; returns what is known so far."""
    from mpsup.envs.resolve import resolve_environment

    resuming = req.resume
    req = check(req)
    if req.nightlies:
        return _run_nightlies(req, progress, bars, warn, resuming)
    pythons = [resolve_environment(e, f"environment {i + 1}") for i, e in enumerate(req.environments)]
    for i, py in enumerate(pythons[1:], 2):
        if same_environment(pythons[0], py):
            # Its step would be the good build against itself, refused by bench halfway through the bisect.
            raise UserError(
                f"environment {i} ({req.environments[i - 1]}) is the good environment itself ({pythons[0]})"
            )
    plan = _prepare(req, pythons[0])
    args = journal_args(req, pythons, plan.device)
    key = journal.journal_key(args)
    path = journal.journal_path(key)
    if resuming:
        _warn_leftovers(key, warn)
    with journal.locked(key):
        doc = _journal_to_continue(path, req)
        if doc is None:
            doc = journal.new_journal(key, args, list(req.environments), now_iso())
            journal.save_journal(doc)
        session = Session(req, plan, Listed(tuple(pythons)), doc, progress, bars, warn)
        return session.run_to_answer()


def _warn_leftovers(key: str, warn: Callable[[str], None]) -> None:
    """`--resume`: what other bisects left installed (interrupted ones not resumed, --keep-envs), each with the
    command that removes it."""
    for folder, what in leftovers(key):
        warn(f"{folder}: {what}, not the bisect being resumed; remove it with: rm -rf {shlex.quote(str(folder))}")


def _prepare(req: BisectRequest, good: Path) -> BenchPlan:
    """--only, --device, --threads... checked once; each step takes this plan with its own pair of interpreters.
    Planned as the good build's A/A: two environments' worth of memory, before any other build is known.
    Arguments read from a journal are refused as the journal's fields, not as options the user never typed."""
    try:
        return _prepare_plan(req, good)
    except UserError as exc:
        if req.journal is None:
            raise
        message = str(exc)
        for arg in journal.ARG_FIELDS:
            option = f"--{arg.name.replace('_', '-')} "
            if message.startswith(option):
                message = f"args.{arg.name} {message.removeprefix(option)}"
                break
        raise UserError(f"{req.journal}: {message}; rerun with --fresh to start over") from None


def _prepare_plan(req: BisectRequest, good: Path) -> BenchPlan:
    return prepare(
        BenchRequest(
            device=req.device,
            budget=req.budget,
            only=req.only,
            tokens=req.tokens,
            threads=req.threads,
            affinity=req.affinity,
            smoke=False,
            baseline=str(good),
            aa=True,
            model=req.model,
            dtype=req.dtype,
            resolution=req.resolution,
            allow_cpu_fallback=req.allow_cpu_fallback,
            train=req.train,
            train_batch=req.train_batch,
            train_tokens=req.train_tokens,
            optimizer=req.optimizer,
        )
    )


def check_torch_only(plan: BenchPlan) -> None:
    """A throwaway environment holds torch and its dependencies alone: a model's phase, which runs the model whole
    with the environment's own transformers or diffusers, cannot run there."""
    phases = [w.name for w in plan.workloads if w.kind == "model_phase"]
    if phases:
        raise UserError(
            f"--nightlies: {phases[0]} runs the model whole with its environment's transformers or diffusers, and "
            "the throwaway environments hold torch alone; choose its layers with --only, or install the nightlies "
            "with `mpsup install-rc --channel nightly --version V --clone` and bisect those environments"
        )


def _run_nightlies(
    req: BisectRequest,
    progress: Progress,
    bars: StepBars,
    warn: Callable[[str], None],
    resuming: bool = False,
) -> BisectResult:
    """List the builds (once, when the bisect starts), then bisect them with installs on demand; at the end the
    throwaway environments go, unless --keep-envs or the bisect was interrupted (kept for --resume)."""
    from mpsup.bench.workerproc import check_interpreter
    from mpsup.bisect import nightlies
    from mpsup.envs.plan import CHANNEL_INDEX

    good = nightlies.parse_endpoint(req.environments[0], "GOOD")
    bad = nightlies.parse_endpoint(req.environments[1], "BAD")
    index_url = req.index_url or CHANNEL_INDEX["nightly"]
    # Absolute, not resolved: a venv's python is a link to the base interpreter, and the venv is what was named.
    python = check_interpreter(req.python or Path(sys.executable), "--python")
    index = nightlies.IndexSession(python, index_url)  # checks the URL's scheme: https, file, or loopback http
    plan = _prepare(req, python)  # every check of the measurement comes first: a refusal reads no index
    check_torch_only(plan)
    args = nightly_args(req, good.key, bad.key, index_url, python, plan.device)
    key = journal.journal_key(args)
    if resuming:
        _warn_leftovers(key, warn)
    with journal.locked(key):  # released when this returns or raises
        folder = nightlies.folder_for(key)
        doc = _journal_to_continue(journal.journal_path(key), req)
        if doc is None:
            selection = nightlies.select_builds(index.torch_files(), index.target(), good, bad, index_url)
            # A new bisect of these arguments (--fresh, or its journal deleted): an earlier one's builds are stale.
            nightlies.remove_folder(folder)
            doc = journal.new_journal(key, args, list(selection.versions), now_iso())
            doc["nightlies"] = nightlies.new_entry(index_url, python, folder, selection)
            journal.save_journal(doc)
        entry = nightlies.journal_entry(doc, journal.journal_path(key))
        journal_doc = doc

        def save() -> None:
            journal.save_journal(journal_doc)

        envs = nightlies.Throwaways(doc, entry, folder, index, progress, save)
        skipped = len(entry.get("skipped", []))
        at_most = max_paired_runs(envs.n) + 1
        progress(NightliesListed(envs.n, envs.versions[0], envs.versions[-1], index_url, skipped, str(folder), at_most))
        session = Session(req, plan, envs, doc, progress, bars, warn)
        try:
            result = session.run_to_answer()
        except KeyboardInterrupt:
            raise  # outside a step (the session keeps its own): what is installed stays for the rerun
        except BaseException:
            # A step or an install failed: the journal keeps the finished steps, the environments go unless kept.
            if not req.keep_envs:
                gone = envs.remove_all()
                progress(ThrowawaysRemoved(len(gone), str(folder)))
            raise
        if result.interrupted:
            state = "kept-for-resume"
        elif req.keep_envs:
            envs.tidy()
            state = "kept"
        else:
            envs.remove_all()
            state = "removed"
        return replace(result, throwaway=envs.summary(state))
