"""Workload specs (plain dicts) -> a callable on the device plus what one call moves and computes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from . import values
from .core import UNSUPPORTED_NEEDLES, Built, Unsupported, dtype_of, is_unsupported_error, rand
from .device import Device

__all__ = ["BUILDERS", "UNSUPPORTED_NEEDLES", "Built", "Unsupported", "dtype_of", "is_unsupported_error", "rand"]


def _linear(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    t, k, n = int(p["tokens"]), int(p["in_features"]), int(p["out_features"])
    x = rand((t, k), dt, d)
    w = rand((n, k), dt, d)
    es = x.element_size()
    return Built(lambda: F.linear(x, w), (t * k + n * k + t * n) * es, 2.0 * t * k * n, t, (x, w))


def routing_sizes(tokens: int, experts: int, routing: str = "even") -> list[int]:
    """Rows per expert. "even" splits evenly; "skewed" follows 1/(rank+1), as real routers skew:
    the same average rows per group (what 2.15's MPS kernel picks its tile from) over very
    different groups."""
    if routing == "even":
        base, extra = divmod(tokens, experts)
        return [base + (1 if e < extra else 0) for e in range(experts)]
    if routing != "skewed":
        raise ValueError(f"unknown routing {routing!r}")
    weights = [1.0 / (e + 1) for e in range(experts)]
    total = sum(weights)
    sizes = [int(tokens * w / total) for w in weights]
    for e in range(tokens - sum(sizes)):
        sizes[e % experts] += 1
    return sizes


def _group_offsets(tokens: int, experts: int, device: Device, routing: str = "even") -> tuple[torch.Tensor, list[int]]:
    sizes = routing_sizes(tokens, experts, routing)
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
    offs, sizes = _group_offsets(routed, experts, d, str(p.get("routing", "even")))
    es = a.element_size()
    active = sum(1 for size in sizes if size)  # experts no token is routed to are never read
    moved = (routed * k + active * n * k + routed * n) * es
    flops = 2.0 * routed * k * n
    # The float64 reference has no grouped kernel: the loop computes the same product.
    if p.get("method") == "loop" or values.TRUTH.on:
        dt = a.dtype
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
        if values.TRUTH.on:  # the value before it was cast: the cast's error is what the builds are held to
            return Built(lambda: src, None, None, None, src)
        src.to(fp8)
        return Built(lambda: src.to(fp8), numel * 3, None, None, src)
    src8 = rand((numel,), fp8, d)
    if values.TRUTH.on:  # every FP8 value is exact in bf16 and float64
        return Built(lambda: src8, None, None, None, src8)
    return Built(lambda: src8.to(torch.bfloat16), numel * 3, None, None, src8)


def scaled_mm_op(
    recipe: str,
) -> tuple[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]:
    """FP8 matmul through the API this torch ships, as (its name, fn(a, b, scale_a, scale_b) -> bf16).

    `F.scaled_mm` (public since 2.10) runs `torch._scaled_mm_v2`, the only FP8 matmul with an MPS
    kernel (2.15: tensor-wise or row-wise, one float32 scale tensor per operand); `torch._scaled_mm`
    has CPU, CUDA and XPU kernels only, so it is the fallback for torch without `F.scaled_mm`."""
    if recipe not in ("tensorwise", "rowwise"):
        raise ValueError(f"unknown scaling recipe {recipe!r}")
    public = getattr(F, "scaled_mm", None)
    scaling = getattr(F, "ScalingType", None)
    if public is not None and scaling is not None:
        how = scaling.TensorWise if recipe == "tensorwise" else scaling.RowWise

        def v2(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
            return public(a, b, sa, how, sb, how, output_dtype=torch.bfloat16)

        return "torch.nn.functional.scaled_mm", v2
    legacy = getattr(torch, "_scaled_mm", None)
    if legacy is None:
        raise Unsupported("this torch has neither torch.nn.functional.scaled_mm nor torch._scaled_mm")

    def v1(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
        return legacy(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    return "torch._scaled_mm", v1


def scaled_mm_scales(
    recipe: str, m: int, n: int, device: torch.device, gen: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 scales: one per tensor, or one per row of a (m, 1) and per column of b (1, n). Their
    product is not 1, so a matmul that drops them shows in the smoke tests."""
    if recipe == "tensorwise":
        return torch.tensor(0.5, device=device), torch.tensor(3.0, device=device)
    if gen is None:  # a workload's: from the stream, the same in both builds and the reference
        sa = values.uniform(m, values.TRUTH.next_seed(), 0.5, 2.0).view(m, 1)
        sb = values.uniform(n, values.TRUTH.next_seed(), 0.5, 2.0).view(1, n)
    else:
        sa = torch.rand((m, 1), generator=gen) * 1.5 + 0.5
        sb = torch.rand((1, n), generator=gen) * 1.5 + 0.5
    return sa.to(device), sb.to(device)


def _scaled_mm(p: dict[str, Any], _dt: torch.dtype, d: Device) -> Built:
    recipe = str(p.get("recipe", "tensorwise"))
    _api, fn = scaled_mm_op(recipe)
    fp8 = dtype_of("fp8")
    m, k, n = int(p["tokens"]), int(p["in_features"]), int(p["out_features"])
    a = rand((m, k), fp8, d)
    b = rand((n, k), fp8, d).t()  # column-major, as every FP8 GEMM wants its second operand
    sa, sb = scaled_mm_scales(recipe, m, n, d.torch_device)
    if values.TRUTH.on:  # against its own dequantised values, in float64
        sa64, sb64 = sa.double(), sb.double()
        return Built(lambda: (a * sa64) @ (b * sb64), None, None, m, (a, b))
    fn(a, b, sa, sb)  # surfaces "unsupported on this device" at build time
    return Built(lambda: fn(a, b, sa, sb), m * k + n * k + 2 * m * n, 2.0 * m * k * n, m, (a, b, sa, sb))


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
    if values.TRUTH.on:  # integer products and sums are exact in float64 at these sizes
        return Built(lambda: (a.double() @ b.double()).to(torch.int64), None, None, None, (a, b))
    fn(a, b)
    return Built(lambda: fn(a, b), m * k + k * n + 4 * m * n, 2.0 * m * k * n, None, (a, b))


def _embedding(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    t, vocab, dim = int(p["tokens"]), int(p["num_embeddings"]), int(p["embedding_dim"])
    table = rand((vocab, dim), dt, d)
    idx = values.ints((t,), torch.int64, d.torch_device, 0, vocab - 1)
    F.embedding(idx, table)  # an FP8 table has a gather kernel on MPS only from 2.15
    return Built(lambda: F.embedding(idx, table), 2 * t * dim * table.element_size() + 8 * t, None, t, (table, idx))


def _conv(p: dict[str, Any], dt: torch.dtype, d: Device) -> Built:
    weight_shape = tuple(int(s) for s in p["weight_shape"])
    input_shape = tuple(int(s) for s in p["input_shape"])
    x = rand(input_shape, dt, d)
    w = rand(weight_shape, dt, d)
    padding = int(p.get("padding", 0))
    stride = int(p.get("stride", 1))
    conv = F.conv3d if len(weight_shape) == 5 else F.conv2d
    out = conv(x, w, padding=padding, stride=stride)  # also surfaces "unsupported" at build time
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
