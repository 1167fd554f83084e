"""A bisect's journal: its arguments, the facts of each environment probed, and every finished step.

One file per set of arguments (named by their hash) in the data dir's bisect/ folder, rewritten whole and
atomically after each step, so that a bisect killed at any moment (Ctrl-C, SIGKILL, a closed lid) is
continued by the same command from the last finished step; the step it was in is measured again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.bisect.logic import BAD, GOOD, INCONCLUSIVE
from mpsup.errors import OperationFailed, UserError
from mpsup.paths import bisect_dir
from mpsup.safe_files import atomic_write_json, finite_json, read_json_object

SCHEMA = "mpsup.bisect/1"
# A journal holds a few dozen steps at most; anything near this is not one of ours.
MAX_JOURNAL_BYTES = 16 << 20
# A journal's key is the hash journal_key writes, and the file's name: never a path.
KEY = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class ArgField:
    """A measurement setting of a bisect, journaled under its request field's name (also bench's option)."""

    name: str
    what: str  # the journal's refusal of another type names this
    types: tuple[type, ...]  # bool is no number here


_TEXT = ("a string or null", (str, type(None)))
_NUMBER = ("a number", (int, float))
# The settings that make two bisects the same one, in the order a journal's args hold them (after `pythons`).
ARG_FIELDS = (
    ArgField("only", *_TEXT),
    ArgField("model", *_TEXT),
    ArgField("device", *_TEXT),
    ArgField("budget", *_NUMBER),
    ArgField("threads", "an integer or null", (int, type(None))),
    ArgField("tokens", *_TEXT),
    ArgField("affinity", *_TEXT),
    ArgField("dtype", *_TEXT),
    ArgField("resolution", *_TEXT),
    ArgField("threshold", *_NUMBER),
    ArgField("train", *_TEXT),
    ArgField("train_batch", "an integer or null", (int, type(None))),
    ArgField("train_tokens", "an integer or null", (int, type(None))),
    ArgField("optimizer", *_TEXT),
)
# Arguments left out of a journal's args while unset (--train's), so that the key of a bisect without them is the
# one it had before they existed.
UNSET_LEFT_OUT = ("train", "train_batch", "train_tokens", "optimizer")
_STATUSES = ("running", "done")


def journal_key(args: dict[str, Any]) -> str:
    """The same arguments (environments as resolved paths, workloads, budget...) give the same journal."""
    text = json.dumps(args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def journal_path(key: str) -> Path:
    """The only place a journal is written: the data dir's bisect/ folder, under a name journal_key made."""
    if not KEY.fullmatch(key):
        raise UserError(f"{key[:80]!r} is not a bisect journal's key (16 hex digits); rerun with --fresh")
    return bisect_dir() / f"{key}.json"


def new_journal(key: str, args: dict[str, Any], typed: list[str], now: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "key": key,
        "args": args,
        "environments": typed,
        "started": now,
        "updated": now,
        "status": "running",
        "elapsed_s": 0.0,
        "facts": {},
        "steps": [],
    }


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt_number(v: Any) -> bool:
    return v is None or _number(v)


def _step_problem(s: Any) -> str | None:
    if not isinstance(s, dict):
        return "is not an object"
    if not (isinstance(s.get("index"), int) and not isinstance(s.get("index"), bool)):
        return "index must be an integer"
    attempt = s.get("attempt", 1)
    if not (isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 1):
        return "attempt must be an integer from 1"
    for key in ("budget_s", "seconds"):
        if key in s and not (_number(s[key]) and s[key] >= 0):
            return f"{key} must be a number of seconds"
    if not isinstance(s.get("run_id"), (str, type(None))):
        return "run_id must be a string or null"
    if not isinstance(s.get("verdict"), str):
        return "verdict must be a string"
    if s["verdict"] not in (GOOD, BAD, INCONCLUSIVE):
        return f"verdict {s['verdict'][:40]!r} is not {GOOD}, {BAD} or {INCONCLUSIVE}"
    figures = s.get("figures", [])
    if not isinstance(figures, list):
        return "figures must be a list"
    for f in figures:
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("change"), str)):
            return "each figure needs a name and a change (strings)"
        if not all(_opt_number(f.get(k)) for k in ("speedup", "low", "high")):
            return "a figure's speedup, low and high must be numbers or null"
        if not isinstance(f.get("accuracy"), (str, type(None))):
            return "a figure's accuracy must be text or null"
    return None


