"""`mpsup bisect` as one call: an ordered list of environments (good first, bad last) and the workloads that
regressed -> paired steps against the good one, journaled -> the last good and first bad environment.
With --nightlies the list is the nightly builds between two, each installed into a throwaway environment when
the bisect first probes it (bisect/nightlies.py).

Each step is what `bench --candidate` does (bench.command.run over the same plan, smoke tests off) and
what `report` calls of it (report.analysis.analyze, with a stored A/A floor where one matches); the
choice of the next step and the reading of a step are pure functions (bisect/logic.py)."""

from __future__ import annotations

import contextlib
import math
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mpsup.bench.command import BUDGET_RANGE_S, BenchPlan, BenchRequest, check_budget, prepare, same_environment
from mpsup.bench.run import Interrupted
from mpsup.bisect import journal as jr
from mpsup.bisect.logic import (
    BAD,
    GOOD,
    INCONCLUSIVE,
    Done,
    Figure,
    Measure,
    Outcome,
    classify,
    max_paired_runs,
    next_action,
)
from mpsup.errors import OperationFailed, UserError
from mpsup.stats import PRACTICAL_THRESHOLD

if TYPE_CHECKING:  # nightlies pulls in install-rc's planner: imported when --nightlies runs
    from mpsup.bisect.nightlies import Throwaway

Progress = Callable[[str, dict[str, Any]], None]
VERDICTS = (GOOD, BAD, INCONCLUSIVE)
COMPARE_URL = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"


def _no_progress(_event: str, _info: dict[str, Any]) -> None:
    return None


@contextlib.contextmanager
def _no_bar() -> Iterator[Progress]:
    yield _no_progress


@dataclass(frozen=True)
class BisectRequest:
    environments: tuple[str, ...] = ()
    only: str | None = None
    model: Path | None = None
    device: str | None = None
    budget: float = 0.5
    threads: int | None = None
    tokens: str | None = None
    affinity: str | None = None
    dtype: str | None = None  # --model: as bench takes it
    resolution: str | None = None
    threshold: float = PRACTICAL_THRESHOLD
    resume: bool = False  # without environments: the bisect last interrupted
    fresh: bool = False  # forget this bisect's journal and measure again
    # --nightlies: `environments` are GOOD and BAD, nightly versions or dates, and the builds between them on
    # `index_url` (install-rc's nightly channel by default) are installed from `python` (default: mpsup's own).
    nightlies: bool = False
    index_url: str | None = None
    python: Path | None = None
    keep_envs: bool = False  # leave the throwaway environments installed at the end
    allow_cpu_fallback: bool = False  # as bench takes it
    journal: Path | None = None  # `--resume` alone: the journal these arguments were read from


@dataclass(frozen=True)
class EnvFacts:
    """What the interpreter probe says of one environment (None where it could not tell)."""

    python: str | None = None
    torch: str | None = None
    git_version: str | None = None
    platform: str | None = None
    machine: str | None = None

    @classmethod
    def from_probe(cls, doc: dict[str, Any] | None) -> EnvFacts:
        if not doc:
            return cls()
        t = doc.get("torch") if isinstance(doc.get("torch"), dict) else {}
        assert isinstance(t, dict)
        return cls(
            python=_str(doc.get("version")),
            torch=_str(t.get("version_full")),
            git_version=_str(t.get("git_version")),
            platform=_str(doc.get("platform")),
            machine=_str(doc.get("machine")),
        )

    @classmethod
    def from_json(cls, doc: Any) -> EnvFacts:
        d = doc if isinstance(doc, dict) else {}
        return cls(**{k: _str(d.get(k)) for k in ("python", "torch", "git_version", "platform", "machine")})

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "torch": self.torch,
            "git_version": self.git_version,
            "platform": self.platform,
            "machine": self.machine,
        }


def _str(v: Any) -> str | None:
    return str(v) if isinstance(v, (str, int, float)) and str(v) else None


