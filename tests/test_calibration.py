"""Issue 12: per-workload calls under drift, heavy tails and placement bias; the A/A floor; unbounded intervals."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from mpsup.report.analysis import aa_floors, analyze, matching_aa
from mpsup.report.render import render_markdown, summary_lines
from mpsup.stats import Interval, benjamini_hochberg, block_ratios, round_ratio_ci, sign_test_p

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibrate_synthetic import Scenario, make_record


def test_block_ratios_cancel_a_first_mover_effect():
    # A-first rounds read 1.05, B-first 1/1.05: each ABBA block is exactly 1.
    rs = [1.05 if i % 2 == 0 else 1 / 1.05 for i in range(24)]
    assert all(abs(u - 1) < 1e-12 for u in block_ratios(rs))
    assert len(block_ratios(rs)) == 12
    assert block_ratios(rs[:16]) == rs[:16]  # too few rounds to pair: rounds stay the units


def test_sign_test_is_exact():
    assert sign_test_p([1.1] * 6) == 2 / 64
    assert sign_test_p([1.1, 0.9]) == 1.0
    assert sign_test_p([1.0, 1.0]) == 1.0
    assert sign_test_p([1.1] * 200) < 1e-50  # no float binomial underflow to nonsense


def test_benjamini_hochberg_step_up():
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.5], q=0.05) == [True, True, True, False]
    assert benjamini_hochberg([0.04, 0.5], q=0.05) == [False, False]  # 0.04 > 0.05 * 1/2
    assert benjamini_hochberg([]) == []


def test_unbounded_interval_says_how_many_rounds():
    ci = round_ratio_ci([1.0, 1.02, 0.98, 1.01])
    assert not ci.bounded and ci.n == 4
    rec, _ = make_record(Scenario("few", rounds=4), 5, random.Random(1))
    md = render_markdown(analyze(rec))
    assert "n/a: 4 rounds; raise --budget" in md
    assert "inf" not in md
    assert analyze(rec).to_json()["workloads"][0]["bounded"] is False


def test_aa_with_drift_tails_and_placement_flags_at_most_one_workload():
    sc = Scenario("aa", rounds=16, noise=0.05, outlier_rate=0.08, placement=0.01, shared_bias=0.02)
    many = 0
    covered = 0
    for rep in range(4):
        rec, _ = make_record(sc, 118, random.Random(100 + rep))
        # The placement biases belong to the machine: one run cannot tell them from torch, an A/A
        # run of the same setup can (its floor); the suite interval must cover 1 either way.
        aa, _ = make_record(sc, 118, random.Random(200 + rep))
        a = analyze(rec, seed=rep, aa_reference=aa)
        many += sum(w.significant for w in a.workloads) > 1
        assert a.suite_geomean is not None
        covered += a.suite_geomean.low <= 1 <= a.suite_geomean.high
        assert a.verdict in ("no-change", "inconclusive")
    assert many == 0
    assert covered >= 3
    assert "Benjamini-Hochberg" in a.method and any(line.startswith("Method:") for line in summary_lines(a))


def test_real_changes_are_still_found():
    rec, _ = make_record(Scenario("chg", rounds=16, changed=10, change=1.15), 60, random.Random(7))
    a = analyze(rec)
    by = {w.name: w.change for w in a.workloads}
    found = sum(by[f"linear/w{i}"] == "faster" for i in range(10))
    assert found >= 9
    assert sum(by[f"linear/w{i}"] != "same" for i in range(10, 60)) == 0


def test_aa_floor_raises_the_threshold_and_says_so():
    # A 4% systematic bias per workload: the plain threshold (3%) calls it; an A/A run of the same
    # setup that shows the same bias lifts the floor above it.
    sc = Scenario(
        "bias", rounds=20, noise=0.005, outlier_rate=0, drift=0, first_mover=0, placement=0, changed=10**9, change=1.04
    )
    rec, _ = make_record(sc, 12, random.Random(3))
    aa, _ = make_record(sc, 12, random.Random(4))
    aa["mode"], aa["id"] = "aa", "aa-run"
    rec["id"] = "cand-run"
    assert sum(w.change == "faster" for w in analyze(rec).workloads) == 12
    # matching_aa and aa_floors take typed records (what the store loads); analyze also takes documents.
    from mpsup.runs.schema import as_record

    ref = matching_aa(as_record(rec), [as_record(aa)])
    assert ref is not None and ref.id == "aa-run"
    assert all(f > math.log(1.03) for f in aa_floors(ref).values())
    b = analyze(rec, aa_reference=ref)
    assert sum(w.significant for w in b.workloads) <= 2  # an estimate may still land past the A/A run's far end
    assert any("A/A floor from run aa-run" in n for n in b.notes)
    other = {**aa, "device": "mps"}
    assert matching_aa(as_record(rec), [as_record(other)]) is None


def test_interval_carries_n():
    assert Interval(1.0, 0.9, 1.1).bounded and not Interval(1.0, -math.inf, math.inf).bounded


def test_row_times_agree_with_the_speedup():
    rec, _ = make_record(Scenario("chg", rounds=16, changed=3, change=1.3), 6, random.Random(9))
    for w in analyze(rec).workloads:
        assert w.speedup and w.baseline_s and w.candidate_s
        assert math.isclose(w.baseline_s / w.candidate_s, w.speedup.estimate)
        assert w.candidate_measured_s is not None and w.to_json()["candidate_measured_s"] == w.candidate_measured_s


# The anchors' rules, pinned on samples whose real behaviour is known: the examples in pyperf's own
# tests (pyperf/tests/test_utils.py) and asv's (test/test_statistics.py, checked there against R's
# wilcox.test), and cases that follow from the rules as written in their source.
_DATA1 = [89.2, 78.2, 89.3, 88.3, 87.3, 90.1, 95.2, 94.3, 78.3, 89.3]
_DATA2 = [79.3, 78.3, 85.3, 79.3, 88.9, 91.2, 87.2, 89.2, 93.3, 79.9]


def test_pyperf_t_test_matches_pyperfs_own_examples():
    from anchors_compare import pyperf_compare

    c = pyperf_compare(_DATA1, _DATA2)
    assert not c.significant and c.t is not None and math.isclose(c.t, 1.0947229724603977, rel_tol=1e-9)
    assert pyperf_compare(_DATA2, _DATA1).t == -c.t
    big = pyperf_compare([x * 10 for x in _DATA1], _DATA1)
    assert big.significant and big.t is not None and math.isclose(big.t, 43.76839453227327, rel_tol=1e-9)


def test_pyperf_critical_values_follow_its_table_then_steps():
    from anchors_compare import pyperf_t_critical

    assert pyperf_t_critical(1) == 12.706 and pyperf_t_critical(18) == 2.101 and pyperf_t_critical(30) == 2.042
    assert pyperf_t_critical(39) == 2.042  # past the table, before the first step
    assert [pyperf_t_critical(d) for d in (40, 49, 50, 59, 60, 79, 80, 99, 100, 199, 200, 10_000)] == [
        2.021, 2.021, 2.009, 2.009, 2.000, 2.000, 1.990, 1.990, 1.984, 1.984, 1.960, 1.960
    ]  # fmt: skip


def test_pyperf_calls_significant_where_its_t_test_cannot_run():
    from anchors_compare import pyperf_compare

    # Zero variance and unequal lengths raise inside pyperf's tscore; compare_to catches the error and
    # reports the pair as significant, even for identical samples.
    assert pyperf_compare([1.0] * 5, [1.0] * 5).significant
    assert pyperf_compare([1.0, 1.1, 0.9], [1.0, 1.1]).significant
    assert pyperf_compare([1.0], [1.0]).significant  # one value each: no test at all
    # --min-speed (unset by default) is the only practical threshold.
    rng = random.Random(2)
    a = [1.0 + rng.gauss(0, 0.001) for _ in range(50)]
    b = [1.02 + rng.gauss(0, 0.001) for _ in range(50)]
    assert pyperf_compare(a, b).significant and not pyperf_compare(a, b, min_speed=5).significant


def test_asv_mann_whitney_matches_asvs_exact_examples():
    from anchors_compare import asv_mann_whitney_u

    u, p = asv_mann_whitney_u([1, 2, 3, 4], [0.9, 1.1, 0.7])
    assert u == 11 and math.isclose(p, 0.11428571428571428, rel_tol=1e-10)
    u, p = asv_mann_whitney_u([1, 2], [1.5])
    assert u == 1 and math.isclose(p, 1.0)
    u, p = asv_mann_whitney_u([1, 2], [2.5])
    assert u == 0 and math.isclose(p, 2 / 3)


def test_asv_normal_approximation_has_no_continuity_or_tie_correction():
    from anchors_compare import asv_mann_whitney_u

    # Fully separated, 21 a side (past asv's exact limit of 20): z = -(mn/2) / sqrt(mn(N+1)/12).
    u, p = asv_mann_whitney_u([float(i) for i in range(21)], [float(i) + 100 for i in range(21)])
    assert u == 0
    z = -(21 * 21 / 2) / math.sqrt(21 * 21 * 43 / 12)
    assert math.isclose(p, math.erfc(-z / math.sqrt(2)), rel_tol=1e-12)
    # All ties: split towards m*n/2, the least significant outcome.
    assert asv_mann_whitney_u([1.0] * 25, [1.0] * 25)[1] > 0.99


def test_asv_needs_seven_samples_a_side_to_call_anything_by_rank():
    from anchors_compare import asv_is_different

    # 1/C(12, 6) < 0.002 selects the U test, but even full separation gives p = 2/924 > 0.002.
    assert asv_is_different([1.0 + i / 100 for i in range(6)], [2.0 + i / 100 for i in range(6)]) == (
        False,
        "mann-whitney",
    )
    assert asv_is_different([1.0 + i / 100 for i in range(7)], [2.0 + i / 100 for i in range(7)]) == (
        True,
        "mann-whitney",
    )
    # 5 vs 5 cannot reach p < 0.002 at all: asv falls back to its 99% intervals of the median.
    assert asv_is_different([1.0] * 5, [2.0] * 5)[1] == "ci-overlap"


def test_asv_flags_only_past_the_factor_and_never_the_wrong_way():
    from anchors_compare import asv_compare, asv_like

    rng = random.Random(4)
    base = [1.0 + rng.gauss(0, 0.002) for _ in range(40)]
    assert asv_compare(base, [x / 1.2 for x in base]).change == "faster"
    assert asv_compare(base, [x * 1.2 for x in base]).change == "slower"
    assert asv_compare(base, [x * 1.05 for x in base]).change == "same"  # significant, but under 1.1
    assert not asv_like(base, [1.0 + rng.gauss(0, 0.002) for _ in range(40)])
    # One sample a side: no statistics, the factor alone decides (asv's repeat == 1 case).
    one = asv_compare([1.0], [1.2])
    assert one.change == "slower" and one.branch == "factor-only"


def test_anchor_calls_read_paired_rounds():
    from anchors_compare import anchor_calls

    rng = random.Random(6)
    rounds = [
        {
            "first": "a",
            "a": [1.0 + rng.gauss(0, 0.005) for _ in range(5)],
            "b": [1.3 + rng.gauss(0, 0.005) for _ in range(5)],
        }
        for _ in range(12)
    ]
    rec = {
        "environments": [{"label": "a"}, {"label": "b"}],
        "workloads": [{"name": "w", "ratios": [1 / 1.3] * 12, "rounds": rounds}, {"name": "single"}],
    }
    got = anchor_calls(rec)
    assert list(got) == ["w"]
    assert got["w"]["pyperf"] == "slower" and got["w"]["asv"] == "slower"


def test_anchors_compare_rejects_an_unreadable_file(tmp_path: Path, capsys) -> None:
    from anchors_compare import main

    bad = tmp_path / "run.json"
    bad.write_text("{not json")
    assert main([str(bad), "--json", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]


def test_reference_rounds_are_classified_by_every_round():
    from calibrate_h200 import classify_reference

    assert classify_reference([1.06, 1.2, 1.051]) == "faster"
    assert classify_reference([0.9, 0.951]) == "slower"
    assert classify_reference([0.9, 0.953]) == "unclear"  # 0.953 is within 5% of 1 (1/1.05 = 0.952)
    assert classify_reference([1.06, 0.9]) == "unclear"  # beyond 5% both ways is not one change
    assert classify_reference([1.009, 0.992, 1.0]) == "flat"
    assert classify_reference([1.009, 1.011]) == "unclear"
    assert classify_reference([]) == "unclear"


def _per(mpsup: str, before: str = "same", pyperf: str = "same", asv: str = "same") -> dict[str, str]:
    return {"mpsup": mpsup, "before": before, "pyperf": pyperf, "asv": asv}


def test_score_counts_found_wrong_way_and_flat_flags():
    from calibrate_h200 import score

    ref = {
        "f1": [1.1, 1.2],
        "f2": [1.1, 1.08],
        "s1": [0.8, 0.9],
        "flat1": [1.0, 1.005],
        "flat2": [0.998, 1.0],
        "mixed": [1.02, 1.2],
        "not-run": [1.2, 1.2],
    }
    per = {
        "f1": _per("faster", pyperf="faster"),
        "f2": _per("slower", pyperf="faster"),
        "s1": _per("slower", pyperf="slower", asv="slower"),
        "flat1": _per("same", pyperf="faster"),
        "flat2": _per("n/a", before="slower", pyperf="slower"),
        "mixed": _per("faster"),
    }
    sc = score(ref, per)
    assert sc["mpsup"] == {"clear": 3, "found": 2, "wrong_direction": 1, "flat": 2, "flat_flagged": 0}
    assert sc["pyperf"] == {"clear": 3, "found": 3, "wrong_direction": 0, "flat": 2, "flat_flagged": 2}
    assert sc["asv"]["found"] == 1 and sc["before"]["flat_flagged"] == 1


def _aa_row(flagged: dict[str, int]) -> dict[str, object]:
    return {
        "wall_s": 40.0,
        "workloads": 118,
        "flagged": flagged,
        "suite_after": [1.001, 0.99, 1.012],
        "median_half_width": 0.012,
        "p90_half_width": 0.08,
    }


def test_h200_summary_fits_one_screen_and_counts_runs():
    from calibrate_h200 import METHODS, summary_lines

    cub = {
        "workloads": 118,
        "wall_s": 150.0,
        "verdict": "regression",
        "suite_after": [0.95, 0.93, 0.97],
        "reference_geomean": 0.963,
        "score": {m: {"clear": 10, "found": 9, "wrong_direction": 0, "flat": 13, "flat_flagged": 0} for m in METHODS},
        "flagged": dict.fromkeys(METHODS, 12),
        "mpsup_vs_reference_median": 0.02,
        "mpsup_vs_reference_p90": 0.078,
        "min_rounds": 9,
        "per_workload": {
            "linear/8192x28672/t512": {
                **_per("faster", pyperf="faster", asv="faster"),
                "reference": "faster",
                "reference_rounds": [1.08, 1.1, 1.09],
                "mpsup_speedup": 1.085,
            },
            "linear/896x896/t1": {**_per("same"), "reference": "flat", "reference_rounds": [1.0], "mpsup_speedup": 1.0},
        },
    }
    aa = [_aa_row({"mpsup": k % 2, "before": 3, "pyperf": 40, "asv": 2 * (k % 2)}) for k in range(6)]
    doc = {"args": {"work": "w"}, "cublaslt": cub, "aa": aa, "seconds": 530.0, "aa_stopped": "20 s left"}
    lines = summary_lines(doc)
    assert len(lines) <= 24 and max(len(x) for x in lines) <= 100
    text = "\n".join(lines)
    assert "0.963x" in text and "9 / 10" in text
    assert "linear/8192x28672/t512    1.090  1.085  faster   same faster faster" in text
    assert "linear/896x896/t1" not in text  # flat shapes are counted, not listed
    assert "mpsup   runs flagging >= 1: 3/6, >= 2: 0/6" in text
    assert "asv     runs flagging >= 1: 3/6, >= 2: 3/6" in text
    assert "no further run (20 s left)" in text


def test_cpu_summary_says_which_calls_are_right():
    from calibrate_cpu import summary_lines

    per = {
        "linear/4096x4096/t128": {"rounds": 14, "speedup": [0.55, 0.52, 0.58], "mpsup": "slower", "right": True,
                                  "before": "slower", "pyperf": "slower", "asv": "slower"},
        "linear/4096x1024/t128": {"rounds": 6, "speedup": [0.9, None, None], "mpsup": "n/a", "right": False,
                                  "before": "slower", "pyperf": "slower", "asv": "same"},
    }  # fmt: skip
    known = {
        "wall_s": 50.0,
        "threads": {"baseline": 2, "candidate": 1},
        "verdict": "regression",
        "per_workload": per,
        "workloads": 2,
        "right": {"mpsup": 1, "before": 2, "pyperf": 2, "asv": 1},
        "wrong_direction": {"mpsup": 0, "before": 0, "pyperf": 0, "asv": 0},
    }
    aa = [_aa_row({"mpsup": 0, "before": k, "pyperf": 2, "asv": 0}) for k in range(3)]
    lines = summary_lines({"args": {"work": "w"}, "known": known, "aa": aa, "seconds": 400.0})
    text = "\n".join(lines)
    assert "0.550x (0.520-0.580)" in text and "0.900x (n/a)" in text and " NO " in text
    assert "right (slower): mpsup 1/2, before 2/2, pyperf 2/2, asv 1/2" in text
    assert "before     2/3       1/3         1.00" in text


def test_bench_failure_is_one_clear_line(tmp_path: Path) -> None:
    import argparse

    import pytest
    from calibrate_h200 import BenchFailed, bench

    with pytest.raises(BenchFailed) as exc:
        bench(tmp_path / "h", [], argparse.Namespace(device="nope", only="linear"), 0.1, timeout_s=60)
    msg = str(exc.value)
    assert "\n" not in msg and "exited 2" in msg and str(tmp_path / "h" / "bench.log") in msg


def test_report_uses_a_stored_aa_run_as_the_floor(tmp_path: Path, monkeypatch) -> None:
    # The same biased setup as above, but through `mpsup report` over stored records: the CLI must find
    # the A/A run of the same machine by itself and say it leaned on it.
    import json

    from typer.testing import CliRunner

    from mpsup.cli import app
    from mpsup.runs.schema import RunRecord

    sc = Scenario(
        "bias", rounds=20, noise=0.005, outlier_rate=0, drift=0, first_mover=0, placement=0, changed=10**9, change=1.04
    )
    rec, _ = make_record(sc, 12, random.Random(3))
    aa, _ = make_record(sc, 12, random.Random(4))
    aa["mode"], aa["id"] = "aa", "20261201T000000Z-aaaaaa"
    rec["id"] = "20261202T000000Z-cccccc"
    runs = tmp_path / "runs"
    runs.mkdir()
    for doc in (aa, rec):
        RunRecord.from_json(doc, runs / f"{doc['id']}.json")  # the fixture is a record the loader accepts
        (runs / f"{doc['id']}.json").write_text(json.dumps(doc))
    monkeypatch.setenv("MPSUP_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["report", "--run", rec["id"], "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert any("A/A floor from run 20261201T000000Z-aaaaaa" in n for n in doc["notes"])
    assert sum(w["significant"] for w in doc["workloads"]) <= 2


def _single_record(
    samples: list[float], warmup: list[float], elapsed: float = 0.3, visits: int = 1, calls: int = 100
) -> dict[str, object]:
    return {
        "mode": "single",
        "environments": [{"label": "baseline"}],
        "options": {"policy": {"budget_s": 0.5}},
        "workloads": [
            {
                "name": "linear/64x64/t1",
                "elapsed_s": elapsed,
                "visits": visits,
                "envs": {"baseline": {"calls": calls, "samples": samples, "warmup": warmup}},
            }
        ],
    }


def test_replay_stops_where_the_sampling_policy_would() -> None:
    from replay_single import stop_at

    from mpsup.bench.policy import SamplingPolicy

    rng = random.Random(3)
    pol = SamplingPolicy()
    samples = [1e-4 * (1 + 0.04 * rng.gauss(0, 1)) for _ in range(200)]
    found = 0
    for target in (0.01, 0.02, 0.05):
        n = stop_at(samples, target, pol)
        if n is None:
            continue
        found += 1
        # The policy, asked at the runner's batch boundaries, agrees: converged there and not one batch before.
        loose = SamplingPolicy(target_rel_ci=target, budget_s=1e9)
        assert n % pol.batch == 0 and n >= pol.min_samples
        assert loose.should_stop(samples[:n], 0.0) == (True, "converged")
        assert loose.should_stop(samples[: n - pol.batch], 0.0) == (False, "")
    assert found >= 2  # 4% noise reaches +-2% and +-5% within 200 samples
    assert stop_at(samples[:30], 1e-6, pol) is None


def test_replay_warmup_ends_where_the_policy_settles() -> None:
    from replay_single import warmup_end

    from mpsup.bench.policy import SamplingPolicy

    pol = SamplingPolicy(budget_s=1e9)
    warm = [3.0, 2.0, 1.5, 1.2, 1.1, 1.0, 1.0, 1.01, 1.0, 1.0, 0.99, 1.0]
    k = warmup_end([x * 1e-6 for x in warm], pol.warmup_window, pol, 1)
    assert k == 10  # median of 1.01, 1.0, 1.0 against 1.1, 1.0, 1.0: the first window within 2%
    assert warmup_end([x * 1e-6 for x in warm], 2, pol, 1) == 9  # 1.01, 1.0 against 1.0, 1.0
    # The time cap: 0.3 of a 0.3 s first share at 50 ms a sample ends it at the second sample.
    assert warmup_end([5e-4 * (i + 1) for i in range(40)], 3, SamplingPolicy(budget_s=0.5), 100) == 2
    # Steady drift under the cap: warmup_max_samples ends it; a stream too short for any rule gives None.
    drift = [1e-6 * 1.05**i for i in range(60)]
    assert warmup_end(drift, 3, pol, 1) == pol.warmup_max_samples
    assert warmup_end(drift[:5], 3, pol, 1) is None


def test_replay_counts_saved_time_per_visit() -> None:
    from replay_single import replay_target, workloads

    from mpsup.bench.policy import SamplingPolicy

    pol = SamplingPolicy(budget_s=0.5)
    flat = [1e-4] * 40  # 10 ms samples: converges at the first boundary (10), 30 samples saved
    (one,) = workloads(_single_record(flat, [1e-4] * 6, elapsed=0.5))
    assert replay_target([one], 0.01, pol)["saved_s"] == pytest.approx(0.3)
    # Two visits, each 0.05 s of setup and warmup: a stop inside the first visit's share saves the second.
    (two,) = workloads(_single_record(flat, [1e-4] * 6, elapsed=0.5, visits=2))
    assert two.overhead_s == pytest.approx(0.05)
    assert replay_target([two], 0.01, pol)["saved_s"] == pytest.approx(0.5 - 0.05 - 0.1)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"mode": "paired", "workloads": []}', "replays single runs"),
        ("[1, 2]", "not a run record"),
        ("{not json", "not JSON"),
        ('{"mode": "single", "environments": [], "workloads": []}', "sampling policy"),
        ('{"mode": "single", "options": {"policy": {"batch": 0}}, "environments": [{}], "workloads": []}', "values"),
        ('{"mode": "single", "options": {"policy": {}}, "environments": [], "workloads": []}', "no environments"),
    ],
)
def test_replay_refuses_what_it_cannot_replay_in_one_line(tmp_path: Path, capsys, content: str, why: str) -> None:
    from replay_single import main

    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert why in err and str(bad) in err and err.count("\n") == 1


def test_replay_skips_odd_workloads_without_a_traceback(tmp_path: Path, capsys) -> None:
    from replay_single import main

    rec = _single_record([1e-4] * 20, [1e-4] * 6)
    rec["workloads"] += [  # type: ignore[operator]
        {"name": "a", "visits": 0, "elapsed_s": 1.0, "envs": {"baseline": {"calls": 5, "samples": [1e-4] * 9}}},
        {"name": "b", "elapsed_s": "x", "envs": {"baseline": {"calls": 5, "samples": [1e-4] * 9}}},
        {"name": "c", "envs": "nope"},
        "not a workload",
    ]
    path = tmp_path / "single.json"
    path.write_text(json.dumps(rec))
    assert main([str(path), "--targets", "0.01"]) == 0
    assert "1 workloads" in capsys.readouterr().out
    assert main([str(path), "--targets", "abc"]) == 2


def test_aa_summary_counts_flags_and_power_under_each_aa_floor(tmp_path: Path, capsys) -> None:
    from aa_summary import main

    paths = []
    for k in range(2):
        rec, _ = make_record(Scenario("aa", rounds=16), 12, random.Random(k))
        paths.append(tmp_path / f"aa{k}.json")
        paths[-1].write_text(json.dumps(rec))
    changed, _ = make_record(Scenario("change", rounds=16, changed=4, change=1.3), 12, random.Random(9))
    (tmp_path / "cand.json").write_text(json.dumps(changed))
    names = [w["name"] for w in changed["workloads"]]
    per = {n: {"reference_rounds": [1.3] * 5 if i < 4 else [1.0] * 5} for i, n in enumerate(names)}
    (tmp_path / "ref.json").write_text(json.dumps({"cublaslt": {"per_workload": per}}))
    args = [*map(str, paths), "--candidate", str(tmp_path / "cand.json"), "--reference", str(tmp_path / "ref.json")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "mpsup: flagged per run [0, 0]" in out
    assert "no A/A floor: found 4 of 4, wrong way 0, flat flagged 0 of 8" in out
    assert out.count("as the A/A floor: found") == 2
    (tmp_path / "bad.json").write_text("[]")
    assert main([str(tmp_path / "bad.json")]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def _single_side(rec: dict, label: str, run_id: str) -> dict:
    """One environment of a synthetic paired record, as a single run of its own."""
    out = json.loads(json.dumps(rec))
    out.update(id=run_id, mode="single")
    out["environments"] = [dict(e, label="baseline") for e in rec["environments"] if e["label"] == label]
    for w in out["workloads"]:
        w["envs"] = {"baseline": w["envs"][label]}
        w.pop("ratios", None)
        w.pop("rounds", None)
    return out


def test_unpaired_comparison_keeps_the_estimate_and_calls_nothing(tmp_path: Path, capsys) -> None:
    from unpaired_aa import main

    from tests.synthetic import paired_record

    real = paired_record(1.3, seed=3, run_id="20261203T100000Z-p1")
    base, cand = _single_side(real, "baseline", "20261203T100000Z-s1"), _single_side(real, "candidate", "s2")
    paths = []
    for name, rec in (("base.json", base), ("cand.json", cand)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(rec))
    assert main([str(p) for p in paths]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split("|")
    # A real 1.3x between two separate runs: the estimate shows it, and still no call and no verdict.
    assert row[2].strip() == "inconclusive" and row[3].strip().startswith("1.") and row[4].strip() == "0 of 24"
    assert float(row[3].split("x")[0]) > 1.2
    paths[1].write_text("[1, 2")
    assert main([str(p) for p in paths]) == 2
    err = capsys.readouterr().err
    assert str(paths[1]) in err and err.count("\n") == 1 and "Traceback" not in err


def test_unpaired_suite_interval_comes_from_each_sides_samples_and_holds_its_estimate() -> None:
    from mpsup.runs.schema import as_record
    from mpsup.runs.select import merge_single_runs
    from tests.synthetic import paired_record

    real = paired_record(1.3, seed=5, run_id="20261203T100000Z-p2")
    merged = merge_single_runs(
        as_record(_single_side(real, "baseline", "a")), as_record(_single_side(real, "candidate", "b"))
    )
    a = analyze(merged)
    suite = a.suite_geomean
    assert suite is not None and suite.low < suite.estimate < suite.high
    assert 1.2 < suite.estimate < 1.4 and suite.high / suite.low < 1.2
    rows = [w.to_json() for w in a.workloads if w.speedup]
    assert rows and all(r["rounds"] == 0 and r["change"] == "uncalled" for r in rows)


def test_figure_scripts_refuse_absurd_but_valid_records_in_one_line(tmp_path: Path, capsys) -> None:
    from unpaired_aa import main as unpaired_main

    from tests.synthetic import paired_record

    tiny = paired_record(1.0, seed=6, run_id="20261203T100000Z-p3")
    for w in tiny["workloads"]:
        for e in w["envs"].values():
            e["samples"] = [1e-300] * len(e["samples"])
            e["median"] = 1e-300
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    paths[0].write_text(json.dumps(_single_side(tiny, "baseline", "a")))
    paths[1].write_text(json.dumps(_single_side(paired_record(1.0, seed=7), "candidate", "b")))
    code = unpaired_main([str(p) for p in paths])
    captured = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in captured.err