def _problem(doc: dict[str, Any], path: Path) -> str | None:
    """What makes `doc` no journal mpsup wrote at `path` (field by field), or None."""
    if doc.get("schema") != SCHEMA:
        return "not a bisect journal mpsup can read"
    key = doc.get("key")
    # The key names the file the journal is rewritten to: one that is not this file's own name would move it.
    if not (isinstance(key, str) and KEY.fullmatch(key) and key == path.stem):
        shown = repr(key)[:80]
        return f"its key {shown} is not this file's name ({path.stem}), so mpsup will not write it anywhere"
    if path.suffix != ".json" or path.parent.resolve() != bisect_dir().resolve():
        return f"not in the data dir's bisect folder ({bisect_dir()})"
    names = doc.get("environments")
    if not (isinstance(names, list) and len(names) >= 2 and all(isinstance(n, str) for n in names)):
        return "environments must be a list of at least two strings"
    args = doc.get("args")
    if not isinstance(args, dict):
        return "args must be an object"
    for arg in ARG_FIELDS:
        v = args.get(arg.name)
        wrong = not isinstance(v, arg.types) or isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v))
        if wrong and arg.name in args:  # an argument left out takes its default
            return f"args.{arg.name} must be {arg.what}, found {type(v).__name__}"
    pythons = args.get("pythons", [])
    if not (isinstance(pythons, list) and all(isinstance(p, str) for p in pythons)):
        return "args.pythons must be a list of strings"
    night = args.get("nightlies")
    if night is not None and not (
        isinstance(night, dict) and all(isinstance(night.get(k), str) for k in ("good", "bad", "index_url", "python"))
    ):
        return "args.nightlies must be an object of strings (good, bad, index_url, python)"
    # The key is the arguments' digest: arguments changed after the fact (the interpreters a resume would run
    # among them) do not give it, and are refused rather than run.
    if journal_key(args) != key:
        return "its arguments do not give its key (edited or damaged), so mpsup will not run them"
    if doc.get("status") not in _STATUSES:
        return "status must be 'running' or 'done'"
    for key in ("started", "updated"):
        if not isinstance(doc.get(key, ""), str):
            return f"{key} must be a string"
    elapsed = doc.get("elapsed_s", 0.0)
    if not (_number(elapsed) and elapsed >= 0):
        return "elapsed_s must be a number of seconds"
    facts = doc.get("facts")
    if not (isinstance(facts, dict) and all(isinstance(v, dict) for v in facts.values())):
        return "facts must be an object of objects"
    for f in facts.values():
        if not all(isinstance(v, (str, type(None))) for v in f.values()):
            return "each environment's facts must be strings or null"
    steps = doc.get("steps")
    if not isinstance(steps, list):
        return "steps must be a list"
    for i, s in enumerate(steps, 1):
        why = _step_problem(s)
        if why:
            return f"step {i}: {why}"
    result = doc.get("result")
    if result is not None and not (
        isinstance(result, dict)
        and isinstance(result.get("status"), str)
        and all(type(result.get(k)) is int for k in ("last_good", "first_bad"))
    ):
        return "result must be an object with a status and two build indexes"
    return None


def rewritten_bytes(doc: dict[str, Any]) -> int:
    """How large save_journal writes `doc`: what the next read of it must stay within."""
    return len(json.dumps(finite_json(doc), indent=1, allow_nan=False).encode()) + 1


