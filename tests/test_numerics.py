"""Same answers? (issue 45): each build's answer against a float64 truth computed by the baseline's interpreter.

The rules of report/numerics.py on figures built here, each able to fail when its rule is turned off; then real
paired CPU runs of a tiny Llama folder: a candidate whose aten::linear computes in bfloat16 (a torch.library
override, which op replay sees) is less accurate and its linear is named; a candidate whose inputs differ is
not compared; the baseline against itself is identical."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.report.numerics import (
    EPS,
    PhaseNumerics,
    allowed,
    judge,
    judge_output,
    model_numerics,
)
from mpsup.report.phases import PhaseChange, phase_verdict
from mpsup.report.wording import numerics_clause
from mpsup.runs.fields import Corrupt
from mpsup.runs.numerics_fields import check_numerics
from mpsup.stats import Interval
from tests.conftest import run_cli
from tests.tiny_models import LLAMA as TINY_LLAMA


def output(eb: float, ec: float, *, dtype: str = "float32", floor: float | None = 0.0, identical: bool = False,
           nb: int = 0, nc: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "name": "logits",
        "dtype": dtype,
        "elements": 1000,
        "scale": 1.0,
        "truth_nonfinite": 0,
        "errors": {
            "baseline": {"rmse": eb, "max_abs": 3 * eb, "nonfinite": nb},
            "candidate": {"rmse": ec, "max_abs": 3 * ec, "nonfinite": nc},
        },
        "between": {"rmse": abs(ec - eb), "max_abs": abs(ec - eb), "identical": identical},
        "floor": floor,
    }


def verdict_of(**kw: Any) -> str:
    call = judge_output(output(**kw), "baseline", "candidate")
    assert call is not None
    return call.verdict


def test_identical_answers_are_identical_whatever_the_errors() -> None:
    assert verdict_of(eb=1e-3, ec=1e-3, identical=True) == "identical"


def test_float32_may_be_twice_as_far_from_float64_plus_two_epsilon() -> None:
    base = 1e-6
    assert verdict_of(eb=base, ec=1.9 * base) == "same accuracy"
    assert verdict_of(eb=base, ec=2.0 * base + 3 * EPS["float32"]) == "less accurate"
    assert verdict_of(eb=2.0 * base + 3 * EPS["float32"], ec=base) == "more accurate"


def test_half_types_get_three_times() -> None:
    base = 0.01
    assert verdict_of(eb=base, ec=2.5 * base, dtype="float32") == "less accurate"
    assert verdict_of(eb=base, ec=2.5 * base, dtype="bfloat16") == "same accuracy"
    assert verdict_of(eb=base, ec=allowed("bfloat16", base) * 1.01, dtype="bfloat16") == "less accurate"


def test_a_difference_inside_the_runs_own_floor_is_same_accuracy() -> None:
    # What one build gives on two visits (a nondeterministic kernel) is no change between builds.
    assert verdict_of(eb=1e-6, ec=5e-6, floor=1e-5) == "same accuracy"
    assert verdict_of(eb=1e-6, ec=5e-6, floor=1e-7) == "less accurate"


def test_nan_where_the_baseline_had_none_or_a_tenth_of_the_scale_is_broken() -> None:
    assert verdict_of(eb=1e-6, ec=1e-6, nc=3) == "broken"
    assert verdict_of(eb=1e-6, ec=1e-6, nb=3, nc=3) == "same accuracy"
    assert verdict_of(eb=0.01, ec=0.2, dtype="bfloat16") == "broken"
    assert verdict_of(eb=0.2, ec=0.2, dtype="bfloat16") == "same accuracy"


@pytest.mark.parametrize("eb,ec", [(0.098, 0.102), (0.098, 0.098), (0.102, 0.097), (0.098, 0.29)])
def test_a_deep_half_precision_baseline_near_the_line_never_makes_an_equal_candidate_broken(
    eb: float, ec: float
) -> None:
    # A 32-layer bf16 prefill reads 0.098 against float64 in both builds: an A/A or an equally accurate candidate
    # that lands on the other side of 0.1 is not broken; three times further is still only less accurate.
    assert verdict_of(eb=eb, ec=ec, dtype="bfloat16") in ("same accuracy", "more accurate", "less accurate")
    assert verdict_of(eb=eb, ec=ec, dtype="bfloat16") != "broken"


def test_broken_is_past_a_tenth_and_ten_times_the_baseline_s_own_error() -> None:
    assert verdict_of(eb=0.098, ec=1.2, dtype="bfloat16") == "broken"  # 12x the baseline's, past 0.1
    assert verdict_of(eb=0.098, ec=0.9, dtype="bfloat16") == "less accurate"  # 9x: worse, not broken
    assert verdict_of(eb=0.001, ec=0.09, dtype="bfloat16") == "less accurate"  # 90x but under 0.1


def test_integer_outputs_use_the_exact_match_rate() -> None:
    doc = {
        "name": "output0",
        "dtype": "int64",
        "errors": {"baseline": {"match": 1.0}, "candidate": {"match": 0.9}},
        "between": {"match": 0.9, "identical": False},
        "floor": None,
    }
    call = judge_output(doc, "baseline", "candidate")
    assert call is not None and call.verdict == "less accurate" and not call.is_float


def test_the_worst_output_decides_and_not_compared_says_why() -> None:
    doc = {"status": "compared", "outputs": [output(eb=1e-6, ec=1e-6), output(eb=1e-6, ec=1e-3)]}
    assert judge(doc, "w", "baseline", "candidate").verdict == "less accurate"  # type: ignore[union-attr]
    gone = judge({"status": "not_compared", "reason": "values differ"}, "w", "baseline", "candidate")
    assert gone is not None and gone.verdict == "not compared" and gone.reason == "values differ"
    assert judge(None, "w", "baseline", "candidate") is None


def _record(phase_out: dict[str, Any], op_out: dict[str, Any]) -> dict[str, Any]:
    return {
        "workloads": [
            {"name": "model/prefill", "part": "phase", "numerics": {"status": "compared", "outputs": [phase_out]}},
            {
                "name": "model/op/linear/x",
                "kind": "op_replay",
                "op": "linear",
                "shapes": "1x128x1024, 1024x1024",
                "dtypes": "float32",
                "op_phases": {"model/prefill": {"baseline": 7, "candidate": 7}},
                "numerics": {"status": "compared", "outputs": [op_out]},
            },
            {
                "name": "model/op/add/y",
                "kind": "op_replay",
                "op": "add",
                "shapes": "1x128x1024",
                "dtypes": "float32",
                "op_phases": {"model/prefill": {"baseline": 9, "candidate": 9}},
                "numerics": {"status": "compared", "outputs": [output(eb=1e-7, ec=1e-7, identical=True)]},
            },
        ]
    }


def test_a_faster_but_less_accurate_phase_is_a_regression_and_names_its_op() -> None:
    rec = _record(output(eb=1e-6, ec=5e-5), output(eb=1e-7, ec=4e-6))
    pn = model_numerics(rec, {"prefill": "model/prefill"}, "baseline", "candidate")["prefill"]
    assert isinstance(pn, PhaseNumerics) and pn.verdict == "less accurate"
    assert pn.top_op is not None and pn.top_op.op == "linear"
    clause = numerics_clause(pn, "2.13.0")
    assert clause == "less accurate: linear 1x128x1024, 1024x1024 (float32) is 40x further from float64 than in 2.13.0"
    faster = PhaseChange(
        "prefill", "model/prefill", Interval(1.10, 1.05, 1.15, 24), "faster", 1e-3, 0.9e-3, None,
        accuracy=pn.verdict, accuracy_clause=clause,
    )  # fmt: skip
    verdict, sentence = phase_verdict([faster], [], "torch 2.14.1 vs torch 2.13.0")  # type: ignore[misc]
    assert verdict == "regression"
    assert "faster but less accurate: linear" in sentence
    assert pn.to_json()["ops"][0]["error_ratio"] == pytest.approx(40.0)


def test_an_identical_phase_names_no_op_and_stays_a_benefit() -> None:
    rec = _record(output(eb=1e-6, ec=1e-6, identical=True), output(eb=1e-7, ec=1e-7, identical=True))
    pn = model_numerics(rec, {"prefill": "model/prefill"}, "baseline", "candidate")["prefill"]
    assert pn.verdict == "identical" and pn.top_op is None and numerics_clause(pn, "2.13.0") == "identical answers"
    faster = PhaseChange(
        "prefill", "model/prefill", Interval(1.10, 1.05, 1.15, 24), "faster", 1e-3, 0.9e-3, None,
        accuracy=pn.verdict, accuracy_clause="identical answers",
    )  # fmt: skip
    assert phase_verdict([faster], [], "x vs y")[0] == "benefit"  # type: ignore[index]


def test_a_call_replayed_only_in_its_phase_s_group_is_judged_alone_and_named() -> None:
    rms = {"overload": "aten.rsqrt.default", "args": [{"tensor": {"shape": [1, 16, 1], "stride": [16, 1, 1],
                                                                  "dtype": "float32"}}]}  # fmt: skip
    add = {"overload": "aten.add.Tensor", "args": [{"tensor": {"shape": [4], "stride": [1], "dtype": "float32"}}, 1]}
    rec = _record(output(eb=1e-7, ec=1e-3), output(eb=1e-7, ec=1.5e-7))
    rec["workloads"].append(
        {
            "name": "model/op/rest/prefill",
            "kind": "op_group",
            "op": "other calls",
            "op_group": [add, rms],
            "op_group_counts": [3, 5],
            "op_phases": {"model/prefill": {"baseline": 1, "candidate": 1}},
            "numerics": {
                "status": "compared",
                "calls": [
                    {"call": 0, "outputs": [{**output(eb=1e-7, ec=1e-7), "name": "output"}]},
                    {"call": 1, "outputs": [{**output(eb=1e-7, ec=4e-3), "name": "output"}]},
                ],
            },
        }
    )
    check_numerics(rec["workloads"][-1]["numerics"], "workloads[3].numerics")
    pn = model_numerics(rec, {"prefill": "model/prefill"}, "baseline", "candidate")["prefill"]
    top = pn.top_op
    assert top is not None and top.op == "rsqrt" and top.shapes == "1x16x1" and top.op_call == rms
    assert top.workload == "model/op/rest/prefill#1"
    assert [o.op for o in pn.ops if o.numerics.verdict == "less accurate"] == ["rsqrt"]  # the group's add is fine


@pytest.mark.parametrize(
    "bad",
    [
        {"status": "maybe"},
        {"status": "compared", "outputs": [{"name": "x", "errors": {"baseline": {"rmse": "a lot"}}}]},
        {"status": "compared", "outputs": [{"name": "x", "floor": float("nan")}]},
        {"status": "compared", "outputs": [{"name": "x"}] * 65},
        {"status": "compared", "calls": [{"call": 0, "outputs": [{"name": "x"}]}] * 401},
        {"status": "compared", "calls": [{"outputs": [{"name": "x"}]}]},
        {"status": "compared", "language": {"top1_agreement": 2.0}},
    ],
)
def test_a_record_s_numerics_is_checked_on_reading(bad: dict[str, Any]) -> None:
    with pytest.raises(Corrupt):
        check_numerics(bad, "workloads[0].numerics")


# --- real paired runs on this CPU ---

# float32: its error against float64 is a few units of float32, so a bf16 linear stands out by 10^4.
LLAMA = {**TINY_LLAMA, "torch_dtype": "float32"}
BF16_LINEAR = """import torch
_lib = torch.library.Library("aten", "IMPL")
def _linear(x, w, b=None):
    out = (x.to(torch.bfloat16) @ w.to(torch.bfloat16).t()).to(x.dtype)
    return out if b is None else out + b
