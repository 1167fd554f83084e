"""The report's energy figures from a record's turns (pure): energy above idle paired by round, per token for a
causal LM's decode, parts that move in batches as run totals, the phase clause and the no-meter line."""

from __future__ import annotations

import random
from typing import Any

import pytest

from mpsup.report.energy import energy_clause, energy_figures, energy_lines
from mpsup.runs.schema import RunRecord

IDLE_W = 100.0


def _turns(rounds: int, watts_above: float, rng: random.Random, *, per_call_s: float) -> list[dict[str, Any]]:
    out = []
    for k in range(rounds):
        calls = 40
        s = calls * per_call_s * rng.uniform(0.97, 1.03)
        gpu = (IDLE_W + watts_above) * s
        out.append({"warmup": False, "calls": calls, "s": s, "round": k, "j": {"gpu": gpu, "cpu": 0.0}})
    return out


def _record(meter: dict[str, Any], rounds: int = 40) -> RunRecord:
    rng = random.Random(5)
    # The candidate takes 1.5x the time at the same power above idle: 1.5x the energy above idle per call.
    base = _turns(rounds, 200.0, rng, per_call_s=0.01)
    cand = _turns(rounds, 200.0, rng, per_call_s=0.015)
    phase = {"phase": "decode", "tokens": 1, "cache": 64}
    env = {"status": "ok", "samples": [0.01] * rounds, "items_per_call": 1}
    doc = {
        "schema": "mpsup.run/1.3",
        "id": "20261206T000000Z-abcdef",
        "mode": "paired",
        "device": "cuda",
        "environments": [{"label": "baseline"}, {"label": "candidate"}],
        "energy_meter": meter,
        "workloads": [
            {
                "name": "model/decode",
                "part": "phase",
                "params": phase,
                **phase,
                "ratios": [1 / 1.5] * rounds,
                "envs": {"baseline": {**env, "energy": base}, "candidate": {**env, "energy": cand}},
            }
        ],
    }
    return RunRecord.from_json(doc, "test")


METER = {
    "name": "nvml",
    "parts": ["gpu", "cpu"],
    "total_parts": ["gpu"],
    "stamped": ["gpu"],
    "main": "gpu",
    "read_s": 0.004,
    "cadence_s": {"gpu": 0.1},
    "idle_w": {"gpu": IDLE_W},
}


def test_energy_above_idle_pairs_by_round_with_an_interval_and_per_token() -> None:
    figs = energy_figures(_record(METER), "baseline", "candidate")
    assert figs is not None and figs.line is None
    fig = figs.model_energy["decode"]
    assert fig is not None and fig["per"] == "token"
    assert fig["energy_ratio"] == pytest.approx(1.5, rel=0.05)
    assert fig["low"] is not None and fig["low"] <= fig["energy_ratio"] <= fig["high"]
    # Idle included, the ratio is the same here (same power): the total is shown beside it.
    assert fig["total_ratio"] == pytest.approx(1.5, rel=0.05)
    assert fig["baseline_w"] == pytest.approx(300.0, rel=0.01) and fig["idle_w"] == IDLE_W
    assert fig["baseline_j"] == pytest.approx(300.0 * 0.01, rel=0.05)  # joules per token: one token per call
    assert fig["parts"]["cpu"] == {"read_zero": True} and fig["parts"]["ane"] is None
    clause = energy_clause(fig)
    assert clause is not None and clause.startswith(f"{fig['energy_ratio']:.2f}x the energy per token (95% CI ")
    assert clause.endswith("; GPU 300.0 W -> 300.0 W")
    assert energy_lines(figs) == [f"decode energy: {clause}"]


def test_a_run_without_a_meter_gives_one_line_and_null_figures() -> None:
    figs = energy_figures(
        _record({"name": None, "why": "no RAPL here (/sys/class/powercap is absent)"}), "baseline", "candidate"
    )
    assert figs is not None
    assert energy_lines(figs) == ["no energy meter on this machine (no RAPL here (/sys/class/powercap is absent))"]
    assert figs.to_json() == {"energy_meter": None, "model_energy": {"decode": None}, "energy": {}}
    assert energy_clause(None) is None
