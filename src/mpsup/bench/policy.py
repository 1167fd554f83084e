"""When to stop warming up, when to stop sampling, and how to share a run's time. Pure functions of
samples, intervals and elapsed time, so that every decision can be tested on synthetic streams."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from mpsup.stats import median_ci, round_ratio_ci

# Seconds per workload, warmup included (both environments together when paired): the shortest budget whose
# paired runs still find clear changes, flag no flat workload and meet the 3% / 1% half-width targets; twice
# that costs far more wall time for little (docs/evidence/history.md).
DEFAULT_BUDGET_S = 0.5

# One environment alone is only ever compared with another run's processes, whose medians of the same workload
# already differ by about 1-3% (benchmarks/aa_summary.py): an interval narrower than +-2% buys nothing and costs
# the noisiest layers their whole budget, and a warmup window of two samples settles as well as three
# (benchmarks/replay_single.py; figures in docs/evidence/).
SINGLE_TARGET_REL_CI = 0.02
SINGLE_WARMUP_WINDOW = 2

# Budget units a whole-model phase (bench --model, part "phase") takes: each of its calls is a whole forward,
# and it must reach the rounds a paired call needs (docs/evidence/figures/cpu_whole_model.txt).
PHASE_BUDGET_FACTOR = 10.0


# A workload of the default suite whose fewest calls (fewest_calls) would take more than this many of its
# budgets is skipped, said so with its call time, rather than measured: a few such workloads would otherwise
# take most of a main job (docs/evidence/figures/cpu_speed_main.txt). Three, as the most the second pass gives
# one workload (max_extension): no workload's bare minimum may cost more.
SLOW_CALL_BUDGETS = 3.0


@dataclass(frozen=True)
class SamplingPolicy:
    budget_s: float = DEFAULT_BUDGET_S
    target_rel_ci: float = 0.01  # stop once the 95% interval is within +-1%
    target_sample_s: float = 0.01  # one sample: long against clock resolution and sync cost
    min_sample_s: float = 0.002  # the shortest a paired sample is made to fit more rounds in
    min_samples: int = 10
    max_samples: int = 2000
    warmup_window: int = 3
    warmup_tolerance: float = 0.02
    warmup_share: float = 0.3  # of the first pass's share, at most
    warmup_max_samples: int = 50  # a stream that never settles (steady drift) still ends its warmup
    batch: int = 5  # samples per request (single) and at most per environment and round (paired)
    # A sign test over rounds has no power below ~12 of them: rounds come before samples per round.
    min_rounds: int = 12
    # The first pass sizes each round so that this many fit in the workload's share.
    planned_rounds: int = 16
    # The first pass spends at most this share of a workload's budget; what an unconverged workload did
    # not spend goes to the second pass, widest interval first.
    first_pass_share: float = 0.6
    leftover: bool = True
    # Paired: every workload's rounds come from two pairs of worker processes (half in each), so a bias
    # one pair of processes has (placement, allocator state, per-process library heuristics) shows up as
    # spread between rounds instead of a consistent lean that the sign test would call a change.
    split_pairs: bool = True
    # The second visit starts, sets up and warms up the other environment first, so whatever going first
    # gives falls to each environment in turn (recorded: a record without it had the baseline always first).
    counterbalance: bool = True
    # Visits (fresh process pairs) of a paired run whose workloads are all whole-model phases, or that sets
    # torch against MLX: there one process, or one stack, can read slow for its whole life (a torch prefill at
    # 30-40 ms beside a plain 25-30 ms), which two visits cannot show. Six is the fewest whose visit medians
    # bound an order-statistic 95% interval (min to max, 96.9%), so process-to-process spread is inside it.
    phase_visits: int = 6
    # In the second pass one workload may take at most this many budgets: one wild workload must not
    # eat every other's time.
    max_extension: float = 3.0
    # The second pass visits only workloads it can bring within the target in the time it could give them
    # (an interval narrowing as 1/sqrt(time)). One environment's intervals describe, they call nothing, and
    # their noise is between-process levels that more samples of one process do not narrow (figures in
    # docs/evidence/). A paired run keeps feeding its noisiest: a narrower interval there can turn "too wide"
    # into a call.
    leftover_reachable_only: bool = False
    # A side whose samples are this long or longer discards no block after a switch: what a switch costs (a
    # context, caches, clocks ramping up, milliseconds) is under 1% of a second-long call, and discarding
    # it doubles the calls of a whole-model phase (one wasted call per side and round). Shorter ones keep it,
    # each side judged by its own samples: without it A/A runs of small layers flag changes
    # (docs/evidence/figures/cpu_long_sample_discard.txt).
    discard_up_to_s: float = 1.0

    @classmethod
    def for_environments(cls, count: int, budget_s: float = DEFAULT_BUDGET_S) -> SamplingPolicy:
        """The default policy of a run over `count` environments: a paired run's rounds are held to +-1%
        (the report's per-workload calls rest on them), one environment's medians to +-2%."""
        if count >= 2:
            return cls(budget_s=budget_s)
        return cls(
            budget_s=budget_s,
            target_rel_ci=SINGLE_TARGET_REL_CI,
            warmup_window=SINGLE_WARMUP_WINDOW,
            leftover_reachable_only=True,
        )

    # -- warmup --------------------------------------------------------------------------------------------

    def warmup_settled(self, samples: list[float], elapsed_s: float) -> bool:
        """Settled when the median of the last window is within tolerance of the window before it."""
        w = self.warmup_window
        if elapsed_s >= self.warmup_share * self.first_share_s:
            return True
        if len(samples) < 2 * w:
            return False
        last = median(samples[-w:])
        before = median(samples[-2 * w : -w])
        return abs(last - before) <= self.warmup_tolerance * before

    def fewest_calls(self, paired: bool) -> int:
        """The calls a measurement cannot do with fewer: six samples alone, min_rounds rounds of one call a side
        paired; and per environment and visit the setup's two (the first, then one to calibrate) and a warmup."""
        visits = self.visits(paired)
        return 2 * (self.min_rounds + 3 * visits) if paired else 6 + 3

    def slow_call_s(self, paired: bool, weight: float = 1.0) -> float:
        """The longest call a workload of `weight` budgets can be measured with in SLOW_CALL_BUDGETS of them."""
        return SLOW_CALL_BUDGETS * weight * self.budget_s / self.fewest_calls(paired)

    def visits(self, paired: bool, whole: bool = False) -> int:
        """Planned visits per workload: two (two pairs of processes) for a paired run with split pairs;
        `phase_visits` where the run is `whole` (every workload a whole-model phase, or torch against MLX)."""
        if not (paired and self.split_pairs):
            return 1
        return max(2, self.phase_visits) if whole else 2

    def visit_rounds(self, visits: int) -> int:
        """The rounds each of `visits` visits takes at least: `min_rounds` over them, and never under one
        ABBA pair (two), so every visit cancels its own first-mover effect."""
        return max(2, math.ceil(self.min_rounds / max(1, visits)))

    @property
    def first_share_s(self) -> float:
        return self.first_pass_share * self.budget_s if self.leftover else self.budget_s

    # -- one environment -----------------------------------------------------------------------------------

    def should_stop(self, samples: list[float], elapsed_s: float, share_s: float | None = None) -> tuple[bool, str]:
        """`share_s`: the time this visit may take (default: the whole budget)."""
        share = self.budget_s if share_s is None else share_s
        n = len(samples)
        if n >= self.max_samples:
            return True, "max-samples"
        # The interval from six samples on (the fewest that bound it), as the record will show it.
        width = median_ci(samples).rel_half_width if n >= 6 else math.inf
        if n >= self.min_samples and converged(width, self.target_rel_ci):
            return True, "converged"
        # Even a tiny budget yields six samples: the fewest with a bounded 95% interval of the median.
        if elapsed_s >= share and n >= min(self.min_samples, 6):
            return True, "budget"
        return False, ""

    # -- two environments, in rounds -----------------------------------------------------------------------

    def samples_per_round(self, sample_s: float, share_s: float) -> int:
        """Timed samples per environment and round (each round also pays one discarded sample per
        environment): as many as fit `planned_rounds` rounds in `share_s`, between 1 and `batch`.
        More, cheaper rounds beat fewer, richer ones: the rounds are the units of the report's test."""
        if sample_s <= 0 or not math.isfinite(sample_s):
            return max(1, self.batch)
        per_env_round = share_s / (self.planned_rounds * 2 * sample_s)
        return max(1, min(self.batch, math.floor(per_env_round) - 1))

    def paired_sample_s(self, share_s: float) -> float:
        """A paired sample's length: short enough that `planned_rounds` rounds of one discarded and one timed
        sample per environment fit in the share, never longer than a single-environment sample, and never
        under 2 ms (clock resolution and the cost of a sync stay small against it)."""
        return max(self.min_sample_s, min(self.target_sample_s, share_s / (self.planned_rounds * 2 * 2)))

    def should_stop_rounds(
        self,
        ratios: Sequence[float],
        elapsed_s: float,
        share_s: float,
        min_rounds: int | None = None,
        *,
        reach_min: bool = False,
    ) -> tuple[bool, str]:
        """After a round: converged (the report's own interval within target, over >= min_rounds rounds),
        or this visit's share spent. A slow workload may overrun its share to reach six rounds (the fewest
        that bound an interval at all), up to five-fold, and three rounds at ten-fold. `min_rounds`: the
        rounds this visit must reach (half of them on a first visit that a second, in fresh processes,
        completes). `reach_min`: no overrun cap before min_rounds, for a whole-model phase: it is the
        verdict, and below 12 rounds the sign test can call nothing (six rounds read "too wide to tell" whatever
        changed)."""
        least = self.min_rounds if min_rounds is None else min_rounds
        n = len(ratios)
        if n >= self.max_samples:
            return True, "max-samples"
        if n >= least and converged(round_ratio_ci(ratios).rel_half_width, self.target_rel_ci):
            return True, "converged"
        if elapsed_s >= share_s and n >= least:
            return True, "budget"
        if reach_min:
            return False, ""
        if (elapsed_s >= 5 * share_s and n >= 6) or (elapsed_s >= 10 * share_s and n >= 3):
            return True, "budget"
        return False, ""


def converged(rel_half_width: float, target: float) -> bool:
    return math.isfinite(rel_half_width) and rel_half_width <= target


def net_of_overrun(pool: float, allowances: Sequence[float], spent: Sequence[float]) -> float:
    """The leftover pass's time once what workloads took beyond their allowance (a slow call's six samples, a
    skipped one's timing call) is taken out of it: a run spends its budgets, not its budgets plus the pool."""
    overrun = sum(max(0.0, s - a) for a, s in zip(allowances, spent, strict=True))
    return max(0.0, pool - overrun)


def leftover_pool(budgets: Sequence[float], used: Sequence[float], done: Sequence[bool]) -> float:
    """The second pass's time: the sum of budgets, minus what the first pass used, minus what converged
    workloads did not use (that time is saved, not handed out)."""
    return sum(max(0.0, b - u) for b, u, d in zip(budgets, used, done, strict=True) if not d)


def next_allotment(pool_s: float, widths: Sequence[float], cap_s: float) -> float:
    """Seconds for the widest of the workloads still open (`widths`, relative half-widths, the first
    being the one to visit now, inf for an unbounded interval): a share of the pool proportional to its
    width, at most `cap_s`. Called again for the next one with what remains, so time a converged
    workload gives back flows to the ones after it."""
    if pool_s <= 0 or not widths:
        return 0.0
    # An unbounded interval counts as the widest bounded one doubled (or 100%): it needs time most.
    finite = [w for w in widths if math.isfinite(w)]
    big = 2 * max(finite) if finite else 1.0
    ws = [w if math.isfinite(w) else max(big, 1.0) for w in widths]
    total = sum(ws)
    share = pool_s * ws[0] / total if total > 0 else pool_s / len(ws)
    return min(cap_s, share)


def within_reach(rel_half_width: float, spent_s: float, more_s: float, target: float) -> bool:
    """Whether `more_s` of measuring, added to the `spent_s` a workload has had, would bring its interval
    within `target` if it narrows as 1/sqrt(time). An unbounded interval (too few samples) cannot be
    judged, so it may try."""
    if not math.isfinite(rel_half_width) or spent_s <= 0:
        return True
    return rel_half_width * math.sqrt(spent_s / (spent_s + max(0.0, more_s))) <= target


def widest_first(widths: dict[str, float], target: float) -> list[str]:
    """The workloads a second pass visits, widest interval first; converged ones are left alone."""
    open_ = [(name, w) for name, w in widths.items() if not converged(w, target)]
    return [name for name, _ in sorted(open_, key=lambda kv: -(kv[1] if math.isfinite(kv[1]) else math.inf))]


def predict_visits(
    sizes_done: Sequence[float], times_done: Sequence[float], sizes: Sequence[float], prior_s: float
) -> list[float]:
    """What each visit still to come will take (`sizes`: its workload's bytes), from what the finished
    ones took: a least-squares line of time over bytes. A visit costs a fixed part (setups, warmup, rounds
    of the shortest samples) and a part that grows with the data once a call outlasts the sample target;
    the mean alone would let a suite's few vocabulary-sized heads, met early, triple the ETA. A slope the data do
    not support (no spread in size, or negative) leaves the mean; before any visit, `prior_s` (the share)."""
    if not times_done:
        return [prior_s] * len(sizes)
    n = len(times_done)
    mean_x, mean_t = sum(sizes_done) / n, sum(times_done) / n
    var = sum((x - mean_x) ** 2 for x in sizes_done)
    slope = sum((x - mean_x) * (t - mean_t) for x, t in zip(sizes_done, times_done, strict=True)) / var if var else 0.0
    slope = max(0.0, slope)
    fixed = max(0.0, mean_t - slope * mean_x)
    # Never beyond the longest visit seen: across kinds (FP8, int8, linears) bytes do not price time alike,
    # and an unclamped line prices a dozen FP8 visits at about ten times what they take.
    longest = max(times_done)
    return [min(fixed + slope * x, longest) for x in sizes]


def eta_s(
    budget_s: float,
    unvisited_s: Sequence[float] = (),
    *,
    visits: int = 1,
    ok_share: float = 1.0,
    open_share: float = 0.0,
    revisits_s: float = 0.0,
    restart_s: float = 0.0,
    pool_s: float = 0.0,
    leftover_visits: int = 0,
    per_visit_s: float = 0.0,
) -> float:
    """Seconds still to come, over every pass the policy plans, not only the one under way.

    First pass: a visit for each unvisited workload (`unvisited_s`: what each is expected to take, setup
    included). Split pairs (`visits` 2): `restart_s` for fresh workers, then a second visit for every measured
    workload that has not had it (`revisits_s`: each about what its own first visit took, as it has the
    same rounds and share) and for the `ok_share` of the unvisited ones that will measure. Leftover: the
    pool expected so far (`pool_s`), and for the `open_share` of unvisited workloads that will end
    unconverged, what their budget leaves after their visits; `leftover_visits` pay their setup again (a
    sixth of a visit of `per_visit_s`)."""
    first = sum(unvisited_s)
    later = max(0, visits - 1) * ok_share * first
    leftover = open_share * sum(max(0.0, budget_s - visits * t) for t in unvisited_s)
    return first + later + revisits_s + restart_s + pool_s + leftover + leftover_visits * per_visit_s / 6
