"""The floors a run's calls must clear, in log units: a stored A/A run's of the same setup, and the run's own
between-process one (how far its two pairs of fresh workers disagree on workloads of similar duration)."""

from __future__ import annotations

import math
from statistics import median

from mpsup.runs.schema import RunRecord
from mpsup.stats import round_ratio_ci

# A visit needs this many rounds before its median counts as that visit's lean.
VISIT_MIN_ROUNDS = 3

# No floor above a thousand-fold: beyond it every call is off anyway, and exp() of a hostile record's
# log-distances (ratios of 1e-300) would overflow.
FLOOR_CAP = math.log(1000.0)


def aa_floors(aa: RunRecord) -> dict[str, float]:
    """Per workload, how far from 1x an A/A run of the same setup lands: the farther end of its 95%
    interval. A systematic difference between two worker processes (placement, caches) shows here, and
    no torch change can be told apart from it in one run."""
    floors = {}
    for w in aa.workloads:
        rs = w.paired_ratios
        if not rs:
            continue
        ci = round_ratio_ci(rs)
        if ci.bounded:
            floors[w.name] = min(max(abs(math.log(ci.low)), abs(math.log(ci.high))), FLOOR_CAP)
    return floors


# Workloads of similar duration that pool their evidence about between-process spread, and the factor
# that turns the median disagreement |d| between two process pairs into a floor: d ~ N(0, 2 s_b^2) for a
# per-process effect of spread s_b, median |d| = 0.674 * sqrt(2) s_b, and the estimate (both pairs
# together) carries s_b / sqrt(2); three of those (what ~120 workloads under multiplicity need) is
# 1.5 * median|d| / 0.674 = 2.2 * median|d|.
PROCESS_NEIGHBOURS = 15
PROCESS_FLOOR_FACTOR = 1.5 / 0.6745


def process_floors(record: RunRecord, label: str) -> tuple[dict[str, float], float]:
    """Per workload, a floor (in log units) from the run itself: bench measures each workload with two
    pairs of fresh worker processes, and how far the pairs disagree on workloads of similar duration
    shows how much a process's placement (addresses, caches, library state) moves the result; short layers
    disagree most (docs/explanation/methodology.md). Returns the floors and the largest median disagreement seen."""
    points: list[tuple[float, float]] = []  # (log baseline time, |log disagreement|)
    for w in record.workloads:
        visits = w.ratios_by_visit
        base = w.env(label).median
        if len(visits) < 2 or min(len(visits[0]), len(visits[1])) < VISIT_MIN_ROUNDS or not base or base <= 0:
            continue
        points.append((math.log(base), abs(math.log(median(visits[0])) - math.log(median(visits[1])))))
    if len(points) < PROCESS_NEIGHBOURS:
        return {}, 0.0
    floors: dict[str, float] = {}
    worst = 0.0
    for w in record.workloads:
        base = w.env(label).median
        if not base or base <= 0 or not w.ratios:
            continue
        here = math.log(base)
        nearest = sorted(points, key=lambda p: abs(p[0] - here))[:PROCESS_NEIGHBOURS]
        typical = median(d for _, d in nearest)
        worst = max(worst, min(typical, FLOOR_CAP))
        floors[w.name] = min(PROCESS_FLOOR_FACTOR * typical, FLOOR_CAP)
    return floors, worst
