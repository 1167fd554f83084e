"""Bundled Metal kernels on MPS via torch.mps.compile_shader, and their torch references.

A manifest entry says how to run a kernel: its grid (threads), the buffers' dtypes and sizes
(`per_thread` elements per thread, or a fixed `size`), how threads map to work (`thread_args`;
simdgroup kernels run one 32-thread group per tile, `group_size`), and which torch reference its
output must match. The C++ compatibility harness in the tests reads the same entries."""

from __future__ import annotations

from typing import Any

import torch

from .core import Built, Unsupported
from .device import Device


class NeedsMetal(Unsupported):
    """A Metal kernel asked of a device that is not MPS: says nothing about this torch, only where it runs. The
    worker's answer says so in a field (`needs_metal: true`, see answer_fields), so bench reads no error text."""


# Answers name an error by its class: this one reads as any feature the device lacks (`Unsupported: ...`),
# so a record's reasons keep one wording and the field alone tells the two apart.
NeedsMetal.__name__ = Unsupported.__name__


def answer_fields(exc: BaseException) -> dict[str, bool]:
    """What an error answer (a setup's, a smoke test's) adds for `exc`: `needs_metal` for a NeedsMetal."""
    return {"needs_metal": True} if isinstance(exc, NeedsMetal) else {}


_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "uint8": torch.uint8}


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


def buffer_len(spec: dict[str, Any], grid: int) -> int:
    if "size" in spec:
        return int(spec["size"])
    return max(1, int(grid * float(spec.get("per_thread", 1))))


def check_grid(entry: dict[str, Any]) -> int:
    """The grid a correctness check runs: the whole grid where the reference needs it, else up to 2^16 threads."""
    return int(entry.get("check_grid") or min(int(entry["grid"]), 1 << 16))


def make_input(spec: dict[str, Any], grid: int, device: str | torch.device = "cpu") -> torch.Tensor:
    dtype = _TORCH_DTYPES[spec["dtype"]]
    n = buffer_len(spec, grid)
    init = spec["init"]
    if init == "all_codes":
        return torch.arange(n, dtype=torch.int64).remainder(256).to(torch.uint8).to(device)
    if init == "all_bf16":
        # Every bfloat16 bit pattern once: both zeros, subnormals, infinities, NaNs of both signs.
        codes = torch.arange(n, dtype=torch.int64).remainder(1 << 16)
        return (
            (codes - (codes >= (1 << 15)).to(torch.int64) * (1 << 16)).to(torch.int16).view(torch.bfloat16).to(device)
        )
    gen = torch.Generator().manual_seed(1234)
    if init == "contraction_pairs":
        # Per 8x8 tile pair: A with entries in [-1/16, 1/16] (rows sum to at most 1/2), then B in [-1, 1].
        groups = max(1, n // 128)
        a = (torch.rand(groups, 64, generator=gen) * 2 - 1) / 16
        b = torch.rand(groups, 64, generator=gen) * 2 - 1
        return torch.cat([a, b], dim=1).reshape(-1).to(dtype).to(device)
    return torch.randn(n, generator=gen, dtype=torch.float32).to(dtype).to(device)


def _matrix_chain(src: torch.Tensor) -> torch.Tensor:
    """Each chain X <- A X + B contracts by at least 1/2 a step (A's rows sum to at most 1/2), so
    after 256 steps every start has reached (I - A)^-1 B to far below any float's precision."""
    tiles = src.to(torch.float64).reshape(-1, 2, 8, 8)
    a, b = tiles[:, 0], tiles[:, 1]
    fixed = torch.linalg.solve(torch.eye(8, dtype=torch.float64) - a, b)
    return fixed.unsqueeze(1).expand(-1, 4, 8, 8).reshape(-1).to(src.dtype)


def reference(entry: dict[str, Any], src: torch.Tensor, grid: int) -> torch.Tensor:
    """What each kernel must produce over `grid` threads, computed by torch on the CPU."""
    name = entry["reference"]
    src = src.cpu()
    if name == "copy":
        return src.clone()
    if name == "sum_4_float4":
        # The kernel's own order: acc = v0; acc += v1, v2, v3 (fp32), then (x + y) + (z + w).
        v = src.reshape(4, -1, 4)
        acc = v[0].clone()
        for j in range(1, 4):
            acc = acc + v[j]
        return (acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3])
    if name == "fill_first":
        return src[:1].expand(buffer_len(entry["output"], grid)).clone()
    if name == "fma_chain_1024":
        # The kernel's constants as fp32 literals, then exact arithmetic: what remains is the
        # kernel's own rounding, about 1024 half-ulps at worst.
        a = torch.tensor(0.999, dtype=torch.float32).item()
        b = torch.tensor(0.001, dtype=torch.float32).item()
        y = src.to(torch.float64)
        for _ in range(1024):
            y = y * a + b
        return y.to(torch.float32)
    if name == "matrix_chain_256":
        return _matrix_chain(src)
    if name in ("fp8_e4m3_decode", "fp8_e4m3_encode"):
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is None:
            raise Unsupported("torch.float8_e4m3fn does not exist in this torch")
        return src.view(fp8).to(torch.bfloat16) if name == "fp8_e4m3_decode" else src.to(fp8).view(torch.uint8)
    if name == "constant_pad":
        params = entry["params"]
        x = src.reshape(params["shape"]).view(torch.int16)  # bit patterns: the pad copies bits
        return torch.nn.functional.pad(x, tuple(params["pad"]), mode="constant", value=0).reshape(-1).view(src.dtype)
    raise ValueError(f"unknown reference {name!r}")


def compile_library(source: str, device: Device) -> Any:
    if device.kind != "mps":
        raise NeedsMetal(f"Metal kernels need the mps device (this run is on {device.kind})")
    compile_shader = getattr(torch.mps, "compile_shader", None)
    if compile_shader is None:
        raise Unsupported("torch.mps.compile_shader does not exist in this torch (public since 2.7)")
    return compile_shader(source)


def _buffers(entry: dict[str, Any], n: int, device: Device) -> tuple[torch.Tensor, torch.Tensor]:
    src = make_input(entry["inputs"][0], n, device.torch_device)
    dst = torch.zeros(
        buffer_len(entry["output"], n), dtype=_TORCH_DTYPES[entry["output"]["dtype"]], device=device.torch_device
    )
    return src, dst


def _launcher(lib: Any, entry: dict[str, Any], src: torch.Tensor, dst: torch.Tensor, n: int) -> Any:
    kernel = getattr(lib, entry["name"])
    group = entry.get("group_size")
    if group:
        return lambda: kernel(src, dst, threads=n, group_size=int(group))
    return lambda: kernel(src, dst, threads=n)


def run_kernel(entry: dict[str, Any], device: Device, grid: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    lib = compile_library(entry["source"], device)
    n = int(grid or entry["grid"])
    src, dst = _buffers(entry, n, device)
    _launcher(lib, entry, src, dst, n)()
    device.synchronize()
    return src, dst


def build_metal(spec: dict[str, Any], device: Device) -> Built:
    entry = spec["params"]["kernel"]
    lib = compile_library(entry["source"], device)
    n = int(spec["params"].get("grid", entry["grid"]))
    src, dst = _buffers(entry, n, device)
    return Built(
        _launcher(lib, entry, src, dst, n),
        float(entry["bytes_per_thread"]) * n,
        float(entry["flops_per_thread"]) * n or None,
        None,
        (lib, src, dst),
    )
