"""Calibration of the statistics on synthetic data with known truth."""

from __future__ import annotations

import random

from mpsup.report.analysis import analyze
from mpsup.stats import Interval, classify_change, paired_ratio_ci
from tests.synthetic import paired_record


def _rounds(truth: float, noise: float, n: int, rng: random.Random) -> list[float]:
    return [truth * rng.lognormvariate(0, noise) for _ in range(n)]


def test_aa_false_positive_rate_at_most_5_percent():
    rng = random.Random(42)
    trials = 600
    flagged = 0
    for t in range(trials):
        ci = paired_ratio_ci(_rounds(1.0, 0.03, 20, rng), seed=t)
        flagged += classify_change(ci, threshold=0.03) != "same"
    assert flagged / trials <= 0.05


def test_interval_alone_is_calibrated_without_threshold():
    """Without the practical floor, the interval still excludes 1 in about 5% of A/A trials or fewer."""
    rng = random.Random(7)
    trials = 600
    excluded = sum(
        (lambda ci: ci.low > 1 or ci.high < 1)(paired_ratio_ci(_rounds(1.0, 0.03, 20, rng), seed=t))
        for t in range(trials)
    )
    assert excluded / trials <= 0.07


def test_power_detects_5_and_25_percent():
    rng = random.Random(3)
    for truth, expected_rate in ((1.05, 0.9), (1.25, 0.99)):
        hits = sum(
            classify_change(paired_ratio_ci(_rounds(truth, 0.02, 20, rng), seed=t)) == "faster" for t in range(300)
        )
        assert hits / 300 >= expected_rate, (truth, hits)
    slower = sum(
        classify_change(paired_ratio_ci(_rounds(1 / 1.25, 0.02, 20, rng), seed=t)) == "slower" for t in range(100)
    )
    assert slower >= 99


def test_practical_threshold():
    assert classify_change(Interval(1.02, 1.01, 1.03)) == "same"  # significant but below 3%
    assert classify_change(Interval(1.05, 1.01, 1.09)) == "faster"
    assert classify_change(Interval(0.95, 0.92, 0.99)) == "slower"
    assert classify_change(Interval(1.10, 0.95, 1.30)) == "same"  # interval includes 1


def test_aa_records_report_no_change_over_seeds():
    verdicts = [analyze(paired_record(1.0, seed=s, noise=0.02)).verdict for s in range(40)]
    assert verdicts.count("no-change") >= 38
    flagged = sum(w.significant for s in range(40) for w in analyze(paired_record(1.0, seed=s)).workloads)
    assert flagged / (40 * 24) <= 0.05


def test_known_speedups_are_found():
    a = analyze(paired_record(1.25, seed=1))
    assert a.verdict == "benefit"
    assert a.suite_geomean is not None and 1.2 < a.suite_geomean.estimate < 1.3
    assert a.suite_geomean.low > 1.15
    b = analyze(paired_record(1.05, seed=2, noise=0.01))
    assert b.verdict == "benefit" and b.suite_geomean.low > 1.0
    r = analyze(paired_record(0.8, seed=3))
    assert r.verdict == "regression"


def test_same_record_same_report():
    rec = paired_record(1.1, seed=5)
    assert analyze(rec, seed=0).to_json() == analyze(rec, seed=0).to_json()


def test_mixed_and_inconclusive():
    names = [w["name"] for w in paired_record()["workloads"]]
    truths = {n: (1.4 if i < 6 else 0.7 if i < 12 else 1.0) for i, n in enumerate(names)}
    assert analyze(paired_record(truths, seed=4)).verdict == "mixed"
    noisy = paired_record(
        1.0,
        seed=5,
        noise=0.4,
        rounds=6,
        hygiene={"before": {"on_battery": True}, "after": {"on_battery": True}, "changed": []},
    )
    a = analyze(noisy)
    assert a.verdict == "inconclusive" and "on battery" in a.sentence
