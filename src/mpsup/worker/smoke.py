"""Smoke tests of new MPS features: the device result against a CPU float32 reference.

One status per feature: pass, fail (with the error size), unsupported (this torch or device lacks
it), or crash (the worker died; decided by the runner, which sees the process go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .device import Device
from .metal import reference, run_kernel
from .ops import Unsupported, dtype_of, grouped_mm_fn, is_unsupported_error


class Mismatch(Exception):
    def __init__(self, error: float, tolerance: float, what: str = "max relative error") -> None:
        super().__init__(f"{what} {error:.3g} > tolerance {tolerance:.3g}")
        self.error = error
        self.tolerance = tolerance


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got = got.detach().cpu().to(torch.float64)
    want = want.detach().cpu().to(torch.float64)
    scale = want.abs().max().item() or 1.0
    return (got - want).abs().max().item() / scale


def _check_close(got: torch.Tensor, want: torch.Tensor, tol: float) -> float:
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(float("inf"), tol, f"shape {tuple(got.shape)} vs {tuple(want.shape)}:")
    err = _rel_error(got, want)
    if not err <= tol:
        raise Mismatch(err, tol)
    return err


def _check_bits(got: torch.Tensor, want: torch.Tensor) -> float:
    g = got.detach().cpu().view(torch.uint8)
    w = want.detach().cpu().view(torch.uint8)
    diff = int((g != w).sum().item())
    if diff:
        raise Mismatch(float(diff), 0.0, "differing bytes:")
    return 0.0


def fp8_cast(d: Device) -> float:
    fp8 = dtype_of("fp8")
    x = torch.randn(4096, generator=_gen(1)).to(torch.bfloat16)
    want8 = x.to(fp8)
    got8 = x.to(d.torch_device).to(fp8)
    _check_bits(got8, want8)
    back = got8.to(torch.bfloat16)
    return _check_bits(back, want8.to(torch.bfloat16))


def fp8_copy(d: Device) -> float:
    fp8 = dtype_of("fp8")
    x = torch.randn(64, 64, generator=_gen(2)).to(fp8)
    dev = x.to(d.torch_device)
    dst = torch.empty((64, 64), dtype=fp8, device=d.torch_device)
    dst.copy_(dev.t())  # a strided copy, not only a memcpy
    return _check_bits(dst, x.t().contiguous())


def fp8_cat(d: Device) -> float:
    fp8 = dtype_of("fp8")
    parts = [torch.randn(8, 32, generator=_gen(3 + i)).to(fp8) for i in range(3)]
    got = torch.cat([p.to(d.torch_device) for p in parts], dim=0)
    return _check_bits(got, torch.cat([p.view(torch.uint8) for p in parts], dim=0).view(fp8))


def fp8_pad(d: Device) -> float:
    fp8 = dtype_of("fp8")
    x = torch.randn(2, 3, 5, generator=_gen(6)).to(fp8)
    got = F.pad(x.to(d.torch_device), (1, 2, 0, 1), mode="constant", value=0.0)
    want = F.pad(x.view(torch.uint8), (1, 2, 0, 1), mode="constant", value=0).view(fp8)
    return _check_bits(got, want)


def scaled_mm_fp8(d: Device) -> float:
    fn = getattr(torch, "_scaled_mm", None)
    if fn is None:
        raise Unsupported("torch._scaled_mm does not exist in this torch")
    fp8 = dtype_of("fp8")
    a = torch.randn(32, 64, generator=_gen(7)).to(fp8)
    b = torch.randn(48, 64, generator=_gen(8)).to(fp8)
    sa = torch.tensor(0.5)
    sb = torch.tensor(2.0)
    got = fn(a.to(d.torch_device), b.to(d.torch_device).t(), scale_a=sa.to(d.torch_device),
             scale_b=sb.to(d.torch_device), out_dtype=torch.bfloat16)
    want = (a.float() * 0.5) @ (b.float() * 2.0).t()
    return _check_close(got, want, 1e-2)


def _grouped(d: Device, dtype: torch.dtype, tol: float) -> float:
    gmm = grouped_mm_fn()
    experts, k, n = 4, 32, 24
    sizes = [5, 0, 11, 16]
    a = torch.randn(sum(sizes), k, generator=_gen(9))
    w = torch.randn(experts, n, k, generator=_gen(10))
    ends = torch.tensor([sum(sizes[: i + 1]) for i in range(experts)], dtype=torch.int32)
    got = gmm(a.to(dtype).to(d.torch_device), w.to(dtype).to(d.torch_device).transpose(-2, -1),
              offs=ends.to(d.torch_device))
    a_r = a.to(dtype).float()
    w_r = w.to(dtype).float()
    want = torch.cat([a_r[int(e - s): int(e)] @ w_r[i].t() for i, (s, e) in enumerate(zip(sizes, ends.tolist(), strict=True))])
    return _check_close(got, want, tol)


def grouped_mm_bf16(d: Device) -> float:
    return _grouped(d, torch.bfloat16, 2e-2)


def grouped_mm_fp16(d: Device) -> float:
    return _grouped(d, torch.float16, 5e-3)


def grouped_mm_fp32(d: Device) -> float:
    return _grouped(d, torch.float32, 1e-4)


def constant_pad(d: Device) -> float:
    x = torch.randn(1, 4, 3, 6, 5, generator=_gen(11)).to(torch.bfloat16)
    pad = (1, 1, 1, 1, 2, 0)  # the causal 3D-conv pad of Wan-style VAEs
    got = F.pad(x.to(d.torch_device), pad, mode="constant", value=0.0)
    return _check_bits(got, F.pad(x, pad, mode="constant", value=0.0))


def int_mm(d: Device) -> float:
    fn = getattr(torch, "_int_mm", None)
    if fn is None:
        raise Unsupported("torch._int_mm does not exist in this torch")
    a = torch.randint(-8, 8, (32, 64), generator=_gen(12), dtype=torch.int8)
    b = torch.randint(-8, 8, (64, 32), generator=_gen(13), dtype=torch.int8)
    got = fn(a.to(d.torch_device), b.to(d.torch_device))
    want = a.to(torch.int32) @ b.to(torch.int32)
    if not torch.equal(got.cpu().to(torch.int32), want):
        raise Mismatch(float((got.cpu().to(torch.int32) - want).abs().max().item()), 0.0, "max abs error")
    return 0.0


def metal_kernels(d: Device, kernels: list[dict[str, Any]]) -> float:
    worst = 0.0
    for entry in kernels:
        grid = min(int(entry["grid"]), 1 << 16)
        src, dst = run_kernel(entry, d, grid)
        want = reference(entry["reference"], src)
        got = dst.cpu()
        if entry["reference"] == "fp8_e4m3_decode":
            nan_ok = torch.equal(torch.isnan(got.float()), torch.isnan(want.float()))
            finite = ~torch.isnan(want.float())
            if not nan_ok or not torch.equal(got[finite].view(torch.int16), want[finite].view(torch.int16)):
                raise Mismatch(1.0, 0.0, f"{entry['name']}: decoded codes differ:")
            continue
        tol = entry["tolerance"]
        err = (got.double() - want.double()).abs() - tol["rtol"] * want.double().abs()
        excess = float(err.max().item())
        if excess > tol["atol"]:
            raise Mismatch(excess, tol["atol"], f"{entry['name']}: error past tolerance")
        worst = max(worst, excess)
    return worst


FEATURES: dict[str, Callable[..., float]] = {
    "fp8_cast": fp8_cast,
    "fp8_copy": fp8_copy,
    "fp8_cat": fp8_cat,
    "fp8_constant_pad": fp8_pad,
    "scaled_mm_fp8": scaled_mm_fp8,
    "grouped_mm_bf16": grouped_mm_bf16,
    "grouped_mm_fp16": grouped_mm_fp16,
    "grouped_mm_fp32": grouped_mm_fp32,
    "constant_pad_bf16_5d": constant_pad,
    "int_mm": int_mm,
    "metal_kernels": metal_kernels,
}


def run_feature(name: str, device: Device, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    fn = FEATURES[name]
    try:
        error = fn(device, kernels) if name == "metal_kernels" else fn(device)
    except Mismatch as exc:
        return {"status": "fail", "error": exc.error, "message": str(exc)}
    except Exception as exc:
        if is_unsupported_error(exc):
            return {"status": "unsupported", "message": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        return {"status": "fail", "error": None, "message": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    return {"status": "pass", "error": error, "message": ""}
