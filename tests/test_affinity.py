"""`bench --affinity`: parsing, the auto choice per device, refusals, and workers really pinned."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mpsup.errors import UserError
from mpsup.host import affinity
from mpsup.host.affinity import choose, parse_cpu_list
from tests.conftest import run_cli

linux_only = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")


def test_cpu_lists_parse_like_taskset() -> None:
    assert parse_cpu_list("3") == (3,)
    assert parse_cpu_list("2,3") == (2, 3)
    assert parse_cpu_list("0-3,8, 5") == (0, 1, 2, 3, 5, 8)


@pytest.mark.parametrize("text", ["", "x", "3-1", "1-", "-1", "1,,2", "0-99999999", "1.5"])
def test_bad_cpu_lists_are_one_clear_error(text: str) -> None:
    with pytest.raises(UserError, match="--affinity"):
        parse_cpu_list(text)


def test_auto_pins_cuda_to_the_last_allowed_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: (0, 1, 2, 7))
    assert choose(None, "cuda").cpus == (7,)
    assert choose("auto", "cuda").cpus == (7,)
    assert choose(None, "cpu").cpus is None
    assert choose(None, "cuda").threads_on is None
    assert choose(None, "mps").cpus is None
    assert choose("none", "cuda").cpus is None
    assert choose("1-2", "cpu").cpus == (1, 2)


def test_cpus_outside_the_allowed_set_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: (0, 1))
    with pytest.raises(UserError, match="CPU 5 is not one this process may use"):
        choose("1,5", "cuda")


def test_without_an_affinity_interface_auto_is_unpinned_and_lists_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: None)
    assert choose(None, "cuda").cpus is None
    with pytest.raises(UserError, match="no CPU affinity interface"):
        choose("0", "cuda")


@linux_only
def test_the_workers_run_on_the_chosen_cpu(mpsup_home: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    done = run_cli(
        *("bench", "--device", "cpu", "--aa", "--only", "linear/896x896/t1", "--no-smoke", "--budget", "0.05"),
        *("--affinity", str(cpu), "--json"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pinned: every worker on CPU" in done.stderr
    summary = json.loads(done.stdout)
    record = json.loads(Path(summary["path"]).read_text())
    assert record["options"]["cpus"] == [cpu]
    assert [e["cpus"] for e in record["environments"]] == [[cpu], [cpu]]


def test_a_bad_affinity_is_exit_2_with_one_line(mpsup_home: Path) -> None:
    done = run_cli("bench", "--device", "cpu", "--affinity", "9-1", "--list")
    assert done.returncode == 2
    assert "--affinity '9-1'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("text", ["\u00b2", "\uff10", "1" * 5000, "", "0\n1"])
def test_odd_affinity_text_is_refused_not_a_traceback(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: (0, 1))
    with pytest.raises(UserError, match="--affinity"):
        choose(text, "cuda")


def test_pinned_workers_get_as_many_threads_as_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import mpsup.bench.runner as runner
    from mpsup.bench.runner import BenchOptions, EnvSession, EnvSpec

    seen: list[dict[str, str]] = []

    class FakeWorker:
        def __init__(self, _python: object, *, env: dict[str, str], stack: str = "torch") -> None:
            seen.append(env)

        def request(self, doc: dict[str, object], timeout: float = 0) -> dict[str, object]:
            seen.append({"hello_threads": str(doc["threads"])})
            return {"type": "hello", "available": True}

    monkeypatch.setattr(runner, "WorkerProcess", FakeWorker)
    EnvSession(EnvSpec("baseline", Path(sys.executable)), BenchOptions(device="cpu", cpus=(0, 1))).start()
    EnvSession(EnvSpec("baseline", Path(sys.executable)), BenchOptions(device="cpu", cpus=(0,), threads=3)).start()
    assert seen[0]["OMP_NUM_THREADS"] == "2" and seen[1] == {"hello_threads": "2"}
    assert seen[2]["OMP_NUM_THREADS"] == "3"  # an explicit --threads wins


@linux_only
def test_a_workload_is_built_unpinned_and_timed_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from mpsup.worker import main as worker_main

    everything = os.sched_getaffinity(0)
    seen: list[set[int]] = []
    real_build = worker_main.build

    def build(spec, device):  # type: ignore[no-untyped-def]
        seen.append(os.sched_getaffinity(0))  # torch.compile's workers would start here
        return real_build(spec, device)

    monkeypatch.setattr(worker_main, "build", build)
    worker = worker_main.Worker(io.StringIO())
    last = max(everything)
    try:
        hello = worker.hello({"device": "cpu", "cpus": [last]})
        assert hello["cpus"] == [last]
        spec = {"kind": "linear", "dtype": "fp32", "params": {"tokens": 1, "in_features": 8, "out_features": 8}}
        worker.setup({"workload": spec, "calls": 2})
        assert seen == [everything]
        assert os.sched_getaffinity(0) == {last}
    finally:
        os.sched_setaffinity(0, everything)
        import gc

        gc.unfreeze()  # hello froze this test process's objects, as it does a worker's


def test_auto_binds_cpu_workers_threads_one_per_cpu_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: left to the scheduler, a CPU worker's two intra-op threads shared one vCPU or had one each,
    per process, and that leaned A/A runs; auto binds them alike in every worker, the calling thread last."""
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: (0, 1, 2, 7))
    chosen = choose(None, "cpu")
    assert chosen.cpus is None and chosen.threads_on == (7, 0, 1, 2)
    assert "one per CPU" in chosen.why
    assert choose("none", "cpu").threads_on is None  # the scheduler's placement, as before
    assert choose("1-2", "cpu").threads_on is None  # a list pins the process, threads free within it
    monkeypatch.setattr(affinity, "allowed_cpus", lambda: (3,))
    assert choose(None, "cpu").threads_on is None  # one CPU: nothing to spread


def test_bound_threads_reach_the_worker_as_openmp_places(monkeypatch: pytest.MonkeyPatch) -> None:
    from mpsup.bench.workerproc import worker_env

    env = worker_env(None, (1, 0))
    assert env["OMP_PROC_BIND"] == "close" and env["OMP_PLACES"] == "{1},{0}"
    assert env["OMP_NUM_THREADS"] == "2" and env["GOMP_SPINCOUNT"] == "10000" and "OMP_WAIT_POLICY" not in env
    assert worker_env(1, (1, 0))["OMP_NUM_THREADS"] == "1"  # --threads wins
    assert "OMP_PLACES" not in worker_env(2)


@linux_only
def test_cpu_workers_run_their_threads_one_per_cpu(mpsup_home: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    done = run_cli(
        *("bench", "--device", "cpu", "--aa", "--only", "linear/896x896/t1", "--no-smoke", "--budget", "0.02"),
        "--json",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(Path(json.loads(done.stdout)["path"]).read_text())
    order = record["options"]["thread_cpus"]
    assert order[0] == max(os.sched_getaffinity(0)) and sorted(order) == sorted(os.sched_getaffinity(0))
    # The worker's calling thread is bound to the first place, so that is the CPU its hello reports.
    assert [e["cpus"] for e in record["environments"]] == [[order[0]], [order[0]]]
