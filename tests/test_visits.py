"""Whole-model and torch-against-MLX runs: six visits, each in fresh processes, and an interval over the visit
medians, so that one process (or one stack) that reads slow for its whole life is inside the interval."""

from __future__ import annotations

import math
import random
from typing import Any

from mpsup.bench.events import SecondVisitDone, VisitDone, WorkersRestarting
from mpsup.bench.measurement import Round, WorkloadMeasurement
from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.run import _two_passes
from mpsup.bench.runner import BenchOptions
from mpsup.progress import Event
from mpsup.report.analysis import analyze, visit_ci
from mpsup.stats import round_ratio_ci
from mpsup.workloads import Workload
from tests.fake_schedule import FakeWorkers, NoStops
from tests.synthetic import paired_record


class _Runner(FakeWorkers):
    """Two workers on a fake clock; each pair of processes leans its rounds by its own factor (`leans`, one
    per process pair, in start order), as a process that reads slow for its whole life does."""

    def __init__(self, clock: list[float], stacks: tuple[str, str], leans: list[float]) -> None:
        super().__init__(clock, stacks)
        self.leans = leans
        self.visits: list[tuple[str, int]] = []  # (workload, process pair) per visit
        self.rng = random.Random(1)

    def _visit(self, w: Workload, m: WorkloadMeasurement, share: float, least: int) -> None:
        self.visits.append((w.name, self.restarts))
        t0, new = self.clock[0], 0
        lean = self.leans[self.restarts % len(self.leans)]
        while new < least or self.clock[0] - t0 < share:
            m.ratios.append(lean * math.exp(self.rng.gauss(0.0, 0.002)))
            assert m.rounds is not None
            m.rounds.append(Round("baseline" if len(m.ratios) % 2 else "candidate", m.visits + 1, {}))
            self.clock[0] += 0.05
            new += 1
        m.elapsed_s = (m.elapsed_s or 0.0) + self.clock[0] - t0
        m.visits += 1


def _phase(name: str) -> Workload:
    return Workload(name, "phase", "phase", "bf16", {"tokens": 8})


def _linear(name: str) -> Workload:
    return Workload(name, "linear", "linear", "bf16", {"tokens": 1, "in_features": 8, "out_features": 8})


def _run(
    workloads: list[Workload], stacks: tuple[str, str] = ("torch", "torch"), leans: list[float] | None = None
) -> tuple[_Runner, dict[str, Any], list[tuple[float, Event]], float]:
    clock = [0.0]
    runner = _Runner(clock, stacks, leans or [1.0])
    record: dict[str, Any] = {"workloads": []}
    events: list[tuple[float, Event]] = []

    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.5), clock=lambda: clock[0])
    _two_passes(
        runner,  # type: ignore[arg-type]
        workloads,
        opts,
        record,
        lambda kind, doc: record[kind].append(doc),
        lambda e: events.append((clock[0], e)),
        None,
        NoStops(),  # type: ignore[arg-type]
        2.0,  # what starting the workers took: the ETA's price of each restart
    )
    return runner, record, events, clock[0]


def test_a_phase_only_run_visits_every_phase_six_times_in_fresh_processes_and_no_more():
    runner, record, events, _ = _run([_phase("model/prefill"), _phase("model/decode")])
    assert runner.restarts == 5
    for doc in record["workloads"]:
        assert doc["visits"] == 6
        by_visit: dict[int, int] = {}
        for r in doc["rounds"]:
            by_visit[r["visit"]] = by_visit.get(r["visit"], 0) + 1
        assert sorted(by_visit) == [1, 2, 3, 4, 5, 6]
        assert min(by_visit.values()) >= 2  # one ABBA pair at least, each visit
        assert len(doc["ratios"]) >= 12
    # Each visit in its own pair of processes: no leftover visit in the last pair.
    assert [pair for name, pair in runner.visits if name == "model/prefill"] == [0, 1, 2, 3, 4, 5]
    assert sum(isinstance(e, WorkersRestarting) for _, e in events) == 5
    assert sum(isinstance(e, VisitDone) for _, e in events) == 2 * 4
    assert sum(isinstance(e, SecondVisitDone) for _, e in events) == 2


def test_torch_against_mlx_gets_six_visits_whatever_it_measures():
    runner, record, _, _ = _run([_linear("linear/a")], stacks=("torch", "mlx"))
    assert runner.restarts == 5 and record["workloads"][0]["visits"] == 6


