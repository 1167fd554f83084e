"""Records on disk: atomic writes, strict JSON, and the one guarded way to read any input file."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from mpsup.errors import UserError

# Generous for every JSON document mpsup reads (records, configs, indexes, snapshots), yet far
# below what would exhaust memory: an input larger than this is refused, never read whole.
DEFAULT_MAX_JSON_BYTES = 256 << 20


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
        raise UserError(f"{path}: {what} is larger than {max_bytes >> 20} MiB; refusing to read it")
    return data


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
        return json.loads(text, parse_constant=no_constants)
    except UnicodeDecodeError:
        raise UserError(f"{source}: {what} is not UTF-8 text") from None
    except RecursionError:
        raise UserError(f"{source}: {what} is nested too deeply to be valid") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: {what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
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


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
