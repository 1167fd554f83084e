"""The between-process floor: bench measures each workload with two pairs of fresh worker processes;
where pairs disagree (launch-bound layers on a GPU), a consistent lean within one pair must not be
called a torch change, while a clear change on steady workloads still is."""

from __future__ import annotations

import math
import random
from typing import Any

from mpsup.report.analysis import analyze
from mpsup.report.floors import process_floors
from mpsup.runs.schema import as_record
from tests.synthetic import paired_record


def _two_visits(record: dict[str, Any], *, short_spread: float, truth: dict[str, float], seed: int) -> dict[str, Any]:
    """Rewrite each workload's 24 rounds as two visits of 12, each visit with its own process-pair lean:
    large (short_spread) on the first half of the workloads (made launch-bound, ~20 us), 0.3% on the rest."""
    rng = random.Random(seed)
    workloads = record["workloads"]
    for i, w in enumerate(workloads):
        short = i < len(workloads) // 2
        base = 2e-5 if short else 2e-3 * (1 + i)
        leans = [rng.gauss(0, short_spread if short else 0.003) for _ in range(2)]
        ratios, rounds = [], []
        for visit, lean in enumerate(leans, start=1):
            for k in range(12):
                r = truth.get(w["name"], 1.0) * math.exp(lean + rng.gauss(0, 0.01))
                ratios.append(r)
                rounds.append({"first": "baseline" if k % 2 == 0 else "candidate", "visit": visit})
        w["ratios"], w["rounds"] = ratios, rounds
        for env in w["envs"].values():
            env["samples"] = [base] * 24
            env["median"] = base
    return record


def test_disagreeing_process_pairs_raise_the_floor_of_similar_workloads_only():
    rec = as_record(_two_visits(paired_record(count=40, rounds=24), short_spread=0.15, truth={}, seed=1))
    floors, worst = process_floors(rec, "baseline")
    short = [floors[w.name] for w in rec.workloads[:20]]
    steady = [floors[w.name] for w in rec.workloads[20:]]
    assert min(short) > 0.10  # ~15% per-pair leans: the floor is well above the 3% threshold
    assert max(steady) < 0.03  # steady workloads keep the practical threshold
    assert worst > 0.05


def test_aa_with_process_leans_flags_at_most_one_in_most_runs():
    flagged_runs = 0
    for seed in range(20):
        doc = _two_visits(
            paired_record(count=40, rounds=24, mode="aa", seed=seed), short_spread=0.15, truth={}, seed=seed
        )
        without = sum(w.change in ("faster", "slower") for w in analyze(doc).workloads)
        flagged_runs += without > 1
    assert flagged_runs <= 1


def test_a_clear_change_on_steady_workloads_is_still_found():
    base = paired_record(count=40, rounds=24)
    names = [w["name"] for w in base["workloads"][20:30]]
    doc = _two_visits(base, short_spread=0.15, truth=dict.fromkeys(names, 0.85), seed=3)
    calls = {w.name: w.change for w in analyze(doc).workloads}
    assert all(calls[n] == "slower" for n in names)
    assert any("Between-process floor" in n for n in analyze(doc).notes)


def test_records_without_visits_get_no_process_floor():
    rec = as_record(paired_record(count=40, rounds=24))
    assert process_floors(rec, "baseline") == ({}, 0.0)
    assert all(w.ratios_by_visit == [w.paired_ratios] for w in rec.workloads)


def test_rounds_that_do_not_line_up_with_ratios_count_as_one_visit():
    doc = _two_visits(paired_record(count=2, rounds=24), short_spread=0.15, truth={}, seed=0)
    doc["workloads"][0]["rounds"] = doc["workloads"][0]["rounds"][:5]  # hostile or truncated
    doc["workloads"][1]["rounds"][0] = {"visit": "two"}
    rec = as_record(doc)
    assert len(rec.workloads[0].ratios_by_visit) == 1
    assert len(rec.workloads[1].ratios_by_visit) == 2


def test_a_quiet_aa_reference_does_not_lower_the_between_process_floor():
    # Launch-bound workloads whose two process pairs disagree by ~15%: the run's own floor holds them.
    # An A/A run that happened to be quiet on them must not replace that floor with its smaller one.
    doc = _two_visits(paired_record(count=40, rounds=24, seed=5), short_spread=0.15, truth={}, seed=5)
    quiet = paired_record(count=40, rounds=24, mode="aa", seed=6)
    for w in quiet["workloads"]:
        w["ratios"] = [1.0 + (0.001 if k % 2 else -0.001) for k in range(24)]
    rec = as_record(doc)
    floors, _ = process_floors(rec, "baseline")
    plain = analyze(doc)
    with_aa = analyze(doc, aa_reference=quiet)
    assert any("A/A floor from run" in n for n in with_aa.notes)
    short = [w.name for w in rec.workloads[:20]]
    assert all(floors[n] > 0.10 for n in short)
    flagged_plain = {w.name for w in plain.workloads if w.change in ("faster", "slower")}
    flagged_aa = {w.name for w in with_aa.workloads if w.change in ("faster", "slower")}
    assert flagged_aa <= flagged_plain  # a floor only ever removes calls
    assert not flagged_aa & set(short)
