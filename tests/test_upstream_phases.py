"""`report --upstream -o repro.py` for a phase regression: the phase is what the run was about, so the script is
the phase's own (built from the config.json given when it runs) or its top op's, whatever layer regressed beside
it; each phase kind's script is written by the CLI and run for real on the CPU with a tiny config. A compiled
phase stays without one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.report.analysis import Analysis, analyze
from mpsup.report.upstream import build_upstream
from mpsup.runs.schema import as_record
from tests.conftest import run_cli
from tests.test_attribution import _op, _timed
from tests.test_attribution_upstream import LLAMA, _t
from tests.test_whole_model import UNET, VAE

EMBEDDING = "model/embedding/128256x4096/t512"


def _record(phase: str, config: dict[str, Any], info: dict[str, Any], **params: Any) -> dict[str, Any]:
    """A model run whole whose phase took twice as long in the candidate, beside a layer (an embedding, which has no
    standalone script) that took three times as long: the issue's allocator-off run, shrunk."""
    library = "transformers" if "model_type" in config else "diffusers"
    workload = {"library": library, "config": config, "phase": phase, "kind": "model_phase", **params}
    ph = _timed(f"model/{phase}", "phase", 0.010, 0.5, 1, **workload)
    for env in ph["envs"].values():
        env["phase"] = dict(info)
    emb = _timed(EMBEDDING, "model", 0.0002, 0.33, 2, kind="embedding", tokens=512, num_embeddings=128256)
    return {
        "schema": "mpsup.run/1",
        "id": f"phase-{phase}",
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
        "model": {"path": "/m", "format": library},
        "workloads": [ph, emb],
        "smoke": [],
    }


