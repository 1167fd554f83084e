"""Statistics: distribution-free intervals for medians, bootstrap intervals for paired ratios,
and the practical-size rule for calling a change. Standard library only, seeded, deterministic."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import median


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    @property
    def rel_half_width(self) -> float:
        if self.estimate == 0 or math.isinf(self.low) or math.isinf(self.high):
            return math.inf
        return (self.high - self.low) / 2 / abs(self.estimate)

    def to_json(self) -> dict[str, float | None]:
        # JSON has no infinities: an unbounded side (too few rounds) is null.
        return {"estimate": self.estimate, "low": finite_or_none(self.low), "high": finite_or_none(self.high)}


def finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def median_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Interval for the median from order statistics (exact binomial): no normality assumed."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    est = median(xs)
    j = order_statistic_rank(n, confidence)
    if j == 0:
        return Interval(est, -math.inf, math.inf)
    return Interval(est, xs[j - 1], xs[n - j])


@functools.lru_cache(maxsize=4096)
def order_statistic_rank(n: int, confidence: float = 0.95) -> int:
    """Largest j with P(Bin(n, 1/2) < j) <= (1 - confidence) / 2; the interval is [x_(j), x_(n-j+1)] (1-based).

    Exact rational arithmetic on Python integers: 2**n has no float once n passes ~1,023 (the
    sampling cap is 2,000), and float binomial terms underflow there too. Cached: the sampling
    policy asks after every batch, and the answer depends only on n."""
    if n < 0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"order_statistic_rank({n}, {confidence}): n must be >= 0 and 0 < confidence < 1")
    half_alpha = (1 - Fraction(confidence)) / 2
    # cumulative/2**n <= half_alpha  <=>  cumulative * den <= num * 2**n, all in integers.
    limit = half_alpha.numerator << n
    den = half_alpha.denominator
    cumulative = 0
    term = 1  # C(n, j), updated in place
    j = 0
    while j < n:
        if (cumulative + term) * den > limit:
            break
        cumulative += term
        term = term * (n - j) // (j + 1)
        j += 1
    return j


def bootstrap_median_ci(values: Sequence[float], *, seed: int = 0, resamples: int = 2000,
                        confidence: float = 0.95) -> Interval:
    """Percentile bootstrap of the median; the seed makes a report reproducible."""
    xs = list(values)
    if not xs:
        raise ValueError("no samples")
    est = median(xs)
    if len(xs) == 1:
        return Interval(est, -math.inf, math.inf)
    rng = random.Random(seed)
    n = len(xs)
    meds = sorted(median(rng.choices(xs, k=n)) for _ in range(resamples))
    lo_i = math.floor((1 - confidence) / 2 * resamples)
    hi_i = min(resamples - 1, math.ceil((1 + confidence) / 2 * resamples) - 1)
    return Interval(est, meds[lo_i], meds[hi_i])


def paired_ratio_ci(ratios: Sequence[float], *, seed: int = 0, confidence: float = 0.95) -> Interval:
    """Interval for the median paired ratio: the union of the seeded percentile bootstrap and the
    exact order-statistic interval. With few rounds the bootstrap alone is too narrow (it cannot
    see beyond the observed values); the order-statistic interval is valid for any n but coarse."""
    boot = bootstrap_median_ci(ratios, seed=seed, confidence=confidence)
    exact = median_ci(ratios, confidence=confidence)
    return Interval(boot.estimate, min(boot.low, exact.low), max(boot.high, exact.high))


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bootstrap_geomean_ci(groups: Sequence[Sequence[float]], *, seed: int = 0, resamples: int = 1000,
                         confidence: float = 0.95) -> Interval:
    """Geometric mean over workloads of each workload's median ratio. Resampling happens inside each
    workload (its rounds), so the interval reflects measurement noise, not the choice of workloads."""
    est = geometric_mean([median(g) for g in groups])
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        logs = [math.log(median(rng.choices(list(g), k=len(g)))) for g in groups]
        stats.append(math.exp(sum(logs) / len(logs)))
    stats.sort()
    lo_i = math.floor((1 - confidence) / 2 * resamples)
    hi_i = min(resamples - 1, math.ceil((1 + confidence) / 2 * resamples) - 1)
    return Interval(est, stats[lo_i], stats[hi_i])


def classify_change(ci: Interval, threshold: float = 0.03) -> str:
    """'faster', 'slower' or 'same' for a speedup interval (baseline time / candidate time).

    A change counts only when the interval excludes 1 and the estimate clears the practical
    threshold: a significant 0.4% is not worth an upgrade decision."""
    if ci.low > 1.0 and ci.estimate >= 1.0 + threshold:
        return "faster"
    if ci.high < 1.0 and ci.estimate <= 1.0 / (1.0 + threshold):
        return "slower"
    return "same"
