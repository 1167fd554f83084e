"""report --upstream for a phase regression: a script that times the top mover(s) with the census's exact call
(torch.utils.benchmark.Timer, a Compare table, fresh processes and their spread), or the phase itself when no
op explains half of the change; every record value checked before it becomes code."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mpsup.report.analysis import analyze
from mpsup.report.upstream import build_upstream
from mpsup.runs.schema import as_record
from tests.test_attribution import record
from tests.tiny_models import LLAMA as TINY_LLAMA

# Smaller still: the repro script builds this model in the test's own subprocess.
LLAMA = {**TINY_LLAMA, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 64}


def _t(*shape: int, stride: list[int] | None = None) -> dict[str, Any]:
    dense, step = [], 1
    for d in reversed(shape):
        dense.insert(0, step)
        step *= d
    return {"tensor": {"shape": list(shape), "stride": stride or dense, "dtype": "float32"}}


def _doc(sdpa_call: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    doc = record(**kw)
    phase = doc["workloads"][0]
    phase.update(library="transformers", causal=True, tokens=8, cache=8, config=LLAMA)
    sdpa = doc["workloads"][1]
    sdpa["op_call"] = sdpa_call or {
        "overload": "aten.scaled_dot_product_attention.default",
        # a transposed query, as a model's attention hands it over, and is_causal given positionally
        "args": [_t(1, 4, 8, 16, stride=[512, 16, 64, 1]), _t(1, 4, 8, 16), _t(1, 4, 8, 16), None, 0.0, True],
        "kwargs": {"kwargs": {"scale": 0.25}},
    }
    return doc


def test_the_script_times_the_top_mover_with_the_census_call_and_runs(tmp_path: Path) -> None:
    doc = _doc()
    up = build_upstream(analyze(doc), as_record(doc))
    assert up.workload == "model/decode"
    assert "Where the decode change went" in up.markdown and "scaled" in up.markdown
    script = up.script
    assert script is not None
    assert "benchmark.Timer(" in script and "blocked_autorange" in script and "benchmark.Compare" in script
    assert "sync(device)" in script and "--processes" in script
    assert "torch.ops.aten.scaled_dot_product_attention.default(" in script and "scale=0.25" in script
    assert "(512, 16, 64, 1, )" in script  # the layout, not a dense copy
    assert "import mpsup" not in script and "from mpsup" not in script
    path = tmp_path / "repro.py"
    path.write_text(script)
    saved = tmp_path / "good.pt"
    run = [sys.executable, str(path), "--device", "cpu", "--processes", "2", "--seconds", "0.05"]
    out = subprocess.run([*run, "--save", str(saved)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "over 2 fresh processes; they spread" in out.stdout
    both = subprocess.run(
        [sys.executable, str(path), "--compare", str(saved), str(saved)], capture_output=True, text=True, timeout=120
    )
    assert both.returncode == 0 and "scaled_dot_product_attention" in both.stdout, both.stderr[-2000:]


def test_when_no_op_explains_half_the_script_times_the_phase_itself_and_says_why() -> None:
    doc = _doc(sdpa_speedup=1.0, phase_speedup=0.8)
    up = build_upstream(analyze(doc), as_record(doc))
    script = up.script
    assert script is not None
    assert "no op explains half of the change" in script
    assert "transformers.AutoConfig.for_model" in script and "kv.crop(-1)" in script
    compile(script, "repro.py", "exec")


def test_the_phase_script_builds_the_model_from_the_config_it_is_given_and_carries_none(tmp_path: Path) -> None:
    doc = _doc(sdpa_speedup=1.0, phase_speedup=0.8)
    doc["workloads"][0]["config"] = {**LLAMA, "_name_or_path": "/Users/someone/private-model"}
    script = build_upstream(analyze(doc), as_record(doc)).script
    assert script is not None and "private-model" not in script and "hidden_size" not in script
    path = tmp_path / "repro.py"
    path.write_text(script)
    run = [sys.executable, str(path), "--device", "cpu", "--processes", "1", "--seconds", "0.05"]
    refused = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "pass --config PATH" in refused.stderr
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    ran = subprocess.run([*run, "--config", str(config)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "median" in ran.stdout and "fresh processes" in ran.stdout


def test_a_hostile_call_never_becomes_code() -> None:
    evil = {"overload": "aten.mm.default(); __import__('os').system('x') #", "args": [_t(2, 2), _t(2, 2)]}
    doc = _doc(evil)
    script = build_upstream(analyze(doc), as_record(doc)).script or ""
    assert "system" not in script
    assert "transformers.AutoConfig.for_model" in script  # the phase itself instead
    for bad in (
        {"overload": "aten.mm.default", "args": [{"tensor": {"shape": [2], "dtype": "float32); import os; ("}}]},
        {"overload": "aten.mm.default", "args": [_t(2, 2)], "kwargs": {"kwargs": {"a=1) or (b": 1}}},
        {"overload": "aten.mm.default", "args": ["__import__('os')"]},
    ):
        script = build_upstream(analyze(_doc(bad)), as_record(_doc(bad))).script or ""
        assert "float32); import os" not in script and "a=1) or (b" not in script
        tree = ast.parse(script)  # whatever the record held, nothing of it runs as code
        assert not any(isinstance(n, ast.Name) and n.id == "__import__" for n in ast.walk(tree))
