"""The worker protocol: its own pipes, answers checked, a worker that never outlives mpsup."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.bench.workerproc import WorkerProcess, _valid, check_interpreter
from mpsup.errors import UserError
from mpsup.workloads import Workload
from tests.conftest import run_cli
from tests.turn_clock import TurnClock


def _runner() -> Runner:
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.01), smoke=False)
    runner = Runner([EnvSpec("baseline", Path(sys.executable))], opts)
    runner.start()
    return runner


def _tiny(name: str, kind: str = "linear") -> Workload:
    return Workload(name, kind, "linear", "fp32", {"tokens": 2, "in_features": 8, "out_features": 8})


def test_stray_output_is_harmless_and_a_malformed_answer_is_one_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A module:function model that prints (fake protocol lines too, even with os.write on fd 1) is
    measured normally; a broken answer on the protocol pipe itself is that workload's crash only."""
    (tmp_path / "chatty_model.py").write_text(
        textwrap.dedent("""
        import os
        import torch

        os.write(1, b"import-time chatter\\n")
        print("{not json")

        class M(torch.nn.Module):
            def forward(self, x):
                os.write(1, b'{"type": "samples", "host": ["x"]}\\n')
                print('{"type": "ready"}')
                return x * 2

        def make():
            return M(), torch.ones(4)
    """)
    )
    chatty = Workload(
        "model/end-to-end",
        "end_to_end",
        "model",
        "fp32",
        {"source": "factory", "target": "chatty_model:make", "cwd": str(tmp_path), "compile": False},
    )
    monkeypatch.setenv("MPSUP_WORKER_TEST_HOOKS", "1")
    runner = _runner()
    try:
        r = runner.measure(chatty)
        log = runner.sessions[0].worker.stderr_tail()  # type: ignore[union-attr]
        results = [runner.measure(w) for w in (_tiny("garbage", "__garbage__"), _tiny("after"))]
    finally:
        runner.close()
    assert r.status == "ok", r.reason
    env = r.envs["baseline"]
    assert env.samples and all(isinstance(s, float) and s > 0 for s in env.samples)
    assert '{"type": "ready"}' in log  # kept in the worker's log for a crash report, never parsed
    assert [x.status for x in results] == ["crash", "ok"]
    assert "not JSON" in (results[0].reason or "")
    assert runner.sessions[0].crashes == 1


@pytest.mark.parametrize(
    ("answer", "op"),
    [
        ({"type": "ready"}, "setup"),  # no calls: once a KeyError traceback
        ({"type": "ready", "calls": "3"}, "setup"),
        ({"type": "ready", "calls": True}, "setup"),
        ({"type": "samples", "host": ["1.0"]}, "sample"),
        ({"type": "samples", "host": [float("nan")]}, "sample"),
        ({"type": "samples", "host": [1.0], "device": "fast"}, "sample"),
        ({"type": "samples", "host": [1.0]}, "setup"),  # an answer to some other request
        ({"type": "hello"}, "hello"),
        ({"type": "error", "message": 5}, "sample"),
        ({"type": "done", "memory": []}, "teardown"),
    ],
)
def test_answers_that_break_the_protocol_are_refused(answer: dict, op: str):
    from mpsup.bench.workerproc import ANSWERS

    assert not _valid(answer, ANSWERS[op])


def test_good_answers_pass():
    assert _valid({"type": "ready", "calls": 3}, "ready")
    assert _valid({"type": "samples", "host": [1e-6, 2e-6], "device": None}, "samples")
    assert _valid({"type": "error", "status": "oom", "message": "out of memory"}, "samples")


def test_worker_stops_when_mpsup_goes_away_even_mid_measurement():
    """mpsup killed with SIGKILL runs no cleanup; the worker sees its request pipe end and exits."""
    w = WorkerProcess(Path(sys.executable))
    try:
        assert w.request({"op": "hello", "device": "cpu"})["type"] == "hello"
        assert w.request({"op": "setup", "workload": _tiny("x").spec(), "calls": 1})["type"] == "ready"
        w._requests.write('{"op": "sample", "count": 100000000}\n')  # minutes of work
        w._requests.flush()
        time.sleep(0.3)
        assert w.alive
        w._requests.close()  # what the kernel does to mpsup's end of the pipe when mpsup dies
        deadline = time.monotonic() + 10
        while w.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not w.alive, "the worker kept measuring for nobody"
    finally:
        w.close(force=True)


