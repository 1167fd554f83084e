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
    n: int = 0  # units behind the interval, when known: an unbounded one says how many it had

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

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
        return Interval(est, -math.inf, math.inf, n)
    return Interval(est, xs[j - 1], xs[n - j], n)


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


def percentile_interval(estimate: float, stats: Sequence[float], confidence: float = 0.95) -> Interval:
    """The central `confidence` share of bootstrap statistics (sorted here) around `estimate`: the one
    place where a resampling's percentile indices are computed."""
    xs = sorted(stats)
    if not xs:
        raise ValueError("no bootstrap statistics")
    lo_i = math.floor((1 - confidence) / 2 * len(xs))
    hi_i = min(len(xs) - 1, math.ceil((1 + confidence) / 2 * len(xs)) - 1)
    return Interval(estimate, xs[lo_i], xs[hi_i])


def bootstrap_median_ci(
    values: Sequence[float], *, seed: int = 0, resamples: int = 2000, confidence: float = 0.95
) -> Interval:
    """Percentile bootstrap of the median; the seed makes a report reproducible."""
    xs = list(values)
    if not xs:
        raise ValueError("no samples")
    est = median(xs)
    if len(xs) == 1:
        return Interval(est, -math.inf, math.inf)
    rng = random.Random(seed)
    n = len(xs)
    return percentile_interval(est, [median(rng.choices(xs, k=n)) for _ in range(resamples)], confidence)


def paired_ratio_ci(ratios: Sequence[float], *, seed: int = 0, confidence: float = 0.95) -> Interval:
    """Interval for the median paired ratio: the union of the seeded percentile bootstrap and the
    exact order-statistic interval. With few rounds the bootstrap alone is too narrow (it cannot
    see beyond the observed values); the order-statistic interval is valid for any n but coarse."""
    boot = bootstrap_median_ci(ratios, seed=seed, confidence=confidence)
    exact = median_ci(ratios, confidence=confidence)
    return Interval(boot.estimate, min(boot.low, exact.low), max(boot.high, exact.high))


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bootstrap_geomean_ci(
    groups: Sequence[Sequence[float]], *, seed: int = 0, resamples: int = 1000, confidence: float = 0.95
) -> Interval:
    """Geometric mean over workloads of each workload's median ratio. Resampling happens inside each
    workload (its rounds), so the interval reflects measurement noise, not the choice of workloads."""
    est = geometric_mean([median(g) for g in groups])
    rng = random.Random(seed)
    stats = []
    for _ in range(resamples):
        logs = [math.log(median(rng.choices(list(g), k=len(g)))) for g in groups]
        stats.append(math.exp(sum(logs) / len(logs)))
    return percentile_interval(est, stats, confidence)


# The smallest change the report calls (`report --threshold`); per-workload floors can only raise it.
# One constant for the CLI, the report and the calibration scripts that restate its decisions.
PRACTICAL_THRESHOLD = 0.03


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with `df` degrees of freedom (df >= 1), in closed form: for even df a Poisson
    tail, for odd df the normal tail plus a finite sum (no incomplete-gamma series, no table)."""
    if df < 1:
        raise ValueError(f"chi2_sf: df must be >= 1, not {df}")
    if not x > 0:
        return 1.0
    half = x / 2.0
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= half / j
            total += term
        return min(1.0, math.exp(-half) * total)
    total = math.erfc(math.sqrt(half))
    term = math.sqrt(2 * x / math.pi) * math.exp(-half)  # (x/2)^(1/2) e^(-x/2) / Gamma(3/2)
    for j in range(1, (df - 1) // 2 + 1):
        total += term
        term *= x / (2 * j + 1)
    return min(1.0, total)


def classify_change(ci: Interval, threshold: float = PRACTICAL_THRESHOLD) -> str:
    """'faster', 'slower' or 'same' for a speedup interval (baseline time / candidate time).

    A change counts only when the interval excludes 1 and the estimate clears the practical
    threshold: a significant 0.4% is not worth an upgrade decision."""
    if ci.low > 1.0 and ci.estimate >= 1.0 + threshold:
        return "faster"
    if ci.high < 1.0 and ci.estimate <= 1.0 / (1.0 + threshold):
        return "slower"
    return "same"


# --- Per-workload calls that hold under drift and heavy tails -------------------------------------------

METHOD = (
    "paired rounds (ABBA blocks from 24 rounds on); exact 95% interval of their median ratio; sign test over "
    "rounds with "
    "Benjamini-Hochberg (q=0.05) across workloads; suite: bootstrap over workloads and rounds, plus a 2% "
    "between-process floor"
)
# Two single runs put side by side (report --baseline A --candidate B): runs of one torch minutes apart
# differ by far more than each run's own intervals show (docs/evidence), a drift that one pair of runs
# cannot measure, so they get an estimate and no call.
METHOD_UNPAIRED = (
    "two separate runs (unpaired): each side's samples bootstrapped on their own; no per-workload calls and no "
    "verdict, since the drift between runs is not measured"
)
# Below this, pairing rounds into blocks leaves so few units that the exact interval is [min, max] of
# a handful of blocks, and one stalled block hides a real change; rounds are then the units.
BLOCK_MIN_ROUNDS = 24


# A round whose two sides differ a million-fold measured nothing (a stalled or broken sample), and a record
# that carries one is damaged or hostile: such ratios are dropped, which also keeps every product and
# logarithm below from underflowing to 0 (1e-300 squared is 0.0, and log(0) is a math domain error).
MAX_ROUND_RATIO = 1e6


def usable_ratio(r: float | None) -> bool:
    # Compared, not math.isfinite: nan and inf fail the comparison, and a huge int would overflow isfinite.
    # A record may hold null for a round that measured nothing.
    return isinstance(r, int | float) and 1.0 / MAX_ROUND_RATIO <= r <= MAX_ROUND_RATIO


def block_ratios(ratios: Sequence[float]) -> list[float]:
    """ABBA blocks: round k (A first) and round k+1 (B first) together cancel any first-mover effect,
    and a block is short enough that slow drift hits both sides alike. An odd last round is dropped."""
    rs = [r for r in ratios if usable_ratio(r)]
    if len(rs) < BLOCK_MIN_ROUNDS:
        return rs
    return [math.sqrt(rs[i] * rs[i + 1]) for i in range(0, len(rs) - 1, 2)]


def round_ratio_ci(ratios: Sequence[float], confidence: float = 0.95) -> Interval:
    """Exact order-statistic interval for the median block ratio: valid for any distribution of the
    blocks (heavy tails, outliers) as long as blocks are independent; unbounded below six units."""
    units = block_ratios(ratios)
    ci = median_ci(units, confidence)
    return Interval(ci.estimate, ci.low, ci.high, n=len(units))


def sign_test_p(units: Sequence[float]) -> float:
    """Exact two-sided sign test of 'median ratio = 1' (ties dropped); exact integers, no float binomials."""
    up = sum(1 for u in units if u > 1.0)
    down = sum(1 for u in units if u < 1.0)
    n = up + down
    if n == 0:
        return 1.0
    k = min(up, down)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def benjamini_hochberg(pvalues: Sequence[float], q: float = 0.05) -> list[bool]:
    """Which hypotheses to reject so that the expected share of false discoveries stays <= q."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    cut = 0
    for rank, i in enumerate(order, start=1):
        if pvalues[i] <= q * rank / m:
            cut = rank
    rejected = [False] * m
    for i in order[:cut]:
        rejected[i] = True
    return rejected


