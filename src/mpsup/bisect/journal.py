"""A bisect's journal: its arguments, the facts of each environment probed, and every finished step.

One file per set of arguments (named by their hash) in the data dir's bisect/ folder, rewritten whole and
atomically after each step, so that a bisect killed at any moment (Ctrl-C, SIGKILL, a closed lid) is
continued by the same command from the last finished step; the step it was in is measured again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.paths import bisect_dir
from mpsup.safe_files import atomic_write_json, read_json_object

SCHEMA = "mpsup.bisect/1"
# A journal holds a few dozen steps at most; anything near this is not one of ours.
MAX_JOURNAL_BYTES = 16 << 20


def journal_key(args: dict[str, Any]) -> str:
    """The same arguments (environments as resolved paths, workloads, budget...) give the same journal."""
    text = json.dumps(args, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def journal_path(key: str) -> Path:
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


def load_journal(path: Path) -> dict[str, Any]:
    """A journal as written by save_journal, or one line naming the file and the way out."""
    try:
        doc = read_json_object(path, "bisect journal", MAX_JOURNAL_BYTES)
    except UserError as exc:
        raise UserError(f"{exc}; rerun with --fresh to start over") from None
    ok = (
        doc.get("schema") == SCHEMA
        and isinstance(doc.get("args"), dict)
        and isinstance(doc.get("steps"), list)
        and isinstance(doc.get("facts"), dict)
        and isinstance(doc.get("environments"), list)
        and all(isinstance(s, dict) and isinstance(s.get("index"), int) for s in doc["steps"])
    )
    if not ok:
        raise UserError(f"{path}: not a bisect journal mpsup can read; rerun with --fresh to start over")
    return doc


def save_journal(doc: dict[str, Any]) -> Path:
    path = journal_path(str(doc["key"]))
    atomic_write_json(path, doc)
    return path


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
