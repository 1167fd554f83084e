"""Which op did it: a phase's change laid at its ops' door (report/attribution.py), said in the verdict and on
every surface (terminal, Markdown, HTML, JSON), with the replayed sum against the phase and the remainder."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest
from rich.console import Console

from mpsup.report.analysis import analyze
from mpsup.report.attribution import op_classes
from mpsup.report.render import render_html, render_markdown, render_terminal

ROUNDS = 24


def _timed(name: str, part: str, base_s: float, speedup: float, seed: int, **extra: Any) -> dict[str, Any]:
    rng = random.Random(seed)
    a, b, ratios = [], [], []
    for _ in range(ROUNDS):
        drift = rng.lognormvariate(0, 0.01)
        ta = base_s * drift * rng.lognormvariate(0, 0.005)
        tb = base_s / speedup * drift * rng.lognormvariate(0, 0.005)
        a.append(ta)
        b.append(tb)
        ratios.append(ta / tb)
    envs = {
        "baseline": {"status": "ok", "samples": a, "median": sorted(a)[ROUNDS // 2]},
        "candidate": {"status": "ok", "samples": b, "median": sorted(b)[ROUNDS // 2]},
    }
    return {"name": name, "part": part, "dtype": "fp32", "status": "ok", "envs": envs, "ratios": ratios, **extra}


def _op(name: str, overload: str, shapes: str, base_s: float, speedup: float, counts: dict[str, int], seed: int):
    call = {"overload": overload, "args": [{"tensor": {"shape": [1, 8], "stride": [8, 1], "dtype": "float32"}}]}
    return _timed(
        name,
        "op",
        base_s,
        speedup,
        seed,
        kind="op_replay",
        op=overload.split(".")[1],
        shapes=shapes,
        dtypes="float32",
        op_call=call,
        op_phases={"model/decode": counts},
        count=max(counts.values()),
    )


def record(sdpa_speedup: float = 1 / 1.9, phase_speedup: float = 10 / 11.9) -> dict[str, Any]:
    """decode: 10 ms a call; its sdpa (2 calls of 1 ms) slows to 1.9 ms each (+1.8 ms), a cat the candidate
    alone calls adds 0.1 ms, the linears (4 x 1.5 ms) and views do not move: the phase takes 11.9 ms."""
    phase = _timed("model/decode", "phase", 0.010, phase_speedup, 1, kind="model_phase", phase="decode")
    census = {"calls": 17, "replay": []}
    for env in phase["envs"].values():
        env["phase"] = {"census": census, "layers": 2, "depth": 2}
    ops = [
        _op(
            "model/op/sdpa/a",
            "aten.scaled_dot_product_attention.default",
            "1x8x1x64",
            0.001,
            sdpa_speedup,
            {"baseline": 2, "candidate": 2},
            2,
        ),
        _op(
            "model/op/linear/b",
            "aten.linear.default",
            "1x1x256, 256x256",
            0.0015,
            1.0,
            {"baseline": 4, "candidate": 4},
            3,
        ),
        _op("model/op/cat/c", "aten.cat.default", "1x8", 0.0001, 1.0, {"candidate": 1}, 4),
        _op("model/op/view/d", "aten.view.default", "1x8", 1e-6, 1.0, {"baseline": 5, "candidate": 5}, 5),
        _op("model/op/t/e", "aten.t.default", "8x8", 1e-6, 1.0, {"baseline": 5, "candidate": 5}, 6),
    ]
    return {
        "schema": "mpsup.run/1",
        "id": "attr",
        "created_at": "2026-12-06T01:00:00Z",
        "mode": "paired",
        "device": "cpu",
        "partial": False,
        "environments": [
            {"label": "baseline", "torch_version": "2.14.1", "device_name": "cpu", "python": "/a/python"},
            {"label": "candidate", "torch_version": "2.15.0", "device_name": "cpu", "python": "/b/python"},
        ],
        "options": {},
        "hygiene": {"before": {}, "after": {}, "changed": []},
        "model": {"path": "/m", "format": "transformers-config"},
        "workloads": [phase, *ops],
        "smoke": [],
    }


def test_the_phase_change_is_laid_at_the_op_that_moved() -> None:
    a = analyze(record())
    attr = a.attribution["decode"]
    top = attr.ops[0]
    assert top.op == "scaled_dot_product_attention"
    assert top.change_s == pytest.approx(0.0018, rel=0.05)
    assert top.share_of_change == pytest.approx(1.8 / 1.9, rel=0.06)
    assert top.speedup is not None and top.speedup.estimate == pytest.approx(1 / 1.9, rel=0.02)
    # ranked by |change|; the op the candidate alone calls appears with its counts
    cat = next(o for o in attr.ops if o.op == "cat")
    assert (cat.count_baseline, cat.count_candidate) == (0, 1) and cat.baseline_s == 0.0
    assert cat.change_s == pytest.approx(0.0001, rel=0.05)
    assert [abs(o.change_s or 0) for o in attr.ops] == sorted((abs(o.change_s or 0) for o in attr.ops), reverse=True)
    # the replayed sum against the whole phase, in both builds, and the remainder on its own
    assert attr.coverage_baseline == pytest.approx((2 * 1 + 4 * 1.5 + 10 * 0.001) / 10, rel=0.03)
    assert attr.coverage_candidate == pytest.approx((2 * 1.9 + 6 + 0.1 + 0.01) / 11.9, rel=0.03)
    assert attr.explained_change == pytest.approx(1.0, abs=0.08)
    assert attr.unexplained_s is not None and abs(attr.unexplained_s) < 0.0002
    assert attr.not_replayed_calls == {"baseline": 17, "candidate": 17}  # the census's entries name none of them
    # the verdict sentence names the mover
    assert a.verdict == "regression"
    assert "Which op:" in a.sentence and "of the decode change is scaled_dot_product_attention 1x8x1x64" in a.sentence
    assert "2 calls per token, 0.53x" in a.sentence


def test_json_has_exactly_the_issue_shape() -> None:
    doc = analyze(record()).to_json()
    pa = doc["phase_attribution"]["decode"]
    assert set(pa) == {"coverage", "explained_change", "phase_changed", "ops_change_s", "ops", "spread"}
    assert pa["spread"] is None  # attention alone moved: no change every op shares (tests/test_spread.py)
    assert set(pa["coverage"]) == {"baseline", "candidate"}
    assert set(pa["ops"][0]) == {
        "op", "shapes", "dtypes", "count_baseline", "count_candidate", "baseline_s", "candidate_s", "speedup",
        "low", "high", "change_s", "share_of_change",
    }  # fmt: skip
    assert (
        pa["ops"][0]["op"] == "scaled_dot_product_attention"
        and pa["ops"][0]["low"] <= pa["ops"][0]["speedup"] <= pa["ops"][0]["high"] < 0.6
    )
    rest = doc["phase_attribution_remainder"]["decode"]
    assert rest["unexplained_s"] == pytest.approx(doc_unexplained(pa, rest), abs=1e-9)
    json.dumps(doc)
    # the ops are no layers: not in the layer shares or the estimate from the layers
    assert all(w["share"] in (None, 0.0) for w in doc["workloads"] if w["part"] == "op")
    assert doc["layer_estimate"] is None


def doc_unexplained(pa: dict[str, Any], rest: dict[str, Any]) -> float:
    return rest["phase_change_s"] - sum(o["change_s"] for o in pa["ops"])


def test_every_surface_shows_the_ops_and_the_remainder() -> None:
    a = analyze(record())
    buf = io.StringIO()
    render_terminal(a, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "Ops of decode, each timed alone in both builds" in text
    assert "scaled_dot_product_attention" in text and "unexplained" in text
    assert "2 views" in text  # the views, which moved nothing, folded into one line
    assert "0 -> 1" in text  # the op that appeared
    layers_table = text.split("unexplained:")[-1]
    assert "model/op/" not in layers_table  # the ops are in their phase's table, not the layers'
    mdown = render_markdown(a)
    assert "| scaled\\_dot\\_product\\_attention | 1x8x1x64 |" in mdown and "| unexplained |" in mdown
    assert "model/op/" not in mdown
    page = render_html(a)
    assert "Which op: decode" in page and "scaled_dot_product_attention" in page
    assert "model/<wbr>op/" not in page


def test_no_mover_is_named_for_a_phase_that_did_not_change_and_none_invented_for_noise() -> None:
    same = analyze(record(sdpa_speedup=1.0, phase_speedup=1.0))
    assert "Which op" not in same.sentence
    assert "decode" in same.attribution  # still computed and shown, only not named in the verdict
    # a phase that changed while no op did: said as such, the change left in the remainder
    unexplained = analyze(record(sdpa_speedup=1.0, phase_speedup=0.8))
    assert "no single op carries a fifth of the decode change" in unexplained.sentence
    attr = unexplained.attribution["decode"]
    assert attr.explained_change is not None and abs(attr.explained_change) < 0.1
    assert not attr.top_explains_half


def test_a_record_without_op_workloads_has_no_attribution() -> None:
    doc = record()
    doc["workloads"] = doc["workloads"][:1]
    a = analyze(doc)
    assert a.attribution == {} and a.to_json()["phase_attribution"] == {}


def test_an_op_called_with_several_shapes_is_named_once_with_all_its_calls() -> None:
    """A kernel change moves every shape of its op: two group_norm calls of 40% each are one 80% mover, named
    before a single conv that moved 15% (which alone would outrank each of them)."""
    doc = record(sdpa_speedup=1.0, phase_speedup=10 / 11.0)
    counts = {"baseline": 2, "candidate": 2}
    doc["workloads"] += [
        _op("model/op/gn/1", "aten.group_norm.default", "1x64x64x64", 0.001, 1 / 1.2, counts, 11),
        _op("model/op/gn/2", "aten.group_norm.default", "1x32x128x128", 0.001, 1 / 1.2, counts, 12),
        _op(
            "model/op/conv/3", "aten.conv2d.default", "1x64x64x64", 0.0015, 1 / 1.1, {"baseline": 1, "candidate": 1}, 13
        ),
    ]
    for w in doc["workloads"][-3:]:
        w["op_phases"] = {"model/decode": w["op_phases"]["model/decode"]}
    a = analyze(doc)
    attr = a.attribution["decode"]
    assert attr.top_explains_half
    assert "of the decode change is group_norm in 2 shapes" in a.sentence
    assert "conv2d" not in a.sentence  # 15%: under a fifth, not named


def _rest(base_s: float, speedup: float, calls: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    return _timed(
        "model/op/rest/decode",
        "op",
        base_s,
        speedup,
        seed,
        kind="op_group",
        op="other calls",
        shapes=f"{len(calls)} calls of {len(calls)} kinds: add 1",
        dtypes="float32",
        op_group=calls,
        op_group_counts=[1] * len(calls),
        op_phases={"model/decode": {"baseline": 1, "candidate": 1}},
        count=1,
    )


def test_the_calls_replayed_together_count_in_the_coverage_and_are_never_named_as_the_op() -> None:
    """decode 10 ms; its other 3 calls, replayed together, take 1.5 ms and slow to 3.4 ms (+1.9 ms, the whole
    change), no op of its own moves: the sentence says the change lies in those calls, names no op, and the
    census's calls they replay are no longer counted as not replayed."""
    doc = record(sdpa_speedup=1.0)
    calls = [
        {"overload": "aten.add.Tensor", "args": [{"tensor": {"shape": [1, 8], "stride": [8, 1], "dtype": "float32"}}]}
        for _ in range(3)
    ]
    calls = [{**c, "args": [*c["args"], i]} for i, c in enumerate(calls)]  # three distinct calls
    census = {"calls": 17, "replay": [{**c, "count": 1} for c in calls]}
    for env in doc["workloads"][0]["envs"].values():
        env["phase"]["census"] = census
    doc["workloads"].append(_rest(0.0015, 1.5 / 3.4, calls, 21))
    a = analyze(doc)
    attr = a.attribution["decode"]
    rest = attr.together
    assert rest is not None and rest.op == "other calls" and rest.count_baseline == 1
    assert rest.change_s == pytest.approx(0.0019, rel=0.06) and rest.share_of_change == pytest.approx(1.0, abs=0.1)
    assert attr.coverage_baseline == pytest.approx((2 * 1 + 4 * 1.5 + 10 * 0.001 + 1.5) / 10, rel=0.03)
    assert attr.not_replayed_calls == {"baseline": 14, "candidate": 14}
    assert all(c.op != "other calls" for c in op_classes(attr)) and not attr.top_explains_half
    assert "Which op:" in a.sentence and "is in the calls replayed together (3 calls of 3 kinds" in a.sentence
    pa = a.to_json()["phase_attribution"]["decode"]
    assert [o.get("together") for o in pa["ops"]].count(True) == 1
    buf = io.StringIO()
    render_terminal(a, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    row = next(line for line in text.splitlines() if line.strip().startswith("other calls"))
    assert "3 calls of 3 kinds" in row and text.index("other calls") < text.index("unexplained ")
    # an op of its own that moves is named before them, whatever they carry
    doc["workloads"][1] = _op(
        "model/op/sdpa/a",
        "aten.scaled_dot_product_attention.default",
        "1x8x1x64",
        0.001,
        1 / 1.9,
        {"baseline": 2, "candidate": 2},
        2,
    )
    named = analyze(doc)
    assert "of the decode change is scaled_dot_product_attention" in named.sentence
    assert "replayed together" not in named.sentence
