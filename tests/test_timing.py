"""The timing core with fake clocks: calibration, warmup settling, the stopping rule, CI of the median."""

from __future__ import annotations

import math
import random

import pytest

from mpsup.bench.policy import SamplingPolicy
from mpsup.stats import median_ci
from mpsup.worker.timing import calibrate_calls, time_block


class FakeClock:
    """Time advances only when the fake workload 'runs'."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_time_block_syncs_and_counts_calls():
    clock = FakeClock()
    calls = []
    syncs = []

    def fn():
        calls.append(1)
        clock.now += 0.002

    bt = time_block(fn, 5, lambda: syncs.append(clock.now), clock)
    assert len(calls) == 5
    assert bt.host_s == pytest.approx(0.010)
    assert len(syncs) == 2  # before the clock starts and before it stops


def test_time_block_includes_work_only_visible_at_sync():
    """Async device: the call returns at once, the work completes at sync. The time must include it."""
    clock = FakeClock()
    pending = []

    def fn():
        pending.append(0.003)

    def sync():
        clock.now += sum(pending)
        pending.clear()

    assert time_block(fn, 4, sync, clock).host_s == pytest.approx(0.012)


def test_calibration_makes_samples_long_enough():
    clock = FakeClock()

    def fn():
        clock.now += 20e-6

    calls, per_call = calibrate_calls(fn, lambda: None, 0.01, clock)
    assert per_call == pytest.approx(20e-6)
    assert calls == 500


def test_calibration_with_slow_call_uses_one():
    clock = FakeClock()

    def fn():
        clock.now += 0.5

    calls, _ = calibrate_calls(fn, lambda: None, 0.01, clock)
    assert calls == 1


def test_warmup_settles_only_after_times_stop_falling():
    pol = SamplingPolicy(budget_s=100)
    falling = [10.0, 8.0, 6.0, 4.0, 3.0, 2.0]
    assert not pol.warmup_settled(falling, 0.1)
    settled = [*falling, 1.0, 1.0, 1.0, 1.01, 0.99, 1.0]
    assert pol.warmup_settled(settled, 0.1)
    # Out of warmup time: stop even if not settled.
    assert pol.warmup_settled(falling, 31.0)


def test_stopping_rule_converges_on_quiet_data():
    pol = SamplingPolicy(budget_s=10)
    rng = random.Random(1)
    samples = [1.0 + rng.gauss(0, 0.005) for _ in range(40)]
    stop, why = pol.should_stop(samples, 0.5)
    assert stop and why == "converged"


def test_stopping_rule_keeps_going_on_noisy_data_until_budget():
    pol = SamplingPolicy(budget_s=1.0)
    rng = random.Random(2)
    samples = [1.0 + rng.gauss(0, 0.3) for _ in range(40)]
    assert pol.should_stop(samples, 0.5) == (False, "")
    assert pol.should_stop(samples, 1.0) == (True, "budget")


def test_stopping_rule_needs_six_samples_even_past_budget():
    pol = SamplingPolicy(budget_s=0.001)
    assert pol.should_stop([1.0, 1.1, 1.2, 1.0, 1.1], 5.0) == (False, "")
    stop, why = pol.should_stop([1.0, 1.1, 1.2, 1.0, 1.1, 1.2], 5.0)
    assert (stop, why) == (True, "budget")
    assert median_ci([1.0, 1.1, 1.2, 1.0, 1.1, 1.2]).rel_half_width < 1


def test_median_ci_coverage():
    """The order-statistic interval covers the true median about 95% of the time."""
    rng = random.Random(3)
    covered = 0
    trials = 400
    for _ in range(trials):
        xs = [rng.lognormvariate(0, 0.5) for _ in range(31)]
        ci = median_ci(xs)
        covered += ci.low <= 1.0 <= ci.high  # lognormal(0, s) has median 1
    assert 0.92 <= covered / trials <= 0.99


def test_median_ci_small_n_is_unbounded():
    ci = median_ci([1.0, 2.0, 3.0])
    assert math.isinf(ci.rel_half_width)
    assert median_ci([5.0] * 20).rel_half_width == 0.0


def _exact_rank(n: int, confidence: float = 0.95) -> int:
    """Brute force from the definition, in exact fractions: the largest j with P(Bin(n, 1/2) < j) <= alpha/2."""
    from fractions import Fraction

    half_alpha = (1 - Fraction(confidence)) / 2
    best = 0
    for j in range(n + 1):
        if Fraction(sum(math.comb(n, i) for i in range(j)), 2**n) <= half_alpha:
            best = j
    return min(best, n)


def _log_space_rank(n: int, confidence: float = 0.95) -> int:
    """An independent float computation (log-gamma terms, log-sum-exp) for large n."""
    log_half_alpha = math.log((1 - confidence) / 2)
    terms: list[float] = []
    j = 0
    while j < n:
        terms.append(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - n * math.log(2))
        top = max(terms)
        if top + math.log(sum(math.exp(t - top) for t in terms)) > log_half_alpha:
            break
        j += 1
    return j


def test_median_ci_ranks_match_the_exact_binomial_for_small_n():
    from mpsup.stats import order_statistic_rank

    for n in range(1, 61):
        for conf in (0.90, 0.95, 0.99):
            assert order_statistic_rank(n, conf) == _exact_rank(n, conf), (n, conf)
    # Textbook values: n=6 -> [x1, x6], n=20 -> [x6, x15], under 6 samples the interval is unbounded.
    ci = median_ci([float(i) for i in range(1, 7)])
    assert (ci.low, ci.high) == (1.0, 6.0)
    ci = median_ci([float(i) for i in range(1, 21)])
    assert (ci.low, ci.high) == (6.0, 15.0)
    assert math.isinf(median_ci([1.0, 2, 3, 4, 5]).low)


@pytest.mark.parametrize("n", [1028, 1029, 1030, 1500, 1999, 2000])
def test_median_ci_up_to_the_sample_cap_does_not_overflow(n: int):
    """`alpha * (1 << n)` overflowed a float from about 1,029 samples; the cap is 2,000."""
    from mpsup.stats import order_statistic_rank

    xs = [1.0 + i * 1e-4 for i in range(n)]
    random.Random(n).shuffle(xs)
    ci = median_ci(xs)
    j = order_statistic_rank(n)
    assert j == _log_space_rank(n)
    # The normal approximation of the rank: n/2 - 1.96 * sqrt(n)/2, within a couple of ranks.
    assert abs(j - (n / 2 - 1.96 * math.sqrt(n) / 2)) < 3
    assert ci.low == sorted(xs)[j - 1] and ci.high == sorted(xs)[n - j]
    assert ci.low < ci.estimate < ci.high and ci.rel_half_width < 0.02


def test_stopping_rule_at_the_sample_cap():
    pol = SamplingPolicy(budget_s=100.0, target_rel_ci=1e-9)
    rng = random.Random(5)
    samples = [1.0 + rng.gauss(0, 0.1) for _ in range(pol.max_samples - 5)]
    for extra in range(1029 - 1, pol.max_samples - 5, 97):
        assert pol.should_stop(samples[:extra], 1.0) == (False, "")
    assert pol.should_stop(samples + [1.0] * 5, 1.0) == (True, "max-samples")
