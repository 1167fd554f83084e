"""Calibration on synthetic paired runs with known truth: drift, heavy tails, outliers, first-mover
effects and per-process placement biases. Compares the per-workload calls and the suite verdict of
the method before issue 12 (per-workload bootstrap, no multiplicity control, within-workload suite
bootstrap) with the current one (`mpsup.report.analysis.analyze`), and the anchors' per-workload
rules (pyperf's t-test, asv's Mann-Whitney + factor 1.1; `anchors_compare.py`) on the same samples.

    python benchmarks/calibrate_synthetic.py [--reps 40] [--workloads 118] [--json out.json]

Prints a compact table and writes JSON. About 1-2 minutes on one core at the defaults."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from anchors_compare import anchor_calls

from mpsup.report.analysis import analyze
from mpsup.stats import bootstrap_geomean_ci, classify_change, paired_ratio_ci


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


# The method before issue 12, the current one (alone and with an A/A floor), and the anchors' rules.
METHODS = ("before", "after", "after+aa", "pyperf", "asv")

SCENARIOS = [
    Scenario("aa-plain", rounds=16),
    Scenario("aa-tails+outliers", rounds=16, noise=0.05, outlier_rate=0.08),
    Scenario("aa-placement-2%", rounds=16, placement=0.01, shared_bias=0.02),
    Scenario("aa-few-rounds", rounds=6, noise=0.05),
    Scenario("change-10x1.10", rounds=16, changed=10, change=1.10),
    Scenario("change-10x0.90", rounds=16, changed=10, change=0.90),
    Scenario("change-all-1.05", rounds=16, changed=10**9, change=1.05),
]


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


def before(rec: dict[str, Any], seed: int) -> tuple[list[str], tuple[float, float, float]]:
    """The pre-issue-12 method, from the functions still in mpsup.stats."""
    calls = [classify_change(paired_ratio_ci(w["ratios"], seed=seed + i)) for i, w in enumerate(rec["workloads"])]
    s = bootstrap_geomean_ci([w["ratios"] for w in rec["workloads"]], seed=seed)
    return calls, (s.estimate, s.low, s.high)


def after(
    rec: dict[str, Any], seed: int, aa: dict[str, Any] | None = None
) -> tuple[list[str], tuple[float, float, float], str]:
    a = analyze(rec, seed=seed, aa_reference=aa)
    by_name = {w.name: w.change for w in a.workloads}
    s = a.suite_geomean
    assert s is not None
    return [by_name[w["name"]] for w in rec["workloads"]], (s.estimate, s.low, s.high), a.verdict


def anchor(rec: dict[str, Any], method: str) -> list[str]:
    """pyperf's or asv's call per workload on the same record (each side's per-round samples)."""
    got = anchor_calls(rec)
    return [got[w["name"]][method] if w["name"] in got else "n/a" for w in rec["workloads"]]


def evaluate(sc: Scenario, reps: int, n_workloads: int, seed: int) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {}
    for method in METHODS:
        fp_runs = fp_runs2 = flagged_null = found = wrong_dir = truly_changed = suite_excl1 = 0
        for rep in range(reps):
            rng = random.Random(seed * 1000 + rep)
            rec, truths = make_record(sc, n_workloads, rng)
            suite: tuple[float, float, float] | None = None
            if method == "before":
                calls, suite = before(rec, rep)
            elif method in ("pyperf", "asv"):
                calls = anchor(rec, method)  # no suite-level call
            elif method == "after":
                calls, suite, _ = after(rec, rep)
            else:
                aa, _ = make_record(
                    Scenario(**{**sc.__dict__, "name": "aa", "changed": 0}),
                    n_workloads,
                    random.Random(seed * 1000 + rep + 555),
                )
                calls, suite, _ = after(rec, rep, aa)
            nulls = [c for c, t in zip(calls, truths, strict=True) if t == 1.0 and c != "same" and c != "n/a"]
            flagged_null += len(nulls)
            fp_runs += len(nulls) > 0
            fp_runs2 += len(nulls) > 1
            for c, t in zip(calls, truths, strict=True):
                if t != 1.0:
                    truly_changed += 1
                    want = "faster" if t > 1 else "slower"
                    found += c == want
                    wrong_dir += c not in (want, "same", "n/a")
            suite_excl1 += suite is not None and (suite[1] > 1 or suite[2] < 1)
        rows[method] = {
            "runs_with_any_null_flagged": fp_runs / reps,
            "runs_with_2plus_null_flagged": fp_runs2 / reps,
            "null_flagged_per_run": flagged_null / reps,
            "power": found / truly_changed if truly_changed else float("nan"),
            "wrong_direction": wrong_dir,
            "suite_interval_excludes_1": suite_excl1 / reps if method not in ("pyperf", "asv") else float("nan"),
        }
    return {"scenario": sc.__dict__, "reps": reps, "workloads": n_workloads, **rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--workloads", type=int, default=118)
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--only", default="", help="run only scenarios whose name contains this")
    p.add_argument("--json", type=Path, default=Path("calibrate_synthetic.json"))
    args = p.parse_args(argv)
    t0 = time.monotonic()
    results = [
        evaluate(sc, args.reps, args.workloads, args.seed + k) for k, sc in enumerate(SCENARIOS) if args.only in sc.name
    ]
    hdr = f"{'scenario':20} {'method':8} {'P(>=1 FP)':>9} {'P(>=2 FP)':>9} {'FP/run':>7} {'power':>6} {'suite!=1':>8}"
    print(hdr)
    for r in results:
        for m in METHODS:
            x = r[m]
            pw = "-" if math.isnan(x["power"]) else f"{x['power']:.2f}"
            s1 = "-" if math.isnan(x["suite_interval_excludes_1"]) else f"{x['suite_interval_excludes_1']:.2f}"
            print(
                f"{r['scenario']['name']:20} {m:8} {x['runs_with_any_null_flagged']:9.2f} "
                f"{x['runs_with_2plus_null_flagged']:9.2f} "
                f"{x['null_flagged_per_run']:7.2f} {pw:>6} {s1:>8}"
            )
    print(f"({args.reps} runs x {args.workloads} workloads per scenario; {time.monotonic() - t0:.0f} s)")
    args.json.write_text(json.dumps({"results": results, "seconds": time.monotonic() - t0}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
