"""Figures over many workloads: the model's forward from its layers, geometric means, two separate runs' ratio."""

from __future__ import annotations

import math
import random
from statistics import median

from mpsup.report.changes import NOT_LAYERS, WorkloadChange
from mpsup.stats import Interval, geometric_mean, percentile_interval, suite_geomean_ci, usable_ratio


def _median_ratio(a: list[float], b: list[float]) -> float:
    mb = median(b)
    return median(a) / mb if mb > 0 else math.inf


def unpaired_ratio(a: list[float], b: list[float], seed: int) -> tuple[Interval, list[float]] | None:
    """Two single runs: bootstrap the ratio of medians, each side resampled on its own. None when the
    medians are no measurement (a record may hold samples of 0 or 5e-324 s): a ratio of those is 0 or inf."""
    rng = random.Random(seed)
    est = _median_ratio(a, b)
    draws = (_median_ratio(rng.choices(a, k=len(a)), rng.choices(b, k=len(b))) for _ in range(2000))
    boots = sorted(r for r in draws if usable_ratio(r))
    if not usable_ratio(est) or len(boots) < 1000:
        return None
    return percentile_interval(est, boots), boots


def model_speedup(changes: list[WorkloadChange], seed: int) -> Interval | None:
    """The forward's speedup from its layers' (time-weighted harmonic mean). A layer too short of rounds
    to bound makes the whole figure n/a: the bootstrap of a 3-round median covers ~75%, not 95%, and
    leaving the layer out would weigh the rest wrongly."""
    layers = [
        (c, c.speedup, c.count * c.baseline_s)
        for c in changes
        if c.speedup and c.baseline_s and c.baseline_s > 0 and c.ratios and c.part not in NOT_LAYERS
    ]
    if not layers:
        return None
    # Each layer's share of the slowest one's time, not seconds: a record's absurd times (5e-324 s)
    # cannot underflow the sums below to 0.
    biggest = max(t for _, _, t in layers)
    usable = [(c, t / biggest, sp.estimate) for c, sp, t in layers]
    total_base = sum(t for _, t, _ in usable)
    est = total_base / sum(t / s for _, t, s in usable)
    short = [sp.n for _, sp, _ in layers if not sp.bounded]
    if short:
        return Interval(est, -math.inf, math.inf, min(short))
    rng = random.Random(seed)
    boots = []
    for _ in range(1000):
        forward = 0.0
        for c, t, _ in usable:
            # Unpaired: one bootstrap draw of the workload's ratio is already a resample of it.
            forward += t / (rng.choice(c.ratios) if c.unpaired else median(rng.choices(c.ratios, k=len(c.ratios))))
        boots.append(total_base / forward)
    return percentile_interval(est, boots)


def _geomean_ci(changes: list[WorkloadChange], seed: int) -> Interval:
    """The geometric mean over workloads: paired, from their rounds (suite_geomean_ci); unpaired, from each
    workload's own bootstrap draws, one per replicate, with the workloads resampled too."""
    if not any(c.unpaired for c in changes):
        return suite_geomean_ci([c.ratios for c in changes], seed=seed)
    usable = [c for c in changes if c.speedup and c.speedup.estimate > 0]
    est = geometric_mean([c.speedup.estimate for c in usable])  # type: ignore[union-attr]
    rng = random.Random(seed)
    boots = []
    for _ in range(1000):
        picked = rng.choices(usable, k=len(usable))
        boots.append(math.exp(sum(math.log(rng.choice(c.ratios)) for c in picked) / len(picked)))
    return percentile_interval(est, boots)


def aggregate(group: list[WorkloadChange], seed: int) -> Interval | None:
    """The geometric mean over the workloads whose own interval is bounded; n/a (unbounded, with the
    fewest units) when none is: bootstrapping medians of 3 rounds would give a 95% interval that is not."""
    intervals = [(c, c.speedup) for c in group if c.speedup]
    if not intervals:
        return None
    bounded = [c for c, sp in intervals if sp.bounded]
    if bounded:
        return _geomean_ci(bounded, seed)
    est = geometric_mean([sp.estimate for _, sp in intervals])
    return Interval(est, -math.inf, math.inf, min(sp.n for _, sp in intervals))