def decide(ci: Interval, discovered: bool, threshold: float = PRACTICAL_THRESHOLD) -> str:
    """A change needs all three: the interval excludes 1, the multiplicity-corrected test rejects,
    and the estimate clears the practical threshold."""
    cls = classify_change(ci, threshold)
    return cls if discovered else "same"


# Two worker processes of one environment can differ by ~2% on launch-bound shapes (placement,
# caches): a difference between processes, not between torch builds, that no single run can separate.
# The suite interval's half-width (in log terms) gets this added in quadrature, a random-effects floor.
PROCESS_FLOOR = 0.02


def suite_geomean_ci(
    groups: Sequence[Sequence[float]],
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    floor: float = PROCESS_FLOOR,
) -> Interval:
    """Geometric mean over workloads of each workload's median block ratio. Resamples workloads, then
    blocks within each: the interval carries between-workload spread (per-process placement biases
    that differ by shape) as well as measurement noise, so an A/A run's interval covers 1 unless the
    bias is shared by nearly every workload."""
    units = [block_ratios(g) for g in groups]
    units = [u for u in units if u]
    if not units:
        raise ValueError("no workloads")
    est = geometric_mean([median(u) for u in units])
    if len(units) == 1:
        return _widen(median_ci(units[0], confidence), floor)
    rng = random.Random(seed)
    ordered = [sorted(u) if len(u) > EXACT_RESAMPLE_LIMIT else None for u in units]
    stats = []
    for _ in range(resamples):
        picked = rng.choices(range(len(units)), k=len(units))
        logs = [math.log(_resampled_median(units[i], ordered[i], rng)) for i in picked]
        stats.append(math.exp(sum(logs) / len(logs)))
    stats.sort()
    lo_i = math.floor((1 - confidence) / 2 * resamples)
    hi_i = min(resamples - 1, math.ceil((1 + confidence) / 2 * resamples) - 1)
    return _widen(Interval(est, stats[lo_i], stats[hi_i]), floor)


# Above this many blocks a workload's resampled median is drawn from its large-sample distribution instead of
# from a full resample: a record at the 2,000,000-value cap (33 workloads of 20,000 rounds) took over 5 minutes
# of resampling a report (1000 x 33 x 10,000 draws). No bench keeps this many rounds of one workload.
EXACT_RESAMPLE_LIMIT = 1000


def _resampled_median(u: Sequence[float], ordered: Sequence[float] | None, rng: random.Random) -> float:
    """The median of a bootstrap resample of u. For n > EXACT_RESAMPLE_LIMIT (`ordered` given), its rank: the
    resample's median falls at or below the j-th smallest value when at least half of n draws do, a
    Binomial(n, j/n) event, so its rank is n/2 + Z * sqrt(n)/2 with Z standard normal to O(1/sqrt(n))."""
    if ordered is None:
        return median(rng.choices(u, k=len(u)))
    n = len(ordered)
    rank = round((n - 1) / 2 + rng.gauss(0.0, 1.0) * math.sqrt(n) / 2)
    return ordered[min(n - 1, max(0, rank))]


def _widen(ci: Interval, floor: float) -> Interval:
    if not ci.bounded or floor <= 0 or ci.low <= 0:
        return ci
    lo = math.log(ci.estimate / ci.low)
    hi = math.log(ci.high / ci.estimate)
    return Interval(
        ci.estimate, ci.estimate * math.exp(-math.hypot(lo, floor)), ci.estimate * math.exp(math.hypot(hi, floor)), ci.n
    )