def test_a_run_with_layers_keeps_two_visits_and_its_leftover_pass():
    runner, record, _, _ = _run([_phase("model/prefill"), _linear("linear/a")])
    assert runner.restarts == 1
    assert all(doc["visits"] >= 2 for doc in record["workloads"])
    assert {pair for _, pair in runner.visits} == {0, 1}


def test_the_eta_of_a_six_visit_run_holds_every_visit_to_come():
    _, _, events, end = _run([_phase("model/prefill"), _phase("model/decode")])
    # From the first restart on every ETA is what was left (five restarts of 2 s, five visits of each phase
    # at the first one), within 15%, and falls to nothing.
    timed = [(t, e.eta_s) for t, e in events if getattr(e, "eta_s", None) is not None]
    first_restart = next(t for t, e in events if isinstance(e, WorkersRestarting))
    later = [(t, eta) for t, eta in timed if t >= first_restart]
    assert later and later[0][1] is not None and later[0][1] >= 10.0
    for t, eta in later:
        assert eta is not None and abs(eta - (end - t)) <= 0.15 * (end - t) + 0.5, (t, eta, end - t)


def test_one_process_pair_that_reads_slow_is_inside_the_interval():
    # Five pairs read 1.00x, one reads 1.10x: the rounds' interval (one pair's rounds weigh like any other's)
    # is narrow at 1.00x and excludes that pair's lean; the visit medians' interval holds it.
    _, record, _, _ = _run([_phase("model/prefill")], leans=[1.0, 1.0, 1.10, 1.0, 1.0, 1.0])
    doc = record["workloads"][0]
    rounds_iv = round_ratio_ci(doc["ratios"])
    assert rounds_iv.high < 1.05
    groups: dict[int, list[float]] = {}
    for r, rd in zip(doc["ratios"], doc["rounds"], strict=True):
        groups.setdefault(rd["visit"], []).append(r)
    iv = visit_ci([groups[k] for k in sorted(groups)])
    assert iv is not None and iv.n == 6
    assert iv.low < 1.0 < iv.high and iv.high > 1.09


def _six_visits(doc: dict[str, Any], leans: list[float], rounds: int = 4) -> dict[str, Any]:
    w = doc["workloads"][0]
    ratios, marks = [], []
    for visit, lean in enumerate(leans, start=1):
        for k in range(rounds):
            ratios.append(lean * (1.0 + 0.002 * ((k % 3) - 1)))
            marks.append({"first": "baseline" if k % 2 == 0 else "candidate", "visit": visit})
    w["ratios"], w["rounds"] = ratios, marks
    return doc


def test_the_report_interval_is_over_the_visit_medians_from_six_visits():
    leans = [1.00, 1.02, 1.04, 1.06, 1.08, 1.10]
    a = analyze(_six_visits(paired_record(count=1, rounds=24), leans))
    c = a.workloads[0]
    assert c.speedup is not None and c.units == 6
    # Each visit's median is its lean (to the rounds' own +-0.1%): the interval is min to max of them.
    assert math.isclose(c.speedup.low, min(leans), rel_tol=2e-3)
    assert math.isclose(c.speedup.high, max(leans), rel_tol=2e-3)
    # Every visit read at or above 1.00x, one at 1.00x itself: the interval reaches 1x, nothing is called.
    assert c.change == "same"


def test_six_visits_that_all_lean_one_way_are_called():
    a = analyze(_six_visits(paired_record(count=1, rounds=24), [1.30, 1.32, 1.28, 1.31, 1.29, 1.30]))
    c = a.workloads[0]
    assert c.speedup is not None and c.speedup.low >= 1.27 and c.change == "faster"


def test_five_visits_keep_the_rounds_interval():
    doc = _six_visits(paired_record(count=1, rounds=20), [1.00, 1.02, 1.04, 1.06, 1.08])
    a = analyze(doc)
    c = a.workloads[0]
    assert c.speedup == round_ratio_ci(doc["workloads"][0]["ratios"])
    assert visit_ci([[1.0, 1.0]] * 5) is None
    # A visit of one round does not count towards the six.
    assert visit_ci([[1.0, 1.0]] * 5 + [[1.0]]) is None
    assert visit_ci([[1.0, 1.0]] * 6) is not None
