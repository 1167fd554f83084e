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
from mpsup.runs.schema import Corrupt, RunRecord, SmokeRun, WorkloadRun
from mpsup.runs.store import SAFE_ID, load_record, save_record
from mpsup.safe_files import DEFAULT_MAX_JSON_BYTES, finite_json

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


# Deeper than anything a bench writes (a workload's entry is about 6 levels deep), far below what
# would exhaust the stack when a line is encoded again: a line nested deeper is damage, not data.
MAX_LINE_DEPTH = 64


def _too_deep(doc: Any, limit: int = MAX_LINE_DEPTH) -> bool:
    """Whether doc nests lists and objects more than `limit` deep (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


@dataclass(frozen=True)
class Parsed:
    """A journal read line by line: the readable entries in order, and how many lines were not."""

    entries: list[tuple[str, Any]]
    bad: int  # lines that are not one JSON object of one key (a torn last line, a damaged byte)
    torn_tail: bool  # the last line is one of them: what a crash while appending leaves, nothing else

    @property
    def measured(self) -> int:
        """Entries holding measurements, readable or not: what deleting the journal would lose."""
        return sum(kind in ("workload", "smoke") for kind, _ in self.entries) + self.bad - self.torn_tail


def _parse_lines(data: bytes) -> Parsed:
    entries: list[tuple[str, Any]] = []
    bad = 0
    torn = False
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        torn = False
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and len(doc) == 1 and not _too_deep(doc):
            entries.append(next(iter(doc.items())))
        else:
            bad += 1
            torn = True
    return Parsed(entries, bad, torn)


class DamagedJournal(UserError):
    """The journal's run cannot be rebuilt (its header is damaged) though it holds measurements: keep it."""


def _entry_ok(kind: str, doc: Any) -> bool:
    """Whether one workload or smoke entry would pass the record's checks on its own."""
    try:
        (WorkloadRun if kind == "workload" else SmokeRun).from_json(doc, kind)
    except Corrupt:
        return False
    return True


def rebuild_record(data: bytes, source: Path) -> RunRecord | None:
    """The run record a journal describes, or None when its run ended before measuring anything.

    Damage costs only the lines it touched: an unreadable line, or a workload or smoke entry the record
    would refuse, is dropped and counted (`recovered.unreadable_lines`), and the rest is recovered. A damaged
    header (the run's environments and options) cannot be dropped: that raises DamagedJournal when the
    journal holds measurements, so the caller keeps the file instead of deleting it."""
    parsed = _parse_lines(data)
    entries = parsed.entries
    header = next((doc for kind, doc in entries if kind == "header"), None)
    if not isinstance(header, dict):
        if parsed.measured == 0:
            return None
        problem = "is missing or damaged" if header is None else "is not a JSON object"
        n = sum(kind == "workload" for kind, _ in entries)
        raise DamagedJournal(
            f"{source}: the journal's header line {problem}, so its run cannot be rebuilt "
            f"({n} finished workload{'s' * (n != 1)} and {_lines(parsed.bad)} that could not be read)"
        )
    dropped = parsed.bad
    record = dict(header)
    smoke = [doc for kind, doc in entries if kind == "smoke"]
    record["smoke"] = [doc for doc in smoke if _entry_ok("smoke", doc)]
    dropped += len(smoke) - len(record["smoke"])
    # Positions matter: a later visit names the workload it replaces by its place in the journal.
    workloads: list[Any] = [doc if _entry_ok("workload", doc) else None for kind, doc in entries if kind == "workload"]
    for kind, doc in entries:
        # A later visit of a workload (fresh workers, leftover time) replaces its entry: it holds every round.
        if kind != "workload-extended":
            continue
        index, visit = (doc.get("index"), doc.get("workload")) if isinstance(doc, dict) else (None, None)
        if type(index) is int and 0 <= index < len(workloads) and _entry_ok("workload", visit):
            workloads[index] = visit
        else:
            dropped += 1  # the first visit's entry stays: fewer rounds, nothing lost
    dropped += sum(w is None for w in workloads)
    record["workloads"] = [w for w in workloads if w is not None]
    end = next((doc for kind, doc in entries if kind == "end"), None)
    ended = dict(record)
    if isinstance(end, dict):
        ended.update({k: v for k, v in end.items() if k not in ("workloads", "smoke")})
    else:
        ended["partial"] = True
        ended["interrupted"] = True
    ended["recovered"] = {"from": source.name, "at": iso_now(), "unreadable_lines": dropped}
    try:
        return RunRecord.from_json(ended, source)
    except UserError:
        if not isinstance(end, dict):
            raise
    # A damaged end line: the run is recovered as the header left it, partial, that line dropped.
    record.update(partial=True, interrupted=True)
    record["recovered"] = {"from": source.name, "at": iso_now(), "unreadable_lines": dropped + 1}
    return RunRecord.from_json(record, source)


def _lines(n: int) -> str:
    return f"{n} line{'s' * (n != 1)}"


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


def _holds_as_much(existing: Path, record: RunRecord) -> bool:
    """Whether a stored record by the journal's id already holds every workload the journal does: only then
    is the journal redundant (an id damaged into another run's must not delete this run's measurements)."""
    if not existing.exists():
        return False
    try:
        stored = load_record(existing)
    except UserError:
        return False
    return len(stored.workloads) >= len(record.workloads) and len(stored.smoke) >= len(record.smoke)


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
        if SAFE_ID.fullmatch(record.id) and _holds_as_much(existing, record):
            # The bench wrote its record and died before removing the journal.
            path.unlink(missing_ok=True)
            return existing
        saved = save_record(record, path.parent)
        path.unlink(missing_ok=True)
        n = len(record.workloads)
        dropped = record.extra["recovered"]["unreadable_lines"]
        lost = f"; {_lines(dropped)} of the journal could not be read and {'was' if dropped == 1 else 'were'} dropped"
        warn(
            (
                f"recovered the interrupted run {record.id} from its journal: {n} finished "
                f"workload{'s' * (n != 1)}, {len(record.smoke)} smoke tests, saved as {saved.name} (marked partial)"
                if record.partial
                else f"recovered the run {record.id} from its journal, saved as {saved.name}"
            )
            + (lost if dropped else "")
        )
        return saved
    except UserError as exc:
        # Not ours to delete, and not worth a warning on every listing: set aside under a name we skip.
        aside = path.with_name(path.name + UNREADABLE)
        for n in range(2, 100):  # never over an earlier journal set aside under the same name
            if not aside.exists():
                break
            aside = path.with_name(f"{path.name}{UNREADABLE}.{n}")
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        warn(f"skipped {exc}; nothing was deleted: the journal is kept as {aside.name}")
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
    """Recover every journal left by a run whose bench has exited; live benches are left alone."""
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
