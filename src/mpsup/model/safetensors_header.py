"""The safetensors header: 8-byte little-endian length, then that many bytes of JSON.

Only the header is read, so a 70B checkpoint costs a few kilobytes of I/O. Every field is checked
against the file itself, as the safetensors library does: a header that lies about sizes or offsets
is an error naming the file. Messages never quote the file's bytes before they parsed as a header
(the length field of a file that is not a safetensors file is its content)."""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.safe_files import open_regular, parse_json
from mpsup.workloads import SAFETENSORS_ITEMSIZE

# One table of element sizes for the reader and the workloads, so the two cannot drift.
ITEMSIZE = SAFETENSORS_ITEMSIZE
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors library's own limit
MAX_DIM = 2**40
MAX_RANK = 16
# Real tensor names stay under a few hundred characters; a longer one is hostile, and every name is
# matched against several patterns, so the cap bounds that work too.
MAX_NAME_CHARS = 1024


class ModelFormatError(UserError):
    """A model file that cannot be read as what it claims to be: one line, exit 2."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    header_bytes: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def _fail(path: Path, problem: str) -> ModelFormatError:
    return ModelFormatError(f"{path}: {problem}")


def shown(value: object, limit: int = 80) -> str:
    """A value from a file for a one-line message, cut short: strings quoted by repr (so a newline
    cannot split the line), numbers and lists of them as written, anything else by its type
    (repr of a deeply nested list would itself raise RecursionError)."""
    numbers = isinstance(value, list) and all(isinstance(x, (int, float)) for x in value)
    if not (numbers or value is None or isinstance(value, (str, bool, int, float))):
        return f"<a JSON {'object' if isinstance(value, dict) else type(value).__name__}>"
    text = value if isinstance(value, str) else repr(value)
    cut = text[:limit]
    quoted = repr(cut) if isinstance(value, str) else cut
    return quoted if len(text) <= limit else f"{quoted}... ({len(text):,} characters)"


def check_name(path: Path, name: str) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise _fail(
            path,
            f"tensor name of {len(name):,} characters (over {MAX_NAME_CHARS:,}): "
            f"{shown(name)}; not a checkpoint mpsup reads",
        )


def read_header(path: Path) -> SafetensorsHeader:
    with open_regular(path, "safetensors file") as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise _fail(path, f"truncated: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise _fail(
                    path,
                    f"not a safetensors file (its header length field is over the {MAX_HEADER_BYTES >> 20} MiB limit)",
                )
            if 8 + n > size:
                raise _fail(
                    path,
                    f"not a safetensors file, or truncated (its header length field runs past the end of "
                    f"the file's {size} bytes)",
                )
            raw = fh.read(n)
        except OSError as exc:
            raise _fail(path, f"cannot read ({exc.strerror or exc})") from None
    if len(raw) != n:
        raise _fail(path, "changed while being read (header cut short)")
    doc = parse_json(raw, path, "safetensors header")
    if not isinstance(doc, dict):
        raise _fail(path, "header is not a JSON object")
    metadata_raw = doc.pop("__metadata__", {}) or {}
    if not isinstance(metadata_raw, dict):
        raise _fail(path, "__metadata__ is not an object")
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    data_size = size - 8 - n
    for name, entry in doc.items():
        check_name(path, name)
        tensors[name], begin, end = _tensor(path, name, entry, data_size)
        spans.append((begin, end, name))
    _check_layout(path, spans, data_size)
    return SafetensorsHeader(path, n, tensors, {str(k): str(v) for k, v in metadata_raw.items()})


def _tensor(path: Path, name: str, entry: Any, data_size: int) -> tuple[TensorInfo, int, int]:
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {shown(name)}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise _fail(path, f"tensor {shown(name)}: unknown dtype {shown(dtype)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise _fail(path, f"tensor {shown(name)}: shape must be a list of integers")
    if len(shape) > MAX_RANK or any(d < 0 or d > MAX_DIM for d in shape):
        raise _fail(
            path, f"tensor {shown(name)}: negative or absurd dimension, or over {MAX_RANK} of them, in {shown(shape)}"
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise _fail(path, f"tensor {shown(name)}: data_offsets must be two integers")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise _fail(
            path, f"tensor {shown(name)}: offsets {shown(offsets)} lie outside the file's {data_size} data bytes"
        )
    nbytes = math.prod(shape) * ITEMSIZE[dtype]
    if end - begin != nbytes:
        raise _fail(
            path,
            f"tensor {shown(name)}: shape {shown(shape)} of {dtype} needs {nbytes} bytes, offsets give {end - begin}",
        )
    return TensorInfo(name, dtype, tuple(shape), nbytes), begin, end


def _check_layout(path: Path, spans: list[tuple[int, int, str]], data_size: int) -> None:
    """The tensors, sorted by offset, must tile the data exactly, as the safetensors library requires:
    no overlap (two tensors sharing bytes), no gap, nothing after the last one."""
    expected = 0
    for begin, end, name in sorted(spans):
        if begin != expected:
            how = (
                "overlaps the tensor before it"
                if begin < expected
                else f"leaves a gap of {begin - expected} bytes before it"
            )
            raise _fail(
                path, f"tensor {shown(name)}: data_offsets [{begin}, {end}] {how}; not a valid safetensors file"
            )
        expected = end
    if expected != data_size:
        raise _fail(
            path,
            f"the tensors cover {expected} data bytes but the file holds {data_size}; not a valid safetensors file",
        )
