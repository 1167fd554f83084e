"""The progress bar's ETA over a whole run: every pass the policy plans, on a fake clock (no torch)."""

from __future__ import annotations

import math
import random

import pytest

from mpsup.bench.events import VisitStarted, WorkersRestarting, WorkloadStarted
from mpsup.bench.measurement import Round, WorkloadMeasurement
from mpsup.bench.policy import SamplingPolicy, eta_s, predict_visits
from mpsup.progress import Event
from mpsup.workloads import Workload
from tests.fake_schedule import FakeWorkers, NoStops

MB = 2**20


class _Runner(FakeWorkers):
    """Two workers on a fake clock, costed like the CPU repro (`--aa --budget 0.05`): each visit pays its
    setups and warmup, then rounds until its share is spent and its least rounds are taken; a round's
    length grows with the workload's bytes, so the few vocabulary-sized heads take many times the rest."""

    setup_s = 0.15
    labels = ("baseline", "baseline-2")

    def __init__(self, clock: list[float], start_s: float, spread: float) -> None:
        super().__init__(clock)
        self.restart_s = start_s
        self.spread = spread
        self.rng = random.Random(3)

    def _visit(self, w: Workload, m: WorkloadMeasurement, share_s: float, least: int) -> None:
        t0 = self.clock[0]
        self.clock[0] += self.setup_s
        round_s = 0.004 + w.memory_bytes * 2e-10
        rounds = max(least, math.floor((share_s - self.setup_s) / round_s))
        for _ in range(rounds):
            m.ratios.append(math.exp(self.rng.gauss(0.0, self.spread)))
            assert m.rounds is not None
            m.rounds.append(Round("baseline", m.visits + 1, {}))
            self.clock[0] += round_s
        m.elapsed_s = (m.elapsed_s or 0.0) + self.clock[0] - t0
        m.visits += 1


def _suite() -> list[Workload]:
    """Like `linear/*/t1`: mostly small layers, a heavy head early on, another late."""
    sizes = [32, 8, 112, 112, 1000, 128, 16, 448, 448, 2000] + [2, 4, 8, 16, 24, 32, 48] * 6 + [600, 20, 10]
    return [
        Workload(f"linear/w{i}", "linear", "linear", "bf16", {"tokens": 1}, memory_bytes=s * MB)
        for i, s in enumerate(sizes)
    ]


def _run(budget: float, spread: float) -> tuple[list[tuple[float, Event]], float]:
    """The real two passes over the fake workers: each progress event with the fake time it came at."""
    from mpsup.bench.run import _two_passes
    from mpsup.bench.runner import BenchOptions

    clock = [0.0]
    start_s = 1.0
    runner = _Runner(clock, start_s, spread)
    record: dict = {"workloads": []}
    events: list[tuple[float, Event]] = []

    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=budget), clock=lambda: clock[0])
    _two_passes(
        runner,  # type: ignore[arg-type]
        _suite(),
        opts,
        record,
        lambda kind, doc: record[kind].append(doc),
        lambda e: events.append((clock[0], e)),
        None,
        NoStops(),  # type: ignore[arg-type]
        start_s,
    )
    assert runner.restarts == 1
    return events, clock[0]


def test_before_the_second_pass_the_eta_still_holds_the_second_visits():
    events, end = _run(budget=0.05, spread=0.05)
    firsts = [(t, e.eta_s) for t, e in events if isinstance(e, WorkloadStarted)]
    restart_at = next(t for t, e in events if isinstance(e, WorkersRestarting))
    second_pass = end - restart_at
    assert second_pass > 0.4 * end  # the case the bug hid: half the run still to come
    # The last first-pass workload: its own visit, then fresh workers and every second visit.
    t, eta = firsts[-1]
    assert eta >= second_pass
    assert eta == pytest.approx(end - t, rel=0.2)
    # Once a few visits are timed, every ETA (both passes) is within a third of what was left, and it
    # falls to about nothing at the end instead of restarting from zero at the second pass.
    timed = [(t, eta) for t, e in events if (eta := getattr(e, "eta_s", None)) is not None][5:]
    for t, eta in timed:
        assert eta == pytest.approx(end - t, rel=0.35, abs=0.5), (t, eta, end - t)
    assert timed[-1][1] < 0.1 * end


def test_the_eta_counts_the_leftover_pass_when_there_is_time_to_give():
    # A generous budget and noisy rounds: every workload ends unconverged and gets leftover time.
    events, end = _run(budget=1.0, spread=0.3)
    assert sum(isinstance(e, VisitStarted) for _, e in events) > len(_suite())  # second visits, then leftover ones
    t, eta = next((t, e.eta_s) for t, e in events if isinstance(e, WorkloadStarted) and t > 0.2 * end)
    assert eta == pytest.approx(end - t, rel=0.35)


def test_eta_arithmetic_over_every_pass():
    # Split pairs, budget 1 s: two unvisited workloads expected at 0.2 s each, half of them measured ok
    # ending unconverged; 3 s of second visits of measured ones, 1.5 s to restart, 0.5 s pooled.
    got = eta_s(1.0, [0.2, 0.2], visits=2, ok_share=1.0, open_share=0.5, revisits_s=3.0, restart_s=1.5, pool_s=0.5)
    first, second, leftover = 0.4, 0.4, 0.5 * 2 * (1.0 - 2 * 0.2)
    assert got == pytest.approx(first + second + 3.0 + 1.5 + 0.5 + leftover)
    # One environment: no second visits; the leftover pass's visits each pay a sixth of a visit to set up.
    assert eta_s(1.0, [0.5] * 10, open_share=0.5) == pytest.approx(10 * (0.5 + 0.5 * 0.5))
    assert eta_s(1.0, pool_s=3.0, leftover_visits=5, per_visit_s=0.6) == pytest.approx(3.0 + 0.5)


def test_predicted_visits_scale_with_bytes_and_fall_back_to_the_mean_or_the_share():
    assert predict_visits([], [], [1.0, 2.0], prior_s=0.03) == [0.03, 0.03]
    # Time = 0.1 s + 1 s per GB: the line is found and prices a workload between those seen; one larger than
    # any seen is priced at the longest visit so far (bytes do not price time alike across kinds).
    sizes = [1e8, 2e8, 5e8]
    times = [0.1 + x * 1e-9 for x in sizes]
    assert predict_visits(sizes, times, [4e8, 0.0, 1e9], 0.03) == pytest.approx([0.5, 0.1, 0.6])
    # No spread in size (or a slope pointing down): the mean, never a negative time.
    assert predict_visits([5.0, 5.0], [0.2, 0.4], [9.0], 0.03) == pytest.approx([0.3])
    assert predict_visits([1.0, 9.0], [0.4, 0.2], [100.0], 0.03) == pytest.approx([0.3])
