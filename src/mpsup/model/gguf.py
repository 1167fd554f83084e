"""GGUF headers read by hand (no `gguf` package needed): tensor names, shapes and quantization types.

Layout (ggml's docs/reference/models.md): "GGUF", version (2 or 3), tensor count and key/value count (u64), the
key/values, then per tensor: name, rank, dims (innermost first), ggml type, offset into the data section.
Only the header is read; every count and length is bounded and checked against the file, so a hostile
file is one line naming it. Quantized tensors keep their ggml type name (Q4_K ...): extraction measures
their matmul in bf16, as ComfyUI-GGUF and Diffusers dequantize before it, and lists the dequantization
as not measured."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from mpsup.model.safetensors_header import (
    MAX_DIM,
    MAX_NAME_CHARS,
    MAX_RANK,
    ModelFormatError,
    TensorInfo,
    check_name,
    shown,
)
from mpsup.safe_files import open_regular

MAGIC = b"GGUF"
MAX_COUNT = 1 << 20  # tensors or keys; real files hold a few thousand
MAX_STRING = 1 << 20
MAX_ARRAY = 1 << 22  # items; a tokenizer's vocabulary and merges stay under a million
MAX_HEADER_BYTES = 512 << 20  # llama.cpp tokenizers put ~10 MB of vocabulary in the header
# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    30: ("BF16", 1, 2),
}
QUANTIZED = frozenset(name for name, block, _ in GGML_TYPES.values() if block > 1)
# value type id -> struct format of a scalar; 8 is a string, 9 an array
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


@dataclass
class GGUFHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, object] = field(default_factory=dict)  # scalar and string values only
    unknown_types: dict[str, int] = field(default_factory=dict)  # tensor -> a ggml type id this reader does not size


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh, self.path, self.read_bytes = fh, path, 0

    def take(self, n: int) -> bytes:
        self.read_bytes += n
        if self.read_bytes > MAX_HEADER_BYTES:
            raise ModelFormatError(f"{self.path}: GGUF header larger than {MAX_HEADER_BYTES >> 20} MiB; refused")
        data = self.fh.read(n)
        if len(data) != n:
            raise ModelFormatError(f"{self.path}: GGUF header ends early (truncated file?)")
        return data

    def unpack(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def count(self, what: str, limit: int = MAX_COUNT) -> int:
        n = int(self.unpack("<Q"))
        if n > limit:
            raise ModelFormatError(f"{self.path}: GGUF {what} {n} is beyond {limit}; refused")
        return n

    def string(self) -> str:
        return self.take(self.count("string length", MAX_STRING)).decode("utf-8", "replace")

    def value(self, vtype: int, depth: int = 0) -> object:
        if vtype in SCALARS:
            return self.unpack(SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9 and depth == 0:
            item = int(self.unpack("<I"))
            n = self.count("array length", MAX_ARRAY)
            if item in SCALARS:
                self.take(n * struct.calcsize(SCALARS[item]))  # skipped in one read, not item by item
            else:
                for _ in range(n):
                    self.value(item, depth + 1)
            return None  # arrays (the tokenizer's vocabulary) are skipped, not kept
        raise ModelFormatError(f"{self.path}: GGUF value type {vtype} is not one the format defines")


def read_gguf(path: Path) -> GGUFHeader:
    with open_regular(path, "GGUF file") as fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, path)
        if r.take(4) != MAGIC:
            raise ModelFormatError(f"{path}: not a GGUF file (no GGUF magic)")
        version = int(r.unpack("<I"))
        if version not in (2, 3):
            raise ModelFormatError(f"{path}: GGUF version {version}; mpsup reads versions 2 and 3")
        n_tensors, n_kv = r.count("tensor count"), r.count("key count")
        header = GGUFHeader(path, {})
        for _ in range(n_kv):
            key = r.string()
            value = r.value(int(r.unpack("<I")))
            if value is not None and len(key) <= MAX_NAME_CHARS:
                header.metadata[key] = value
        for _ in range(n_tensors):
            _tensor(r, header, size)
    return header


def _tensor(r: _Reader, header: GGUFHeader, size: int) -> None:
    name = r.string()
    check_name(r.path, name)
    rank = int(r.unpack("<I"))
    if rank > MAX_RANK:
        raise ModelFormatError(f"{r.path}: tensor {shown(name)} has rank {rank}; refused")
    dims = [int(r.unpack("<Q")) for _ in range(rank)]
    if any(d > MAX_DIM for d in dims):
        raise ModelFormatError(f"{r.path}: tensor {shown(name)} has a dimension beyond {MAX_DIM}; refused")
    type_id, offset = int(r.unpack("<I")), int(r.unpack("<Q"))
    shape = tuple(reversed(dims))  # GGUF lists the innermost dimension first; torch's (out, in) is the reverse
    numel = 1
    for d in shape:
        numel *= d
    if type_id not in GGML_TYPES:
        header.unknown_types[name] = type_id
        header.tensors[name] = TensorInfo(name, f"GGML_TYPE_{type_id}", shape, 0)
        return
    dtype, block, block_bytes = GGML_TYPES[type_id]
    nbytes = -(-numel // block) * block_bytes
    if offset + nbytes > size:
        raise ModelFormatError(
            f"{r.path}: tensor {shown(name)} lies past the end of the file ({offset} + {nbytes} > {size})"
        )
    header.tensors[name] = TensorInfo(name, dtype, shape, nbytes)
