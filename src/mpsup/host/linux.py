"""What a Linux machine says of its CPU's state in /proc and /sys: pure parsers of each file's text, and bounded
reads of whichever files exist (a VM often has no cpufreq or thermal zones: those are not known there).

- /proc/loadavg: the 1-minute load, and the entities runnable right now (the fourth field, `2/345`).
- /proc/pressure/cpu and /proc/pressure/memory (PSI, Linux 4.20+): `some ... total=` is the microseconds in which
  at least one task waited for a CPU (or for memory); its growth over a visit, divided by the visit's time, is the
  share of the visit something waited: a second busy process shows there at once, where the load average lags.
- /proc/stat: the `steal` column, time the hypervisor gave this VM's CPUs to another guest.
- /proc/meminfo: swap in use (SwapTotal - SwapFree).
- /sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq: each CPU's clock (kHz); /sys/class/thermal/
  thermal_zone*/temp: each zone's temperature (millidegrees C).
"""

from __future__ import annotations

import os
from pathlib import Path
from statistics import median
from typing import Any

from mpsup.host.parsers import bounded_int

MAX_FILE_BYTES = 16_384  # /proc/meminfo is ~1.5 KB, /proc/stat's first line far less; never read a file whole
MAX_CPUS = 512  # cpufreq files read per reading: beyond this the median no longer moves
MAX_ZONES = 64


def read_small(path: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    """At most `limit` bytes of a /proc or /sys file, or None where it is absent or unreadable."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(limit).decode("ascii", errors="replace")
    except OSError:
        return None


def parse_loadavg(text: str) -> tuple[float | None, int | None]:
    """`0.52 0.58 0.59 2/345 12345` -> (0.52, 2)."""
    words = text.split()
    load = None
    if words:
        try:
            value = float(words[0])
            load = value if 0 <= value < 1e6 else None
        except ValueError:
            load = None
    runnable = bounded_int(words[3].split("/")[0]) if len(words) > 3 and "/" in words[3] else None
    return load, runnable


def parse_psi_some(text: str) -> tuple[float | None, int | None]:
    """`some avg10=0.76 avg60=6.97 avg300=5.99 total=29739419` -> (0.76, 29739419): the share of the last 10 s in
    which a task waited (percent), and the microseconds it has waited since boot."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "some":
            fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            try:
                avg10 = float(fields.get("avg10", ""))
            except ValueError:
                avg10 = None
            return (avg10 if avg10 is not None and 0 <= avg10 <= 100 else None), bounded_int(fields.get("total", ""))
    return None, None


def parse_swap_used(text: str) -> int | None:
    """/proc/meminfo's SwapTotal - SwapFree, in bytes."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("SwapTotal", "SwapFree"):
            words = rest.split()
            value = bounded_int(words[0]) if words else None
            if value is not None:
                kb[name] = value
    if "SwapTotal" not in kb or "SwapFree" not in kb:
        return None
    return max(0, kb["SwapTotal"] - kb["SwapFree"]) * 1024


def parse_steal_ticks(text: str) -> int | None:
    """/proc/stat's first line: `cpu user nice system idle iowait irq softirq steal ...` -> steal (clock ticks)."""
    first = text.splitlines()[0].split() if text.strip() else []
    if len(first) < 9 or first[0] != "cpu":
        return None
    return bounded_int(first[8])


def parse_number(text: str | None) -> int | None:
    """A /sys file holding one integer (a temperature may be negative)."""
    if text is None:
        return None
    word = text.strip()
    sign = -1 if word.startswith("-") else 1
    value = bounded_int(word.lstrip("-"))
    return None if value is None else sign * value


class LinuxReader:
    """Reads the files above under `root` (a fake tree in tests). Each key is None where its file is absent."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self._cpufreq = sorted(root.glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))[:MAX_CPUS]
        self._zones = sorted(root.glob("sys/class/thermal/thermal_zone[0-9]*/temp"))[:MAX_ZONES]
        try:
            self._tick = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError, AttributeError):
            self._tick = 100.0

    def absent(self) -> dict[str, str]:
        """What this machine does not show, and why: said by doctor and on the bench screen."""
        probe = self.read()
        why = {
            "cpu_mhz": "no cpufreq in /sys, as in most VMs",
            "cpu_temp_c": "no thermal zones in /sys, as in most VMs",
            "cpu_pressure_us": "no /proc/pressure/cpu (PSI needs Linux 4.20 or later)",
            "memory_pressure_us": "no /proc/pressure/memory (PSI needs Linux 4.20 or later)",
            "swap_used_bytes": "no swap figures in /proc/meminfo",
            "load1": "no /proc/loadavg",
            "cpu_steal_s": "no steal column in /proc/stat",
        }
        return {k: v for k, v in why.items() if probe.get(k) is None}

    def read(self) -> dict[str, Any]:
        root = self.root
        load, runnable = parse_loadavg(read_small(root / "proc/loadavg") or "")
        khz = [parse_number(read_small(p, 64)) for p in self._cpufreq]
        mhz = [v / 1000 for v in khz if v is not None and v > 0]
        millidegrees = [parse_number(read_small(p, 64)) for p in self._zones]
        # Only plausible temperatures: a zone reading -273 or 1000 C is a sensor that is not there.
        temps = [v / 1000 for v in millidegrees if v is not None and -40_000 < v < 150_000]
        cpu_avg10, cpu_total = parse_psi_some(read_small(root / "proc/pressure/cpu") or "")
        _, mem_total = parse_psi_some(read_small(root / "proc/pressure/memory") or "")
        stat = read_small(root / "proc/stat", 512)
        steal = parse_steal_ticks(stat) if stat else None
        meminfo = read_small(root / "proc/meminfo")
        return {
            "load1": load,
            "runnable": runnable,
            "cpu_pressure_avg10": cpu_avg10,
            "cpu_pressure_us": cpu_total,
            "memory_pressure_us": mem_total,
            "cpu_steal_s": None if steal is None else round(steal / self._tick, 2),
            "swap_used_bytes": parse_swap_used(meminfo) if meminfo else None,
            "cpu_mhz": round(median(mhz)) if mhz else None,
            "cpu_temp_c": round(max(temps), 1) if temps else None,
        }