_lib.impl("linear", _linear, "CPU")
"""


def _candidate(tmp_path: Path, name: str, body: str) -> Path:
    python = tmp_path / name
    python.write_text(f'#!/bin/sh\n{body}exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def _paired_run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    folder = tmp_path / "llama"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    args = ("bench", "--model", str(folder), "--tokens", "16", "--budget", "0.05", "--no-smoke", "--json", *extra)
    bench = run_cli(*args)
    assert bench.returncode == 0, bench.stderr[-2000:]
    report = run_cli("report", "--json", "--fail-on-regression")
    doc = json.loads(report.stdout)
    doc["exit_code"] = report.returncode
    return doc


def test_a_build_whose_linear_computes_in_bf16_is_less_accurate_and_its_linear_is_named(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BF16_LINEAR)
    candidate = _candidate(tmp_path, "bf16-linear-python", f'export PYTHONPATH="{hook}"\n')
    doc = _paired_run(tmp_path, "--candidate", str(candidate), "--visits", "2")
    numerics = doc["model_numerics"]
    for phase in ("prefill", "decode"):
        assert numerics[phase]["verdict"] == "less accurate", numerics[phase]
        assert numerics[phase]["error_ratio"] > 10
        top = numerics[phase]["ops"][0]
        assert top["op"] == "linear" and top["verdict"] == "less accurate"
        others = [o for o in numerics[phase]["ops"] if o["op"] != "linear"]
        assert all(o["verdict"] in ("identical", "same accuracy") for o in others)
    assert "less accurate: linear" in doc["sentence"]
    assert doc["verdict"] == "regression" and doc["exit_code"] == 1
    lang = next(w for w in doc["workloads"] if w["name"] == "model/prefill")["numerics"]
    assert lang["verdict"] == "less accurate"
    # --upstream leads with accuracy; its script, run under each build (the good one's float64 saved, the bad one
    # reading it), prints errors whose ratio is the report's.
    script = tmp_path / "repro.py"
    assert run_cli("report", "--upstream", "-o", str(script)).returncode == 0
    body = run_cli("report", "--upstream").stdout
    assert "less accurate" in body and "error vs float64, good" in body
    truth = tmp_path / "truth.pt"
    errors = []
    for python in (sys.executable, str(candidate)):
        out = subprocess.run([python, str(script), "--truth", str(truth)], capture_output=True, text=True, check=True)
        errors.append(float(out.stdout.split("rms ")[1].split(",")[0]))
    text = script.read_text()
    ops = [o for phase in ("prefill", "decode") for o in numerics[phase]["ops"]]
    top = next(o for o in ops if f"Computes: {o['op']} {o['shapes']} ({o['dtypes']})" in text)
    assert errors[1] / errors[0] == pytest.approx(top["error_ratio"], rel=0.01)


BF16_MUL = """import torch
_lib = torch.library.Library("aten", "IMPL")
def _mul(x, y):
    y = torch.as_tensor(y, dtype=x.dtype) if not isinstance(y, torch.Tensor) else y
    if x.dtype == torch.float32 and y.dtype == torch.float32:  # the model's products, not the value stream's
        x, y = x.to(torch.bfloat16).to(x.dtype), y.to(torch.bfloat16).to(y.dtype)
    return torch.addcmul(torch.zeros((), dtype=torch.result_type(x, y)), x, y)
