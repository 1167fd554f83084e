"""What keeps two runs' figures apart: an OS build (macOS ships MPSGraph), an energy mode, a power source. Runs that
differ in one are not one machine's, whatever else they share: a report says so rather than merging them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

APART_KEYS = {"os_build": "OS build", "energy_mode": "energy mode", "on_battery": "power source"}
MAX_SHOWN = 40  # characters of a record's value: a build, a mode's word


def _shown(key: str, value: Any) -> str:
    """A condition's value in words, on one line and short: it comes from a record, so each surface escapes it."""
    if key == "on_battery":
        return "battery" if value else "mains"
    return " ".join(str(value).split())[:MAX_SHOWN]


def conditions_differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """How two runs' start conditions (`hygiene.before`) differ in what keeps their figures apart, in words."""
    out = []
    for key, label in APART_KEYS.items():
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None and x != y:
            out.append(f"{label} {_shown(key, x)} vs {_shown(key, y)}")
    return out