DIFFUSERS = {"resolution": [32, 32]}
PHASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # phase: (config, what the worker said of the phase it built, the phase workload's own fields)
    "prefill": (LLAMA, {}, {"tokens": 8, "causal": True, "dtype": "bf16"}),
    "decode": (LLAMA, {}, {"tokens": 8, "cache": 8, "causal": True}),
    "forward": (LLAMA, {}, {"tokens": 8, "causal": False}),
    "step": (UNET, {"latent": "1x4x8x8"}, {**DIFFUSERS, "vae_factor": 4}),
    "vae_decode": (VAE, {"latent": "1x4x16x16", "factor": 2}, DIFFUSERS),
    "vae_encode": (VAE, {"latent": "1x4x16x16", "factor": 2}, DIFFUSERS),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_every_phase_regression_gets_a_script_that_runs(phase: str, tmp_path: Path) -> None:
    config, info, params = PHASES[phase]
    doc = _record(phase, config, info, **params)
    title = build_upstream(analyze(doc), as_record(doc)).markdown.split("### 🐛 Describe the bug")[0]
    assert f"`model/{phase}` 2.00x slower" in title and EMBEDDING not in title
    run = tmp_path / "run.json"
    run.write_text(json.dumps(doc))
    out = run_cli("report", "--upstream", str(run), "-o", str(tmp_path / "repro.py"))
    assert out.returncode == 0 and "repro script written" in out.stderr, out.stderr
    script = (tmp_path / "repro.py").read_text()
    assert f"the whole {phase} phase" in script and "the run replayed no ops" in script
    assert "torch.bfloat16" in script if params.get("dtype") == "bf16" else "torch.float32" in script
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["--device", "cpu", "--seconds", "0.05", "--config", str(tmp_path / "config.json")]
    # The whole script (fresh processes, their spread, the Compare table) for one phase; the others build and
    # time their phase once, in one process (--child), which is what differs between them.
    args += ["--processes", "1"] if phase == "prefill" else ["--child"]
    ran = subprocess.run(
        [sys.executable, str(tmp_path / "repro.py"), *args], capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    if phase == "prefill":
        assert "per call over 1 fresh processes" in ran.stdout
    else:
        (median,) = json.loads(ran.stdout.strip().splitlines()[-1])
        assert median > 0


def _with_ops(doc: dict[str, Any], top: float, other: float) -> dict[str, Any]:
    """The prefill phase's ops replayed: an SDPA (2 ms of the 10 ms phase) at `top`, a linear (6 ms) at `other`."""
    counts = {"baseline": 2, "candidate": 2}
    sdpa = _op("model/op/sdpa/a", "aten.scaled_dot_product_attention.default", "1x4x8x16", 0.001, top, counts, 3)
    sdpa["op_call"] = {
        "overload": "aten.scaled_dot_product_attention.default",
        "args": [_t(1, 4, 8, 16), _t(1, 4, 8, 16), _t(1, 4, 8, 16)],
    }
    linear = _op("model/op/linear/b", "aten.linear.default", "1x8x32, 32x32", 0.003, other, counts, 4)
    linear["op_call"] = {"overload": "aten.linear.default", "args": [_t(1, 8, 32), _t(32, 32)]}
    for op in (sdpa, linear):
        op["op_phases"] = {"model/prefill": counts}
    doc["workloads"] += [sdpa, linear]
    return doc


def test_a_phase_that_cannot_be_rebuilt_gets_its_top_op_even_under_half() -> None:
    config, info, params = PHASES["prefill"]
    doc = _with_ops(_record("prefill", config, info, **params), top=1 / 1.5, other=1.0)
    up = build_upstream(analyze(doc), as_record(doc))
    assert up.workload == "model/prefill" and up.script is not None
    assert "no op explains half" in up.script  # 1 ms of a 10 ms change: the phase itself
    del doc["workloads"][0]["config"]  # a record without the config cannot rebuild the phase: the top op then
    up = build_upstream(analyze(doc), as_record(doc))
    assert up.script is not None and "torch.ops.aten.scaled_dot_product_attention.default(" in up.script
    compile(up.script, "repro.py", "exec")


def _three_kinds(sdpa: float, linear: float, mul: float) -> tuple[dict[str, Any], Analysis]:
    """The prefill phase with SDPA, linear and mul replayed at these speedups, and its analysis."""
    config, info, params = PHASES["prefill"]
    doc = _with_ops(_record("prefill", config, info, **params), top=sdpa, other=linear)
    op = _op("model/op/mul/c", "aten.mul.Tensor", "1x8x32", 0.0005, mul, {"baseline": 2, "candidate": 2}, 5)
    op["op_phases"] = {"model/prefill": {"baseline": 2, "candidate": 2}}
    doc["workloads"].append(op)
    return doc, analyze(doc)


def test_a_change_spread_over_the_op_kinds_gets_the_phase_not_the_biggest_op() -> None:
    doc, analysis = _three_kinds(0.5, 0.5, 0.5)
    assert analysis.attribution["prefill"].spread is not None
    assert analysis.attribution["prefill"].top_explains_half  # the linear alone would have been timed
    script = build_upstream(analysis, as_record(doc)).script or ""
    assert "the whole prefill phase" in script and "spread over 3 op kinds alike" in script
    assert "torch.ops.aten.linear" not in script


def test_a_change_spread_unalike_with_none_apart_gets_the_phase_too() -> None:
    """SDPA 0.25x, mul 0.27x, linear 0.6x: every kind slower, not alike, none apart (a cost every call pays moves
    short calls most): the phase's script, said as more likely shared than one kernel."""
    doc, analysis = _three_kinds(0.25, 0.6, 0.27)
    spread = analysis.attribution["prefill"].spread
    assert spread is not None and not spread.alike
    script = build_upstream(analysis, as_record(doc)).script or ""
    assert "the whole prefill phase" in script and "spread over 3 op kinds, none apart" in script
    assert "more likely something every call shares than one kernel" in script


def test_a_compiled_phase_still_gets_no_script(tmp_path: Path) -> None:
    config, info, params = PHASES["prefill"]
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_record("prefill", config, info, compile=True, **params)))
    out = run_cli("report", "--upstream", str(run), "-o", str(tmp_path / "repro.py"))
    assert out.returncode == 2 and "no standalone script for model/prefill" in out.stderr
    assert not (tmp_path / "repro.py").exists()
