"""Figures as people read them: times, sizes, rates and intervals with the unit that keeps them short."""

from __future__ import annotations

import math


def fmt_time(s: float | None) -> str:
    if s is None or math.isnan(s):
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n: float | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_limit(n: int) -> str:
    """A size limit, exactly: `256 MiB`, `64 KiB`, `256 bytes` (a limit under a MiB once read "0 MiB")."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def fmt_rate(per_s: float, unit: str) -> str:
    """A rate with the SI prefix that keeps three significant digits: CPU rates are GFLOP/s, not 0.00 TFLOP/s."""
    for prefix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_s >= size:
            return f"{per_s / size:.3g} {prefix}{unit}"
    return f"{per_s:.3g} {unit}"


def fmt_span(low: float | None, high: float | None) -> str:
    """`3.89-5.22 ms` when both ends share a unit (most intervals), else each end with its own."""
    lo, hi = fmt_time(low), fmt_time(high)
    if lo == "-" and hi == "-":
        return "-"
    if lo == "-" or hi == "-":
        return f"{lo} - {hi}"
    lo_num, _, lo_unit = lo.partition(" ")
    hi_num, _, hi_unit = hi.partition(" ")
    return f"{lo_num}-{hi_num} {hi_unit}" if lo_unit == hi_unit else f"{lo}-{hi}"
