"""An NVIDIA GPU's state through NVML (`nvidia-ml-py`, optional): why its clocks are held back, its SM clock,
temperature, power and the processes on it. Each figure is None where NVML does not give it; without
nvidia-ml-py there is no reader, and why is said."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from mpsup.energy.nvml import INSTALL, nvml_index

# nvml.h's nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*), by the name a reader sees.
CLOCK_EVENT_REASONS = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal slowdown (software)",
    0x40: "thermal slowdown (hardware)",
    0x80: "power brake",
    0x100: "display clocks",
}
# The reasons that mean the card slowed itself: the others are settings or the card at rest.
SLOWDOWN_REASONS = frozenset(
    {"power cap", "hardware slowdown", "thermal slowdown (software)", "thermal slowdown (hardware)", "power brake"}
)
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clock-event mask; an unknown bit is `bit 0x...`, never dropped."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    names += [f"bit {1 << b:#x}" for b in range(64) if unknown & (1 << b)]
    return names


class NvmlState:
    """One GPU's state, read on demand; NVML started once and shut down at `close()`."""

    def __init__(self, nvml: Any, handle: Any, name: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self.name = name

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn)(self._handle, *args)
        except Exception:  # NotSupported, a driver gone, an older pynvml: that figure is not known
            return None

    def read(self) -> dict[str, Any]:
        mask = self._call("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        util = self._call("nvmlDeviceGetUtilizationRates")
        procs = self._call("nvmlDeviceGetComputeRunningProcesses")
        power = self._call("nvmlDeviceGetPowerUsage")
        return {
            "gpu_events": reason_names(mask) if isinstance(mask, int) and mask >= 0 else None,
            "gpu_sm_mhz": _whole(self._call("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)),
            "gpu_temp_c": _whole(self._call("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)),
            "gpu_power_w": round(power / 1000, 1) if _whole(power) is not None else None,
            "gpu_util": _whole(getattr(util, "gpu", None)),
            "gpu_processes": len(procs) if isinstance(procs, list | tuple) else None,
        }

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # the driver may be gone already; nothing is left to release then
            return None


def _whole(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**9 else None


def open_nvml_state(
    environ: dict[str, str] | os._Environ[str] = os.environ, nvml: Any = None
) -> tuple[NvmlState | None, str | None]:
    """The reader of the GPU the workers get as cuda:0, or None and why."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None, f"nvidia-ml-py is not installed ({INSTALL})"
        nvml = pynvml
    index = nvml_index(environ)
    if index is None:
        return None, "CUDA_VISIBLE_DEVICES names the GPU by UUID or MIG instance: which NVML device is unknown"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return None, f"NVML could not start ({str(exc)[:200]})"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
    except Exception as exc:
        with contextlib.suppress(Exception):  # a half-started NVML may refuse to stop; nothing is held then
            nvml.nvmlShutdown()
        return None, f"NVML could not read GPU {index} ({str(exc)[:200]})"
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return NvmlState(nvml, handle, f"GPU {index} ({name[:100]})"), None