def test_check_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "py").symlink_to(sys.executable)
    # Relative paths become absolute (the worker runs elsewhere) but a venv's symlink is kept as is.
    assert check_interpreter(Path("py")) == tmp_path / "py"
    with pytest.raises(UserError, match="no such interpreter"):
        check_interpreter(tmp_path / "nope")


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_unusable_python_is_one_line_and_exit_2(tmp_path: Path, mpsup_home: Path):
    (tmp_path / "plain.txt").write_text("not a program")
    fake_torch = tmp_path / "site" / "torch"
    fake_torch.mkdir(parents=True)
    (fake_torch / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    cases = {
        tmp_path / "plain.txt": "not executable",
        tmp_path: "is a folder",
        # -S: no site-packages, so no torch, as in a fresh venv.
        _script(tmp_path / "no-torch-python", f'exec "{sys.executable}" -S "$@"\n'): "no torch in",
        _script(
            tmp_path / "broken-torch-python", f'PYTHONPATH="{tmp_path / "site"}" exec "{sys.executable}" -S "$@"\n'
        ): "torch cannot be imported in",
    }
    for python, needle in cases.items():
        res = run_cli("bench", "--device", "cpu", "--only", "roofline*", "--no-smoke", "--python", str(python))
        assert res.returncode == 2, (python, res.stderr)
        assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "libtorch_cpu.so" in res.stderr
    assert not (mpsup_home / "runs").exists()
    assert os.access(sys.executable, os.X_OK)


def test_a_ready_answer_is_parsed_once_into_typed_fields():
    from mpsup.bench.measurement import EnvMeasurement

    ans = {"type": "ready", "calls": 3, "per_call_s": 0.002, "bytes_per_call": 4096, "flops_per_call": "lots"}
    env = EnvMeasurement.ready(ans)
    assert env.ok and env.calls == 3 and env.sample_s == pytest.approx(0.006)
    # A figure the protocol check does not cover is kept only when it is a number (an int stays an int);
    # anything else would make the saved record unreadable.
    assert env.bytes_per_call == 4096 and isinstance(env.bytes_per_call, int)
    assert env.flops_per_call is None and env.items_per_call is None
    assert "sample_s" not in env.to_json() and "_sample_s" not in env.to_json()


def test_a_measurement_is_written_with_the_record_layout_and_reads_back():
    from mpsup.bench.measurement import EnvMeasurement, Round, WorkloadMeasurement
    from mpsup.runs.schema import WorkloadRun

    w = _tiny("w")
    ready = {"type": "ready", "calls": 2, "per_call_s": 1e-3, "bytes_per_call": 64, "flops_per_call": 512.0}
    a, b = EnvMeasurement.ready(ready), EnvMeasurement.ready(ready)
    a.samples += [1.0e-3, 1.1e-3, 0.9e-3]
    b.samples += [2.0e-3, 2.2e-3, 1.8e-3]
    a.stop = b.stop = "rounds"
    b.fail("crash", "worker died")  # after its rule had stopped it: the reason follows the stop
    for env in (a, b):
        env.summarize()
    m = WorkloadMeasurement(w, {"baseline": a, "candidate": b}, rounds=[], ratios=[0.5], samples_per_round=3)
    m.rounds = [Round("candidate", 1, {"baseline": a.samples, "candidate": b.samples})]
    m.status, m.reason, m.elapsed_s, m.visits = "crash", "worker died", 0.25, 1
    doc = m.to_json()
    assert list(doc)[: len(w.to_json())] == list(w.to_json())
    assert list(doc)[len(w.to_json()) :] == [
        "envs", "rounds", "ratios", "samples_per_round", "status", "reason", "elapsed_s", "visits",
    ]  # fmt: skip
    head = ["status", "calls", "bytes_per_call", "flops_per_call", "items_per_call", "warmup", "samples"]
    assert list(doc["envs"]["baseline"]) == [*head, "device_samples", "memory", "stop", "median", "ci_low", "ci_high"]
    assert list(doc["envs"]["candidate"]) == [
        *head, "device_samples", "memory", "stop", "reason", "median", "ci_low", "ci_high",
    ]  # fmt: skip
    assert doc["rounds"] == [{"first": "candidate", "visit": 1, "baseline": a.samples, "candidate": b.samples}]
    run = WorkloadRun.from_json(json.loads(json.dumps(doc)), "workloads[0]")
    assert run.ratios == (0.5,) and run.env("candidate").samples == tuple(b.samples)
    assert run.env("baseline").median == a.summary.median == pytest.approx(1.0e-3)
    # Nothing measured: a failed setup is three keys, a skipped workload has no time and no visits.
    failed = EnvMeasurement.failed("crash", "died in setup", "tail")
    assert failed.to_json() == {"status": "crash", "reason": "died in setup", "stderr": "tail"}
    skipped = WorkloadMeasurement(w, status="skipped", reason="too big").to_json()
    assert list(skipped)[len(w.to_json()) :] == ["envs", "status", "reason"] and skipped["envs"] == {}


def test_a_slow_request_for_samples_is_a_progress_event_the_bar_shows() -> None:
    """A whole-model phase at seconds a call (84 s for the Wan 2.2 VAE decode on this CPU) showed nothing
    moving within the workload: each request at least `slow_sample_s` long now says where it is."""
    import io

    from rich.console import Console

    from mpsup.bench.events import BenchStarted, SamplesTaken, VisitStarted, WorkloadStarted
    from mpsup.bench.progress_bar import bench_progress
    from mpsup.progress import Event

    events: list[Event] = []
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.01), smoke=False, slow_sample_s=0.0)
    runner = Runner([EnvSpec("baseline", Path(sys.executable))], opts, events.append)
    runner.start()
    try:
        assert runner.measure(_tiny("linear/8x8/t2")).status == "ok"
    finally:
        runner.close()
    samples = [e for e in events if isinstance(e, SamplesTaken)]
    assert samples and {e.env for e in samples} == {"baseline"}
    assert any(e.warmup for e in samples) and any(not e.warmup for e in samples)
    measured = [e.samples for e in samples if not e.warmup]
    assert measured == sorted(measured) and measured[-1] >= 6  # a running count, up to the six the interval needs
    buf = io.StringIO()
    with bench_progress(Console(file=buf, width=150, color_system=None, force_terminal=True)) as on_event:
        on_event(BenchStarted(total=1, visits=1))
        on_event(WorkloadStarted("model/vae/vae_decode", 90))
        on_event(SamplesTaken("candidate", warmup=False, samples=3, took_s=84.2))
    assert "model/vae/vae_decode: candidate samples 3 (84.20 s a request)" in buf.getvalue()
    buf = io.StringIO()
    with bench_progress(Console(file=buf, width=150, color_system=None, force_terminal=True)) as on_event:
        on_event(BenchStarted(total=2, visits=2))
        on_event(WorkloadStarted("model/vae/vae_decode", 90))
        on_event(WorkloadStarted("model/linear/8x8/t1", 60))
        on_event(VisitStarted("model/vae/vae_decode", 60))  # its second visit, after the others
        on_event(SamplesTaken("baseline", warmup=False, samples=9, took_s=84.2))
    assert "model/vae/vae_decode: baseline samples 9" in buf.getvalue()
    # below the threshold (the default, 1 s) a fast workload sends none
    quiet: list[Event] = []
    runner = Runner(
        [EnvSpec("baseline", Path(sys.executable))],
        BenchOptions(device="cpu", smoke=False, policy=SamplingPolicy(budget_s=0.01)),
        quiet.append,
    )
    runner.start()
    try:
        runner.measure(_tiny("linear/8x8/t2"))
    finally:
        runner.close()
    assert not any(isinstance(e, SamplesTaken) for e in quiet)


