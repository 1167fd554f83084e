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


def _usable(x: float | None) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_speedup(x: float | None, digits: int = 3) -> str:
    """`0.970x`; `n/a` for a missing or non-finite figure."""
    return f"{x:.{digits}f}x" if _usable(x) else "n/a"


def fmt_interval(estimate: float | None, low: float | None, high: float | None, digits: int = 3) -> str:
    """The one way a speedup and its 95% interval are printed everywhere: `0.970x (95% CI 0.950-0.990x)`;
    the estimate alone when the interval is missing."""
    if not _usable(low) or not _usable(high):
        return fmt_speedup(estimate, digits)
    return f"{fmt_speedup(estimate, digits)} (95% CI {low:.{digits}f}-{high:.{digits}f}x)"
