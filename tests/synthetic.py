"""Synthetic paired run records with a known true speedup per workload."""

from __future__ import annotations

import random
from typing import Any

from mpsup.bench.suite import linear_workloads


def paired_record(
    true_speedup: float | dict[str, float] = 1.0,
    *,
    noise: float = 0.02,
    rounds: int = 20,
    seed: int = 0,
    count: int = 24,
    mode: str = "paired",
    run_id: str = "synthetic",
    hygiene: dict[str, Any] | None = None,
    smoke: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    workloads = []
    for i, w in enumerate(linear_workloads((1,))[:count]):
        truth = true_speedup.get(w.name, 1.0) if isinstance(true_speedup, dict) else true_speedup
        base_t = 1e-5 * (1 + i)
        a_samples, b_samples, ratios = [], [], []
        for _ in range(rounds):
            drift = rng.lognormvariate(0, noise)  # shared by both sides of a round: what pairing removes
            a = base_t * drift * rng.lognormvariate(0, noise)
            b = base_t / truth * drift * rng.lognormvariate(0, noise)
            a_samples.append(a)
            b_samples.append(b)
            ratios.append(a / b)
        a_samples_sorted = sorted(a_samples)
        b_samples_sorted = sorted(b_samples)
        env_a = {
            "status": "ok",
            "samples": a_samples,
            "median": a_samples_sorted[rounds // 2],
            "flops_per_call": 2.0 * w.params["in_features"] * w.params["out_features"],
            "memory": {"peak_allocated": 1000},
        }
        env_b = {
            "status": "ok",
            "samples": b_samples,
            "median": b_samples_sorted[rounds // 2],
            "flops_per_call": env_a["flops_per_call"],
            "memory": {"peak_allocated": 800},
        }
        workloads.append(
            {**w.to_json(), "status": "ok", "envs": {"baseline": env_a, "candidate": env_b}, "ratios": ratios}
        )
    return {
        "schema": "mpsup.run/1",
        "id": run_id,
        "created_at": "2026-12-02T10:00:00Z",
        "mode": mode,
        "device": "mps",
        "partial": False,
        "environments": [
            {"label": "baseline", "torch_version": "2.14.1", "device_name": "Apple M4 Max", "python": "/a/python"},
            {"label": "candidate", "torch_version": "2.15.0", "device_name": "Apple M4 Max", "python": "/b/python"},
        ],
        "options": {},
        "hygiene": hygiene or {"before": {}, "after": {}, "changed": []},
        "model": None,
        "workloads": workloads,
        "smoke": smoke or [],
    }