@dataclass(frozen=True)
class Step:
    index: int
    attempt: int
    budget_s: float
    run_id: str | None
    verdict: str
    figures: tuple[Figure, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "attempt": self.attempt,
            "budget_s": self.budget_s,
            "run_id": self.run_id,
            "verdict": self.verdict,
            "figures": [f.to_json() for f in self.figures],
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Step:
        figs = tuple(
            Figure(
                str(f.get("name")),
                str(f.get("change")),
                _num(f.get("speedup")),
                _num(f.get("low")),
                _num(f.get("high")),
            )
            for f in d.get("figures", [])
            if isinstance(f, dict)
        )
        return cls(
            index=int(d["index"]),
            attempt=int(d.get("attempt", 1)),
            budget_s=float(d.get("budget_s", 0.0)),
            run_id=_str(d.get("run_id")),
            verdict=str(d.get("verdict")),
            figures=figs,
            seconds=float(d.get("seconds", 0.0)),
        )


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class BisectResult:
    environments: tuple[str, ...]  # as the user typed them, in order
    pythons: tuple[str, ...]  # the interpreters they resolved to
    device: str
    workloads: tuple[str, ...]  # what --only selected
    targets: tuple[str, ...]  # of those, what the ends step called slower: what the later steps follow
    budget_s: float
    threshold: float
    steps: tuple[Step, ...]
    facts: dict[int, EnvFacts]
    done: Done | None
    journal: Path
    resumed_steps: int  # steps taken from the journal rather than measured by this call
    elapsed_s: float  # every session of this bisect together
    interrupted: str | None = None  # the signal's name
    exit_code: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    throwaway: Throwaway | None = None  # --nightlies: what was installed, and whether it is still there

    @property
    def paired_runs(self) -> int:
        return len(self.steps)

    def compare_url(self) -> str | None:
        if self.done is None or self.done.status != "found":
            return None
        good, bad = self.facts.get(self.done.last_good), self.facts.get(self.done.first_bad)
        if not (good and bad and good.git_version and bad.git_version) or good.git_version == bad.git_version:
            return None  # nothing to compare (the note says why)
        return COMPARE_URL.format(good=good.git_version, bad=bad.git_version)

    def to_json(self) -> dict[str, Any]:
        def env(i: int) -> dict[str, Any]:
            return {"index": i, "environment": self.environments[i], **self.facts.get(i, EnvFacts()).to_json()}

        d = self.done
        return {
            "schema": "mpsup.bisect-result/1",
            "status": d.status if d else ("interrupted" if self.interrupted else "running"),
            "environments": list(self.environments),
            "device": self.device,
            "workloads": list(self.workloads),
            "targets": list(self.targets),
            "budget_s": self.budget_s,
            "threshold": self.threshold,
            "last_good": env(d.last_good) if d else None,
            "first_bad": env(d.first_bad) if d and d.status == "found" else None,
            "range": [d.last_good, d.first_bad] if d else None,
            "unresolved": list(d.unresolved) if d else [],
            "compare_url": self.compare_url(),
            "paired_runs": self.paired_runs,
            "max_paired_runs_if_clear": max_paired_runs(len(self.environments)),
            "minutes": round(self.elapsed_s / 60.0, 2),
            "resumed_steps": self.resumed_steps,
            "interrupted": self.interrupted,
            "journal": str(self.journal),
            "steps": [
                {**s.to_json(), "environment": self.environments[s.index], "torch": self._torch(s.index)}
                for s in self.steps
            ],
            "notes": list(self.notes),
            "nightlies": self.throwaway.to_json() if self.throwaway else None,
            "exit_code": self.exit_code,
        }

    def _torch(self, i: int) -> str | None:
        f = self.facts.get(i)
        return f.torch if f else None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _args(req: BisectRequest, pythons: list[Path], device: str) -> dict[str, Any]:
    """What makes two bisects the same one: a rerun with these continues the journal."""
    return {
        "pythons": [str(p.absolute()) for p in pythons],
        "only": req.only,
        "model": str(req.model.absolute()) if req.model else None,
        "device": device,
        "budget": req.budget,
        "threads": req.threads,
        "tokens": req.tokens,
        "affinity": req.affinity,
        "dtype": req.dtype,
        "resolution": req.resolution,
        "threshold": req.threshold,
        # Only when on: a journal written before the option keeps its key.
        **({"allow_cpu_fallback": True} if req.allow_cpu_fallback else {}),
    }


def _request_from_journal(doc: dict[str, Any], path: Path) -> BisectRequest:
    """The request a journal was made by. Its interpreters as resolved then (absolute paths), so that
    `--resume` works from any folder and finds the same journal."""
    try:
        return replace(_from_args(doc), journal=path)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: a bisect journal with damaged arguments; rerun with --fresh to start over") from None


def _from_args(doc: dict[str, Any]) -> BisectRequest:
    a = doc["args"]  # each field's type checked by load_journal
    night = a.get("nightlies")
    if night is not None:
        environments: tuple[str, ...] = (str(night["good"]), str(night["bad"]))
    else:
        pythons = a.get("pythons")
        if not (isinstance(pythons, list) and len(pythons) == len(doc["environments"]) >= 2):
            pythons = doc["environments"]
        environments = tuple(str(e) for e in pythons)
    return BisectRequest(
        environments=environments,
        only=a.get("only"),
        model=Path(a["model"]) if a.get("model") else None,
        device=a.get("device"),
        budget=float(a.get("budget", 0.5)),
        threads=a.get("threads"),
        tokens=a.get("tokens"),
        affinity=a.get("affinity"),
        dtype=a.get("dtype"),
        resolution=a.get("resolution"),
        threshold=float(a.get("threshold", PRACTICAL_THRESHOLD)),
        allow_cpu_fallback=a.get("allow_cpu_fallback") is True,
        nightlies=night is not None,
        index_url=str(night["index_url"]) if night else None,
        python=Path(night["python"]) if night else None,
    )


def check(req: BisectRequest) -> BisectRequest:
    """Usage errors, as one line each, before anything runs; `--resume` alone becomes the journal's request."""
    if req.resume and req.fresh:
        raise UserError("--resume and --fresh contradict each other: continue a bisect, or start it over")
    if req.resume and not req.environments:
        path = jr.newest_unfinished()
        if path is None:
            passed = jr.unreadable()
            why = f"; passed over {len(passed)} unreadable: {passed[0]}" if passed else ""
            raise UserError(
                f"--resume: no interrupted bisect to continue (none in the data dir's bisect/ folder){why}"
                + _leftovers_line(None)
            )
        journaled = _request_from_journal(jr.load_journal(path), path)
        try:
            journaled = check(journaled)  # the values, as if typed: a journal is input like any other
        except UserError as exc:
            raise UserError(f"{path}: {exc}; rerun with --fresh to start over") from None
        return replace(journaled, keep_envs=req.keep_envs)
    if not req.nightlies:
        for flag, given in (("--index-url", req.index_url), ("--python", req.python), ("--keep-envs", req.keep_envs)):
            if given:
                raise UserError(f"{flag} goes with --nightlies (the environments named here are used as they are)")
    elif len(req.environments) != 2:
        raise UserError(
            f"--nightlies takes two builds, GOOD BAD (nightly versions such as 2.16.0.dev20261101, or dates such as "
            f"20261101), the good one first; {len(req.environments)} given"
        )
    if len(req.environments) < 2:
        raise UserError(
            "bisect needs at least two environments, the good one first and the bad one last "
            "(interpreters, venvs or versions recorded by install-rc)"
        )
    if len(req.environments) > 1024:
        raise UserError(f"{len(req.environments)} environments: at most 1024")
    if not req.only and req.model is None:
        raise UserError("--only: name the workload(s) that regressed, e.g. --only 'linear/4096x4096/t16'")
    check_budget(req.budget)
    if not (math.isfinite(req.threshold) and 0.0 < req.threshold < 1.0):
        raise UserError(f"--threshold {req.threshold:g}: expected a fraction between 0 and 1, e.g. 0.03")
    if req.nightlies:
        from mpsup.bisect.nightlies import parse_endpoint

        parse_endpoint(req.environments[0], "GOOD")
        parse_endpoint(req.environments[1], "BAD")
    return req


class Environments(Protocol):
    """The bisect's environments as interpreters, by index: resolved up front, or installed when first asked for."""

    @property
    def n(self) -> int: ...

    def python(self, i: int) -> Path: ...  # may install (--nightlies)

    def known(self, i: int) -> Path | None: ...  # without installing anything

    def probed(self, i: int) -> dict[str, Any] | None: ...  # the probe an install just ran there, if any

    def release(self, keep: set[int]) -> None: ...  # what the bisect will not ask for again may go (--nightlies)


@dataclass(frozen=True)
class _Listed:
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


def _journal_to_continue(path: Path, req: BisectRequest) -> dict[str, Any] | None:
    """This bisect's journal, unless --fresh; None where there is none (which --resume refuses)."""
    if path.exists() and not req.fresh:
        doc = jr.load_journal(path)
        if doc.get("status") != "done":
            jr.check_room(doc, path)
        return doc
    if req.resume:
        raise UserError("--resume: no journal for these arguments; run without --resume to start this bisect")
    return None


def run(
    req: BisectRequest,
    progress: Progress = _no_progress,
    bar: Callable[[], AbstractContextManager[Progress]] = _no_bar,
    warn: Callable[[str], None] = lambda _m: None,
) -> BisectResult:
    """Bisect, or continue the journal of the same arguments; returns what is known so far."""
    from mpsup.envs.resolve import resolve_environment

    resuming = req.resume
    req = check(req)
    if req.nightlies:
        return _run_nightlies(req, progress, bar, warn, resuming)
    pythons = [resolve_environment(e, f"environment {i + 1}") for i, e in enumerate(req.environments)]
    for i, py in enumerate(pythons[1:], 2):
        if same_environment(pythons[0], py):
            # Its step would be the good build against itself, refused by bench halfway through the bisect.
            raise UserError(
                f"environment {i} ({req.environments[i - 1]}) is the good environment itself ({pythons[0]})"
            )
    plan = _prepare(req, pythons[0])
    key = jr.journal_key(_args(req, pythons, plan.device))
    path = jr.journal_path(key)
    if resuming:
        _warn_leftovers(key, warn)
    with jr.locked(key):
        doc = _journal_to_continue(path, req)
        if doc is None:
            doc = jr.new_journal(key, _args(req, pythons, plan.device), list(req.environments), _now())
            jr.save_journal(doc)
        session = _Session(req, plan, _Listed(tuple(pythons)), doc, progress, bar, warn)
        return session.go()


def _leftovers(but: str | None) -> list[tuple[Path, str]]:
    """Folders of throwaway environments under bisect-envs/ other than bisect `but`'s, with what they belong to."""
    from mpsup.bisect.nightlies import leftover_folders

    return [(folder, what) for folder, what in leftover_folders() if folder.name != but]


def _leftovers_line(but: str | None) -> str:
    found = _leftovers(but)
    if not found:
        return ""
    return f"; {len(found)} folder(s) of nightly builds are left: remove with rm -rf " + " ".join(
        shlex.quote(str(f)) for f, _ in found
    )


def _warn_leftovers(key: str, warn: Callable[[str], None]) -> None:
    """`--resume`: what other bisects left installed (interrupted ones not resumed, --keep-envs), each with the
    command that removes it."""
    for folder, what in _leftovers(key):
        warn(f"{folder}: {what}, not the bisect being resumed; remove it with: rm -rf {shlex.quote(str(folder))}")


# The journal field behind each option bench names in its refusals.
_JOURNAL_FIELDS = ("only", "model", "device", "budget", "threads", "tokens", "affinity", "dtype", "resolution")


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
        for field in _JOURNAL_FIELDS:
            option = f"--{field} "
            if message.startswith(option):
                message = f"args.{field} {message.removeprefix(option)}"
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
        )
    )


