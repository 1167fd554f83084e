"""The journal of a run: every finished measurement on disk the moment it is finished.

A bench appends one JSON line per event to `<runs>/<id>.journal.jsonl` (flushed and fsynced) and,
at the end, writes the run record atomically and deletes the journal. A journal that is still there
belongs either to a live bench (it holds an exclusive flock on it for its whole life) or to a run
that died (SIGKILL, power loss, a full disk while finishing): the next bench or report turns the
latter into a record marked partial, so what was measured is never lost.

Lines: {"begin": {...}} once the file exists, {"header": record-without-results} once the workers
answered, then {"smoke": entry} and {"workload": result} as they finish, and {"end": {...}} just
before the record is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.clock import iso_now
from mpsup.errors import UserError
from mpsup.paths import runs_dir
from mpsup.runs.schema import RunRecord
from mpsup.runs.store import SAFE_ID, save_record
from mpsup.store import DEFAULT_MAX_JSON_BYTES, finite_json

JOURNAL_SCHEMA = "mpsup.journal/1"
SUFFIX = ".journal.jsonl"
UNREADABLE = ".unreadable"

Warn = Callable[[str], None]


class JournalWriteError(Exception):
    """The journal could not be appended to (a full disk, an I/O error): the run must stop."""


def _encode(kind: str, doc: Any) -> bytes:
    return (json.dumps({kind: finite_json(doc)}, allow_nan=False, separators=(",", ":")) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass
class Journal:
    path: Path
    run_id: str
    fd: int
    closed: bool = field(default=False)
    made_dirs: list[Path] = field(default_factory=list)  # folders create() made, removed again if left empty

    @classmethod
    def create(cls, run_id: str, directory: Path | None = None) -> Journal:
        """Create, lock and write the first line, which also proves the data folder takes writes.

        The file is made under a hidden name, locked, and only then renamed into view, so that a
        concurrent recovery never sees (and removes) a journal whose bench has not locked it yet."""
        d = directory or runs_dir()
        hidden = d / f".{run_id}{SUFFIX}.new"
        made = [p for p in (d, *d.parents) if not p.exists()]
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(
                hidden, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o666
            )
        except OSError as exc:
            raise UserError(
                f"{d}: cannot write run records there ({exc.strerror or exc}); nothing was measured. "
                "Free some space, fix the folder's permissions, or point MPSUP_HOME at a writable folder"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(
                fd, _encode("begin", {"journal": JOURNAL_SCHEMA, "id": run_id, "pid": os.getpid(), "at": iso_now()})
            )
            os.fsync(fd)
            final = d / f"{run_id}{SUFFIX}"
            os.rename(hidden, final)
        except OSError as exc:
            os.close(fd)
            hidden.unlink(missing_ok=True)
            raise UserError(
                f"{d}: cannot write run records there ({exc.strerror or exc}); nothing was measured. "
                "Free some space, fix the folder's permissions, or point MPSUP_HOME at a writable folder"
            ) from None
        return cls(final, run_id, fd, made_dirs=made)

    def append(self, kind: str, doc: Any) -> None:
        """One line, on disk before this returns. A failed write is cut back off, so the journal
        never holds half a line that would spoil the next one."""
        data = _encode(kind, doc)
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            _write_all(self.fd, data)
            os.fsync(self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise JournalWriteError(
                f"{self.path}: cannot append to the run's journal ({exc.strerror or exc})"
            ) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise

    def close(self) -> None:
        """Release the lock, keeping the file (it still holds measurements no record has)."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def discard(self) -> None:
        """The record is safely written (or nothing was measured): the journal has served."""
        # If it cannot be removed, a later recovery finds the record already there and removes it then.
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        self.close()

    def discard_unused(self) -> None:
        """Nothing was measured: remove the journal and any folder made for it, leaving no trace."""
        self.discard()
        for d in self.made_dirs:  # deepest first; a folder someone else filled meanwhile stays
            with contextlib.suppress(OSError):
                d.rmdir()


def _parse_lines(data: bytes) -> tuple[list[tuple[str, Any]], int]:
    """Entries in order, and how many lines could not be read (a torn last line after a crash)."""
    entries: list[tuple[str, Any]] = []
    bad = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(doc, dict) and len(doc) == 1:
            entries.append(next(iter(doc.items())))
        else:
            bad += 1
    return entries, bad


