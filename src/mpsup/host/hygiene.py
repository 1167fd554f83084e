"""The benchmark-conditions facts the doctor reads, taken before and after a run: power source and charge, energy
mode, thermal and memory pressure, swap and the OS build (docs/reference/run-record.md, `hygiene`)."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Mapping
from typing import Any

from mpsup.host import darwin, parsers
from mpsup.host import snapshot as snap
from mpsup.syscmd import run_command


def hygiene_from(output: Callable[[str], str | None]) -> dict[str, Any]:
    """The conditions from each command's output (`output(snapshot key)`: stdout, or None where it failed)."""
    facts: dict[str, Any] = {
        "on_battery": None,
        "power_source": None,
        "battery_percent": None,
        "low_power_mode": None,
        "energy_mode": None,
        "thermal_warning": None,
        "swap_total_bytes": None,
        "swap_used_bytes": None,
        "memory_pressure": None,
    }
    if (batt := output(snap.PMSET_BATT)) is not None:
        b = parsers.parse_pmset_batt(batt)
        facts["on_battery"], facts["power_source"], facts["battery_percent"] = b.on_battery, b.source, b.percent
    if (pm := output(snap.PMSET)) is not None:
        settings = parsers.parse_pmset_settings(pm)
        facts["low_power_mode"] = parsers.low_power_mode(settings)
        facts["energy_mode"] = parsers.energy_mode(settings)
    if (therm := output(snap.PMSET_THERM)) is not None:
        # Only where pmset says something (an Intel Mac): Apple silicon's notes cannot show a warning.
        t = parsers.parse_pmset_therm(therm)
        facts["thermal_warning"] = bool(t.thermal_warning or t.performance_warning) if t.known else None
    if (swap_text := output(snap.SWAP)) is not None and (swap := parsers.parse_swapusage(swap_text)) is not None:
        facts["swap_total_bytes"], facts["swap_used_bytes"] = swap.total_bytes, swap.used_bytes
    if (pressure := output(snap.PRESSURE)) is not None:
        facts["memory_pressure"] = parsers.memory_pressure(pressure)
    return facts


def _run(key: str) -> str | None:
    res = run_command(snap.COMMANDS[key][0], timeout=5)
    return res.stdout if res.ok else None


def os_build() -> str | None:
    """macOS's build (kern.osversion: 24D60, which changes where the version does not) or Linux's kernel release."""
    if sys.platform == "darwin":
        lib = darwin.load_libsystem()
        return darwin.sysctl_text(lib, "kern.osversion") if lib is not None else None
    return platform.release() or None


def hygiene_now(state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The conditions now; `state`: a machine-state reading (host/machine_state.py) taken beside them: its thermal
    levels join these, its Low Power Mode and memory pressure stand where it has them (read without a process, from
    the same sources as pmset's and sysctl's), and its swap in use stands where sysctl gave none (Linux)."""
    facts = hygiene_from(_run)
    try:
        facts["loadavg"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        facts["loadavg"] = None
    facts["os_build"] = os_build()
    for key in ("thermal_pressure", "thermal_state", "low_power_mode", "memory_pressure", "swap_used_bytes"):
        if state is not None and state.get(key) is not None and (facts.get(key) is None or key != "swap_used_bytes"):
            facts[key] = state[key]
    return facts


SWAP_GROWTH_BYTES = 256 << 20  # macOS swaps a little in the background; more than this over a run is the run's

# What a change of each condition is called, and the words for its values.
LABELS = {
    "on_battery": "power source",
    "power_source": "power source",
    "low_power_mode": "Low Power Mode",
    "energy_mode": "energy mode",
    "thermal_warning": "pmset's thermal warning",
    "thermal_pressure": "thermal pressure",
    "thermal_state": "thermal state",
    "memory_pressure": "memory pressure",
    "os_build": "OS build",
}
# Compared before and after: power_source says the same as on_battery in words, so only one of them is.
CHANGE_KEYS = ("on_battery", "low_power_mode", "energy_mode", "thermal_warning", "thermal_pressure", "thermal_state",
               "memory_pressure", "os_build")  # fmt: skip


def shown(key: str, value: Any) -> str:
    """A condition's value in words: `battery`, `on`, `heavy`."""
    if key == "on_battery":
        return "battery" if value else "mains"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def conditions_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changes = []
    for key in CHANGE_KEYS:
        if before.get(key) is not None and after.get(key) is not None and before[key] != after[key]:
            changes.append(f"{LABELS[key]} changed from {shown(key, before[key])} to {shown(key, after[key])}")
    used_before, used_after = before.get("swap_used_bytes"), after.get("swap_used_bytes")
    if isinstance(used_before, int) and isinstance(used_after, int) and used_after - used_before > SWAP_GROWTH_BYTES:
        changes.append(f"swap use grew by {(used_after - used_before) / 2**30:.1f} GiB during the run")
    return changes


HEAVY_THERMAL = frozenset({"heavy", "trapping", "sleeping", "serious", "critical"})


def noisy_conditions(h: dict[str, Any]) -> list[str]:
    out = []
    if h.get("on_battery"):
        out.append("on battery")
    if h.get("low_power_mode"):
        out.append("Low Power Mode on")
    if h.get("thermal_warning"):
        out.append("thermal warnings")
    for key in ("thermal_pressure", "thermal_state"):
        if h.get(key) in HEAVY_THERMAL:
            out.append(f"{LABELS[key]} {h[key]}")
    if h.get("memory_pressure") not in (None, "normal"):
        out.append(f"memory pressure {h['memory_pressure']}")
    return out


def start_warnings(h: Mapping[str, Any]) -> list[str]:
    """What is wrong with benchmarking right now, each with its fix: said before a run starts."""
    out = []
    if h.get("on_battery"):
        percent = f" ({h['battery_percent']}%)" if isinstance(h.get("battery_percent"), int) else ""
        out.append(
            f"on battery{percent}: macOS may slow the GPU to save charge; plug in the power adapter before benchmarking"
        )
    if h.get("low_power_mode") or h.get("energy_mode") == "low":
        out.append(
            "Low Power Mode is on: it caps the chip's clocks; turn it off (System Settings > Battery > Energy Mode)"
        )
    heat = [f"{LABELS[k]} {h[k]}" for k in ("thermal_pressure", "thermal_state") if h.get(k) in HEAVY_THERMAL]
    if heat:
        out.append(f"{' and '.join(heat)}: the Mac is already hot and will slow down; let it cool, then run again")
    if h.get("memory_pressure") in ("warn", "critical") or str(h.get("memory_pressure", "")).startswith("level"):
        out.append(
            f"memory pressure {h['memory_pressure']}: the run may swap; quit memory-hungry apps before benchmarking"
        )
    return out
