"""The safetensors header: 8-byte little-endian length, then that many bytes of JSON.

Only the header is read, so a 70B checkpoint costs a few kilobytes of I/O. Every field is checked
against the file itself: a header that lies about sizes or offsets is an error naming the file."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.errors import UserError

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors library's own limit
MAX_DIM = 2**40


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


def read_header(path: Path) -> SafetensorsHeader:
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise _fail(path, f"truncated: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise _fail(path, f"header length {n} is absurd (over {MAX_HEADER_BYTES} bytes)")
            if 8 + n > size:
                raise _fail(path, f"header length {n} runs past the end of the file ({size} bytes)")
            raw = fh.read(n)
    except OSError as exc:
        raise _fail(path, f"cannot read ({exc.strerror or exc})") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _fail(path, "header is not a JSON object")
    data_size = size - 8 - n
    metadata_raw = doc.pop("__metadata__", {}) or {}
    if not isinstance(metadata_raw, dict):
        raise _fail(path, "__metadata__ is not an object")
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        tensors[name] = _tensor(path, name, entry, data_size)
    return SafetensorsHeader(path, n, tensors, {str(k): str(v) for k, v in metadata_raw.items()})


def _tensor(path: Path, name: str, entry: Any, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {name!r}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise _fail(path, f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise _fail(path, f"tensor {name!r}: shape must be a list of integers")
    if any(d < 0 or d > MAX_DIM for d in shape):
        raise _fail(path, f"tensor {name!r}: negative or absurd dimension in {shape}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise _fail(path, f"tensor {name!r}: data_offsets must be two integers")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise _fail(path, f"tensor {name!r}: offsets {offsets} lie outside the file's {data_size} data bytes")
    nbytes = math.prod(shape) * ITEMSIZE[dtype]
    if end - begin != nbytes:
        raise _fail(path, f"tensor {name!r}: shape {shape} of {dtype} needs {nbytes} bytes, offsets give {end - begin}")
    return TensorInfo(name, dtype, tuple(shape), nbytes)