def _nightly_args(req: BisectRequest, good: str, bad: str, index_url: str, python: Path, device: str) -> dict[str, Any]:
    """A bisect over nightlies is the same one for the same ends (as dates or versions, normalised), index,
    interpreter and measurement settings: its journal holds the builds listed when it started."""
    args = {k: v for k, v in _args(req, [], device).items() if k != "pythons"}
    return {**args, "nightlies": {"good": good, "bad": bad, "index_url": index_url, "python": str(python)}}


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
    bar: Callable[[], AbstractContextManager[Progress]],
    warn: Callable[[str], None],
    resuming: bool = False,
) -> BisectResult:
    """List the builds (once, when the bisect starts), then bisect them with installs on demand; at the end the
    throwaway environments go, unless --keep-envs or the bisect was interrupted (kept for --resume)."""
    from mpsup.bench.workerproc import check_interpreter
    from mpsup.bisect import nightlies as nl
    from mpsup.envs.plan import CHANNEL_INDEX

    good, bad = nl.parse_endpoint(req.environments[0], "GOOD"), nl.parse_endpoint(req.environments[1], "BAD")
    index_url = req.index_url or CHANNEL_INDEX["nightly"]
    # Absolute, not resolved: a venv's python is a link to the base interpreter, and the venv is what was named.
    python = check_interpreter(req.python or Path(sys.executable), "--python")
    index = nl.IndexSession(python, index_url)  # checks the URL's scheme: https, file, or loopback http
    plan = _prepare(req, python)  # every check of the measurement before the index is read
    check_torch_only(plan)
    args = _nightly_args(req, good.key, bad.key, index_url, python, plan.device)
    key = jr.journal_key(args)
    if resuming:
        _warn_leftovers(key, warn)
    with jr.locked(key):  # released when this returns or raises
        path = jr.journal_path(key)
        folder = nl.folder_for(key)
        doc = _journal_to_continue(path, req)
        if doc is None:
            selection = nl.select_builds(index.torch_files(), index.target(), good, bad, index_url)
            # A new bisect of these arguments (--fresh, or its journal deleted): an earlier one's builds are stale.
            nl.remove_folder(folder)
            doc = jr.new_journal(key, args, list(selection.versions), _now())
            doc["nightlies"] = nl.new_entry(index_url, python, folder, selection)
            jr.save_journal(doc)
        entry = nl.journal_entry(doc, path)
        journal_doc = doc

        def save() -> None:
            jr.save_journal(journal_doc)

        envs = nl.Throwaways(doc, entry, folder, index, progress, save)
        progress(
            "nightlies",
            {
                "builds": envs.n,
                "first": envs.versions[0],
                "last": envs.versions[-1],
                "index_url": index_url,
                "skipped": len(entry.get("skipped", [])),
                "folder": str(folder),
                "at_most": max_paired_runs(envs.n) + 1,
            },
        )
        session = _Session(req, plan, envs, doc, progress, bar, warn)
        try:
            result = session.go()
        except KeyboardInterrupt:
            raise  # outside a step (go() keeps its own): what is installed stays for the rerun, as after Ctrl-C in one
        except BaseException:
            # A step or an install failed: the journal keeps the finished steps, the environments go unless kept.
            if not req.keep_envs:
                gone = envs.remove_all()
                progress("cleanup", {"removed": len(gone), "folder": str(folder)})
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


