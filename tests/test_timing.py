"""The timing core with fake clocks: calibration, warmup settling, the stopping rule, CI of the median."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import pytest

from mpsup.bench.events import WorkloadDone, WorkloadStarted
from mpsup.bench.measurement import EnvMeasurement, Round, WorkloadMeasurement
from mpsup.bench.policy import SamplingPolicy
from mpsup.progress import Event
from mpsup.stats import median_ci
from mpsup.worker.timing import calibrate_calls, time_block
from tests.fake_schedule import NoStops


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


# -- adaptive time: rounds, the second pass, the ETA (synthetic streams, no clock) ---------------------------


def _ratios(n: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [math.exp(rng.gauss(0.0, spread)) for _ in range(n)]


def test_paired_rounds_stop_early_on_quiet_data_but_not_before_twelve():
    pol = SamplingPolicy(budget_s=10.0)
    quiet = _ratios(40, 0.001, seed=1)
    assert pol.should_stop_rounds(quiet[:11], 0.1, 10.0) == (False, "")
    assert pol.should_stop_rounds(quiet[:12], 0.1, 10.0) == (True, "converged")


def test_paired_rounds_reach_twelve_even_when_the_share_is_spent():
    pol = SamplingPolicy(budget_s=1.0)
    noisy = _ratios(40, 0.2, seed=2)
    # Past the share, still short of twelve rounds: keep going (up to five shares).
    assert pol.should_stop_rounds(noisy[:8], 1.5, 1.0) == (False, "")
    assert pol.should_stop_rounds(noisy[:12], 1.5, 1.0) == (True, "budget")
    # A very slow workload stops at six rounds after five shares, at three after ten.
    assert pol.should_stop_rounds(noisy[:6], 5.0, 1.0) == (True, "budget")
    assert pol.should_stop_rounds(noisy[:3], 9.0, 1.0) == (False, "")
    assert pol.should_stop_rounds(noisy[:3], 10.0, 1.0) == (True, "budget")
    # A whole-model phase is the verdict: no cap until twelve rounds, however long they take (a 2.3 s VAE
    # decode got six and could be called nothing).
    assert pol.should_stop_rounds(noisy[:6], 50.0, 1.0, reach_min=True) == (False, "")
    assert pol.should_stop_rounds(noisy[:3], 100.0, 1.0, reach_min=True) == (False, "")
    assert pol.should_stop_rounds(noisy[:12], 50.0, 1.0, reach_min=True) == (True, "budget")


def test_rounds_get_cheaper_not_fewer_when_the_share_is_tight():
    pol = SamplingPolicy()
    roomy = pol.samples_per_round(0.001, 10.0)
    tight = pol.samples_per_round(0.01, 0.5)
    assert roomy == pol.batch and tight == 1
    # Whatever the share, planned_rounds rounds of (discard + samples) per environment fit in it, or one sample.
    for share in (0.2, 0.6, 1.0, 3.0):
        k = pol.samples_per_round(0.01, share)
        assert k == 1 or pol.planned_rounds * 2 * (k + 1) * 0.01 <= share
    # Paired samples shrink to fit the rounds, within [min_sample_s, target_sample_s].
    assert pol.paired_sample_s(100.0) == pol.target_sample_s
    assert pol.paired_sample_s(0.001) == pol.min_sample_s
    mid = pol.paired_sample_s(0.3)
    assert pol.min_sample_s < mid < pol.target_sample_s and pol.planned_rounds * 4 * mid == pytest.approx(0.3)


def test_one_environment_gets_the_looser_target_and_shorter_warmup_window_pairs_do_not():
    single, paired = SamplingPolicy.for_environments(1, 0.7), SamplingPolicy.for_environments(2, 0.7)
    assert single.budget_s == paired.budget_s == 0.7
    assert (single.target_rel_ci, single.warmup_window) == (0.02, 2)
    assert (paired.target_rel_ci, paired.warmup_window) == (0.01, 3)
    # Samples whose median interval is about +-1.5%: converged for one environment, not for +-1%.
    xs = [1.0 + 0.004 * ((i * 37) % 21 - 10) for i in range(30)]
    from mpsup.stats import median_ci

    assert 0.01 < median_ci(xs).rel_half_width <= 0.02
    assert single.should_stop(xs, 0.0) == (True, "converged")
    assert paired.should_stop(xs, 0.0) == (False, "")
    # Two samples level with the two before them end a single run's warmup; a pair waits for three.
    warm = [3.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    assert single.warmup_settled(warm[:4], 0.0) is False
    assert single.warmup_settled([5.0, 1.0, 1.0, 1.0, 1.0], 0.0) is True
    assert paired.warmup_settled([5.0, 1.0, 1.0, 1.0, 1.0], 0.0) is False


def test_single_environment_stops_at_its_visit_share():
    pol = SamplingPolicy(budget_s=1.0)
    noisy = [1.0 + 0.3 * ((i * 7919) % 13) / 13 for i in range(10)]
    assert pol.should_stop(noisy, 0.3, share_s=0.5) == (False, "")
    assert pol.should_stop(noisy, 0.5, share_s=0.5) == (True, "budget")


def test_leftover_pool_counts_only_what_unconverged_workloads_left():
    from mpsup.bench.policy import leftover_pool

    # Converged workloads' unused time is saved, not handed out; overruns give nothing back.
    assert leftover_pool([1.0, 1.0, 1.0], [0.2, 0.6, 1.4], [True, False, False]) == pytest.approx(0.4)


def test_second_pass_goes_widest_first_and_in_proportion():
    from mpsup.bench.policy import next_allotment, widest_first

    widths = {"quiet": 0.005, "mid": 0.04, "wild": 0.2, "unbounded": math.inf}
    order = widest_first(widths, 0.01)
    assert order == ["unbounded", "wild", "mid"]  # converged "quiet" gets nothing
    w = [widths[k] for k in order]
    first = next_allotment(10.0, w, cap_s=100.0)
    second = next_allotment(10.0 - first, w[1:], cap_s=100.0)
    assert first > second > next_allotment(10.0 - first - second, w[2:], cap_s=100.0) > 0
    assert next_allotment(10.0, w, cap_s=1.5) == 1.5
    assert next_allotment(0.0, w, cap_s=1.5) == 0.0


class _FakeRunner:
    """A runner whose workloads are synthetic ratio streams with a known spread, on a fake clock."""

    def __init__(self, spreads: dict[str, float], clock: list[float], round_s: float = 0.01) -> None:
        self.spreads = spreads
        self.clock = clock
        self.round_s = round_s
        self.sessions = [SimpleNamespace(env=SimpleNamespace(stack="torch")) for _ in range(2)]
        self.restarts = 0
        self.visits: list[str] = []
        self.rng = random.Random(5)

    def restart(self) -> None:
        self.restarts += 1

    def _rounds(self, name: str, m: WorkloadMeasurement, share: float, least_total: int, least_new: int) -> None:
        pol = SamplingPolicy(budget_s=1.0)
        t0, new = self.clock[0], 0
        while True:
            m.ratios.append(math.exp(self.rng.gauss(0.0, self.spreads[name])))
            assert m.rounds is not None
            m.rounds.append(Round("baseline", m.visits + 1, {}))
            self.clock[0] += self.round_s
            new += 1
            stop, _ = pol.should_stop_rounds(m.ratios, self.clock[0] - t0, share, least_total)
            if stop and new >= least_new:
                break
        m.elapsed_s = (m.elapsed_s or 0.0) + self.clock[0] - t0
        m.visits += 1

    def measure(self, w, share_s, min_rounds=None):
        self.visits.append(w.name)
        envs = {"baseline": EnvMeasurement("ok"), "baseline-2": EnvMeasurement("ok")}
        m = WorkloadMeasurement(w, envs, rounds=[], status="ok")
        self._rounds(w.name, m, share_s, min_rounds or 12, 1)
        return m

    def extend(self, w, m, share_s, min_new=2):
        self.visits.append(w.name)
        self._rounds(w.name, m, share_s, 12, min_new)
        return True


class _Journal:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def append(self, kind: str, doc: dict) -> None:
        self.lines.append((kind, json.loads(json.dumps(doc))))  # as the journal writes it, at that moment


def _two_pass_run(
    spreads: dict[str, float], budget: float = 1.0, runner_cls=None, journal=None, record=None, policy=None
):
    from mpsup.bench.run import _two_passes
    from mpsup.bench.runner import BenchOptions
    from mpsup.workloads import Workload

    clock = [0.0]
    runner = (runner_cls or _FakeRunner)(spreads, clock)
    workloads = [
        Workload(n, "linear", "linear", "bf16", {"tokens": 1, "in_features": 8, "out_features": 8}) for n in spreads
    ]
    record = {"workloads": []} if record is None else record
    events: list[Event] = []

    opts = BenchOptions(device="cpu", policy=policy or SamplingPolicy(budget_s=budget), clock=lambda: clock[0])
    _two_passes(
        runner,  # type: ignore[arg-type]
        workloads,
        opts,
        record,
        lambda kind, doc: record[kind].append(doc),
        events.append,
        journal,
        NoStops(),  # type: ignore[arg-type]
    )
    return runner, record, events


def test_every_finished_visit_is_journaled_as_the_record_holds_it():
    journal = _Journal()
    runner, record, _ = _two_pass_run({"quiet": 0.0005, "wild": 0.3}, journal=journal)
    assert journal.lines and {kind for kind, _ in journal.lines} == {"workload-extended"}
    assert len(journal.lines) == len(runner.visits) - 2  # every visit after the first of each workload
    last = {line["index"]: line["workload"] for _, line in journal.lines}
    assert [last[i] for i in range(len(record["workloads"]))] == record["workloads"]
    assert all(doc["visits"] >= 2 and len(doc["rounds"]) == len(doc["ratios"]) for doc in last.values())


class _StoppedMidVisit(_FakeRunner):
    """Ctrl-C lands in a second visit, after that visit took one round."""

    def extend(self, w, m, share_s, min_new=2):
        self.visits.append(w.name)
        m.ratios.append(2.0)
        m.rounds.append(Round("baseline", m.visits + 1, {}))
        raise KeyboardInterrupt


def test_a_visit_cut_short_leaves_what_it_took_in_the_record_but_not_in_the_journal():
    journal, record = _Journal(), {"workloads": []}
    with pytest.raises(KeyboardInterrupt):
        _two_pass_run({"a": 0.01, "b": 0.02}, runner_cls=_StoppedMidVisit, journal=journal, record=record)
    first, second = record["workloads"]
    # The saved record keeps the cut visit's round (as the dict-based runner did); a recovered journal
    # would hold the first visit only.
    assert first["ratios"][-1] == 2.0 and first["visits"] == 1
    assert second["ratios"] and 2.0 not in second["ratios"]
    assert journal.lines == []


def test_two_passes_split_every_workload_over_two_process_pairs_and_feed_the_noisiest():
    spreads = {"quiet": 0.0005, "mild": 0.03, "wild": 0.3}
    runner, record, events = _two_pass_run(spreads)
    by_name = {d["name"]: d for d in record["workloads"]}
    assert runner.restarts == 1
    # Every workload reaches twelve rounds, half of them from each pair of processes.
    assert all(len(d["ratios"]) >= 12 for d in by_name.values())
    # The quiet one converged at twelve rounds and is left alone; the wild one gets the leftover, first.
    assert len(by_name["quiet"]["ratios"]) == 12
    leftover = runner.visits[2 * len(spreads) :]
    assert leftover and leftover[0] == "wild"
    assert len(by_name["wild"]["ratios"]) > len(by_name["mild"]["ratios"]) >= 12
    # The progress total matches the workloads; every first-pass step carries an ETA.
    firsts = [e for e in events if isinstance(e, WorkloadStarted)]
    assert len(firsts) == len(spreads) and all(e.eta_s is not None and e.eta_s >= 0 for e in firsts)
    assert sum(isinstance(e, WorkloadDone) for e in events) == len(spreads)


def test_two_passes_spend_no_more_than_the_budgets_plus_the_floors():
    spreads = {f"w{i}": 0.05 * (i % 4) + 0.001 for i in range(12)}
    _, record, _ = _two_pass_run(spreads, budget=1.0)
    spent = sum(d["elapsed_s"] for d in record["workloads"])
    # Twelve rounds of 10 ms are the floor; beyond it, the leftover pass only redistributes the budgets.
    assert spent <= len(spreads) * 1.0 + 1e-6
    quiet = [d for d in record["workloads"] if d["name"] in ("w0", "w4", "w8")]
    assert all(d["elapsed_s"] < 0.2 for d in quiet)  # converged early: their time is saved, not spent


def test_a_round_cut_between_its_two_appends_is_not_written():
    """A signal between `ratios.append` and `rounds.append` must not shift every later round's visit."""
    from mpsup.workloads import Workload

    w = Workload("linear/8x8/t1", "linear", "linear", "bf16", {"in_features": 8, "out_features": 8, "tokens": 1})
    envs = {"baseline": EnvMeasurement("ok"), "baseline-2": EnvMeasurement("ok")}
    m = WorkloadMeasurement(w, envs, rounds=[Round("baseline", 1, {})], status="ok")
    m.ratios.extend([1.01, 0.5])  # the second ratio's round never made it
    doc = m.to_json()
    assert doc["ratios"] == [1.01] and len(doc["rounds"]) == 1


