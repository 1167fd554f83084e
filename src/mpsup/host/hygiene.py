"""The benchmark-conditions facts the doctor reads, taken quickly before and after a run."""

from __future__ import annotations

import os
from typing import Any

from mpsup.host import parsers
from mpsup.host import snapshot as snap
from mpsup.syscmd import run_command


def hygiene_now() -> dict[str, Any]:
    facts: dict[str, Any] = {"on_battery": None, "low_power_mode": None, "thermal_warning": None}
    batt = run_command(snap.COMMANDS[snap.PMSET_BATT][0], timeout=5)
    if batt.ok:
        facts["on_battery"] = parsers.parse_pmset_batt(batt.stdout).on_battery
    pm = run_command(snap.COMMANDS[snap.PMSET][0], timeout=5)
    if pm.ok:
        facts["low_power_mode"] = parsers.low_power_mode(parsers.parse_pmset_settings(pm.stdout))
    therm = run_command(snap.COMMANDS[snap.PMSET_THERM][0], timeout=5)
    if therm.ok:
        t = parsers.parse_pmset_therm(therm.stdout)
        facts["thermal_warning"] = bool(t.thermal_warning or t.performance_warning) if t.known else None
    try:
        facts["loadavg"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        facts["loadavg"] = None
    return facts


def conditions_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changes = []
    for key in ("on_battery", "low_power_mode", "thermal_warning"):
        if before.get(key) is not None and after.get(key) is not None and before[key] != after[key]:
            changes.append(f"{key} changed from {before[key]} to {after[key]}")
    return changes


def noisy_conditions(h: dict[str, Any]) -> list[str]:
    out = []
    if h.get("on_battery"):
        out.append("on battery")
    if h.get("low_power_mode"):
        out.append("Low Power Mode on")
    if h.get("thermal_warning"):
        out.append("thermal warnings")
    return out
