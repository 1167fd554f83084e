"""Energy windows: each build's energy per call, from stretches of its own work long enough for the meter's
counter, taken apart from the timed rounds.

Why not the turns: a counter that moves every 100 ms and publishes up to a step late (NVML's) cannot tell a
worker turn of a few ms to a few hundred ms from its neighbours, so an A/A read that way lands far from 1x
(docs/evidence/energy_windows.md). So after a whole-model phase's timed rounds, both
workers still set up and warm, the builds take turns in windows of WINDOW_STEPS counter steps each, in A B B A
order, PAIRS windows each, and the meter is read only at a window's edges.

Each edge sits in an idle gap. First SETTLE_STEPS steps, so a counter up to a step late has published the
window's tail; then reads every POLL_STEPS of a step until the counter moves, so the edge's reading is fresh to
within a poll. Both edges of a window then stand in idle time, lag included: the joules between them are the
window's work and idle gap only, and a window's energy above idle is those joules less idle power over the time
between its edges. Rounding at an edge is idle power over a poll (a few ms), not over a step."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from mpsup.bench.energy_turns import EnergyTurns
from mpsup.bench.measurement import EnergyWindow
from mpsup.energy.meter import Reading
from mpsup.energy.probe import Calibration

# A window spans this many counter steps: with edges fresh to within a poll, what is left is the counter's own
# jitter, under a step at each edge, so 25 steps keep it within a few per cent of the window.
WINDOW_STEPS = 25
# A fast counter (RAPL's ~1 ms) still gets windows long enough that a worker request's own overhead and the
# read cost count for little.
MIN_WINDOW_S = 0.5
MIN_READS_PER_WINDOW = 100  # a window is at least this many reads long
PAIRS = 6  # windows per build: a ratio per A-B pair, six for stats.median_ci's bounded 95% interval
# A workload's windows together take at most this long: a slow phase (seconds a call) gets fewer pairs, and
# under six no interval, rather than minutes of windows.
MAX_WINDOWS_S = 60.0
SETTLE_STEPS = 1.0  # a counter may publish up to a step late: a step of idle lets the window's tail land
POLL_STEPS = 0.05  # then read this often (of a step) until the counter moves
MAX_POLL_STEPS = 2.0  # a counter resting at idle (Apple's GPU row reads exactly zero) stops the polling here


@dataclass(frozen=True)
class WindowPlan:
    window_s: float  # the least a window lasts
    samples: int  # the worker's samples per window (its calibrated calls each), the switch block besides
    pairs: int  # windows per build
    settle_s: float  # idle after a window before its edge is read
    poll_s: float  # then between reads until the counter moves
    step_s: float | None  # the slowest watched part's cadence; None: stamped when read, no steps seen
    watch: tuple[str, ...]  # the parts whose windows mean something (stamped, in the meter's total)

    def to_json(self) -> dict[str, object]:
        return {
            "window_s": self.window_s,
            "samples": self.samples,
            "pairs": self.pairs,
            "settle_s": self.settle_s,
            "poll_s": self.poll_s,
        }


def plan_windows(cal: Calibration, total_parts: tuple[str, ...], sample_s: float) -> WindowPlan | None:
    """Windows sized from the probed cadence; None where no part of the meter's total is stamped (only batches:
    a run total says all there is)."""
    watch = tuple(p for p in total_parts if p in cal.stamped)
    if not watch:
        return None
    steps = [c for p in watch if (c := cal.cadence_s.get(p)) is not None]
    step = max(steps) if steps else None
    window = max(WINDOW_STEPS * (step or 0.0), MIN_WINDOW_S, MIN_READS_PER_WINDOW * cal.read_s)
    samples = max(1, math.ceil(window / sample_s)) if sample_s > 0 else 1
    settle = SETTLE_STEPS * step if step else 0.0
    poll = max(POLL_STEPS * step, cal.read_s) if step else 0.0
    # The edge: the settle, then on average half a step until the counter moves.
    per_window = max(window, (samples + 1) * sample_s) + settle + 0.5 * (step or 0.0) + cal.read_s
    pairs = PAIRS
    while pairs > 1 and 2 * pairs * per_window > MAX_WINDOWS_S:
        pairs -= 1
    return WindowPlan(window, samples, pairs, settle, poll, step, watch)


def read_edge(energy: EnergyTurns, plan: WindowPlan, sleep: Callable[[float], None] = time.sleep) -> Reading | None:
    """The reading at a window's edge, taken in idle: after the settle, the first reading after the counter
    moves. None where the meter failed (energy.failure says why)."""
    if plan.settle_s > 0:
        sleep(plan.settle_s)
    first = energy.read()
    if first is None or plan.step_s is None:
        return first
    deadline = first.stamp + MAX_POLL_STEPS * plan.step_s
    while True:
        sleep(plan.poll_s)
        got = energy.read()
        if got is None:
            return None
        if got.stamp >= deadline or any(got.joules.get(p) != first.joules.get(p) for p in plan.watch):
            return got


def window(label: str, calls: int, work_s: float, before: Reading, after: Reading) -> EnergyWindow:
    joules = {p: after.joules[p] - before.joules[p] for p in after.joules if p in before.joules}
    return EnergyWindow(label, calls, after.stamp - before.stamp, work_s, joules)
