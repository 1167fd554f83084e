"""Where a paired report must not call: too few rounds to bound an interval (said as n/a, on every
surface), visits that lean opposite ways (a placement effect, seen in A/A runs), and
absurd ratios in a record (dropped, never a crash)."""

from __future__ import annotations

import io
import math
from typing import Any

from rich.console import Console

from mpsup.report.analysis import analyze, visits_disagree
from mpsup.report.render import render_html, render_markdown, render_terminal
from mpsup.stats import block_ratios, median_ci
from tests.synthetic import paired_record


def _visits(w: dict[str, Any], leans: list[tuple[float, int]]) -> None:
    """Rewrite a workload's rounds as visits, each with a fixed ratio (`lean`) and its number of rounds."""
    ratios, rounds = [], []
    for visit, (lean, n) in enumerate(leans, start=1):
        for k in range(n):
            ratios.append(lean * (1.0 + 0.001 * ((k % 3) - 1)))
            rounds.append({"first": "baseline" if k % 2 == 0 else "candidate", "visit": visit})
    w["ratios"], w["rounds"] = ratios, rounds


def _terminal(doc: dict[str, Any], width: int) -> str:
    buf = io.StringIO()
    render_terminal(analyze(doc), Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_an_unbounded_interval_carries_its_unit_count():
    assert median_ci([1.0, 1.1, 0.9]).n == 3
    assert not median_ci([1.0, 1.1, 0.9]).bounded
    assert median_ci([1.0] * 10).n == 10


def test_three_rounds_say_na_everywhere_never_inf_or_a_false_same():
    doc = paired_record(count=1, rounds=3)
    a = analyze(doc)
    w = a.workloads[0]
    assert w.change == "n/a"
    assert a.verdict == "inconclusive"
    assert "n/a: 3 rounds; raise --budget" in a.sentence
    assert "inf" not in a.sentence
    for width in (80, 160):
        out = _terminal(doc, width)
        assert "inf" not in out and "unbounded" not in out
        assert "n/a: 3 rounds" in out
        assert "raise --budget" in out
        assert "0 rounds" not in out
    md = render_markdown(a)
    assert "inf" not in md and "n/a: 3 rounds; raise --budget" in md
    page = render_html(a)
    assert "-inf" not in page and "n/a: 3 rounds; raise --budget" in page
    # No error bar drawn as if exact: the point is hollow and has no interval line.
    assert 'fill="none"' in page


def test_visits_that_lean_opposite_ways_are_not_called():
    doc = paired_record(count=40, rounds=24, mode="aa")
    w = doc["workloads"][0]
    # As one H200 A/A run of the full suite measured it (Mixtral down, t1, grouped): one setup order 0.87x,
    # the other 1.15x, the third visit longest; called "slower" before the rule.
    _visits(w, [(0.87, 9), (1.15, 10), (0.87, 25)])
    a = analyze(doc)
    hit = next(c for c in a.workloads if c.name == w["name"])
    assert hit.speedup is not None and hit.speedup.estimate < 0.9  # the pooled median leans one way...
    assert hit.change == "same"  # ...but the pairs disagree, so no call
    assert any(n.startswith("Not called: 1 workload(s)") for n in a.notes)


def test_a_change_every_visit_sees_is_still_called():
    doc = paired_record(count=40, rounds=24)
    w = doc["workloads"][0]
    _visits(w, [(0.80, 12), (0.84, 12), (0.82, 12)])
    hit = next(c for c in analyze(doc).workloads if c.name == w["name"])
    assert hit.change == "slower"


def test_visits_disagree_rule():
    assert visits_disagree("slower", [0.87, 1.15, 0.87])
    assert visits_disagree("faster", [1.10, 1.0])
    assert not visits_disagree("slower", [0.9, 0.95])
    assert not visits_disagree("slower", [0.9])  # one visit cannot disagree with itself
    assert not visits_disagree("same", [0.8, 1.2])
    # visits that lean one way but differ by more than the change: a placement effect as large as the call
    assert visits_disagree("slower", [0.87, 0.99], 0.91)
    assert visits_disagree("faster", [1.07, 1.28], 1.159)
    assert not visits_disagree("slower", [0.24, 0.26], 0.25)  # a real change moves both alike
    assert not visits_disagree("slower", [0.85, 0.90], 0.87)


def test_absurd_ratios_are_dropped_not_a_crash():
    # 1e-300 squared underflows to 0.0 and log(0) raised a math domain error in blocks, floors and visits.
    assert block_ratios([1e-300] * 30) == []
    doc = paired_record(count=20, rounds=30, mode="aa")
    w = doc["workloads"][0]
    _visits(w, [(1e-300, 15), (1e-7, 15)])  # in range for the schema, a million-fold for mpsup
    a = analyze(doc, aa_reference=doc)
    hit = next(c for c in a.workloads if c.name == w["name"])
    assert hit.change == "n/a"
    assert all(math.isfinite(c.speedup.estimate) for c in a.workloads if c.speedup)


def test_aggregates_of_short_workloads_are_na_not_a_bootstrap_of_three_rounds():
    # A bootstrap of 3-round medians gave "Upgrade 1.18x (1.16-1.23x)" with every row n/a.
    doc = paired_record(true_speedup=1.1, count=4, rounds=3)
    a = analyze(doc)
    assert a.suite_geomean is not None and not a.suite_geomean.bounded
    assert a.verdict == "inconclusive" and "n/a: 3 rounds; raise --budget" in a.sentence
    doc["model"] = {"path": "/m/model.safetensors"}
    a = analyze(doc)
    assert a.model_speedup is not None and not a.model_speedup.bounded
    # The layer sum is an estimate of an unknown share of the forward, and the sentence says so (issue 24).
    assert a.verdict == "inconclusive" and "the model estimated from its layers" in a.sentence
    assert "your model's forward" not in a.sentence and a.model_source == "layers"


def test_the_suite_leaves_out_short_shapes_and_says_so():
    doc = paired_record(count=10, rounds=20)
    short = doc["workloads"][0]
    short["ratios"] = short["ratios"][:3]
    a = analyze(doc)
    assert a.suite_geomean is not None and a.suite_geomean.bounded
    assert any("leaves out 1 of 10 linear shape(s)" in n for n in a.notes)


def test_absurd_samples_in_separate_runs_or_a_model_are_not_a_crash():
    doc = paired_record(count=3, rounds=10)
    doc["mode"] = "unpaired"
    for w in doc["workloads"]:
        w["ratios"] = []
    first = doc["workloads"][0]["envs"]
    first["baseline"]["samples"] = [5e-324] * 3 + [1e-3] * 7
    first["candidate"]["samples"] = [1e-3] * 7 + [1e9] * 3
    first["candidate"]["median"] = 1e-3
    a = analyze(doc)
    assert a.verdict == "inconclusive"
    model = paired_record(true_speedup=3.0, count=2, rounds=10, noise=0.0)
    model["model"] = {"path": "/m/model.safetensors"}
    model["workloads"][0]["envs"]["baseline"]["median"] = 5e-324  # t / s underflowed to 0: ZeroDivisionError
    assert analyze(model).model_speedup is not None
