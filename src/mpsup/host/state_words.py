"""A machine-state reading in words, as doctor shows it: each figure with its label and unit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mpsup.host.machine_state import FIELDS


def figure_words(key: str, value: Any) -> str | None:
    """`thermal pressure nominal`, `CPU clock 2400 MHz`, `swap in use 1.0 GiB`; None for a counter since boot
    (its growth over a visit is what it says, not its value) or a value of a kind the key does not take."""
    f = FIELDS.get(key)
    if f is None or f.kind == "cumulative" or value is None:
        return None
    if f.kind == "flag":
        return f"{f.label} {'on' if value else 'off'}" if isinstance(value, bool) else None
    if f.kind == "set":
        if not isinstance(value, list):
            return None
        return f"{f.label}: {', '.join(str(v) for v in value) or 'none'}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if f.unit == "bytes" and isinstance(value, int | float):
        return f"{f.label} {value / 2**30:.1f} GiB"
    unit = {"%": "%", "": ""}.get(f.unit, f" {f.unit}")
    return f"{f.label} {value}{unit}"


def reading_words(values: Mapping[str, Any]) -> list[str]:
    """Every figure of a reading in FIELDS' order, those not known left out."""
    return [w for key in FIELDS if (w := figure_words(key, values.get(key))) is not None]
