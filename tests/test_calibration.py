"""Per-workload calls under drift, heavy tails and placement bias; the A/A floor; unbounded intervals."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from mpsup.report.analysis import analyze, matching_aa
from mpsup.report.floors import aa_floors
from mpsup.report.render import render_markdown, summary_lines
from mpsup.stats import Interval, benjamini_hochberg, block_ratios, round_ratio_ci, sign_test_p
from tests.paired_scenarios import Scenario, make_record


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
    from benchmarks.anchors_compare import pyperf_compare

    c = pyperf_compare(_DATA1, _DATA2)
    assert not c.significant and c.t is not None and math.isclose(c.t, 1.0947229724603977, rel_tol=1e-9)
    assert pyperf_compare(_DATA2, _DATA1).t == -c.t
    big = pyperf_compare([x * 10 for x in _DATA1], _DATA1)
    assert big.significant and big.t is not None and math.isclose(big.t, 43.76839453227327, rel_tol=1e-9)


def test_pyperf_critical_values_follow_its_table_then_steps():
    from benchmarks.anchors_compare import pyperf_t_critical

    assert pyperf_t_critical(1) == 12.706 and pyperf_t_critical(18) == 2.101 and pyperf_t_critical(30) == 2.042
    assert pyperf_t_critical(39) == 2.042  # past the table, before the first step
    assert [pyperf_t_critical(d) for d in (40, 49, 50, 59, 60, 79, 80, 99, 100, 199, 200, 10_000)] == [
        2.021, 2.021, 2.009, 2.009, 2.000, 2.000, 1.990, 1.990, 1.984, 1.984, 1.960, 1.960
    ]  # fmt: skip


def test_pyperf_calls_significant_where_its_t_test_cannot_run():
    from benchmarks.anchors_compare import pyperf_compare

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
    from benchmarks.anchors_compare import asv_mann_whitney_u

    u, p = asv_mann_whitney_u([1, 2, 3, 4], [0.9, 1.1, 0.7])
    assert u == 11 and math.isclose(p, 0.11428571428571428, rel_tol=1e-10)
    u, p = asv_mann_whitney_u([1, 2], [1.5])
    assert u == 1 and math.isclose(p, 1.0)
    u, p = asv_mann_whitney_u([1, 2], [2.5])
    assert u == 0 and math.isclose(p, 2 / 3)


def test_asv_normal_approximation_has_no_continuity_or_tie_correction():
    from benchmarks.anchors_compare import asv_mann_whitney_u

    # Fully separated, 21 a side (past asv's exact limit of 20): z = -(mn/2) / sqrt(mn(N+1)/12).
    u, p = asv_mann_whitney_u([float(i) for i in range(21)], [float(i) + 100 for i in range(21)])
    assert u == 0
    z = -(21 * 21 / 2) / math.sqrt(21 * 21 * 43 / 12)
    assert math.isclose(p, math.erfc(-z / math.sqrt(2)), rel_tol=1e-12)
    # All ties: split towards m*n/2, the least significant outcome.
    assert asv_mann_whitney_u([1.0] * 25, [1.0] * 25)[1] > 0.99


def test_asv_needs_seven_samples_a_side_to_call_anything_by_rank():
    from benchmarks.anchors_compare import asv_is_different

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
    from benchmarks.anchors_compare import asv_compare, asv_like

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
    from benchmarks.anchors_compare import anchor_calls

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
    from benchmarks.anchors_compare import main

    bad = tmp_path / "run.json"
    bad.write_text("{not json")
    assert main([str(bad), "--json", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]


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
    from benchmarks.unpaired_aa import main
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
    from benchmarks.unpaired_aa import main as unpaired_main
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
