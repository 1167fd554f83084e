"""Guarded reads of untrusted input files (bounded, regular files only, strict JSON) and atomic writes of records."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.units import fmt_limit

# Generous for every JSON document mpsup reads (records, configs, indexes, snapshots), yet far
# below what would exhaust memory: an input larger than this is refused, never read whole.
DEFAULT_MAX_JSON_BYTES = 256 << 20


def stat_input(path: Path, what: str) -> os.stat_result | None:
    """What a path the user named is (symlinks followed), or None where nothing is there.

    pathlib's exists(), is_file() and is_dir() raise on anything but a missing file: a name over 255
    bytes (ENAMETOOLONG), a folder on the way this user may not search (EACCES). Those become one
    UserError naming the path."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot look at this {what} ({exc.strerror or exc})") from None
    except ValueError:  # an embedded NUL byte
        raise UserError(f"{str(path)!r}: not a valid path for a {what}") from None


def open_regular(path: Path, what: str):  # type: ignore[no-untyped-def]
    """Open a regular file for binary reading, or raise UserError naming it.

    A FIFO or device would block forever (or never end), so the type is checked on the opened
    descriptor (O_NONBLOCK keeps the open itself from waiting on a FIFO's writer), not before.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read this {what} ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise UserError(f"{path}: {kind}; expected a {what}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """The whole of a regular file of at most max_bytes, or UserError naming the file."""
    with open_regular(path, what) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserError(f"{path}: {what} is larger than {fmt_limit(max_bytes)}; refusing to read it")
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(doc: Any) -> Any:
    """doc with every lone surrogate in its keys and texts replaced by U+FFFD (walked without recursion)."""

    def fix(value: Any) -> Any:
        return _SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value

    root: list[Any] = [doc]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        value = parent[key]
        if isinstance(value, str):
            parent[key] = fix(value)
        elif isinstance(value, list):
            stack.extend((value, i) for i in range(len(value)))
        elif isinstance(value, dict):
            if any(isinstance(k, str) and _SURROGATE.search(k) for k in value):
                fixed = {fix(k): v for k, v in value.items()}
                value.clear()
                value.update(fixed)
            stack.extend((value, k) for k in value)
    return root[0]


def parse_json(data: bytes | str, source: str | Path, what: str) -> Any:
    """Strict JSON from untrusted text: every failure becomes one UserError naming the source.

    Beyond JSONDecodeError, Python's parser raises UnicodeDecodeError (bad bytes), RecursionError
    (deeply nested arrays) and ValueError (integers over 4,300 digits); none may escape as a traceback.
    Bare NaN/Infinity are refused: no writer of ours produces them.
    """

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        doc = json.loads(text, parse_constant=no_constants)
        # A `\ud800` escape is valid JSON but no text: every later encode (a fingerprint, the terminal, a
        # report file) would raise on it. Only an escape can bring one in, so only then is the tree walked.
        return without_surrogates(doc) if _SURROGATE_ESCAPE.search(text) else doc
    except UnicodeDecodeError:
        raise UserError(f"{source}: {what} is not UTF-8 text") from None
    except RecursionError:
        raise UserError(f"{source}: {what} is nested too deeply to be valid") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{source}: {what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except ValueError as exc:
        raise UserError(f"{source}: {what} is not valid JSON ({str(exc)[:120]})") from None


def read_json(path: Path, what: str, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> Any:
    """The one reader for JSON files: regular files only, bounded, errors as one line naming the file."""
    return parse_json(read_bytes_bounded(path, what, max_bytes), path, what)


def read_json_object(path: Path, what: str, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> dict[str, Any]:
    doc = read_json(path, what, max_bytes)
    if not isinstance(doc, dict):
        raise UserError(f"{path}: {what} must be a JSON object, found {type(doc).__name__}")
    return doc


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask. Linux shows it in /proc; elsewhere it can only be read by setting it, so it is
    set to a common value for that instant (never 0: a file another thread creates meanwhile stays private)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        old = os.umask(0o022)
        os.umask(old)
    return old


def _mode_for(target: Path) -> int:
    """A replaced regular file keeps its permissions; a new one gets what the umask gives `open()`.
    (mkstemp creates 0600, which would make every written file private whatever the user chose.)"""
    try:
        st = os.stat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode) & 0o777
    return 0o666 & ~current_umask()


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def output_path(text: str | None, what: str) -> Path | None:
    """A user-named output file as typed. A trailing slash names a folder, which `>` refuses; pathlib would
    drop it and write a file of that name."""
    if text is None:
        return None
    if text.endswith(("/", os.sep)):
        raise UserError(f"{text}: ends in '/', so it names a folder; name the {what} file")
    path = Path(text)
    if not os.path.isdir(path.parent):  # said before the work, not after (write_file_through checks again)
        raise UserError(f"{path}: cannot write the {what} there (no such folder: {path.parent}); create it first")
    return path


def write_file_through(path: Path, text: str, what: str) -> Path:
    """Write a user-named output file as a shell's `>` would, but atomically; returns the file written.

    A symlink is followed (the link stays, its target gets the text); the file keeps its mode (a new one
    gets the umask's); anything but a regular file (a folder, a device, a FIFO) is refused rather than
    replaced. Every failure is one UserError naming the path.
    """
    target = Path(os.path.realpath(path))  # follows symlinks, dangling ones too, like `>` does
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"{path}: cannot write the {what} there ({exc.strerror or exc})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "is a folder" if stat.S_ISDIR(st.st_mode) else "is not a regular file"
        raise UserError(f"{path}: {kind}; refusing to write the {what} there (name a file)")
    if st is None and not os.path.isdir(target.parent):
        # `>` makes no folders: a mistyped path must not leave a tree of new ones behind.
        raise UserError(f"{path}: cannot write the {what} there (no such folder: {target.parent}); create it first")
    try:
        atomic_write_text(target, text)
        if st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
            # Root replacing someone's file hands it back to them; anyone else cannot, and becomes its
            # owner, as with any editor's safe save.
            with contextlib.suppress(PermissionError):
                os.chown(target, st.st_uid, st.st_gid)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the {what} there ({exc.strerror or exc})") from None
    return target


def finite_json(doc: Any) -> Any:
    """NaN and infinities become null: json.dumps would write them as bare words no parser accepts."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite_json(v) for v in doc]
    return doc


def atomic_write_json(path: Path, doc: Any) -> None:
    atomic_write_text(path, json.dumps(finite_json(doc), indent=1, allow_nan=False) + "\n")