_lib.impl("mul.Tensor", _mul, "CPU")
"""


def test_a_build_whose_mul_rounds_through_bf16_names_it_even_where_it_is_replayed_only_in_a_group(
    tmp_path: Path,
) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BF16_MUL)
    candidate = _candidate(tmp_path, "bf16-mul-python", f'export PYTHONPATH="{hook}"\n')
    doc = _paired_run(tmp_path, "--candidate", str(candidate), "--visits", "2")
    for phase in ("prefill", "decode"):
        n = doc["model_numerics"][phase]
        assert n["verdict"] == "less accurate", n
        assert n["top_op"] is not None and n["top_op"]["op"] == "mul", n["top_op"]
        assert all(o["verdict"] in ("identical", "same accuracy") for o in n["ops"] if o["op"] != "mul")
    # mul runs in several shapes a phase: its heaviest is timed alone, the others only inside the phase's group of
    # other calls, and those are judged alone too.
    grouped = [
        o
        for phase in ("prefill", "decode")
        for o in doc["model_numerics"][phase]["ops"]
        if o["op"] == "mul" and "#" in o["workload"]
    ]
    assert grouped and all(o["verdict"] == "less accurate" for o in grouped), grouped


def test_inputs_that_differ_between_builds_are_not_compared_and_exit_3(tmp_path: Path) -> None:
    candidate = _candidate(
        tmp_path, "perturbing-python", "export MPSUP_WORKER_TEST_HOOKS=1 MPSUP_TEST_PERTURB_VALUES=1\n"
    )
    doc = _paired_run(tmp_path, "--candidate", str(candidate), "--no-ops", "--only", "model/prefill", "--visits", "2")
    for phase in ("prefill",):
        n = doc["model_numerics"][phase]
        assert n["verdict"] == "not compared" and "different values" in n["reason"]
    assert "answers not compared" in doc["sentence"]
    assert doc["exit_code"] == 3


def test_the_baseline_against_itself_gives_identical_answers(tmp_path: Path) -> None:
    doc = _paired_run(tmp_path, "--aa", "--no-ops", "--visits", "2")  # two visits still give the floor
    for phase in ("prefill", "decode"):
        n = doc["model_numerics"][phase]
        assert n["verdict"] == "identical" and n["between_builds"] == 0.0
        assert n["top1_agreement"] == 1.0 if phase == "prefill" else n["top1_agreement"] is None
    # --no-numerics on the same folder: the report has no numerics to show
    off = json.loads(run_cli("bench", "--model", str(tmp_path / "llama"), "--tokens", "16", "--budget", "0.05",
                             "--no-smoke", "--aa", "--no-ops", "--only", "model/prefill", "--no-numerics", "--visits", "2",
                             "--json").stdout or "{}")  # fmt: skip
    assert off.get("id")
    report = json.loads(run_cli("report", "--json", "--run", off["id"]).stdout)
    assert report["model_numerics"] == {"prefill": None}


# --- the reference's own kernels, against torch's where torch has one ---


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_attention_is_torch_s_own_causal_alignment_and_grouped_heads(causal: bool) -> None:
    import torch

    from mpsup.worker.definitions import reference_op

    name = "aten._scaled_dot_product_flash_attention_for_cpu.default"
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)  # more keys than queries
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1), is_causal=causal
    )
    got = reference_op(name, op)(q.double(), k.double(), v.double(), 0.0, causal)[0]
    assert float((got - want).abs().max()) < 1e-12


def test_the_reference_grouped_matmul_is_each_group_s_product() -> None:
    import torch

    from mpsup.worker.definitions import _grouped_mm

    a, w = torch.randn(10, 8, dtype=torch.float64), torch.randn(3, 8, 5, dtype=torch.float64)
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)
    out = _grouped_mm(a, w, offs)
    assert torch.equal(out[:4], a[:4] @ w[0]) and torch.equal(out[4:10], a[4:10] @ w[2])
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is not None:  # torch's own kernel, in float32, agrees where it has one here
        try:
            mine = grouped(a.float(), w.float(), offs=offs)
        except RuntimeError:
            return
        assert torch.allclose(mine.double(), out, atol=1e-4)


def test_a_phase_whose_ops_did_not_move_names_no_op_in_json() -> None:
    # A decode computed on a cache its prefill built less accurately: its own ops are identical.
    rec = _record(output(eb=1e-6, ec=5e-4), output(eb=1e-7, ec=1e-7, identical=True))
    pn = model_numerics(rec, {"prefill": "model/prefill"}, "baseline", "candidate")["prefill"]
    doc = pn.to_json()
    assert doc["verdict"] == "less accurate" and doc["top_op"] is None and doc["ops"][0]["verdict"] == "identical"
    assert numerics_clause(pn, "2.13.0") == "less accurate: 500x further from float64 than in 2.13.0"


# --- bisect --numerics ---


def test_a_step_is_bad_where_answers_got_worse_and_good_only_where_all_were_judged() -> None:
    from mpsup.bisect.logic import BAD, GOOD, INCONCLUSIVE, Figure, classify_numerics

    def fig(accuracy: str | None) -> Figure:
        return Figure("w", "same", 1.0, 0.99, 1.01, accuracy)

    assert classify_numerics([fig("identical"), fig("less accurate")]) == BAD
    assert classify_numerics([fig("same accuracy"), fig("broken")]) == BAD
    assert classify_numerics([fig("identical"), fig("more accurate")]) == GOOD
    assert classify_numerics([fig("identical"), fig("not compared")]) == INCONCLUSIVE
    assert classify_numerics([fig(None)]) == INCONCLUSIVE and classify_numerics([]) == INCONCLUSIVE


SKEWED_LINEAR = """import torch
_lib = torch.library.Library("aten", "IMPL")
def _linear(x, w, b=None):
    out = torch.matmul(x, w.t())
    return (out if b is None else out + b) * 1.05
