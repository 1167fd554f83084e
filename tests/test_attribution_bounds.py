"""Replay bounded: a phase too slow to measure in a few of its budgets is refused in one line naming --budget, and
a model run says before it starts what it will take (phases, layers, ops), with --no-ops to skip the ops."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpsup.bench.command import BenchPlan, BenchRequest, op_expander, time_estimate
from mpsup.bench.measurement import WorkloadMeasurement
from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.workloads import Workload

PHASE = Workload(
    "model/vae/vae_decode", "model_phase", "phase", "fp32", {"library": "diffusers", "phase": "vae_decode"}
)
LAYER = Workload("model/conv/a", "linear", "model", "fp32", {"tokens": 1, "in_features": 2, "out_features": 2})


def _runner(budget: float = 0.5) -> Runner:
    envs = [
        EnvSpec("baseline", Path("/a")),
        EnvSpec("candidate", Path("/b")),
    ]
    return Runner(envs, BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=budget)))


def test_a_phase_too_slow_for_its_budgets_is_refused_naming_the_budget_that_measures_it() -> None:
    runner = _runner()
    limit = runner._slow_call_limit(PHASE)
    assert limit == pytest.approx(12 * 10 * 0.5 / 36)  # 12 of its 10-unit budgets over 36 fewest paired calls
    assert runner._slow_call_limit(LAYER) is None  # a user's layers: measured whatever they cost, as before
    m = WorkloadMeasurement(PHASE)
    runner._too_slow(m, 84.0, limit, predicted=False)  # the full-size Wan 2.2 VAE decode on a CPU
    assert m.status == "too_slow" and m.budget_needed_s == pytest.approx(25.2)
    assert "(--budget 25.2 measures it)" in (m.reason or "") and "--only" not in (m.reason or "")
    # at that budget, the same call fits
    assert _runner(25.2)._slow_call_limit(PHASE) == pytest.approx(84.0)


def _plan(ops: bool = True, paired: bool = True) -> BenchPlan:
    req = BenchRequest(budget=0.5, candidate="/b/python" if paired else None, ops=ops)
    other = Workload("model/vae/vae_encode", "model_phase", "phase", "fp32", {"library": "diffusers"})
    return BenchPlan(req, "cpu", (PHASE, other, LAYER), {"path": "/m"})


def test_the_time_a_model_run_will_take_is_said_before_it_starts() -> None:
    with_ops = time_estimate(_plan())
    assert with_ops is not None
    assert with_ops.startswith("2 phase(s), 1 layer workload(s), each phase's ops (at most 50% more; --no-ops")
    assert "~16 s at --budget 0.5" in with_ops  # (2 x 10 + 1) units x 0.5 s x 1.5
    assert "over 60 s is refused" in with_ops
    bare = time_estimate(_plan(ops=False))
    assert bare is not None and "ops" not in bare and "~10 s" in bare
    single = time_estimate(_plan(paired=False))
    assert single is not None and "ops" not in single  # one environment: nothing to attribute a change to
    assert op_expander(_plan(), 2) is not None and op_expander(_plan(ops=False), 2) is None
    assert time_estimate(BenchPlan(BenchRequest(), "cpu", (LAYER,), None)) is None  # the bundled suite


def test_a_bisect_following_a_phase_replays_its_ops_at_every_step(tmp_path: Path) -> None:
    """`bisect --only model/decode`: each step is a paired bench of the step's plan, so its record carries the
    decode phase's ops and `report RUN` of the first bad step attributes the change (the journal keeps its id)."""
    import json
    import sys
    from dataclasses import replace

    from mpsup.bisect.command import BisectRequest, _prepare

    folder = tmp_path / "llama"
    folder.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "vocab_size": 16}
    (folder / "config.json").write_text(json.dumps(config))
    plan = _prepare(BisectRequest(only="model/decode", model=folder), Path(sys.executable))
    assert [w.name for w in plan.workloads] == ["model/decode"]
    step = replace(plan, request=replace(plan.request, candidate="/other/python", aa=False))
    assert op_expander(step, 2) is not None


def test_no_ops_is_an_option_of_bench() -> None:
    from tests.conftest import run_cli

    out = run_cli("bench", "--help")
    text = " ".join(out.stdout.split())
    assert "--no-ops" in text
