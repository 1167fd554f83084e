"""The device seam: everything that differs between mps, cuda and cpu lives here."""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
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


CLEAR_REFS = "/proc/self/clear_refs"
PROC_STATUS = "/proc/self/status"


def _proc_status() -> dict[str, int]:
    """VmRSS and VmHWM (the kernel's high-water RSS) in bytes; empty where /proc has no such file."""
    out: dict[str, int] = {}
    try:
        with open(PROC_STATUS) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _reset_rss_peak() -> bool:
    """Set the process's VmHWM back to its RSS now (Linux 4.0+); False where that is not possible (macOS,
    an older kernel, a /proc that refuses the write)."""
    try:
        with open(CLEAR_REFS, "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; musl and macOS have none
    except (OSError, AttributeError):
        return None


def _return_free_heap() -> None:
    """Give the C heap's free pages back to the kernel. glibc keeps freed blocks below its (adaptive, up
    to 32 MiB) mmap threshold in the process, and the next workload would reuse them without its RSS
    growing: its figure would read low by what the one before left behind."""
    trim = _malloc_trim() if sys.platform.startswith("linux") else None
    if trim is not None:
        trim(0)


def _torch_release() -> tuple[int, int]:
    """(major, minor) of this torch; pre-releases count as their release (2.15.0rc1 -> (2, 15))."""
    parts = str(torch.__version__).split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


MAX_HEADER_CHARS = 200_000


def _mps_event_header() -> str | None:
    """This build's own MPSEvent.h, shipped in its wheel; None where it is not."""
    path = Path(torch.__file__).parent / "include" / "ATen" / "mps" / "MPSEvent.h"
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return fh.read(MAX_HEADER_CHARS)
    except OSError:
        return None


def event_timing_in_header(text: str) -> str | None:
    """What MPSEvent.h says an event times; None where it says neither or both."""
    gpu, cpu = "GPU completion time" in text, "CLOCK_MONOTONIC_RAW" in text
    return None if gpu == cpu else "gpu" if gpu else "cpu-callback"


def event_timing(kind: str) -> str | None:
    """What a device event's elapsed time measures, so device samples are only ever compared
    between builds that time the same thing. MPS events up to 2.14 read a CPU clock in a
    completion callback (host-side latency included); 2.15 takes the command buffer's GPU end
    time. The headers of the real wheels show the change (MPSEvent.h: m_completion_time went
    from a CLOCK_MONOTONIC_RAW uint64 to the command buffer's double GPU time), so this build's
    own header decides; without it the version does, except for a 2.15 nightly, which may
    predate the change (None: unknown, never compared)."""
    if kind == "cuda":
        return "gpu"
    if kind != "mps":
        return None
    header = _mps_event_header()
    told = event_timing_in_header(header) if header else None
    if told:
        return told
    release = _torch_release()
    if release < (2, 15):
        return "cpu-callback"
    if release == (2, 15) and "dev" in str(torch.__version__):
        return None
    return "gpu"


def _accelerator_peak_api() -> tuple[Any, Any] | None:
    """torch.accelerator's (reset_peak_memory_stats, memory_stats), where this torch has them."""
    acc = getattr(torch, "accelerator", None)
    reset = getattr(acc, "reset_peak_memory_stats", None)
    stats = getattr(acc, "memory_stats", None)
    return (reset, stats) if reset is not None and stats is not None else None


def _mps_call(name: str) -> int | None:
    fn = getattr(torch.mps, name, None)
    if fn is None:
        return None
    try:
        return int(fn())
    except Exception:
        return None


# The MPS allocator's rules, as torch's own headers state them (ATen/mps/MPSAllocator.h, the same in the 2.6.0
# and 2.15.0 macOS wheels): the high watermark ratio is a hard limit on what the allocator hands out, as a
# multiple of Metal's recommendedMaxWorkingSetSize ("typically 75% of the total system memory"); 0 disables
# it, and torch refuses a ratio outside 0 to 2. The low watermark (1.4 on unified memory) is a soft limit
# where the allocator starts collecting. MPSGraph's implicit allocations count under neither.
MPS_HIGH_WATERMARK_VAR = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
MPS_LOW_WATERMARK_VAR = "PYTORCH_MPS_LOW_WATERMARK_RATIO"
MPS_DEFAULT_HIGH_WATERMARK = 1.7
MPS_HIGH_WATERMARK_UPPER = 2.0
MPS_DEFAULT_LOW_WATERMARK = 1.4
# A torch without torch.mps.recommended_max_memory: a third below the usual 75% of RAM, since nothing says
# what this Mac's GPU may take.
MPS_UNKNOWN_SHARE_OF_RAM = 0.5


@dataclass(frozen=True)
class MpsLimits:
    """What the MPS allocator allows this process, and what a workload may safely take of it."""

    recommended: int | None  # torch.mps.recommended_max_memory(): Metal's recommended working set
    high_ratio: float | None  # the hard limit's ratio; None where the variable is one torch refuses
    hard_limit: int | None  # the allocator's cap in bytes; None: no cap (ratio 0) or not known
    safe: int | None  # what the memory guard and depth fitting may plan for
    note: str = ""  # one line, where the bound is not the recommended size as is


def _ratio(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return -1.0
    return value if value == value else -1.0  # NaN is no ratio


def mps_limits(recommended: int | None, environ: Mapping[str, str], physical: int | None) -> MpsLimits:
    """The allocator's limits from the header's rules. The safe figure is the recommended working set, or the
    hard limit where the watermark ratio sets it lower (a ratio under 1: the allocator fails first); never
    the 1.7x hard limit itself, since implicit MPSGraph allocations come on top of it, uncapped."""
    raw = environ.get(MPS_HIGH_WATERMARK_VAR)
    ratio = _ratio(raw)
    gib = 2**30
    if ratio is not None and not 0.0 <= ratio <= MPS_HIGH_WATERMARK_UPPER:
        base = recommended or (int(physical * MPS_UNKNOWN_SHARE_OF_RAM) if physical else None)
        return MpsLimits(
            recommended,
            None,
            None,
            base,
            f"{MPS_HIGH_WATERMARK_VAR}={raw!r} is not a ratio torch accepts (0 to 2): its allocator will refuse to "
            "start",
        )
    high = MPS_DEFAULT_HIGH_WATERMARK if ratio is None else ratio
    if recommended is None:
        safe = int(physical * MPS_UNKNOWN_SHARE_OF_RAM) if physical else None
        shown = f" ({safe / gib:.1f} GiB)" if safe else ""
        return MpsLimits(
            None,
            high,
            None,
            safe,
            f"this torch has no torch.mps.recommended_max_memory: memory bounded at half the RAM{shown}",
        )
    hard = int(high * recommended) if high > 0 else None
    safe = min(recommended, hard) if hard is not None else recommended
    note = ""
    if hard is not None and hard < recommended:
        note = f"{MPS_HIGH_WATERMARK_VAR}={raw}: the allocator stops at {hard / gib:.1f} GiB, below the recommended"
    elif hard is None:
        note = f"{MPS_HIGH_WATERMARK_VAR}=0: no allocator limit; bounded at the recommended {recommended / gib:.1f} GiB"
    return MpsLimits(recommended, high, hard, safe, note)


def _physical_ram() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class Device:
    kind: str  # "mps", "cuda", "cpu"
    # MPS memory: the allocator's own peak where torch keeps one (2.13+), and the driver's memory
    # read after every timed block. Driver memory includes what MPSGraph allocates outside the
    # allocator (the Wan2.2 VAE pad case), but sampled at block ends it is a maximum seen, not a peak.
    _allocator_peak: bool = field(default=False, repr=False)
    _driver_max: int | None = field(default=None, repr=False)
    _driver_reads: int = field(default=0, repr=False)
    # CPU memory: RSS before the workload's setup, where the kernel's peak RSS was reset for this
    # workload (Linux); None means no per-workload figure is possible, so none is written.
    _rss_at_setup: int | None = field(default=None, repr=False)

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
            return self.mps_limits().safe
        return _available_ram()

    def mps_limits(self) -> MpsLimits:
        recommended = _mps_call("recommended_max_memory")
        return mps_limits(recommended, os.environ, _physical_ram())

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
        """Start a workload's memory figures afresh."""
        self._allocator_peak = False
        self._driver_max = None
        self._driver_reads = 0
        self._rss_at_setup = None
        if self.kind == "cpu":
            before = _proc_status().get("VmRSS")
            if before is not None and _reset_rss_peak():
                self._rss_at_setup = before
        elif self.kind == "cuda":
            torch.cuda.reset_peak_memory_stats()
        elif self.kind == "mps":
            api = _accelerator_peak_api()
            if api is not None:
                try:
                    api[0]()
                    self._allocator_peak = True
                except Exception:
                    # Before 2.13 the MPS allocator keeps no statistics behind this API.
                    self._allocator_peak = False
            self.after_block()

    def already_resident(self, nbytes: int) -> None:
        """A workload's own memory that was resident before its setup (a model kept from the phase before): on
        the CPU its peak is a resident-size difference, which would leave the model out. An allocator's peak
        (CUDA, MPS) starts from what is allocated, the model included."""
        if self.kind == "cpu" and self._rss_at_setup is not None:
            self._rss_at_setup = max(0, self._rss_at_setup - nbytes)

    def after_block(self) -> None:
        """Called after every timed block, outside the timed span."""
        if self.kind != "mps":
            return
        now = _mps_call("driver_allocated_memory")
        if now is not None:
            self._driver_max = now if self._driver_max is None else max(self._driver_max, now)
            self._driver_reads += 1

    def _allocator_peak_bytes(self) -> int | None:
        api = _accelerator_peak_api()
        if not self._allocator_peak or api is None:
            return None
        try:
            peak = api[1]().get("allocated_bytes.all.peak")
        except Exception:
            return None
        # A missing or zero peak means the allocator keeps no statistics here: no workload allocates nothing.
        return int(peak) if peak else None

    def memory(self) -> dict[str, Any]:
        """This workload's memory figures. A key with "peak" in its name is a true high-water mark."""
        if self.kind == "cuda":
            return {
                "peak_allocated": int(torch.cuda.max_memory_allocated()),
                "current_allocated": int(torch.cuda.memory_allocated()),
                "peak_source": "torch.cuda.max_memory_allocated",
                "peak_kind": "allocator",
            }
        if self.kind == "mps":
            self.after_block()
            out: dict[str, Any] = {
                "current_allocated": _mps_call("current_allocated_memory"),
                "driver_allocated": _mps_call("driver_allocated_memory"),
            }
            if self._driver_max is not None:
                # The driver's figure holds what MPSGraph allocates outside the allocator; read at setup and
                # after every timed block, it is the largest seen, not a peak.
                out["driver_allocated_max"] = self._driver_max
                out["driver_reads"] = self._driver_reads
                out["driver_kind"] = "driver maximum over setup and timed-block ends"
            peak = self._allocator_peak_bytes()
            if peak is not None:
                out["peak_allocated"] = peak
                out["peak_source"] = "torch.accelerator.max_memory_allocated"
                out["peak_kind"] = "allocator"  # blocks in the MPS allocator's pools; implicit ones not counted
            return out
        return self._cpu_memory()

    def _cpu_memory(self) -> dict[str, Any]:
        # peak_rss stays for older readers: the process's high-water RSS (on Linux since the last reset).
        out: dict[str, Any] = {"peak_rss": _rss_bytes()}
        hwm = _proc_status().get("VmHWM")
        if self._rss_at_setup is not None and hwm is not None:
            out["workload_peak"] = max(0, hwm - self._rss_at_setup)
            out["peak_source"] = "VmHWM reset at setup (clear_refs) minus VmRSS before setup"
        return out

    def release(self) -> None:
        if self.kind == "cuda":
            torch.cuda.empty_cache()
        elif self.kind == "mps":
            torch.mps.empty_cache()
        else:
            _return_free_heap()

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
            "event_timing": event_timing(self.kind),
            **self.facts_memory(),
        }

    def facts_memory(self) -> dict[str, Any]:
        """MPS: the allocator's hard limit and ratio, and the one line saying why the bound is not the
        recommended size as is (a watermark below it, no limit, or a torch without the API)."""
        if self.kind != "mps":
            return {}
        limits = self.mps_limits()
        out: dict[str, Any] = {"mps_high_watermark_ratio": limits.high_ratio, "mps_hard_limit": limits.hard_limit}
        if limits.note:
            out["memory_limit_note"] = limits.note
        return out
