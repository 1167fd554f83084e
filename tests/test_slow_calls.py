"""The default suite skips what its budget has no room for (issue 25, a main job in bounded time): a workload
whose fewest calls would take several budgets is timed once (or predicted from a like workload's rate) and
said so, instead of running for a minute; what --only names is measured whatever it costs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.bench import command
from mpsup.bench.policy import SLOW_CALL_BUDGETS, SamplingPolicy
from mpsup.bench.run import run_bench
from mpsup.bench.runner import BenchOptions, EnvSpec
from mpsup.bench.screen import render_run
from mpsup.workloads import Workload, priced_flops


def _linear(tokens: int, k: int, n: int) -> Workload:
    return Workload(
        f"linear/{k}x{n}/t{tokens}", "linear", "linear", "fp32", {"tokens": tokens, "in_features": k, "out_features": n}
    )


def test_the_limit_is_the_fewest_calls_in_four_budgets():
    pol = SamplingPolicy(budget_s=0.5)
    assert pol.fewest_calls(paired=False) == 9  # six samples, a warmup call, the setup's two
    assert pol.fewest_calls(paired=True) == 36  # twelve rounds a side over two visits, and 3 calls a visit a side
    assert pol.slow_call_s(paired=False) == pytest.approx(SLOW_CALL_BUDGETS * 0.5 / 9)
    assert pol.slow_call_s(paired=True) == pytest.approx(SLOW_CALL_BUDGETS * 0.5 / 36)
    assert pol.slow_call_s(paired=False, weight=10) == pytest.approx(10 * pol.slow_call_s(paired=False))


def test_flops_are_priced_as_the_worker_counts_them():
    assert priced_flops("linear", {"tokens": 16, "in_features": 4096, "out_features": 14336}) == 2 * 16 * 4096 * 14336
    assert priced_flops("int_mm", {"tokens": 16, "in_features": 8, "out_features": 4}) == 2 * 16 * 8 * 4
    assert priced_flops("grouped_mm", {"tokens": 4, "top_k": 2, "in_features": 8, "out_features": 4}) == 2 * 8 * 8 * 4
    assert priced_flops("matmul", {"n": 8}) == 2 * 8**3
    assert priced_flops("pad", {"shape": [1], "pad": [1, 1]}) is None
    assert priced_flops("linear", {"tokens": -1, "in_features": 8, "out_features": 8}) is None


def _run(skip_slow: bool, workloads: list[Workload]) -> dict[str, Any]:
    # A 1 ms budget: the limit is ~0.33 ms a call, so a 16-token 1024x2048 fp32 linear (67 MFLOP, milliseconds
    # on this CPU) is over it and an 8x8 one far under.
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.001), smoke=False, skip_slow=skip_slow)
    record, _path = run_bench([EnvSpec("baseline", Path(sys.executable))], workloads, opts, save=False)
    return {w["name"]: w for w in record["workloads"]} | {"__record__": record}


def test_a_slow_workload_is_timed_once_then_skipped_and_a_larger_one_predicted(mpsup_home: Path):
    small, slow, larger = _linear(2, 8, 8), _linear(16, 1024, 2048), _linear(16, 2048, 4096)
    out = _run(True, [small, slow, larger])
    assert out[small.name]["status"] == "ok" and out[small.name]["envs"]["baseline"]["median"] > 0
    timed = out[slow.name]
    assert timed["status"] == "too_slow" and timed["call_predicted"] is False and timed["envs"] == {}
    assert timed["call_s"] > SamplingPolicy(budget_s=0.001).slow_call_s(paired=False)
    assert "--budget" in timed["reason"] and "timed here" in timed["reason"]
    # Four times the arithmetic of the same family: predicted from the rate the slow one reached, never set up.
    predicted = out[larger.name]
    assert predicted["status"] == "too_slow" and predicted["call_predicted"] is True
    assert "elapsed_s" not in predicted
    assert predicted["call_s"] == pytest.approx(4 * timed["call_s"], rel=0.5)
    # The budget it names would fit its fewest calls in four budgets.
    need = predicted["budget_needed_s"]
    assert need * SLOW_CALL_BUDGETS >= 9 * predicted["call_s"] * 0.999


def test_without_the_cap_the_same_workload_is_measured(mpsup_home: Path):
    slow = _linear(16, 1024, 2048)
    out = _run(False, [slow])
    assert out[slow.name]["status"] == "ok" and len(out[slow.name]["envs"]["baseline"]["samples"]) >= 6


def test_the_main_screen_says_it_in_one_line(mpsup_home: Path):
    out = _run(True, [_linear(2, 8, 8), _linear(16, 1024, 2048), _linear(16, 2048, 4096)])
    console = Console(width=100, record=True, force_terminal=False)
    render_run(out["__record__"], console)
    text = " ".join(console.export_text().split())  # the line wraps at the console's width
    line = text[text.index("- linear/1024x2048/t16, linear/2048x4096/t16: too slow to measure") :]
    assert "at --budget 0.001 (" in line and " a call here); skipped (`--budget " in line
    assert "2 measured" not in text and "1 measured, 2 not" in text


def test_only_bundled_suite_runs_skip(monkeypatch: pytest.MonkeyPatch, mpsup_home: Path):
    seen: list[bool] = []

    def fake_run_bench(envs, workloads, options, **kw):
        seen.append(options.skip_slow)
        raise SystemExit(0)

    monkeypatch.setattr("mpsup.bench.run.run_bench", fake_run_bench)
    for only in (None, "linear/*"):
        plan = command.prepare(command.BenchRequest(device="cpu", only=only, smoke=False))
        with pytest.raises(SystemExit):
            command.run(plan, lambda *_: None, lambda _: None)
    assert seen == [True, False]


def test_a_first_call_over_the_cap_ends_the_setup_there():
    """The worker stops at its first call when that call alone is over max_first_call_s: no second call to
    calibrate what will not be measured. Under the cap (and without one) it calibrates as before."""
    from mpsup.bench.workerproc import WorkerProcess

    w = WorkerProcess(Path(sys.executable))
    spec = _linear(16, 256, 256).spec()
    try:
        w.request({"op": "hello", "device": "cpu"})
        capped = w.request({"op": "setup", "workload": spec, "calls": None, "max_first_call_s": 0.0})
        free = w.request({"op": "setup", "workload": spec, "calls": None, "max_first_call_s": 60.0})
    finally:
        w.close()
    assert capped["type"] == "ready" and capped.get("first_call_only") is True and capped["calls"] == 1
    assert free["type"] == "ready" and "first_call_only" not in free


def test_the_leftover_pass_is_net_of_what_workloads_overran():
    from mpsup.bench.policy import net_of_overrun

    # Two 0.5 s workloads: one took 2 s (1.5 over), one 0.1 s. A 2 s pool keeps 0.5 s; a 1 s pool nothing.
    assert net_of_overrun(2.0, [0.5, 0.5], [2.0, 0.1]) == pytest.approx(0.5)
    assert net_of_overrun(1.0, [0.5, 0.5], [2.0, 0.1]) == 0.0
    # Nobody overran: the pool stands. A whole-model phase's allowance is its ten budgets.
    assert net_of_overrun(3.0, [0.5, 5.0], [0.4, 4.9]) == 3.0
    with pytest.raises(ValueError):
        net_of_overrun(1.0, [0.5], [0.4, 0.4])


def test_the_report_says_which_budget_measures_what_the_guard_skipped():
    from mpsup.report.analysis import analyze
    from tests.synthetic import paired_record

    rec = paired_record(1.0, count=6)
    rec["options"] = {"budget_s": 0.5}
    for w, needed in zip(rec["workloads"][:2], (2.5, 6.8), strict=True):
        w.update(status="too_slow", envs={}, ratios=[], call_s=0.3, call_predicted=False, budget_needed_s=needed)
    notes = [n for n in analyze(rec).notes if n.startswith("Not measured")]
    assert notes == [
        f"Not measured: 2 workload(s) too slow to measure at --budget 0.5 on this machine (e.g. "
        f"{rec['workloads'][0]['name']}); `mpsup bench --budget 6.8` measures them all, `--only NAME` measures one."
    ]
    rec["workloads"][0]["budget_needed_s"] = "6.8"  # a hostile record: no figure from a wrong type
    rec["workloads"][1]["budget_needed_s"] = float("nan")
    (note,) = [n for n in analyze(rec).notes if n.startswith("Not measured")]
    assert "--budget 6.8" not in note and note.endswith("`--only NAME` measures one.")
    assert not [n for n in analyze(paired_record(1.0, count=6)).notes if n.startswith("Not measured")]
