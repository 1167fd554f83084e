"""Smoke tests of new MPS features: the device result against a CPU float32 reference.

One status per feature: pass, fail (with the error size), fallback (right, but an op ran on the CPU),
unsupported (this torch or device lacks it), or crash (the worker died; decided by the runner, which sees
the process go)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .core import FallbackWatch
from .device import Device
from .metal import answer_fields, check_grid, reference, run_kernel
from .ops import Unsupported, dtype_of, grouped_mm_fn, is_unsupported_error, scaled_mm_op, scaled_mm_scales

# A feature returns its error size, or (error size, a note on how it ran: the API, the backend).
Outcome = float | tuple[float, str]


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


def _scaled_mm(d: Device, recipe: str, m: int) -> tuple[float, str]:
    # K and N multiples of 64: every backend's FP8 GEMM alignment rule holds, so a failure is the kernel's.
    api, fn = scaled_mm_op(recipe)
    fp8 = dtype_of("fp8")
    k, n = 128, 64
    a = torch.randn(m, k, generator=_gen(7)).to(fp8)
    b = torch.randn(n, k, generator=_gen(8)).to(fp8)
    sa, sb = scaled_mm_scales(recipe, m, n, torch.device("cpu"), _gen(14))
    dev = d.torch_device
    got = fn(a.to(dev), b.to(dev).t(), sa.to(dev), sb.to(dev))
    want = (a.float() * sa) @ (b.float() * sb.reshape(-1, 1) if recipe == "rowwise" else b.float() * sb).t()
    return _check_close(got, want, 1e-2), f"{api}, {recipe}, {m}x{k}x{n}"


def scaled_mm_fp8(d: Device) -> Outcome:
    return _scaled_mm(d, "tensorwise", 32)


def scaled_mm_fp8_rowwise(d: Device) -> Outcome:
    return _scaled_mm(d, "rowwise", 32)


def scaled_mm_fp8_decode(d: Device) -> Outcome:
    # 2.15's MPS kernels for 1-4 rows (one-token decode); CUDA's multiple-of-16 rule is not MPS's.
    worst = 0.0
    note = ""
    for recipe in ("tensorwise", "rowwise"):
        for m in (1, 3):
            err, note = _scaled_mm(d, recipe, m)
            worst = max(worst, err)
    return worst, note.split(",")[0] + ", tensorwise and rowwise, 1 and 3 rows"


def _grouped(d: Device, dtype: torch.dtype, tol: float, sizes: list[int] | None = None) -> float:
    gmm = grouped_mm_fn()
    sizes = sizes or [5, 0, 11, 16]
    experts, k, n = len(sizes), 32, 24
    a = torch.randn(sum(sizes), k, generator=_gen(9))
    w = torch.randn(experts, n, k, generator=_gen(10))
    ends = torch.tensor([sum(sizes[: i + 1]) for i in range(experts)], dtype=torch.int32)
    got = gmm(
        a.to(dtype).to(d.torch_device), w.to(dtype).to(d.torch_device).transpose(-2, -1), offs=ends.to(d.torch_device)
    )
    a_r = a.to(dtype).float()
    w_r = w.to(dtype).float()
    want = torch.cat(
        [a_r[int(e - s) : int(e)] @ w_r[i].t() for i, (s, e) in enumerate(zip(sizes, ends.tolist(), strict=True))]
    )
    return _check_close(got, want, tol)


def grouped_mm_bf16(d: Device) -> float:
    return _grouped(d, torch.bfloat16, 2e-2)


def grouped_mm_fp16(d: Device) -> float:
    return _grouped(d, torch.float16, 5e-3)


def grouped_mm_fp32(d: Device) -> float:
    return _grouped(d, torch.float32, 1e-4)


def grouped_mm_uneven(d: Device) -> float:
    # 2.15's MPS grouped mm picks its tile from the average rows per group: groups of 0 to 131
    # rows around an average of 32 check that one tile serves all of them.
    return _grouped(d, torch.float16, 5e-3, sizes=[0, 1, 131, 3, 0, 59, 2, 60])


def constant_pad(d: Device) -> float:
    x = torch.randn(1, 4, 3, 6, 5, generator=_gen(11)).to(torch.bfloat16)
    pad = (1, 1, 1, 1, 2, 0)  # the causal 3D-conv pad of Wan-style VAEs
    got = F.pad(x.to(d.torch_device), pad, mode="constant", value=0.0)
    return _check_bits(got, F.pad(x, pad, mode="constant", value=0.0))


# Up to 2.14 MPSGraph's 5-D constant pad writes wrong values once a plane reaches 2^16 elements
# (a PyTorch bug that 2.15 fixed); Wan VAE decodes cross that size. Planes
# (H, W) just below, at and beyond the limit, on the input and on the output side.
PLANE_LIMIT_CASES: tuple[tuple[int, int, float], ...] = (
    (255, 255, 0.0),  # output 257 x 257: input plane below the limit, output beyond
    (254, 254, 0.0),  # output exactly 256 x 256 = 2^16
    (256, 256, 0.0),  # input exactly 2^16
    (300, 400, 0.0),  # both far beyond
    (128, 1024, -2.0),  # a wide plane beyond the limit, with a fill value that is not zero
)


def _pad_plane_limit(d: Device, dtype: torch.dtype) -> Outcome:
    pad = (1, 1, 1, 1, 2, 0)
    for i, (h, w, value) in enumerate(PLANE_LIMIT_CASES):
        x = torch.randn(1, 2, 2, h, w, generator=_gen(20 + i)).to(dtype)
        got = F.pad(x.to(d.torch_device), pad, mode="constant", value=value)
        if dtype.itemsize == 1:
            code = torch.tensor([value], dtype=torch.bfloat16).to(dtype).view(torch.uint8).item()
            want = F.pad(x.view(torch.uint8), pad, mode="constant", value=code).view(dtype)
        else:
            want = F.pad(x, pad, mode="constant", value=value)
        try:
            _check_bits(got, want)
        except Mismatch as exc:
            raise Mismatch(exc.error, 0.0, f"input plane {h}x{w} ({h * w} elements), differing bytes:") from None
    planes = [h * w for h, w, _v in PLANE_LIMIT_CASES]
    return 0.0, f"{len(planes)} input planes of {min(planes)} to {max(planes)} elements, bit exact"


def constant_pad_bf16_5d_64k(d: Device) -> Outcome:
    return _pad_plane_limit(d, torch.bfloat16)


def fp8_constant_pad_5d_64k(d: Device) -> Outcome:
    return _pad_plane_limit(d, dtype_of("fp8"))


def _fp8_codes() -> torch.Tensor:
    """Every float8_e4m3fn code once (both zeros, both NaNs), as a 16 x 16 table."""
    return torch.arange(256, dtype=torch.int64).to(torch.uint8).view(dtype_of("fp8")).reshape(16, 16)


def fp8_embedding(d: Device) -> float:
    # An FP8 embedding table: the gather kernels 2.15 added for float8_e4m3fn on MPS.
    table = _fp8_codes().reshape(32, 8)
    idx = torch.tensor([0, 31, 15, 15, 16, 1, 30, 7, 0], dtype=torch.int64)
    got = F.embedding(idx.to(d.torch_device), table.to(d.torch_device))
    return _check_bits(got, F.embedding(idx, table.view(torch.uint8)).view(table.dtype))


def fp8_index(d: Device) -> float:
    x = _fp8_codes()
    rows = torch.tensor([3, 0, 15, 3], dtype=torch.int64)
    cols = torch.randint(0, 16, (16, 5), generator=_gen(15))
    dev = d.torch_device
    xd = x.to(dev)
    got = torch.cat(
        [
            xd[rows.to(dev)].reshape(-1),
            torch.gather(xd, 1, cols.to(dev)).reshape(-1),
            xd.index_select(1, rows.to(dev)).reshape(-1),
        ]
    )
    u = x.view(torch.uint8)
    want = torch.cat([u[rows].reshape(-1), torch.gather(u, 1, cols).reshape(-1), u.index_select(1, rows).reshape(-1)])
    return _check_bits(got, want.view(x.dtype))


def fp8_eq_ne(d: Device) -> float:
    # Every code against every other shifted code: +0 == -0, NaN != NaN, as the CPU says.
    x = _fp8_codes()
    y = torch.roll(x.view(torch.uint8), 1).view(x.dtype)
    y[0, 0] = x[8, 0]  # 0x80 (-0) against 0x00 (+0)
    dev = d.torch_device
    got = torch.stack([x.to(dev) == y.to(dev), x.to(dev) != y.to(dev), x.to(dev) == x.to(dev)])
    want = torch.stack([x == y, x != y, x == x])
    return _check_bits(got, want)


def fp8_eye(d: Device) -> float:
    fp8 = dtype_of("fp8")
    return _check_bits(torch.eye(5, 7, dtype=fp8, device=d.torch_device), torch.eye(5, 7, dtype=fp8))


def compile_small_model(d: Device) -> Outcome:
    """Does a small model compile and match eager? torch.compile on MPS is a prototype in 2.15.
    On the CPU the check uses the aot_eager backend: inductor's C++ build would cost about 30 s
    there and says nothing about the GPU backends this is for."""
    dynamo = getattr(torch, "_dynamo", None)
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None or dynamo is None:
        raise Unsupported("torch.compile does not exist in this torch")
    backend = "aot_eager" if d.kind == "cpu" else "inductor"
    gen = _gen(16)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 32)
    )
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen) * 0.1)
    model = model.to(d.torch_device)
    x = torch.randn(8, 64, generator=gen).to(d.torch_device)
    try:
        with torch.no_grad(), _one_compile_thread(backend):
            eager = model(x)
            compiled = compile_fn(model, backend=backend, fullgraph=True)(x)
    finally:
        dynamo.reset()
    return _check_close(compiled, eager, 1e-4), f"backend={backend}"


def _one_compile_thread(backend: str) -> contextlib.AbstractContextManager[Any]:
    """Inductor compiles in this process, not in a pool of one process per CPU: a model of four kernels does
    not repay the pool's start (docs/evidence). A user's `--compile` keeps the pool."""
    if backend != "inductor":
        return contextlib.nullcontext()
    try:
        from torch._inductor import config as inductor_config
    except Exception:  # an inductor that fails to import fails the compile below with its own reason
        return contextlib.nullcontext()
    if not hasattr(inductor_config, "compile_threads"):
        return contextlib.nullcontext()
    return inductor_config.patch(compile_threads=1)


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


def check_kernel_output(entry: dict[str, Any], got: torch.Tensor, want: torch.Tensor) -> float:
    """A kernel's output against its reference: bit for bit where the tolerance is zero (NaNs only
    as NaN for the decoder, whose NaN payload is free), else within rtol/atol. Returns the excess."""
    got = got.cpu()
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(float("inf"), 0.0, f"{entry['name']}: shape {tuple(got.shape)} vs {tuple(want.shape)}:")
    if entry["reference"] == "fp8_e4m3_decode":
        nan = torch.isnan(want.float())
        if not torch.equal(torch.isnan(got.float()), nan) or not torch.equal(
            got[~nan].view(torch.int16), want[~nan].view(torch.int16)
        ):
            raise Mismatch(1.0, 0.0, f"{entry['name']}: decoded codes differ:")
        return 0.0
    tol = entry["tolerance"]
    if tol["rtol"] == 0 and tol["atol"] == 0:
        return _check_bits(got, want)
    err = (got.double() - want.double()).abs() - tol["rtol"] * want.double().abs()
    excess = float(err.max().item())
    if not excess <= tol["atol"]:
        raise Mismatch(excess, tol["atol"], f"{entry['name']}: error past tolerance")
    return max(excess, 0.0)


def metal_kernels(d: Device, kernels: list[dict[str, Any]]) -> Outcome:
    worst = 0.0
    skipped = []
    for entry in kernels:
        grid = check_grid(entry)
        try:
            src, dst = run_kernel(entry, d, grid)
        except Exception as exc:
            # A kernel that needs a newer Metal than this Mac's (bfloat simdgroup matrices) is
            # left out with its reason; any other kernel failing fails the feature.
            if entry.get("optional") and not isinstance(exc, Unsupported):
                skipped.append(f"{entry['name']} ({entry['optional']}): {type(exc).__name__}")
                continue
            raise
        worst = max(worst, check_kernel_output(entry, dst, reference(entry, src, grid)))
    return worst, ("not compiled here: " + "; ".join(skipped)) if skipped else ""


FEATURES: dict[str, Callable[..., Outcome]] = {
    "fp8_cast": fp8_cast,
    "fp8_copy": fp8_copy,
    "fp8_cat": fp8_cat,
    "fp8_constant_pad": fp8_pad,
    "fp8_embedding": fp8_embedding,
    "fp8_index": fp8_index,
    "fp8_eq_ne": fp8_eq_ne,
    "fp8_eye": fp8_eye,
    "scaled_mm_fp8": scaled_mm_fp8,
    "scaled_mm_fp8_rowwise": scaled_mm_fp8_rowwise,
    "scaled_mm_fp8_decode": scaled_mm_fp8_decode,
    "grouped_mm_bf16": grouped_mm_bf16,
    "grouped_mm_fp16": grouped_mm_fp16,
    "grouped_mm_fp32": grouped_mm_fp32,
    "grouped_mm_uneven": grouped_mm_uneven,
    "constant_pad_bf16_5d": constant_pad,
    "constant_pad_bf16_5d_64k": constant_pad_bf16_5d_64k,
    "fp8_constant_pad_5d_64k": fp8_constant_pad_5d_64k,
    "int_mm": int_mm,
    "compile_small_model": compile_small_model,
    "metal_kernels": metal_kernels,
}


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def run_feature(name: str, device: Device, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """A feature that matched its reference but ran an op on the CPU is `fallback`, never `pass`: the device
    lacks the kernel the feature is about."""
    fn = FEATURES[name]
    try:
        with FallbackWatch() as watch:
            outcome = fn(device, kernels) if name == "metal_kernels" else fn(device)
    except Mismatch as exc:
        return {"status": "fail", "error": exc.error, "message": str(exc)}
    except Exception as exc:
        if is_unsupported_error(exc):
            return {"status": "unsupported", "message": _short(exc), **answer_fields(exc)}
        return {"status": "fail", "error": None, "message": _short(exc)}
    error, note = outcome if isinstance(outcome, tuple) else (outcome, "")
    if watch.ops:
        cpu = f"ran on the CPU (no MPS kernel): {', '.join(watch.ops)}"
        return {"status": "fallback", "error": error, "message": f"{cpu}; {note}" if note else cpu, "ops": watch.ops}
    return {"status": "pass", "error": error, "message": note}
