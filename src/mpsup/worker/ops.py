"""Workload specs (plain dicts) -> a callable on the device plus what one call moves and computes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .device import Device


class Unsupported(Exception):
    """This torch or this device lacks the feature: a status, not a failure."""


DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "int8": torch.int8,
}


def dtype_of(name: str) -> torch.dtype:
    if name == "fp8":
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is None:
            raise Unsupported("torch.float8_e4m3fn does not exist in this torch")
        return fp8
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def is_unsupported_error(exc: BaseException) -> bool:
    """Errors that mean 'this op/dtype is not implemented here', as torch words them."""
    if isinstance(exc, (Unsupported, NotImplementedError, AttributeError)):
        return True
    text = str(exc).lower()
    return any(
        needle in text
        for needle in (
            "not implemented",
            "not supported",
            "unsupported",
            "does not support",
            "only supports",
            "is only supported",
            "no kernel",
            "could not run",
            "expected mat_a",
            "is not available",
        )
    )


def rand(shape: tuple[int, ...], dtype: torch.dtype, device: Device) -> torch.Tensor:
    # Random values, generated on the device: zeros run measurably faster on some GPUs.
    # uniform_ fills several times faster than randn on a CPU, which matters for GiB-sized weights.
    if dtype.is_floating_point and dtype.itemsize >= 2:
        return torch.empty(shape, dtype=dtype, device=device.torch_device).uniform_(-1.0, 1.0)
    if dtype.is_floating_point:
        return torch.empty(shape, dtype=torch.bfloat16, device=device.torch_device).uniform_(-1.0, 1.0).to(dtype)
    return torch.randint(-8, 8, shape, dtype=dtype, device=device.torch_device)


@dataclass
class Built:
    fn: Callable[[], Any]
    bytes_per_call: float | None = None
    flops_per_call: float | None = None
    items_per_call: float | None = None  # tokens for grouped matmul throughput
    keep: Any = None  # tensors kept alive for the workload's duration


def _linear(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    t, k, n = int(p["tokens"]), int(p["in_features"]), int(p["out_features"])
    x = rand((t, k), dt, d)
    w = rand((n, k), dt, d)
    es = x.element_size()
    return Built(lambda: F.linear(x, w), (t * k + n * k + t * n) * es, 2.0 * t * k * n, t, (x, w))


def _group_offsets(tokens: int, experts: int, device: Device) -> tuple[torch.Tensor, list[int]]:
    base, extra = divmod(tokens, experts)
    sizes = [base + (1 if e < extra else 0) for e in range(experts)]
    ends = []
    total = 0
    for s in sizes:
        total += s
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device.torch_device), sizes


def grouped_mm_fn() -> Callable[..., torch.Tensor]:
    fn = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if fn is None:
        raise Unsupported("this torch has neither torch.nn.functional.grouped_mm nor torch._grouped_mm")
    return fn


def _grouped(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    tokens, top_k, experts = int(p["tokens"]), int(p["top_k"]), int(p["experts"])
    k, n = int(p["in_features"]), int(p["out_features"])
    routed = tokens * top_k
    a = rand((routed, k), dt, d)
    w = rand((experts, n, k), dt, d)  # nn.Linear layout per expert
    offs, sizes = _group_offsets(routed, experts, d)
    es = a.element_size()
    active = sum(1 for size in sizes if size)  # experts no token is routed to are never read
    moved = (routed * k + active * n * k + routed * n) * es
    flops = 2.0 * routed * k * n
    if p.get("method") == "loop":
        bounds = []
        start = 0
        for s in sizes:
            bounds.append((start, start + s))
            start += s

        def loop() -> torch.Tensor:
            out = torch.empty((routed, n), dtype=dt, device=d.torch_device)
            for e, (s0, s1) in enumerate(bounds):
                if s1 > s0:
                    torch.mm(a[s0:s1], w[e].t(), out=out[s0:s1])
            return out

        return Built(loop, moved, flops, tokens, (a, w))
    gmm = grouped_mm_fn()
    wt = w.transpose(-2, -1)
    gmm(a, wt, offs=offs)  # surfaces "unsupported on this device/dtype" at build time
    return Built(lambda: gmm(a, wt, offs=offs), moved, flops, tokens, (a, w, offs))


def _fp8_cast(p: dict[str, Any], _dt: torch.dtype, d: Device) -> Built:
    numel = int(p["numel"])
    fp8 = dtype_of("fp8")
    if p["direction"] == "to_fp8":
        src = rand((numel,), torch.bfloat16, d)
        src.to(fp8)
        return Built(lambda: src.to(fp8), numel * 3, None, None, src)
    src8 = rand((numel,), torch.bfloat16, d).to(fp8)
    return Built(lambda: src8.to(torch.bfloat16), numel * 3, None, None, src8)


def _scaled_mm(p: dict[str, Any], _dt: torch.dtype, d: Device) -> Built:
    fn = getattr(torch, "_scaled_mm", None)
    if fn is None:
        raise Unsupported("torch._scaled_mm does not exist in this torch")
    fp8 = dtype_of("fp8")
    m, k, n = int(p["tokens"]), int(p["in_features"]), int(p["out_features"])
    a = rand((m, k), fp8, d)
    b = rand((n, k), fp8, d).t()  # column-major, as the fp8 GEMMs require
    one = torch.tensor(1.0, device=d.torch_device)
    fn(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return Built(lambda: fn(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                 m * k + n * k + 2 * m * n, 2.0 * m * k * n, None, (a, b, one))


def _pad(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    shape = tuple(int(s) for s in p["shape"])
    pad = tuple(int(x) for x in p["pad"])
    x = rand(shape, dt, d)
    numel_out = 1
    dims = list(shape)
    for i in range(len(pad) // 2):
        dims[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    for s in dims:
        numel_out *= s
    es = x.element_size()
    return Built(lambda: F.pad(x, pad, mode="constant", value=0.0), (x.numel() + numel_out) * es, None, None, x)


def _copy(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    numel = int(p["bytes"]) // dt.itemsize if "bytes" in p else int(p["numel"])
    src = rand((numel,), dt, d)
    dst = torch.empty_like(src)
    return Built(lambda: dst.copy_(src), 2.0 * numel * src.element_size(), None, None, (src, dst))


def _matmul(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    n = int(p["n"])
    a = rand((n, n), dt, d)
    b = rand((n, n), dt, d)
    return Built(lambda: torch.mm(a, b), 3.0 * n * n * a.element_size(), 2.0 * n**3, None, (a, b))


def _int_mm(p: dict[str, Any], _dt: torch.dtype, d: Device) -> Built:
    fn = getattr(torch, "_int_mm", None)
    if fn is None:
        raise Unsupported("torch._int_mm does not exist in this torch")
    m, k, n = int(p["tokens"]), int(p["in_features"]), int(p["out_features"])
    a = rand((m, k), torch.int8, d)
    b = rand((k, n), torch.int8, d)
    fn(a, b)
    return Built(lambda: fn(a, b), m * k + k * n + 4 * m * n, 2.0 * m * k * n, None, (a, b))


def _embedding(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    t, vocab, dim = int(p["tokens"]), int(p["num_embeddings"]), int(p["embedding_dim"])
    table = rand((vocab, dim), dt, d)
    idx = torch.randint(0, vocab, (t,), device=d.torch_device)
    return Built(lambda: F.embedding(idx, table), 2 * t * dim * table.element_size(), None, t, (table, idx))


def _conv(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    weight_shape = tuple(int(s) for s in p["weight_shape"])
    input_shape = tuple(int(s) for s in p["input_shape"])
    x = rand(input_shape, dt, d)
    w = rand(weight_shape, dt, d)
    padding = int(p.get("padding", 0))
    stride = int(p.get("stride", 1))
    conv = F.conv3d if len(weight_shape) == 5 else F.conv2d
    out = conv(x, w, padding=padding, stride=stride)
    flops = 2.0 * out.numel() * w[0].numel()
    moved = (x.numel() + w.numel() + out.numel()) * x.element_size()
    return Built(lambda: conv(x, w, padding=padding, stride=stride), moved, flops, None, (x, w))


BUILDERS: dict[str, Callable[[dict[str, Any], torch.dtype, Device], Built]] = {
    "linear": _linear,
    "grouped_mm": _grouped,
    "fp8_cast": _fp8_cast,
    "scaled_mm": _scaled_mm,
    "pad": _pad,
    "copy": _copy,
    "matmul": _matmul,
    "int_mm": _int_mm,
    "embedding": _embedding,
    "conv": _conv,
}


def build(spec: dict[str, Any], device: Device) -> Built:
    kind = spec["kind"]
    if kind == "metal":
        from .metal import build_metal

        return build_metal(spec, device)
    if kind == "end_to_end":
        from .end_to_end import build_end_to_end

        return build_end_to_end(spec["params"], device)
    builder = BUILDERS.get(kind)
    if builder is None:
        raise ValueError(f"unknown workload kind {kind!r}")
    return builder(spec.get("params", {}), dtype_of(spec.get("dtype", "fp32")), device)
