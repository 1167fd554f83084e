"""Bundled Metal kernels on MPS via torch.mps.compile_shader, and their torch references."""

from __future__ import annotations

from typing import Any

import torch

from .device import Device
from .ops import Built, Unsupported

_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "uint8": torch.uint8}


def make_input(spec: dict[str, Any], grid: int, device: str | torch.device = "cpu") -> torch.Tensor:
    dtype = _TORCH_DTYPES[spec["dtype"]]
    if spec["init"] == "all_codes":
        return torch.arange(grid, dtype=torch.int64).remainder(256).to(torch.uint8).to(device)
    gen = torch.Generator().manual_seed(1234)
    return torch.randn(grid, generator=gen, dtype=torch.float32).to(dtype).to(device)


def reference(name: str, src: torch.Tensor) -> torch.Tensor:
    """What each kernel must produce, computed by torch on the CPU."""
    src = src.cpu()
    if name == "copy":
        return src.clone()
    if name == "fma_chain_1024":
        # The kernel's constants as fp32 literals, then exact arithmetic: what remains is the
        # kernel's own rounding, about 1024 half-ulps at worst.
        a = torch.tensor(0.999, dtype=torch.float32).item()
        b = torch.tensor(0.001, dtype=torch.float32).item()
        y = src.to(torch.float64)
        for _ in range(1024):
            y = y * a + b
        return y.to(torch.float32)
    if name == "fp8_e4m3_decode":
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is None:
            raise Unsupported("torch.float8_e4m3fn does not exist in this torch")
        return src.view(fp8).to(torch.bfloat16)
    raise ValueError(f"unknown reference {name!r}")


def compile_library(source: str, device: Device) -> Any:
    if device.kind != "mps":
        raise Unsupported(f"Metal kernels need the mps device (this run is on {device.kind})")
    compile_shader = getattr(torch.mps, "compile_shader", None)
    if compile_shader is None:
        raise Unsupported("torch.mps.compile_shader does not exist in this torch (public since 2.7)")
    return compile_shader(source)


def run_kernel(entry: dict[str, Any], device: Device, grid: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    lib = compile_library(entry["source"], device)
    n = int(grid or entry["grid"])
    src = make_input(entry["inputs"][0], n, device.torch_device)
    dst = torch.empty(n, dtype=_TORCH_DTYPES[entry["output"]["dtype"]], device=device.torch_device)
    getattr(lib, entry["name"])(src, dst, threads=n)
    device.synchronize()
    return src, dst


def build_metal(spec: dict[str, Any], device: Device) -> Built:
    entry = spec["params"]["kernel"]
    lib = compile_library(entry["source"], device)
    n = int(spec["params"].get("grid", entry["grid"]))
    src = make_input(entry["inputs"][0], n, device.torch_device)
    dst = torch.empty(n, dtype=_TORCH_DTYPES[entry["output"]["dtype"]], device=device.torch_device)
    kernel = getattr(lib, entry["name"])
    return Built(
        lambda: kernel(src, dst, threads=n),
        float(entry["bytes_per_thread"]) * n,
        float(entry["flops_per_thread"]) * n or None,
        None,
        (lib, src, dst),
    )