class _Session:
    def __init__(
        self,
        req: BisectRequest,
        plan: BenchPlan,
        envs: Environments,
        doc: dict[str, Any],
        progress: Progress,
        bar: Callable[[], AbstractContextManager[Progress]],
        warn: Callable[[str], None],
    ) -> None:
        self.req, self.plan, self.envs, self.doc = req, plan, envs, doc
        self.progress, self.bar, self.warn = progress, bar, warn
        self.n = envs.n
        # Shown as first typed, also when `--resume` alone resolved them from the journal's absolute paths.
        typed = [str(e) for e in doc.get("environments", [])]
        self.names = typed if len(typed) == self.n else list(req.environments)
        path = jr.journal_path(str(doc["key"]))
        try:
            self.steps = [Step.from_json(s) for s in doc["steps"]]
            self.facts = {int(k): EnvFacts.from_json(v) for k, v in doc["facts"].items() if str(k).isdigit()}
            self.elapsed0 = float(doc.get("elapsed_s") or 0.0)
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: a bisect journal with damaged steps; rerun with --fresh to start over") from None
        # A step the logic would misread is refused, not bisected on (load_journal checks each step's own fields;
        # which environments exist is this bisect's to say).
        for i, s in enumerate(self.steps, 1):
            if not 0 < s.index < self.n:
                why = f"index {s.index} names no environment of this bisect (1 to {self.n - 1})"
            elif s.verdict not in VERDICTS:
                why = f"verdict {s.verdict[:40]!r} is not {', '.join(VERDICTS[:-1])} or {VERDICTS[-1]}"
            elif s.attempt < 1:
                why = f"attempt {s.attempt} is not a number from 1"
            else:
                continue
            raise UserError(f"{path}: step {i}: {why}; rerun with --fresh to start over")
        self.resumed = len(self.steps)
        self.t0 = time.monotonic()

    # -- journal ---------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.elapsed0 + (time.monotonic() - self.t0)

    def save(self, done: Done | None = None) -> None:
        self.doc["steps"] = [s.to_json() for s in self.steps]
        self.doc["facts"] = {str(k): v.to_json() for k, v in self.facts.items()}
        self.doc["updated"] = _now()
        self.doc["elapsed_s"] = self.elapsed()
        if done is not None:
            self.doc["status"] = "done"
            self.doc["result"] = {
                "status": done.status,
                "last_good": done.last_good,
                "first_bad": done.first_bad,
                "unresolved": list(done.unresolved),
            }
        jr.save_journal(self.doc)

    # -- the loop --------------------------------------------------------------------------------------

    def outcomes(self) -> list[Outcome]:
        return [Outcome(s.index, s.attempt, s.verdict) for s in self.steps]

    def reference(self) -> dict[str, float]:
        """Each workload the ends step called slower, with how much: what the later steps are held against."""
        ends = [s for s in self.steps if s.index == self.n - 1 and s.verdict == BAD]
        if not ends:
            return {}
        return {f.name: f.speedup for f in ends[-1].figures if f.change == "slower" and f.speedup}

    def go(self) -> BisectResult:
        if self.resumed:
            self.progress("resume", {"steps": self.resumed, "journal": str(jr.journal_path(self.doc["key"]))})
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
                self.ready(action.index)
                stopped = self.measure(action)
                if stopped:
                    self.save()
                    return self.result(None, interrupted=stopped)
                self.save()
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

    def ready(self, i: int) -> None:
        """Environment 0 and `i` there and probed; with --nightlies each is installed here the first time."""
        for k in (0, i):
            self.envs.python(k)
            self.probe(k)

    def measure(self, action: Measure) -> str | None:
        """One paired run of environment 0 against `action.index`; the signal's name if it was stopped."""
        from mpsup.bench.command import run as bench_run
        from mpsup.report.analysis import analyze, matching_aa
        from mpsup.runs import select
        from mpsup.runs.schema import as_record

        i = action.index
        budget = min(self.req.budget * 2 ** (action.attempt - 1), BUDGET_RANGE_S[1])
        number = len(self.steps) + 1
        self.progress(
            "step",
            {
                "number": number,
                "index": i,
                "attempt": action.attempt,
                "budget_s": budget,
                "environment": self.names[i],
                "good": self.names[0],
                "torch": self.facts[i].torch,
                "planned": max_paired_runs(self.n),
            },
        )
        request = replace(
            self.plan.request,
            baseline=str(self.envs.python(0)),
            candidate=str(self.envs.python(i)),
            aa=False,
            budget=budget,
        )
        step_plan = replace(self.plan, request=request)
        t0 = time.monotonic()
        with self.bar() as on_event:
            result = bench_run(step_plan, progress=on_event, warn=self.warn)
        seconds = time.monotonic() - t0
        record = result.record
        if record.get("interrupted"):
            return str(record.get("signal") or "SIGINT")
        if record.get("failure"):
            raise OperationFailed(f"step {number} ({self.names[i]}): {record['failure']}")
        # The stored A/A floor `report` would use for this record: a step calls what report would.
        typed = as_record(record)
        aa = matching_aa(typed, select.stored_aa_runs(self.warn))
        analysis = analyze(typed, threshold=self.req.threshold, aa_reference=aa)
        reference = self.reference()
        wanted = set(reference) if (reference and i != self.n - 1) else {w.name for w in self.plan.workloads}
        figures = tuple(
            Figure(
                c.name,
                c.change,
                c.speedup.estimate if c.speedup else None,
                _finite(c.speedup.low) if c.speedup else None,
                _finite(c.speedup.high) if c.speedup else None,
            )
            for c in sorted(analysis.workloads, key=lambda c: c.name)
            if c.name in wanted
        )
        verdict = classify(figures, self.req.threshold, reference if i != self.n - 1 else None)
        step = Step(i, action.attempt, budget, str(record.get("id") or "") or None, verdict, figures, seconds)
        self.steps.append(step)
        self.progress("step-done", {"step": step, "environment": self.names[i], "number": number})
        return None

    def result(self, done: Done | None, interrupted: str | None = None) -> BisectResult:
        reference = self.reference()
        notes: list[str] = []
        if done is not None:
            notes.extend(_notes(done, self.facts, tuple(self.names)))
        if interrupted:
            code = 128 + signal.Signals[interrupted].value if interrupted in signal.Signals.__members__ else 130
        elif done is None or done.status in ("inconclusive", "ends-inconclusive"):
            code = 3
        elif done.status == "no-regression":
            code = 1
        else:
            code = 0
        return BisectResult(
            environments=tuple(self.names),
            pythons=tuple(str(self.envs.known(i) or "") for i in range(self.n)),
            device=self.plan.device,
            workloads=tuple(w.name for w in self.plan.workloads),
            targets=tuple(sorted(reference)),
            budget_s=self.req.budget,
            threshold=self.req.threshold,
            steps=tuple(self.steps),
            facts=dict(self.facts),
            done=done,
            journal=jr.journal_path(self.doc["key"]),
            resumed_steps=self.resumed,
            elapsed_s=self.elapsed(),
            interrupted=interrupted,
            exit_code=code,
            notes=tuple(notes),
        )


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _notes(done: Done, facts: dict[int, EnvFacts], names: tuple[str, ...]) -> list[str]:
    notes = []
    if done.status == "found":
        good, bad = facts.get(done.last_good), facts.get(done.first_bad)
        if good and bad and good.git_version and good.git_version == bad.git_version:
            notes.append(
                "Both builds report the same git revision: the change is not in torch's source between them "
                "(look at what else differs: the environment's variables, libraries, settings)."
            )
        elif not (good and bad and good.git_version and bad.git_version):
            notes.append("A build did not report its git revision (torch.version.git_version): no compare link.")
    elif done.status == "inconclusive":
        notes.append(
            f"The first bad build lies after {names[done.last_good]} and at or before {names[done.first_bad]}; "
            f"{len(done.unresolved)} environment(s) between them measured twice without a call. "
            "Rerun with a larger --budget (a new bisect) to settle them."
        )
    elif done.status == "no-regression":
        notes.append(
            f"{names[-1]} measured like {names[0]} on the chosen workload(s): nothing to bisect at this budget."
        )
    elif done.status == "ends-inconclusive":
        notes.append(
            f"{names[0]} and {names[-1]} could not be told apart twice (the second time at twice the budget): "
            "rerun with a larger --budget."
        )
    return notes
