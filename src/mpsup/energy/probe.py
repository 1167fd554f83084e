"""What a meter costs and how often it moves, probed while the machine idles: one read's cost, each part's
counter cadence and idle power, from the same series of reads."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from mpsup.energy.meter import Meter, Reading

# A part that moves no more often than this is taken to move in batches: its per-turn readings say nothing.
BATCHED_S = 1.0
# The gap between probe reads: fine enough for a 100 ms counter, coarse enough not to load a CPU core.
PROBE_GAP_S = 0.01


@dataclass(frozen=True)
class Calibration:
    read_s: float  # the median cost of one read
    window_s: float  # how long the idle series ran
    cadence_s: dict[str, float | None]  # median time between moves, per part; None: moved less than twice
    idle_w: dict[str, float]  # per part, over the window
    stamped: tuple[str, ...]  # the parts whose per-turn readings mean something

    def to_json(self) -> dict[str, object]:
        return {
            "read_s": self.read_s,
            "window_s": self.window_s,
            "cadence_s": dict(self.cadence_s),
            "idle_w": dict(self.idle_w),
            "stamped": list(self.stamped),
        }


def calibrate(
    meter: Meter,
    window_s: float,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> Calibration:
    """Reads for `window_s` seconds, PROBE_GAP_S apart. A part the meter calls stamped stays so unless it moved
    in batches (a stamped row may rest at exactly zero at idle, as Apple's GPU row does); any other part is
    stamped only where it moved at least twice, under BATCHED_S apart."""
    costs: list[float] = []
    series: list[Reading] = []
    t0 = clock()
    while True:
        before = clock()
        series.append(meter.read())
        costs.append(clock() - before)
        if clock() - t0 >= window_s:
            break
        sleep(PROBE_GAP_S)
    parts = meter.info.parts
    cadence: dict[str, float | None] = {}
    idle: dict[str, float] = {}
    span = series[-1].stamp - series[0].stamp
    for p in parts:
        moved = [r for prev, r in itertools.pairwise(series) if r.joules[p] != prev.joules[p]]
        gaps = [b.stamp - a.stamp for a, b in itertools.pairwise(moved)]
        cadence[p] = median(gaps) if gaps else None
        # From the first move to the last, where it moved twice: the readings at the window's ends are up to a
        # step stale (NVML's 100 ms counter over 2 s: up to 5% low), the first read after a move is not.
        first, last = (moved[0], moved[-1]) if len(moved) >= 2 else (series[0], series[-1])
        width = last.stamp - first.stamp
        idle[p] = (last.joules[p] - first.joules[p]) / width if width > 0 else 0.0
    stamped = tuple(
        p
        for p in parts
        if ((c := cadence[p]) is not None and c < BATCHED_S)
        or (c is None and p in meter.info.stamped and not _batched(series, p))
    )
    return Calibration(median(costs), span, cadence, idle, stamped)


def _batched(series: list[Reading], p: str) -> bool:
    """Moved once in the window after holding still for over BATCHED_S: a batch, not a resting stamped row."""
    moves = [r.stamp for prev, r in itertools.pairwise(series) if r.joules[p] != prev.joules[p]]
    return bool(moves) and moves[0] - series[0].stamp >= BATCHED_S
