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
