"""Going first must not fall to one environment: a paired run's second visit sets up in the other order,
and a restart starts the workers in the other order."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.workloads import Workload


class _Session:
    def __init__(self, label: str, log: list[tuple[str, str]]) -> None:
        self.env = EnvSpec(label, Path(sys.executable))
        self.log = log
        self.facts: dict[str, Any] = {}
        self.crashes = 0

    def start(self) -> dict[str, Any]:
        self.log.append(("start", self.env.label))
        return {}

    def close(self, *, force: bool = False) -> None:
        self.log.append(("close", self.env.label))

    def request(self, doc: dict[str, Any], timeout: float = 0) -> dict[str, Any]:
        op = doc["op"]
        if op == "setup":
            self.log.append(("setup", self.env.label))
            return {"type": "ready", "calls": 4, "per_call_s": 1e-4}
        if op == "sample":
            self.log.append(("sample", self.env.label))
            n = int(doc.get("count", 1)) + int(doc.get("discard", 0))
            return {
                "type": "samples",
                "host": [1e-4] * n,
                "device": None,
                "discarded": [1e-4] * int(doc.get("discard", 0)),
            }
        return {"type": "done", "memory": {}}


def _runner(log: list[tuple[str, str]], counterbalance: bool = True) -> Runner:
    runner = Runner(
        [EnvSpec("baseline", Path(sys.executable)), EnvSpec("candidate", Path(sys.executable))],
        BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.05, counterbalance=counterbalance)),
    )
    runner.sessions = [_Session("baseline", log), _Session("candidate", log)]  # type: ignore[list-item]
    return runner


def _after_setups(log: list[tuple[str, str]]) -> list[str]:
    """Who samples first (warmup) after each pair of setups."""
    firsts = []
    for i in range(len(log) - 2):
        if log[i][0] == "setup" and log[i + 1][0] == "setup" and log[i + 2][0] == "sample":
            firsts.append(log[i + 2][1])
    return firsts


def test_the_second_visit_sets_up_and_starts_in_the_other_order() -> None:
    log: list[tuple[str, str]] = []
    runner = _runner(log)
    w = Workload("linear/a", "linear", "linear", "bf16", {"tokens": 1, "in_features": 8, "out_features": 8})
    m = runner.measure(w, 0.05, 4)
    assert m.status == "ok" and m.visits == 1
    runner.restart()
    assert runner.extend(w, m, 0.05) and m.visits == 2
    runner.restart()
    assert runner.extend(w, m, 0.05) and m.visits == 3
    setups = [label for op, label in log if op == "setup"]
    starts = [label for op, label in log if op == "start"]
    assert setups == ["baseline", "candidate", "candidate", "baseline", "baseline", "candidate"]
    assert starts == ["candidate", "baseline", "baseline", "candidate"]
    assert {r.visit for r in m.rounds or []} == {1, 2, 3}
    assert _after_setups(log) == ["baseline", "candidate", "baseline"]  # warmup follows the setup order


def test_counterbalance_off_keeps_the_baseline_first() -> None:
    log: list[tuple[str, str]] = []
    runner = _runner(log, counterbalance=False)
    w = Workload("linear/a", "linear", "linear", "bf16", {"tokens": 1, "in_features": 8, "out_features": 8})
    m = runner.measure(w, 0.05, 4)
    runner.restart()
    runner.extend(w, m, 0.05)
    assert [label for op, label in log if op == "setup"] == ["baseline", "candidate"] * 2
    assert [label for op, label in log if op == "start"] == ["baseline", "candidate"]
