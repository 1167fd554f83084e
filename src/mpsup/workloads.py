"""A workload: one thing to time, described as plain data the worker can rebuild on any device."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from mpsup.errors import UserError

# Bytes per element, by safetensors' dtype names (model/safetensors_header.py reads headers with it)
# and by mpsup's own workload dtype names, derived from it so the two cannot drift.
SAFETENSORS_ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
_SAFETENSORS_NAME = {"bf16": "BF16", "fp16": "F16", "fp32": "F32", "fp8": "F8_E4M3", "int8": "I8", "uint8": "U8"}
ITEMSIZE = {name: SAFETENSORS_ITEMSIZE[st] for name, st in _SAFETENSORS_NAME.items()}

# The whole model run once per call (a .pt2 export or module:function): bench names it, the report
# takes its speedup as the model's figure instead of the sum over layers.
END_TO_END = "model/end-to-end"


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # linear, grouped_mm, fp8_cast, scaled_mm, pad, copy, matmul, metal, int_mm, conv, embedding
    part: str  # which table it belongs to: linear, moe, fp8, pad, roofline, model
    dtype: str
    params: dict[str, Any]
    tags: tuple[str, ...] = ()
    source: str = ""
    memory_bytes: int = 0  # what its tensors take on the device, for the memory guard
    count: int = 1  # how many times one forward of a model runs it
    role: str = ""

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "params": self.params}

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "part": self.part,
            "dtype": self.dtype,
            **{k: v for k, v in self.params.items() if k != "kernel"},
            "tags": list(self.tags),
            "source": self.source,
            "memory_bytes": self.memory_bytes,
            "count": self.count,
        }
        if self.role:
            doc["role"] = self.role
        if self.kind == "metal":
            doc["kernel"] = self.params["kernel"]["name"]
        return doc


@dataclass(frozen=True)
class Selection:
    patterns: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, text: str | None) -> Selection:
        if not text:
            return cls(())
        pats = tuple(p.strip() for p in text.split(",") if p.strip())
        for p in pats:
            if p.startswith("re:"):
                try:
                    re.compile(p[3:])
                except re.error as exc:
                    raise UserError(f"--only {p!r}: not a valid regular expression ({exc})") from None
        return cls(pats)

    def matches(self, w: Workload) -> bool:
        if not self.patterns:
            return True
        fields = [w.name, w.kind, w.part, *w.tags]
        for p in self.patterns:
            if p.startswith("re:"):
                if any(re.search(p[3:], f) for f in fields):
                    return True
            elif any(fnmatch.fnmatchcase(f, p) for f in fields):
                return True
        return False


def select(workloads: list[Workload], only: str | None) -> list[Workload]:
    sel = Selection.parse(only)
    chosen = [w for w in workloads if sel.matches(w)]
    if not chosen:
        raise UserError(f"--only {only!r} matches no workload (try `mpsup bench --list`)")
    return chosen