_lib.impl("linear", _linear, "CPU")
"""


def test_bisect_numerics_finds_the_first_build_whose_answers_got_worse(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SKEWED_LINEAR)
    envs = [
        _candidate(tmp_path, f"env{i}", f'export PYTHONPATH="{hook}"\n' if i >= 2 else "") for i in range(4)
    ]  # 0, 1 good; 2, 3 scale every linear's answer by 1.05 (as fast as the good ones)
    args = ["bisect", *map(str, envs), "--device", "cpu", "--only", "linear/896x896/t16", "--budget", "0.05"]
    res = run_cli(*args, "--numerics", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["status"] == "found" and doc["first_bad"]["index"] == 2 and doc["last_good"]["index"] == 1
    for step in doc["steps"]:
        accuracy = {f["accuracy"] for f in step["figures"]}
        assert accuracy == ({"less accurate"} if step["index"] >= 2 else {"identical"}), step


def test_a_float64_copy_over_half_the_machine_s_memory_is_not_built() -> None:
    from mpsup.bench.numerics import too_large
    from mpsup.workloads import Workload

    w = Workload("model/op/linear", "op_replay", "op", "bf16", {}, memory_bytes=2 * 2**30)
    assert too_large(w, 64 * 2**30) is None  # 8 GiB of float64 beside 64 GiB
    why = too_large(w, 12 * 2**30)
    assert why is not None and "8.0 GiB" in why and "12.0 GiB" in why
    # A whole model is never copied whole: the reference weighs its one module itself (tests/test_weights.py).
    phase = Workload("model/prefill", "model_phase", "phase", "bf16", {}, memory_bytes=2 * 2**30)
    assert too_large(phase, 12 * 2**30) is None
