"""The benchmark-conditions facts the doctor reads, taken quickly before and after a run."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from mpsup.host import parsers
from mpsup.host import snapshot as snap
from mpsup.syscmd import run_command


def hygiene_from(output: Callable[[str], str | None]) -> dict[str, Any]:
    """The conditions from each command's output (`output(snapshot key)`: stdout, or None where it failed)."""
    facts: dict[str, Any] = {
        "on_battery": None,
        "low_power_mode": None,
        "thermal_warning": None,
        "swap_total_bytes": None,
        "swap_used_bytes": None,
        "memory_pressure": None,
    }
    if (batt := output(snap.PMSET_BATT)) is not None:
        facts["on_battery"] = parsers.parse_pmset_batt(batt).on_battery
    if (pm := output(snap.PMSET)) is not None:
        facts["low_power_mode"] = parsers.low_power_mode(parsers.parse_pmset_settings(pm))
    if (therm := output(snap.PMSET_THERM)) is not None:
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


def hygiene_now() -> dict[str, Any]:
    facts = hygiene_from(_run)
    try:
        facts["loadavg"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        facts["loadavg"] = None
    return facts


SWAP_GROWTH_BYTES = 256 << 20  # macOS swaps a little in the background; more than this over a run is the run's


def conditions_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changes = []
    for key in ("on_battery", "low_power_mode", "thermal_warning", "memory_pressure"):
        if before.get(key) is not None and after.get(key) is not None and before[key] != after[key]:
            changes.append(f"{key} changed from {before[key]} to {after[key]}")
    used_before, used_after = before.get("swap_used_bytes"), after.get("swap_used_bytes")
    if isinstance(used_before, int) and isinstance(used_after, int) and used_after - used_before > SWAP_GROWTH_BYTES:
        changes.append(f"swap use grew by {(used_after - used_before) / 2**30:.1f} GiB during the run")
    return changes


def noisy_conditions(h: dict[str, Any]) -> list[str]:
    out = []
    if h.get("on_battery"):
        out.append("on battery")
    if h.get("low_power_mode"):
        out.append("Low Power Mode on")
    if h.get("thermal_warning"):
        out.append("thermal warnings")
    if h.get("memory_pressure") not in (None, "normal"):
        out.append(f"memory pressure {h['memory_pressure']}")
    return out
