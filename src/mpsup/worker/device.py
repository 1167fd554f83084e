"""The device seam: everything that differs between mps, cuda and cpu lives here."""

from __future__ import annotations

import os
import platform
import resource
import sys
from dataclasses import dataclass
from typing import Any

import torch


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _available_ram() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass
class Device:
    kind: str  # "mps", "cuda", "cpu"

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind)

    def available(self) -> tuple[bool, str]:
        if self.kind == "cpu":
            return True, ""
        if self.kind == "cuda":
            return (True, "") if torch.cuda.is_available() else (False, "torch.cuda.is_available() is False")
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_built():
            return False, "this torch has no MPS support"
        if not mps.is_available():
            return False, "MPS is built but not available (macOS too old, or not Apple silicon)"
        return True, ""

    def synchronize(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize()
        elif self.kind == "mps":
            torch.mps.synchronize()

    def name(self) -> str:
        if self.kind == "cuda":
            return torch.cuda.get_device_name()
        if self.kind == "mps":
            get_name = getattr(torch.backends.mps, "get_name", None)
            if get_name is not None:
                try:
                    return str(get_name())
                except Exception:
                    pass
            return "Apple GPU (MPS)"
        return _cpu_name()

    def memory_limit(self) -> int | None:
        """Bytes a workload may take at most before it risks the machine."""
        if self.kind == "cuda":
            free, _total = torch.cuda.mem_get_info()
            return int(free)
        if self.kind == "mps":
            fn = getattr(torch.mps, "recommended_max_memory", None)
            return int(fn()) if fn is not None else None
        return _available_ram()

    def event_pair(self) -> tuple[Any, Any] | None:
        """Device timing events, where the device has them."""
        try:
            if self.kind == "cuda":
                return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if self.kind == "mps":
                from torch.mps.event import Event

                return Event(enable_timing=True), Event(enable_timing=True)
        except Exception:
            return None
        return None

    def reset_peak(self) -> None:
        if self.kind == "cuda":
            torch.cuda.reset_peak_memory_stats()

    def memory(self) -> dict[str, int | None]:
        if self.kind == "cuda":
            return {"peak_allocated": int(torch.cuda.max_memory_allocated()),
                    "current_allocated": int(torch.cuda.memory_allocated())}
        if self.kind == "mps":
            out: dict[str, int | None] = {}
            for key, fn_name in (("current_allocated", "current_allocated_memory"),
                                 ("driver_allocated", "driver_allocated_memory")):
                fn = getattr(torch.mps, fn_name, None)
                out[key] = int(fn()) if fn is not None else None
            return out
        return {"peak_rss": _rss_bytes()}

    def release(self) -> None:
        if self.kind == "cuda":
            torch.cuda.empty_cache()
        elif self.kind == "mps":
            torch.mps.empty_cache()

    def facts(self) -> dict[str, Any]:
        return {
            "device": self.kind,
            "device_name": self.name(),
            "memory_limit": self.memory_limit(),
            "torch_version": str(torch.__version__),
            "threads": torch.get_num_threads(),
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "has_events": self.event_pair() is not None,
        }
