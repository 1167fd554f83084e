"""What `mpsup bisect` is asked: the request, its usage checks, and its journal form (the `args` a journal's key
is the digest of, written and read back through one table of fields, bisect.journal.ARG_FIELDS)."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mpsup.bench.command import check_budget
from mpsup.bisect import journal
from mpsup.errors import UserError
from mpsup.stats import PRACTICAL_THRESHOLD

MAX_ENVIRONMENTS = 1024


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
    numerics: bool = False  # a step is bad where the workload's answers got worse against float64, not slower
    train: str | None = None  # --model: a training step as bench takes it (lora or full)
    train_batch: int | None = None
    train_tokens: int | None = None
    optimizer: str | None = None
    journal: Path | None = None  # `--resume` alone: the journal these arguments were read from


def journal_args(req: BisectRequest, pythons: list[Path], device: str) -> dict[str, Any]:
    """What makes two bisects the same one: a rerun with these continues the journal."""
    settings = {arg.name: getattr(req, arg.name) for arg in journal.ARG_FIELDS}
    settings.update(model=str(req.model.absolute()) if req.model else None, device=device)
    for name in journal.UNSET_LEFT_OUT:  # written only when set: a bisect without them keeps the key it had
        if settings.get(name) is None:
            settings.pop(name, None)
    return {
        "pythons": [str(p.absolute()) for p in pythons],
        **settings,
        # Written only when on, so that a bisect without the option keeps the key it has always had.
        **({"allow_cpu_fallback": True} if req.allow_cpu_fallback else {}),
        **({"numerics": True} if req.numerics else {}),
    }


def nightly_args(req: BisectRequest, good: str, bad: str, index_url: str, python: Path, device: str) -> dict[str, Any]:
    """A bisect over nightlies is the same one for the same ends (as dates or versions, normalised), index,
    interpreter and measurement settings: its journal holds the builds listed when it started."""
    args = {k: v for k, v in journal_args(req, [], device).items() if k != "pythons"}
    return {**args, "nightlies": {"good": good, "bad": bad, "index_url": index_url, "python": str(python)}}


def request_from_journal(doc: dict[str, Any], path: Path) -> BisectRequest:
    """The request a journal was made by. Its interpreters as resolved then (absolute paths), so that
    `--resume` works from any folder and finds the same journal."""
    try:
        return replace(_from_args(doc), journal=path)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: a bisect journal with damaged arguments; rerun with --fresh to start over") from None


def _from_args(doc: dict[str, Any]) -> BisectRequest:
    a = doc["args"]  # each field's type checked by load_journal; one left out takes the request's default
    settings: dict[str, Any] = {arg.name: a[arg.name] for arg in journal.ARG_FIELDS if arg.name in a}
    if "model" in settings:
        settings["model"] = Path(settings["model"]) if settings["model"] else None
    for number in ("budget", "threshold"):
        if number in settings:
            settings[number] = float(settings[number])
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
        **settings,
        allow_cpu_fallback=a.get("allow_cpu_fallback") is True,
        numerics=a.get("numerics") is True,
        nightlies=night is not None,
        index_url=str(night["index_url"]) if night else None,
        python=Path(night["python"]) if night else None,
    )


def check(req: BisectRequest) -> BisectRequest:
    """Usage errors, as one line each, before anything runs; `--resume` alone becomes the journal's request."""
    if req.resume and req.fresh:
        raise UserError("--resume and --fresh contradict each other: continue a bisect, or start it over")
    if req.resume and not req.environments:
        return _journaled_request(req)
    _check_nightly_options(req)
    if len(req.environments) < 2:
        raise UserError(
            "bisect needs at least two environments, the good one first and the bad one last "
            "(interpreters, venvs or versions recorded by install-rc)"
        )
    if len(req.environments) > MAX_ENVIRONMENTS:
        raise UserError(f"{len(req.environments)} environments: at most {MAX_ENVIRONMENTS}")
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


def _journaled_request(req: BisectRequest) -> BisectRequest:
    """`--resume` alone: the request of the bisect last interrupted, its values checked as if typed."""
    path = journal.newest_unfinished()
    if path is None:
        passed = journal.unreadable()
        why = f"; passed over {len(passed)} unreadable: {passed[0]}" if passed else ""
        raise UserError(
            f"--resume: no interrupted bisect to continue (none in the data dir's bisect/ folder){why}"
            + leftovers_line(None)
        )
    journaled = request_from_journal(journal.load_journal(path), path)
    try:
        journaled = check(journaled)  # a journal is input like any other
    except UserError as exc:
        raise UserError(f"{path}: {exc}; rerun with --fresh to start over") from None
    return replace(journaled, keep_envs=req.keep_envs)


def _check_nightly_options(req: BisectRequest) -> None:
    """--index-url, --python and --keep-envs go with --nightlies, which takes exactly GOOD and BAD."""
    if not req.nightlies:
        for flag, given in (("--index-url", req.index_url), ("--python", req.python), ("--keep-envs", req.keep_envs)):
            if given:
                raise UserError(f"{flag} goes with --nightlies (the environments named here are used as they are)")
    elif len(req.environments) != 2:
        raise UserError(
            f"--nightlies takes two builds, GOOD BAD (nightly versions such as 2.16.0.dev20261101, or dates such as "
            f"20261101), the good one first; {len(req.environments)} given"
        )


def leftovers(but: str | None) -> list[tuple[Path, str]]:
    """Folders of throwaway environments under bisect-envs/ other than bisect `but`'s, with what they belong to."""
    from mpsup.bisect.nightlies import leftover_folders

    return [(folder, what) for folder, what in leftover_folders() if folder.name != but]


def leftovers_line(but: str | None) -> str:
    """The tail of a refusal naming what other bisects left installed, with the command that removes it."""
    found = leftovers(but)
    if not found:
        return ""
    return f"; {len(found)} folder(s) of nightly builds are left: remove with rm -rf " + " ".join(
        shlex.quote(str(f)) for f, _ in found
    )