def rebuild_record(data: bytes, source: Path) -> RunRecord | None:
    """The run record a journal describes, or None when its run ended before measuring anything."""
    entries, bad = _parse_lines(data)
    header = next((doc for kind, doc in entries if kind == "header"), None)
    if header is None:
        return None
    if not isinstance(header, dict):
        raise UserError(f"{source}: the journal's header is not a JSON object")
    record = dict(header)
    record["smoke"] = [doc for kind, doc in entries if kind == "smoke"]
    workloads = [doc for kind, doc in entries if kind == "workload"]
    for kind, doc in entries:
        # A later visit of a workload (fresh workers, leftover time) replaces its entry: it holds every round.
        if kind == "workload-extended" and isinstance(doc, dict):
            index, visit = doc.get("index"), doc.get("workload")
            if type(index) is int and 0 <= index < len(workloads) and isinstance(visit, dict):
                workloads[index] = visit
    record["workloads"] = workloads
    end = next((doc for kind, doc in entries if kind == "end"), None)
    if isinstance(end, dict):
        record.update({k: v for k, v in end.items() if k not in ("workloads", "smoke")})
    else:
        record["partial"] = True
        record["interrupted"] = True
    record["recovered"] = {"from": source.name, "at": iso_now(), "unreadable_lines": bad}
    return RunRecord.from_json(record, source)


def _lock_dead_journal(path: Path) -> int | None:
    """An open, locked descriptor on a journal whose bench is gone; None if a live bench holds it."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path}: not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_locked(fd: int, path: Path) -> bytes:
    with os.fdopen(os.dup(fd), "rb") as fh:
        data = fh.read(DEFAULT_MAX_JSON_BYTES + 1)
    if len(data) > DEFAULT_MAX_JSON_BYTES:
        raise UserError(f"{path}: the journal is larger than {DEFAULT_MAX_JSON_BYTES >> 20} MiB")
    return data


def recover_one(path: Path, warn: Warn) -> Path | None:
    """Turn one dead run's journal into a record; returns the record's path (None: nothing to do)."""
    try:
        fd = _lock_dead_journal(path)
    except FileNotFoundError:
        return None  # another process recovered it meanwhile
    except (OSError, UserError) as exc:
        warn(f"{path}: cannot read this journal ({getattr(exc, 'strerror', None) or exc}); left in place")
        return None
    if fd is None:
        return None  # its bench is still running
    try:
        record = rebuild_record(_read_locked(fd, path), path)
        if record is None:
            path.unlink(missing_ok=True)
            return None
        existing = path.parent / f"{record.id}.json"
        if SAFE_ID.fullmatch(record.id) and existing.exists():
            # The bench wrote its record and died before removing the journal.
            path.unlink(missing_ok=True)
            return existing
        saved = save_record(record, path.parent)
        path.unlink(missing_ok=True)
        n = len(record.workloads)
        warn(
            f"recovered the interrupted run {record.id} from its journal: {n} finished workload{'s' * (n != 1)}, "
            f"{len(record.smoke)} smoke tests, saved as {saved.name} (marked partial)"
            if record.partial
            else f"recovered the run {record.id} from its journal, saved as {saved.name}"
        )
        return saved
    except UserError as exc:
        # Not ours to delete, and not worth a warning on every listing: set aside under a name we skip.
        aside = path.with_name(path.name + UNREADABLE)
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        warn(f"skipped {exc}; the journal is kept as {aside.name}")
        return None
    except OSError as exc:
        warn(
            f"{path}: the run in this journal could not be saved as a record ({exc.strerror or exc}); the journal "
            "is kept"
        )
        return None
    finally:
        os.close(fd)


def recover_journals(warn: Warn, directory: Path | None = None) -> list[Path]:
    """Recover every journal left by a run that is no longer alive; live benches are left alone."""
    d = directory or runs_dir()
    try:
        journals = sorted(p for p in d.glob(f"*{SUFFIX}") if not p.name.startswith("."))
    except OSError:
        return []
    out = []
    for p in journals:
        saved = recover_one(p, warn)
        if saved is not None:
            out.append(saved)
    return out