def load_journal(path: Path) -> dict[str, Any]:
    """A journal as written by save_journal, every field checked, or one line naming the file and the way out."""
    try:
        doc = read_json_object(path, "bisect journal", MAX_JOURNAL_BYTES)
    except UserError as exc:
        raise UserError(f"{exc}; rerun with --fresh to start over") from None
    why = _problem(doc, path)
    if why:
        raise UserError(f"{path}: {why}; rerun with --fresh to start over")
    return doc


def check_room(doc: dict[str, Any], path: Path) -> None:
    """Before continuing a journal: its rewrite, with a step more, must still be one mpsup can read back, or the
    bisect would be measured on and then lost."""
    size = rewritten_bytes(doc)
    steps = [s for s in doc["steps"] if isinstance(s, dict)]
    step = max((len(json.dumps(s, indent=1)) for s in steps), default=0) + 64
    if size + step > MAX_JOURNAL_BYTES:
        raise UserError(
            f"{path}: {len(steps)} steps, {size / 2**20:.1f} MiB when rewritten, too close to the "
            f"{MAX_JOURNAL_BYTES >> 20} MiB a journal may hold to continue; rerun with --fresh to start over"
        )


def save_journal(doc: dict[str, Any]) -> Path:
    path = journal_path(str(doc["key"]))
    if rewritten_bytes(doc) > MAX_JOURNAL_BYTES:
        # The file on disk stays as it was: still readable, where a larger one would be refused on the next read.
        raise OperationFailed(
            f"{path}: the journal would pass {MAX_JOURNAL_BYTES >> 20} MiB; it was left as it was at its last step"
        )
    atomic_write_json(path, doc)
    return path


@contextlib.contextmanager
def locked(key: str) -> Iterator[Path]:
    """One mpsup at a time on a bisect: a second of the same arguments is refused in one line, not run beside
    it (both would measure the same step, each the other's noise, and rewrite one journal). The lock file goes
    with its holder, and the bisect folder too when nothing else is in it: a refused bisect leaves nothing."""
    import fcntl

    path = journal_path(key).with_suffix(".lock")
    made = not path.parent.exists()
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise UserError(f"{path}: cannot lock this bisect ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            pid = f" (process {holder})" if holder.isdigit() else ""
            raise UserError(
                f"this bisect is running in another mpsup{pid}; wait for it to finish, or stop it and rerun "
                f"(lock: {path})"
            ) from None
        held = os.fstat(fd)
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
            break
        os.close(fd)  # its last holder removed that file meanwhile: lock the one there now
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: whoever opens the path next makes a new file
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):  # journals are there: it stays
                path.parent.rmdir()


def newest_unfinished() -> Path | None:
    """For `--resume` without arguments: the journal of the bisect last interrupted."""
    folder = bisect_dir()
    if not folder.is_dir():
        return None
    found: list[tuple[str, Path]] = []
    for p in folder.glob("*.json"):
        try:
            doc = load_journal(p)
        except UserError:
            continue
        if doc.get("status") != "done":
            found.append((str(doc.get("updated", "")), p))
    return max(found)[1] if found else None


def unreadable() -> list[str]:
    """Why each journal in the bisect folder cannot be read (one line each): what `--resume` passed over."""
    folder = bisect_dir()
    if not folder.is_dir():
        return []
    problems = []
    for p in sorted(folder.glob("*.json")):
        try:
            load_journal(p)
        except UserError as exc:
            problems.append(str(exc))
    return problems


def finished_journals() -> list[dict[str, Any]]:
    """Every finished bisect, newest first (report --upstream quotes the one its record belongs to)."""
    folder = bisect_dir()
    if not folder.is_dir():
        return []
    docs = []
    for p in folder.glob("*.json"):
        try:
            doc = load_journal(p)
        except UserError:
            continue
        if doc.get("status") == "done":
            docs.append(doc)
    return sorted(docs, key=lambda d: str(d.get("updated", "")), reverse=True)