def test_a_paired_sample_of_a_second_or_more_discards_no_block_after_the_switch() -> None:
    """The discarded block after each switch is one full sample per side and round: for a whole-model phase at
    seconds a call it doubled the calls. Below the threshold it stays (it is what keeps small-layer A/A clean)."""

    def discards(discard_up_to_s: float) -> list[int]:
        pol = SamplingPolicy(budget_s=0.05, discard_up_to_s=discard_up_to_s)
        # The share runs out exactly when the twelfth round (the policy's least) ends.
        clock = TurnClock(pol.budget_s / (2 * pol.min_rounds))
        envs = [EnvSpec("baseline", Path(sys.executable)), EnvSpec("candidate", Path(sys.executable))]
        runner = Runner(envs, BenchOptions(device="cpu", policy=pol, smoke=False, clock=clock))
        clock.watch(runner)
        runner.start()
        try:
            m = runner.measure(_tiny("linear/8x8/t2"))
        finally:
            runner.close()
        assert m.status == "ok" and m.rounds is not None and len(m.rounds) == pol.min_rounds
        return clock.discards

    assert discards(1.0) == [1] * 24  # microsecond samples: one discarded block every turn
    assert discards(0.0) == [0] * 24  # as if every sample took a second or more


def test_each_side_discards_by_its_own_sample_length() -> None:
    """torch against MLX: a 30 ms call after the other stack's second-long turn runs cold, so the short side still
    discards its switch block though the long side does not."""
    pol = SamplingPolicy(budget_s=0.05)
    clock = TurnClock(pol.budget_s / (2 * pol.min_rounds))
    envs = [EnvSpec("baseline", Path(sys.executable)), EnvSpec("candidate", Path(sys.executable))]
    runner = Runner(envs, BenchOptions(device="cpu", policy=pol, smoke=False, clock=clock))
    clock.watch(runner)
    paired = runner._paired

    def candidate_takes_seconds(live, m, *args, **kwargs):  # type: ignore[no-untyped-def]
        m.envs["candidate"].sample_s = 2 * pol.discard_up_to_s
        return paired(live, m, *args, **kwargs)

    runner._paired = candidate_takes_seconds  # type: ignore[method-assign]
    runner.start()
    try:
        m = runner.measure(_tiny("linear/8x8/t2"))
    finally:
        runner.close()
    assert m.status == "ok" and m.rounds is not None
    by_side: dict[str, list[int]] = {"baseline": [], "candidate": []}
    turns = iter(clock.discards)
    for rnd in m.rounds:
        first = rnd.first
        for label in (first, "candidate" if first == "baseline" else "baseline"):
            by_side[label].append(next(turns))
    assert set(by_side["baseline"]) == {1} and set(by_side["candidate"]) == {0}
