"""NVIDIA: the board's energy counter through `nvidia-ml-py` (an optional extra), in mJ since the driver loaded.

`nvmlDeviceGetTotalEnergyConsumption` (Volta and later) counts the whole board: GPU, its memory and the
rest of the card; not the host CPU or its memory. It moves about every 100 ms, so a window must span many of
its steps. It is not per MIG instance: under MIG there is no meter."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from mpsup.energy.meter import Choice, CounterMeter, MeterInfo

INSTALL = "pip install 'mpsup[energy-nvidia]'"


def nvml_index(environ: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    """The NVML index of the GPU the workers get as cuda:0: the first of CUDA_VISIBLE_DEVICES where it is a
    number, 0 where unset; None where it names a UUID or MIG instance (NVML's order need not be CUDA's)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return 0
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else None


class NvmlMeter(CounterMeter):
    _source = "NVML"

    def __init__(self, nvml: Any, handle: Any, name: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self._nvml = nvml
        self._handle = handle
        self._clock = clock
        self._info = MeterInfo(
            name="nvml",
            reads=f"NVML total energy of {name}: the board's own counter",
            total="the whole board (GPU, its memory, the card's other rails)",
            parts=("gpu",),
            total_parts=("gpu",),
            stamped=("gpu",),
            main="gpu",
            notes=("the host CPU and its memory are left out",),
        )

    def _joules(self) -> dict[str, float]:
        return {"gpu": float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)) / 1000.0}

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # the driver may be gone already; nothing is left to release then
            return None


def open_nvml(environ: dict[str, str] | os._Environ[str] = os.environ, nvml: Any = None) -> Choice:
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return Choice(None, f"nvidia-ml-py is not installed ({INSTALL})")
        nvml = pynvml
    index = nvml_index(environ)
    if index is None:
        return Choice(None, "CUDA_VISIBLE_DEVICES names the GPU by UUID or MIG instance: which NVML device is unknown")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return Choice(None, f"NVML could not start ({str(exc)[:200]})")
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except Exception:  # a card without MIG says NotSupported: not under MIG
            current = 0
        if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            raise _NoMeter("MIG is on: the energy counter is the whole card's, not one instance's")
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception as exc:
            raise _NoMeter(f"this GPU has no total-energy counter ({str(exc)[:120]}; Volta or later has)") from exc
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return Choice(NvmlMeter(nvml, handle, f"GPU {index} ({name})"))
    except _NoMeter as exc:
        _shutdown(nvml)
        return Choice(None, str(exc))
    except Exception as exc:
        _shutdown(nvml)
        return Choice(None, f"NVML could not read GPU {index} ({str(exc)[:200]})")


class _NoMeter(Exception):
    pass


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down a half-started NVML can fail; there is nothing to release then
        return None
