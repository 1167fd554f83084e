"""The machine's state as a run reads it at each visit: the cheap readers this machine and device have, composed.

A reading is one flat document of FIELDS' keys, each None where not known. What each reader reads, and what
this machine does not show (and why), is said beside it: doctor prints both, the bench screen says what is
missing, the run record keeps them. No reader here starts a process: per-visit reads must cost microseconds
to a millisecond, not a subprocess's tens (docs/explanation/methodology.md has the measured cost)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.host import darwin
from mpsup.host.linux import LinuxReader
from mpsup.host.nvml_state import NvmlState, open_nvml_state
from mpsup.host.parsers import PRESSURE_LEVELS, thermal_pressure_name, thermal_state_name


@dataclass(frozen=True)
class Field:
    label: str  # as a sentence names it: "thermal pressure"
    # How it can move: "level" (words in ORDER, worse later), "flag", "cumulative" (a counter: its growth over a
    # visit is what it says), "figure" (a number read as it is), "set" (names, such as NVML's reasons)
    kind: str
    unit: str = ""


FIELDS: dict[str, Field] = {
    "thermal_pressure": Field("thermal pressure", "level"),
    "thermal_state": Field("thermal state (NSProcessInfo)", "level"),
    "low_power_mode": Field("Low Power Mode", "flag"),
    "memory_pressure": Field("memory pressure", "level"),
    "swap_used_bytes": Field("swap in use", "figure", "bytes"),
    "load1": Field("load average (1 min)", "figure"),
    "runnable": Field("runnable tasks", "figure"),
    "cpu_pressure_avg10": Field("CPU pressure (last 10 s)", "figure", "%"),
    "cpu_pressure_us": Field("CPU pressure", "cumulative", "us"),
    "memory_pressure_us": Field("memory stall", "cumulative", "us"),
    "cpu_steal_s": Field("CPU time stolen by the hypervisor", "cumulative", "s"),
    "cpu_mhz": Field("CPU clock", "figure", "MHz"),
    "cpu_temp_c": Field("CPU temperature", "figure", "C"),
    "gpu_events": Field("GPU clock-event reasons", "set"),
    "gpu_sm_mhz": Field("GPU SM clock", "figure", "MHz"),
    "gpu_temp_c": Field("GPU temperature", "figure", "C"),
    "gpu_power_w": Field("GPU power", "figure", "W"),
    "gpu_util": Field("GPU busy", "figure", "%"),
    "gpu_processes": Field("processes on the GPU", "figure"),
}

# Each level's words from best to worst: a change toward the end "rose".
ORDER: dict[str, tuple[str, ...]] = {
    "thermal_pressure": ("nominal", "moderate", "heavy", "trapping", "sleeping"),
    "thermal_state": ("nominal", "fair", "serious", "critical"),
    "memory_pressure": tuple(PRESSURE_LEVELS[k] for k in sorted(PRESSURE_LEVELS)),
}


class Source:
    """One reader: `keys` it fills, `what` it reads in words, `read()`, `close()`."""

    what: str = ""
    keys: tuple[str, ...] = ()

    def read(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        return None


class MacSource(Source):
    keys = ("thermal_pressure", "thermal_state", "low_power_mode", "memory_pressure", "swap_used_bytes")

    def __init__(self, libsystem: Any, objc: Any) -> None:
        self._lib = libsystem
        self._objc = objc
        self._thermal = darwin.ThermalPressure(libsystem) if libsystem is not None else None
        parts = []
        if self._thermal is not None and self._thermal.registered:
            parts.append("thermal pressure (notify)")
        if objc is not None:
            parts.append("NSProcessInfo thermal state and Low Power Mode")
        if libsystem is not None:
            parts.append("memory pressure and swap (sysctl)")
        self.what = ", ".join(parts)

    @property
    def thermal_registered(self) -> bool:
        return self._thermal is not None and self._thermal.registered

    def read(self) -> dict[str, Any]:
        info = darwin.process_info(self._objc) if self._objc is not None else {}
        level = darwin.sysctl_int(self._lib, "kern.memorystatus_vm_pressure_level") if self._lib is not None else None
        return {
            "thermal_pressure": thermal_pressure_name(self._thermal.read()) if self._thermal is not None else None,
            "thermal_state": thermal_state_name(info.get("thermal_state")),
            "low_power_mode": info.get("low_power_mode"),
            "memory_pressure": None if level is None else PRESSURE_LEVELS.get(level, f"level {level}"),
            "swap_used_bytes": darwin.swap_used_bytes(self._lib) if self._lib is not None else None,
        }

    def close(self) -> None:
        if self._thermal is not None:
            self._thermal.close()


class LinuxSource(Source):
    keys = (
        "load1",
        "runnable",
        "cpu_pressure_avg10",
        "cpu_pressure_us",
        "memory_pressure_us",
        "cpu_steal_s",
        "swap_used_bytes",
        "cpu_mhz",
        "cpu_temp_c",
    )
    what = "/proc (load, PSI pressure, steal, swap) and /sys (CPU clock, thermal zones)"

    def __init__(self, reader: LinuxReader) -> None:
        self._reader = reader

    def read(self) -> dict[str, Any]:
        return self._reader.read()


class NvmlSource(Source):
    keys = ("gpu_events", "gpu_sm_mhz", "gpu_temp_c", "gpu_power_w", "gpu_util", "gpu_processes")

    def __init__(self, state: NvmlState) -> None:
        self._state = state
        self.what = f"NVML: {state.name}'s clock-event reasons, SM clock, temperature, power, processes"

    def read(self) -> dict[str, Any]:
        return self._state.read()

    def close(self) -> None:
        self._state.close()


@dataclass
class MachineState:
    """The sources a run on one device reads at each visit; `absent` what is not known here, and why."""

    sources: list[Source] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)

    @property
    def reads(self) -> list[str]:
        return [s.what for s in self.sources if s.what]

    def read(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for s in self.sources:
            try:
                got = s.read()
            except Exception:  # a reader that breaks mid-run costs its figures, never the run
                got = {}
            doc.update({k: got.get(k) for k in s.keys})
        return doc

    def close(self) -> None:
        for s in self.sources:
            s.close()

    def describe(self) -> dict[str, Any]:
        """What the record and doctor keep: what is read, and what is not known and why."""
        return {"reads": self.reads, "absent": dict(self.absent)}


def open_state(
    device: str,
    *,
    platform: str = sys.platform,
    libsystem: Callable[[], Any] = darwin.load_libsystem,
    objc: Callable[[], Any] = darwin.load_objc,
    linux_root: Path = Path("/"),
    nvml: Any = None,
    environ: dict[str, str] | os._Environ[str] = os.environ,
) -> MachineState:
    """The readers for a run on `device` here: the Mac's own on macOS, /proc and /sys on Linux, and NVML's for
    a CUDA device. Each library is loaded by the callable given, so tests pass fakes."""
    state = MachineState()
    if platform == "darwin":
        lib, runtime = libsystem(), objc()
        mac = MacSource(lib, runtime)
        if mac.what:
            state.sources.append(mac)
        if lib is None:
            state.absent["thermal pressure, memory pressure, swap"] = "libSystem could not be loaded"
        elif not mac.thermal_registered:
            state.absent["thermal pressure"] = "the notify key could not be registered"
        if runtime is None:
            state.absent["thermal state, Low Power Mode"] = "the ObjC runtime (Foundation) could not be loaded"
    elif platform.startswith("linux"):
        reader = LinuxReader(linux_root)
        state.sources.append(LinuxSource(reader))
        state.absent.update({FIELDS[k].label: why for k, why in reader.absent().items()})
    else:
        state.absent["machine state"] = f"no reader for {platform}"
    if device == "cuda":
        gpu, why = open_nvml_state(environ, nvml)
        if gpu is not None:
            state.sources.append(NvmlSource(gpu))
        else:
            state.absent["GPU state (NVML)"] = why or "not known why"
    return state
