"""Synthetic paired run records with a known truth: drift, heavy tails, outliers, first-mover effects and
per-process placement biases, for tests of the report's calls (what a real machine cannot give: the answer)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scenario:
    name: str
    rounds: int
    noise: float = 0.03  # log-sd of one side's round median
    tail_df: float = 3.0  # Student-t degrees of freedom of that noise (heavy tails)
    outlier_rate: float = 0.03  # rounds in which one side is hit by a 1.2-1.6x stall
    drift: float = 0.01  # AR(1) drift of the ratio across rounds (what pairing does not fully remove)
    first_mover: float = 0.01  # the side that runs first in a round is this much slower
    placement: float = 0.0  # log-sd of a fixed per-workload bias between the two worker processes
    shared_bias: float = 0.0  # a bias every launch-bound workload shares (process placement)
    changed: int = 0  # workloads with a real change
    change: float = 1.0  # its size (speedup)


def _t(rng: random.Random, df: float) -> float:
    # Student-t scaled to unit variance: heavy tails without infinite variance.
    z = rng.gauss(0, 1)
    chi = sum(rng.gauss(0, 1) ** 2 for _ in range(int(df)))
    return z / math.sqrt(chi / df) * math.sqrt((df - 2) / df)


def make_record(sc: Scenario, n_workloads: int, rng: random.Random) -> tuple[dict[str, Any], list[float]]:
    workloads, truths = [], []
    for i in range(n_workloads):
        truth = sc.change if i < sc.changed else 1.0
        launch_bound = i % 3 == 0
        # A property of the machine and the two worker processes, the same in every run: an A/A run
        # of the same setup sees it too (what the A/A floor is for).
        bias = math.exp(random.Random(7919 * i).gauss(0, sc.placement)) * (
            (1 + sc.shared_bias) if launch_bound else 1.0
        )
        base = 2e-5 * (1 + i % 17)
        a_s, b_s, ratios = [], [], []
        d = 0.0
        for r in range(sc.rounds):
            d = 0.7 * d + rng.gauss(0, sc.drift)
            a = base * math.exp(sc.noise * _t(rng, sc.tail_df))
            b = base / truth / bias * math.exp(sc.noise * _t(rng, sc.tail_df) + d)
            if rng.random() < sc.outlier_rate:
                stall = rng.uniform(1.2, 1.6)
                a, b = (a * stall, b) if rng.random() < 0.5 else (a, b * stall)
            if r % 2 == 0:
                a *= 1 + sc.first_mover
            else:
                b *= 1 + sc.first_mover
            a_s.append(a)
            b_s.append(b)
            ratios.append(a / b)
        workloads.append(
            {
                "name": f"linear/w{i}",
                "part": "linear",
                "tags": ["small" if launch_bound else "large"],
                "count": 1,
                "status": "ok",
                "ratios": ratios,
                "envs": {
                    "baseline": {"status": "ok", "samples": a_s, "median": sorted(a_s)[len(a_s) // 2]},
                    "candidate": {"status": "ok", "samples": b_s, "median": sorted(b_s)[len(b_s) // 2]},
                },
            }
        )
        truths.append(truth)
    rec = {
        "schema": "mpsup.run/1",
        "id": "synthetic",
        "mode": "paired",
        "device": "cpu",
        "workloads": workloads,
        "environments": [
            {"label": "baseline", "torch_version": "x", "device_name": "synthetic"},
            {"label": "candidate", "torch_version": "x", "device_name": "synthetic"},
        ],
    }
    return rec, truths