def test_a_leftover_visit_goes_only_where_it_can_reach_the_target_when_the_policy_says_so():
    """One environment's policy feeds only the intervals its time can bring within the target: the wild one
    (about +-20%) would need far more than three budgets, so it gets no visit and its time is not spent; the
    mild one (a few %) gets one. A paired policy still feeds the wild one first."""
    from dataclasses import replace

    from mpsup.bench.policy import within_reach

    spreads = {"quiet": 0.0005, "mild": 0.03, "wild": 0.3}
    reach_only = replace(SamplingPolicy(budget_s=1.0), leftover_reachable_only=True)
    runner, record, _ = _two_pass_run(spreads, policy=reach_only)
    leftover = runner.visits[2 * len(spreads) :]
    assert "wild" not in leftover and "mild" in leftover
    visits = {d["name"]: d["visits"] for d in record["workloads"]}
    assert visits["wild"] == 2 and visits["mild"] > 2  # two pairs of processes each; mild once more
    fed, _, _ = _two_pass_run(spreads)
    assert fed.visits[2 * len(spreads)] == "wild"
    assert SamplingPolicy.for_environments(1).leftover_reachable_only
    assert not SamplingPolicy.for_environments(2).leftover_reachable_only
    # +-4% after 1 s: four times the time halves it (reaches +-2%), three times does not.
    assert within_reach(0.04, 1.0, 3.0, 0.02) and not within_reach(0.04, 1.0, 2.9, 0.02)
    assert within_reach(math.inf, 1.0, 0.0, 0.02)  # unbounded: it may try
