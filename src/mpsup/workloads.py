"""A workload: one thing to time, described as plain data the worker can rebuild on any device."""

from __future__ import annotations

import fnmatch
import hashlib
import json
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


def _ints(params: dict[str, Any], *keys: str) -> list[int]:
    values = [params[k] for k in keys]
    if not all(type(v) is int and v >= 0 for v in values):
        raise ValueError(f"{keys}: not whole numbers")
    return values


def _numel(shape: Any) -> int:
    if not isinstance(shape, (list, tuple)) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{shape!r}: not a shape")
    n = 1
    for d in shape:
        n *= d
    return n


def priced_bytes(kind: str, dtype: str, params: dict[str, Any]) -> int | None:
    """Bytes of every tensor one call of this workload holds on the device: its inputs and weights, which the
    worker builds once, and the output each call makes (as worker/ops.py builds them). None for a kind whose
    tensors the params do not describe (Metal kernels, whole models): their maker states what they take.

    The memory guard compares this with what the device can give before the workload is built, so it must
    count every tensor: a conv's output may be thousands of times its weight (1 MiB of weight, 4 GiB a call)."""
    es = ITEMSIZE.get(dtype, 4)
    try:
        if kind == "linear":
            t, k, n = _ints(params, "tokens", "in_features", "out_features")
            return (t * k + n * k + t * n) * es
        if kind == "grouped_mm":
            t, top_k, e, k, n = _ints(params, "tokens", "top_k", "experts", "in_features", "out_features")
            routed = t * top_k
            return (routed * k + e * n * k + routed * n) * es + 4 * e  # + the int32 group offsets
        if kind == "fp8_cast":
            return _ints(params, "numel")[0] * 3  # one fp8 byte in, two bf16 bytes out, or the reverse
        if kind == "scaled_mm":
            m, k, n = _ints(params, "tokens", "in_features", "out_features")
            return m * k + n * k + 2 * m * n + 4 * (m + n)  # fp8 operands, bf16 output, float32 scales
        if kind == "int_mm":
            m, k, n = _ints(params, "tokens", "in_features", "out_features")
            return m * k + k * n + 4 * m * n  # int8 operands, int32 output
        if kind == "matmul":
            return 3 * _ints(params, "n")[0] ** 2 * es
        if kind == "copy":
            numel = _ints(params, "bytes")[0] // es if "bytes" in params else _ints(params, "numel")[0]
            return 2 * numel * es
        if kind == "embedding":
            t, vocab, dim = _ints(params, "tokens", "num_embeddings", "embedding_dim")
            return (vocab * dim + t * dim) * es + 8 * t  # the table, the gathered rows, int64 indices
        if kind == "pad":
            shape, pad = list(params["shape"]), list(params["pad"])
            _numel(pad)
            padded = shape[:]
            for i in range(min(len(pad) // 2, len(shape))):
                padded[-1 - i] += pad[2 * i] + pad[2 * i + 1]
            return (_numel(shape) + _numel(padded)) * es
        if kind == "conv":
            w_shape, x_shape = list(params["weight_shape"]), list(params["input_shape"])
            margin, stride = _ints({"padding": 0, "stride": 1, **params}, "padding", "stride")
            if len(w_shape) != len(x_shape) or len(w_shape) < 3:
                return None
            spatial = [
                max(0, (x + 2 * margin - k) // max(1, stride) + 1)
                for x, k in zip(x_shape[2:], w_shape[2:], strict=True)
            ]
            out = [x_shape[0], w_shape[0], *spatial]
            return (_numel(x_shape) + _numel(w_shape) + _numel(out)) * es
    except (KeyError, TypeError, ValueError):
        return None
    return None


# What a model's input can justify: a workload whose activation sizes no option stated (mpsup's default
# resolution or token count, or a size read from the model's own config) may take at most this floor or this
# multiple of the input's stored bytes, whichever is more. A real VAE at its config's size stays under it (an
# SDXL VAE at 1024 px: 0.6 GiB of a 16x 160 MB allowance); one 1 MiB conv weight at an assumed 64 px (4 GiB)
# does not, and is measured only once the size is stated (--resolution, --tokens, --frames).
ASSUMED_FLOOR = 1 << 30
ASSUMED_MULTIPLE = 16


def justified_bytes(input_bytes: int) -> int:
    """The most a workload sized by assumption may take, for an input of this many stored bytes."""
    return max(ASSUMED_FLOOR, ASSUMED_MULTIPLE * max(0, input_bytes))


HALF = ("bf16", "fp16")
# A convolution on the CPU reorders its operands and output into oneDNN's blocked layout, and a half-precision
# one computes in float32 besides: measured up to 2.0x (float32) and 3.0x (bf16, fp16) its priced tensors on
# this project's x86 machine (docs/reference/models.md), counted with a margin. Other CPU kinds stay within 10%.
CPU_CONV_FACTOR = 2.5
CPU_HALF_CONV_FACTOR = 3.5
CPU_SLACK = 8  # one eighth on top of the priced tensors, for the library's scratch


def working_bytes(w: Workload, device: str) -> int:
    """What this workload takes while it runs on `device`: its priced tensors in the dtype's real working size
    there (a CPU bf16 convolution holds float32 copies of its operands and output), less the attention scores
    that only a device without memory-efficient attention (MPS) materialises."""
    if device == "mps":
        return w.memory_bytes
    own = w.memory_bytes - w.attention_bytes
    if device != "cpu":
        return own
    convolves = w.kind == "conv" or (w.kind == "model_phase" and w.params.get("library") == "diffusers")
    if convolves:
        return int((CPU_HALF_CONV_FACTOR if w.dtype in HALF else CPU_CONV_FACTOR) * own)
    return own + own // CPU_SLACK


# The config keys a record keeps of a whole-model phase's config: what names the model (`bench --list`, the
# report's phase shape). The worker gets the whole config from the live workload; the record keeps its digest.
CONFIG_NAME_KEYS = ("_class_name", "model_type", "architectures")


def config_digest(config: Any) -> str:
    """sha256 of a config's canonical JSON: the same config, the same digest, whatever its key order."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def priced_flops(kind: str, params: dict[str, Any]) -> float | None:
    """Arithmetic of one call (a multiply-add is two), as worker/ops.py counts it; None for a kind whose work
    the params do not describe. With the rate a similar workload reached, it predicts a call's time before
    any is made (bench/runner.py skips what the budget has no room for)."""
    try:
        if kind in ("linear", "scaled_mm", "int_mm"):
            t, k, n = _ints(params, "tokens", "in_features", "out_features")
            return 2.0 * t * k * n
        if kind == "grouped_mm":
            t, top_k, k, n = _ints(params, "tokens", "top_k", "in_features", "out_features")
            return 2.0 * t * top_k * k * n
        if kind == "matmul":
            return 2.0 * _ints(params, "n")[0] ** 3
    except (KeyError, TypeError, ValueError):
        return None
    return None


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
    # Where no option stated its activation sizes: the option that would ("--resolution"), and the most its
    # tensors may take until then (justified_bytes of the model's input); "" and 0 where sizes were stated.
    sized_by: str = ""
    justified: int = 0
    # Of memory_bytes, the attention scores only a device without memory-efficient attention (MPS) holds.
    attention_bytes: int = 0

    def __post_init__(self) -> None:
        # Priced from its tensors wherever the kind allows, whatever its maker wrote: a maker may count more
        # (a Metal kernel's buffers) but never less than the tensors the worker will allocate.
        priced = priced_bytes(self.kind, self.dtype, self.params)
        if priced is not None and priced > self.memory_bytes:
            object.__setattr__(self, "memory_bytes", priced)

    @property
    def flops(self) -> float | None:
        return priced_flops(self.kind, self.params)

    @property
    def rate_family(self) -> tuple[str, str, object]:
        """Workloads whose arithmetic rates predict each other's: one kind, dtype and token count (a GEMM's
        rate grows with its tokens, so a decode shape's rate would overstate a prefill's time)."""
        return (self.kind, self.dtype, self.params.get("tokens"))

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype, "params": self.params}

    def to_json(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if k != "kernel"}
        config = params.get("config")
        if isinstance(config, dict):
            # Once per phase, a config of megabytes made a record of a hundred: the names and a digest stand in.
            params["config"] = {k: config[k] for k in CONFIG_NAME_KEYS if isinstance(config.get(k), (str, list))}
            params["config_sha256"] = config_digest(config)
        doc: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "part": self.part,
            "dtype": self.dtype,
            **params,
            "tags": list(self.tags),
            "source": self.source,
            "memory_bytes": self.memory_bytes,
            "count": self.count,
        }
        if self.role:
            doc["role"] = self.role
        if self.sized_by:
            doc["sized_by"] = self.sized_by
            doc["justified_bytes"] = self.justified
        if self.attention_bytes:
            doc["attention_bytes"] = self.attention_bytes  # of memory_bytes: held on MPS only
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
                except (re.error, OverflowError, RecursionError) as exc:
                    # OverflowError: a repeat count past the engine's limit (a{99999999999}), not a re.error.
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
