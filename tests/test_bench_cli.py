"""`mpsup bench` end to end on the CPU, for real: worker processes, torch, records on disk."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.runs.store import list_record_paths, load_record
from mpsup.workloads import Workload
from tests.conftest import run_cli
from tests.turn_clock import TurnClock


def test_full_suite_on_cpu(mpsup_home: Path):
    # One token count: the multi-token variants are the same code with bigger inputs, and on two
    # CPU cores they doubled this test to 5 of CI's 15 minutes (--tokens parsing is tested below).
    # --only '*': every workload measured whatever it costs. Without a selection the time guard would skip
    # what a 0.02 s budget has no room for (tests/test_slow_calls.py), and this test is about running them all.
    res = run_cli(
        "bench", "--device", "cpu", "--budget", "0.02", "--tokens", "1", "--threads", "2", "--only", "*", "--json"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    summary = json.loads(res.stdout)
    counts = summary["status_counts"]
    assert counts.get("ok", 0) >= 75
    assert set(counts) <= {"ok", "unsupported"}
    # Metal kernels need MPS: unsupported here, never a pass.
    metal = [w for w in summary["workloads"] if w["kind"] == "metal"]
    assert metal and all(w["status"] == "unsupported" for w in metal)
    smoke = {k: v["baseline"] for k, v in summary["smoke"].items()}
    assert smoke["metal_kernels"] == "unsupported"
    if Version(torch.__version__.split("+")[0]) >= Version("2.13"):
        # torch 2.13 on CPU has all of these; a change here means a regression in torch or in us.
        for feature in (
            "fp8_cast",
            "fp8_copy",
            "fp8_cat",
            "fp8_constant_pad",
            "scaled_mm_fp8",
            "grouped_mm_bf16",
            "grouped_mm_fp16",
            "grouped_mm_fp32",
            "constant_pad_bf16_5d",
            "int_mm",
        ):
            assert smoke[feature] == "pass", (feature, smoke)
    # The record was written, atomically, and reads back with every raw sample.
    paths = list_record_paths()
    assert len(paths) == 1 and paths[0].parent == mpsup_home / "runs"
    record = load_record(paths[0]).to_json()
    assert record["id"] == summary["id"]
    # One environment runs under the single-run policy (+-2%, a two-sample warmup window), recorded as used.
    policy = record["options"]["policy"]
    assert (policy["target_rel_ci"], policy["warmup_window"]) == (0.02, 2)
    env = record["environments"][0]
    assert env["threads"] == 2 and env["torch_version"] == torch.__version__
    lin = next(w for w in record["workloads"] if w["name"] == "linear/4096x4096/t1")
    base = lin["envs"]["baseline"]
    assert len(base["samples"]) >= 3 and min(base["samples"]) <= base["median"] <= max(base["samples"])
    assert base["calls"] >= 1 and base["flops_per_call"] == 2 * 4096 * 4096
    assert base["memory"]["peak_rss"] > 0
    small = next(w for w in record["workloads"] if w["name"] == "linear/384x384/t1")["envs"]["baseline"]
    assert len(small["samples"]) >= 6 and small["ci_low"] <= small["median"] <= small["ci_high"]
    assert not list((mpsup_home / "runs").glob(".*tmp"))


def test_table_output(mpsup_home: Path):
    # Not the bf16 matmul probe: a CPU without bf16 units takes ~2.5 s a call there, 40 s of CI for two runs.
    only = "roofline/copy/*,roofline/matmul/fp32/*"
    args = ("bench", "--device", "cpu", "--budget", "0.01", "--only", only, "--no-smoke")
    res = run_cli(*args, "--details")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (
        "Roofline probes" in res.stdout and "GB/s" in res.stdout and "FLOP/s" in res.stdout
    )  # GFLOP/s on a CPU (issue 16)
    assert "Run record:" in res.stdout
    # Without --details, one screen: the figures' meaning and the workloads that take the time, no part tables.
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Roofline probes" not in res.stdout and "roofline, measured here" in res.stdout
    assert "take the most time" in res.stdout and "Run record:" in res.stdout


def test_list_json_has_shape_fields():
    res = run_cli("bench", "--list", "--json", "--device", "cpu")
    assert res.returncode == 0
    items = json.loads(res.stdout)
    linears = [i for i in items if i["kind"] == "linear"]
    assert len(linears) >= 90
    assert all({"tokens", "in_features", "out_features"} <= set(i) for i in linears)
    assert {1, 16} == {i["tokens"] for i in linears}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--only", "no-such-workload*"], "matches no workload"),
        (["--only", "re:(unclosed"], "not a valid regular expression"),
        (["--device", "tpu"], "--device"),
        (["--tokens", "1,-3"], "--tokens"),
        (["--python", "/no/such/python"], "no such interpreter"),
        (["--candidate", "/no/such/env"], "--candidate"),
    ],
)
def test_bad_input_exit_2(args: list[str], needle: str, mpsup_home: Path):
    res = run_cli("bench", "--device", "cpu", *args) if args[0] != "--device" else run_cli("bench", *args)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert not (mpsup_home / "runs").exists()


@pytest.mark.parametrize("budget", ["inf", "1e308", "nan", "-inf", "0", "3601"])
def test_absurd_budget_is_one_line_exit_2_and_no_record(budget: str, mpsup_home: Path):
    # inf used to reach the round sizing: "internal error: OverflowError", exit 1, an empty partial record.
    res = run_cli("bench", "--device", "cpu", "--no-smoke", "--only", "linear/896x128/t1", f"--budget={budget}")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--budget" in lines[0] and "3600" in lines[0], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert not mpsup_home.exists() or not any(mpsup_home.rglob("*"))  # no record, no journal


def test_unavailable_device_exit_2(mpsup_home: Path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    res = run_cli("bench", "--device", "cuda", "--no-smoke", "--only", "roofline")
    assert res.returncode == 2 and "not available" in res.stderr
    assert not (mpsup_home / "runs").exists()


def _tiny(name: str, kind: str = "linear") -> Workload:
    return Workload(name, kind, "linear", "fp32", {"tokens": 2, "in_features": 8, "out_features": 8})


def test_crash_and_raise_are_recorded_and_run_goes_on(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MPSUP_WORKER_TEST_HOOKS", "1")
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.01), smoke=False)
    runner = Runner([EnvSpec("baseline", Path(sys.executable))], opts)
    runner.start()
    try:
        first_pid = runner.sessions[0].worker.proc.pid
        results = [
            runner.measure(w).to_json()
            for w in (
                _tiny("before"),
                _tiny("killed", "__crash__"),
                _tiny("after-crash"),
                _tiny("raises", "__raise__"),
                _tiny("after-raise"),
            )
        ]
    finally:
        runner.close()
    status = {r["name"]: r["status"] for r in results}
    assert status == {"before": "ok", "killed": "crash", "after-crash": "ok", "raises": "error", "after-raise": "ok"}
    killed = next(r for r in results if r["name"] == "killed")
    assert "signal 9" in killed["reason"]
    assert "raises on purpose" in next(r for r in results if r["name"] == "raises")["reason"]
    assert runner.sessions[0].crashes == 1
    assert first_pid != os.getpid()


def test_memory_guard_skips_oversized_workload():
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.01), smoke=False)
    runner = Runner([EnvSpec("baseline", Path(sys.executable))], opts)
    runner.start()
    try:
        huge = Workload(
            "huge", "linear", "linear", "fp32", {"tokens": 1, "in_features": 8, "out_features": 8}, memory_bytes=1 << 50
        )
        r = runner.measure(huge).to_json()
    finally:
        runner.close()
    assert r["status"] == "skipped" and "freeze" in r["reason"]


def test_worker_never_sees_mpsup(tmp_path: Path):
    """The worker must import nothing of mpsup: it is loaded by file location under its own name."""
    from mpsup.bench.workerproc import WorkerProcess

    w = WorkerProcess(Path(sys.executable))
    try:
        ans = w.request({"op": "hello", "device": "cpu"})
        assert ans["type"] == "hello"
    finally:
        w.close()
    import subprocess

    from mpsup.bench.workerproc import BOOT, BOOT_CALL, WORKER_DIR

    probe = BOOT.replace(BOOT_CALL, "") + "import importlib.util\nprint(importlib.util.find_spec('mpsup') is None)\n"
    out = subprocess.run(
        [sys.executable, "-c", probe, str(WORKER_DIR), "0", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        check=True,
    )
    # mpsup is installed (editable or not) in this venv, so find_spec may see it; what matters is
    # that the worker itself never imports it.
    assert "mpsup.worker" not in out.stderr
    import ast

    for src in WORKER_DIR.glob("*.py"):
        tree = ast.parse(src.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("mpsup"), src
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("mpsup") for a in node.names), src


def test_ctrl_c_keeps_a_partial_marked_record(mpsup_home: Path):
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mpsup",
            "bench",
            "--device",
            "cpu",
            "--only",
            "linear/*/t1",
            "--tokens",
            "1",
            "--budget",
            "0.3",
            "--no-smoke",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Interrupt only once the run has begun (the worker exists): on a loaded machine a fixed 8 s once
    # fell inside the parent's start-up, and the run went on to finish with exit 0.
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 120
    while children.exists() and not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(8)  # the worker imports torch and answers hello; then workloads run
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["partial"] is True
    record = load_record(list_record_paths()[0]).to_json()
    assert record["partial"] is True and record["interrupted"] is True
    assert 0 < len(record["workloads"]) < 59


def test_progress_total_is_what_list_shows_and_smoke_steps_are_apart(mpsup_home: Path):
    from mpsup.bench import command
    from mpsup.bench.events import BenchStarted, WorkloadDone, WorkloadStarted
    from mpsup.progress import Event

    only = "linear/896x128/*,roofline/copy*"
    listed = json.loads(run_cli("bench", "--list", "--json", "--device", "cpu", "--only", only).stdout)
    plan = command.prepare(command.BenchRequest(device="cpu", budget=0.01, only=only, smoke=True))
    events: list[Event] = []
    result = command.run(plan, progress=events.append, warn=lambda _m: None)
    start = next(e for e in events if isinstance(e, BenchStarted))
    assert start.total == len(listed) == len(result.record["workloads"])
    assert start.smoke == len(result.record["smoke"]) > 0
    assert sum(isinstance(e, WorkloadDone) for e in events) == len(listed)
    etas = [e.eta_s for e in events if isinstance(e, WorkloadStarted) and e.eta_s is not None]
    assert len(etas) == len(listed) and all(x >= 0 for x in etas)
    # Each workload's time is recorded, and the second pass never adds a workload twice.
    assert all(w["elapsed_s"] > 0 for w in result.record["workloads"])
    assert len({w["name"] for w in result.record["workloads"]}) == len(listed)


def test_paired_rounds_discard_the_switch_block_in_the_same_request():
    pol = SamplingPolicy(budget_s=0.05, min_rounds=4)
    # The first visit's share runs out as its fourth round ends; the second's no sooner than its second round.
    clock = TurnClock(pol.budget_s / (2 * pol.min_rounds))
    opts = BenchOptions(device="cpu", policy=pol, smoke=False, clock=clock)
    runner = Runner([EnvSpec("baseline", Path(sys.executable)), EnvSpec("baseline-2", Path(sys.executable))], opts)
    clock.watch(runner)
    runner.start()
    tiny = Workload("tiny", "linear", "linear", "fp32", {"tokens": 2, "in_features": 8, "out_features": 8})
    try:
        m = runner.measure(tiny)
        assert runner.extend(tiny, m, 0.05, min_new=2)
        r = m.to_json()
    finally:
        runner.close()
    rounds = len(r["ratios"])
    assert r["status"] == "ok" and 6 <= rounds <= 8 and r["visits"] == 2
    assert clock.discards == [1] * (2 * rounds)  # every timed block came with its discarded one
    assert {x["visit"] for x in r["rounds"]} == {1, 2}
    for label in ("baseline", "baseline-2"):
        env = r["envs"][label]
        # One discarded block per round, kept apart from the samples the ratios come from. Each visit sizes its
        # rounds from its own calibration, so the two visits' rounds may hold different counts.
        assert env["samples"] == [x for one in r["rounds"] for x in one[label]]
        assert len(r["rounds"][-1][label]) == r["samples_per_round"]
        assert len(env["warmup"]) >= rounds
