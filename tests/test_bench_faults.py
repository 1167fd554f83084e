"""Faults during a real CPU bench: signals, a dead mpsup, a full disk, a read-only data dir, a crash in
the statistics. Each must leave every finished measurement readable by `mpsup report --list`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.events import WorkloadDone
from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.run import run_bench
from mpsup.bench.runner import BenchOptions, EnvSpec
from mpsup.errors import OperationFailed, UserError
from mpsup.runs import select
from mpsup.runs.journal import SUFFIX
from mpsup.runs.store import list_record_paths, load_record
from mpsup.workloads import Workload
from tests.conftest import run_cli

# Enough workloads that a signal lands mid-run: 59 linear shapes at t1, a few seconds in all.
BENCH = [
    "bench",
    "--device",
    "cpu",
    "--only",
    "linear/*/t1",
    "--tokens",
    "1",
    "--budget",
    "0.03",
    "--no-smoke",
    "--json",
]


def _journaled(runs: Path) -> int:
    """Workloads on disk in the live journal (0 while there is none)."""
    for j in runs.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            return sum(1 for ln in j.read_bytes().splitlines() if ln.startswith(b'{"workload"'))
    return 0


def _start(
    mpsup_home: Path, at_least: int = 2, args: list[str] = BENCH
) -> tuple[subprocess.Popen[str], int, int | None]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpsup", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while _journaled(mpsup_home / "runs") < at_least:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the bench never journaled a workload"
        time.sleep(0.05)
    done = _journaled(mpsup_home / "runs")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    worker = int(children.read_text().split()[0]) if children.exists() and children.read_text().split() else None
    return proc, done, worker


def _gone(pid: int | None, within: float = 10.0) -> bool:
    if pid is None:
        return True  # no /proc here: nothing to check
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):  # dead, waiting for init to reap it
            return True
        time.sleep(0.05)
    return False


def _listed(mpsup_home: Path) -> list[dict]:
    res = run_cli("report", "--list", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize(("how", "code"), [("SIGTERM", 143), ("SIGHUP", 129), ("double Ctrl-C", 130)])
def test_signal_keeps_every_finished_workload(how: str, code: int, mpsup_home: Path):
    proc, done, worker = _start(mpsup_home)
    if how == "double Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
        time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # pressed again while the record is being saved
    else:
        os.kill(proc.pid, getattr(signal, how))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err
    assert _gone(worker), "the worker outlived mpsup"
    summary = json.loads(out)
    record = load_record(Path(summary["path"])).to_json()
    assert record["partial"] is True and record["interrupted"] is True
    assert record["signal"] == ("SIGINT" if how == "double Ctrl-C" else how)
    assert done <= len(record["workloads"]) < 59
    assert all(w["envs"]["baseline"]["samples"] for w in record["workloads"])
    assert not list((mpsup_home / "runs").glob(f"*{SUFFIX}*"))
    assert [(r["id"], r["partial"]) for r in _listed(mpsup_home)] == [(record["id"], True)]


def test_a_stopped_run_says_how_many_of_the_selected_ran(mpsup_home: Path):
    proc, _done, _worker = _start(mpsup_home, args=[a for a in BENCH if a != "--json"])
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    flat = " ".join(out.split())
    assert re.search(r"Interrupted \(SIGTERM\): \d+ of 59 workloads ran", flat), flat[:500]
    assert "the partial record is kept" in flat and "mpsup install-rc" not in flat  # no "Next" after a stop


def test_killed_mpsup_leaves_a_journal_that_report_recovers(mpsup_home: Path):
    proc, done, worker = _start(mpsup_home)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only the journal can save the measurements
    proc.communicate(timeout=60)
    assert _gone(worker), "the worker outlived a killed mpsup"
    assert list_record_paths() == [] and len(list((mpsup_home / "runs").glob(f"*{SUFFIX}"))) == 1
    # One damaged line among the finished workloads costs that line only (it once set the whole journal aside).
    journal = next((mpsup_home / "runs").glob(f"*{SUFFIX}"))
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([*lines[:2], b'{"workload": 5}', *lines[2:]]))
    rows = _listed(mpsup_home)
    assert len(rows) == 1 and rows[0]["partial"] is True and rows[0]["workloads"] >= done
    record = load_record(Path(rows[0]["path"])).to_json()
    assert record["interrupted"] is True and record["recovered"]["unreadable_lines"] == 1
    assert not list((mpsup_home / "runs").glob(f"*{SUFFIX}"))


def _tiny(name: str) -> Workload:
    return Workload(name, "linear", "linear", "fp32", {"tokens": 2, "in_features": 8, "out_features": 8})


def _bench(n: int = 3, **kw) -> tuple[dict, Path | None]:
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=0.01), smoke=False)
    return run_bench([EnvSpec("baseline", Path(sys.executable))], [_tiny(f"w{i}") for i in range(n)], opts, **kw)


def _recover(mpsup_home: Path) -> dict:
    warnings: list[str] = []
    rows = [r.to_json() for r in select.stored_runs(warnings.append)]
    assert len(rows) == 1 and any("recovered" in w for w in warnings), warnings
    assert not list((mpsup_home / "runs").glob(f"*{SUFFIX}"))
    return load_record(Path(rows[0]["path"])).to_json()


def test_full_disk_while_saving_keeps_the_journal_and_says_where(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    def no_space(_record: dict, *_a: object) -> Path:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OperationFailed, match="No space left on device") as info:
        m.setattr("mpsup.bench.run.save_record", no_space)
        _bench(3)
    journal = next((mpsup_home / "runs").glob(f"*{SUFFIX}"))
    assert str(journal) in str(info.value)
    # The disk has room again.
    record = _recover(mpsup_home)
    # The run itself finished: its journal says so, and the record is complete.
    assert record["partial"] is False and [w["name"] for w in record["workloads"]] == ["w0", "w1", "w2"]


def test_full_disk_mid_run_stops_and_keeps_what_was_journaled(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    import mpsup.runs.journal as journal_mod

    real = journal_mod._write_all
    lines = []

    def fill_up(fd: int, data: bytes) -> None:
        lines.append(data)
        if data.startswith(b'{"workload"') and sum(d.startswith(b'{"workload"') for d in lines) == 2:
            real(fd, data[: len(data) // 2])  # the disk fills halfway through the line
            raise OSError(28, "No space left on device")
        real(fd, data)

    def no_space(*_a: object) -> Path:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OperationFailed, match="kept in"):
        m.setattr(journal_mod, "_write_all", fill_up)
        m.setattr("mpsup.bench.run.save_record", no_space)
        _bench(4)
    record = _recover(mpsup_home)
    assert record["partial"] is True and [w["name"] for w in record["workloads"]] == ["w0"]
    assert record["recovered"]["unreadable_lines"] == 0  # the torn line was cut back off


def test_crash_in_the_statistics_mid_run_keeps_finished_workloads(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    import mpsup.bench.policy as policy_mod

    armed = []
    real = policy_mod.median_ci

    def broken(values, *a, **kw):  # type: ignore[no-untyped-def]
        if armed:
            raise ZeroDivisionError("a bug in the statistics")
        return real(values, *a, **kw)

    monkeypatch.setattr(policy_mod, "median_ci", broken)
    record, path = _bench(3, progress=lambda ev: armed.append(1) if isinstance(ev, WorkloadDone) else None)
    assert path is not None and record["partial"] is True and "ZeroDivisionError" in record["failure"]
    stored = load_record(path).to_json()
    assert [w["name"] for w in stored["workloads"]] == ["w0"] and stored["workloads"][0]["envs"]["baseline"]["samples"]
    assert "a bug in the statistics" in stored["failure_traceback"]
    res = run_cli("report", "--list", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)[0]["partial"] is True


def test_crash_in_a_summary_costs_the_summary_not_the_samples(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("mpsup.bench.measurement.median_ci", lambda *_a, **_k: 1 / 0)
    record, path = _bench(2)
    assert path is not None and record["partial"] is False
    for w in load_record(path).to_json()["workloads"]:
        env = w["envs"]["baseline"]
        assert env["samples"] and "median" not in env and env["summary_error"].startswith("ZeroDivisionError")


def test_crash_while_finishing_keeps_the_journal(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    def broken(*_a: object) -> list[str]:
        raise ValueError("a bug while finishing")

    with monkeypatch.context() as m, pytest.raises(OperationFailed, match=r"a bug while finishing.*kept in .*journal"):
        m.setattr("mpsup.bench.run.conditions_changed", broken)
        _bench(2)
    record = _recover(mpsup_home)
    assert record["partial"] is True and [w["name"] for w in record["workloads"]] == ["w0", "w1"]


@pytest.fixture
def read_only_runs(mpsup_home: Path) -> Iterator[Path]:
    runs = mpsup_home / "runs"
    runs.mkdir(parents=True)
    if os.geteuid() != 0:
        runs.chmod(0o555)
        try:
            yield runs
        finally:
            runs.chmod(0o755)
        return
    # Root writes through any mode bits: only a read-only mount stops it.
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(runs)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip("running as root, where chmod does not stop writes, and a read-only tmpfs cannot be mounted here")
    try:
        yield runs
    finally:
        subprocess.run(["umount", str(runs)], check=False)


def test_read_only_data_dir_is_refused_before_any_work(read_only_runs: Path, monkeypatch: pytest.MonkeyPatch):
    res = run_cli("bench", "--device", "cpu", "--only", "roofline*", "--no-smoke", "--budget", "0.01")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "cannot write run records there" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # In-process: no worker was ever started.
    from mpsup.bench import runner

    monkeypatch.setattr(runner.Runner, "start", lambda _self: pytest.fail("a worker started"))
    with pytest.raises(UserError, match="nothing was measured"):
        _bench(1)


# -- waits that say what they wait for, each with its own deadline ----------------------------------------------


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The wait lines, as the CLI would print them on stderr, with the first one after 0.3 s instead of 5."""
    from mpsup import waits

    monkeypatch.setattr(waits, "NOTICE_S", 0.3)
    monkeypatch.setattr(waits, "EVERY_S", 0.5)
    said: list[str] = []
    waits.set_notice(said.append)
    yield said
    waits.set_notice(None)


def test_a_wait_around_each_request_starts_no_thread(monkeypatch: pytest.MonkeyPatch, notices: list[str]) -> None:
    """The wait is armed around every request, timed ones included: after the first, arming starts no thread,
    and a wait that lasts is still said (by the one notifier thread of the process)."""
    import threading

    from mpsup import waits

    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    with waits.announced("a first wait", 10.0):
        pass
    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for i in range(500):
        with waits.announced(f"request {i}", 10.0):
            pass
    with waits.announced("a slow answer", 10.0):
        time.sleep(0.45)
    n = len(notices)
    time.sleep(0.6)
    assert started == []
    assert notices == ["waiting for a slow answer: 0 s so far, giving up at 10 s"]
    assert len(notices) == n  # disarmed: nothing more is said


def _hanging_python(tmp_path: Path) -> Path:
    """An interpreter that never answers: it sleeps whatever it is asked to run."""
    p = tmp_path / "hanging-python"
    p.write_text("#!/bin/sh\nexec sleep 20\n")
    p.chmod(0o755)
    return p


def test_a_hanging_interpreter_probe_is_said_and_given_up(tmp_path: Path, notices: list[str]) -> None:
    from mpsup.probe import run_interpreter_probe

    python = _hanging_python(tmp_path)
    t0 = time.monotonic()
    assert run_interpreter_probe(python, timeout=1.5) is None
    assert time.monotonic() - t0 < 5
    assert notices and notices[0] == (
        f"waiting for {python} to answer the interpreter probe (it imports torch): 0 s so far, giving up at 2 s"
    )
    n = len(notices)
    time.sleep(0.8)
    assert len(notices) == n  # the wait is over: nothing more is said


def test_a_worker_that_never_starts_is_said_and_given_up(tmp_path: Path, notices: list[str]) -> None:
    from mpsup.bench.workerproc import WorkerDied, WorkerProcess

    python = _hanging_python(tmp_path)
    worker = WorkerProcess(python)
    t0 = time.monotonic()
    with pytest.raises(WorkerDied, match="worker gave no answer in 2s"):
        worker.request({"op": "hello", "device": "cpu"}, timeout=1.5)
    assert time.monotonic() - t0 < 5 and not worker.alive
    worker.close()
    assert notices[0].startswith(f"waiting for the worker in {python} to start (importing torch): 0 s so far")
    assert notices[0].endswith("giving up at 2 s")


def test_a_worker_that_hangs_mid_step_is_said_and_given_up(tmp_path: Path, notices: list[str]) -> None:
    """It starts, then its linear never returns (a sitecustomize makes F.linear sleep): the setup's wait names
    the workload, and its deadline stops it."""
    from mpsup.bench.command import BenchRequest, prepare
    from mpsup.bench.workerproc import WorkerDied, WorkerProcess

    hook = tmp_path / "hang"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import time\nimport torch\n\n\ndef _hang(*a, **k):\n    time.sleep(60)\n\n\ntorch.nn.functional.linear = _hang\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexport PYTHONPATH="{hook}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (workload,) = prepare(BenchRequest(device="cpu", only="linear/384x384/t1", smoke=False)).workloads
    worker = WorkerProcess(python)
    try:
        assert worker.request({"op": "hello", "device": "cpu", "threads": 1}, timeout=120)["type"] == "hello"
        notices.clear()
        t0 = time.monotonic()
        with pytest.raises(WorkerDied, match="worker gave no answer in 2s"):
            worker.request({"op": "setup", "workload": workload.spec(), "calls": 1, "target_sample_s": 0.01}, 2.0)
        assert time.monotonic() - t0 < 6 and not worker.alive
    finally:
        worker.close(force=True)
    assert notices[0].startswith(f"waiting for the worker in {python} to set up linear/384x384/t1: 0 s so far")
    assert len(notices) >= 2 and notices[-1].endswith("giving up at 2 s")  # said again while it lasts


def test_cli_says_what_it_waits_for_within_seconds(tmp_path: Path, mpsup_home: Path) -> None:
    """A bisect whose second environment hangs: the probe's wait is on stderr within a few seconds (the CLI's own
    5 s), long before its 180 s deadline. The process is stopped once the line is there."""
    python = _hanging_python(tmp_path)
    other = tmp_path / "good-python"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(0o755)
    args = ["bisect", str(other), str(python), "--only", "linear/384x384/t1", "--device", "cpu", "--budget", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpsup", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        t0 = time.monotonic()
        # the good environment may be waited for too on a busy machine: read until the hanging one is named
        while not any(str(python) in ln for ln in lines) and (line := proc.stderr.readline()):
            lines.append(line)
        took = time.monotonic() - t0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (said,) = [ln for ln in lines if str(python) in ln]
    assert said.startswith(f"waiting for {python} to answer the interpreter probe (it imports torch): 5 s so far")
    assert "giving up at 180 s" in said and took < 25


# -- one exit-code rule for every way a workload or phase can end --------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ("ok", 0),
        ("unsupported", 0),  # the build has no kernel for it: a finding, as a smoke test's unsupported
        ("skipped", 0),  # the memory guard, before it ran
        ("too_slow", 0),  # the time guard, said with the --budget that measures it
        ("crash", 1),
        ("error", 1),
        ("oom", 1),
        ("gpu_hang", 1),  # a status no mpsup knows (a newer worker's, or a hostile one's) is a failure too
    ],
)
@pytest.mark.parametrize("part", ["phase", "linear"])
def test_one_exit_code_rule_for_every_status_of_a_phase_or_a_layer(status: str, code: int, part: str) -> None:
    from mpsup.bench.command import exit_code

    def workload(name: str, st: str, env_status: str | None = None) -> dict[str, Any]:
        envs = {"baseline": {"status": env_status or st}, "candidate": {"status": "ok"}}
        return {"name": name, "part": part, "status": st, "envs": envs}

    ok = workload("w/ok", "ok")
    assert exit_code({"workloads": [ok, workload("w/x", status)], "smoke": []}) == code
    # the workload's own status and each environment's are read alike: either one failing is a failure
    if status not in ("skipped", "too_slow"):
        assert exit_code({"workloads": [ok, workload("w/x", "ok", env_status=status)], "smoke": []}) == code


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ("pass", 0),
        ("unsupported", 0),
        ("skipped", 0),
        ("skip", 0),
        ("fallback", 0),
        ("fail", 1),
        ("crash", 1),
        ("gpu_hang", 1),
    ],
)
def test_one_exit_code_rule_for_every_smoke_status(status: str, code: int) -> None:
    """SMOKE_NOT_FAILED decides, as NOT_FAILED does for workloads: a status no mpsup knows is a failure too."""
    from mpsup.bench.command import SMOKE_NOT_FAILED, exit_code

    smoke = [{"feature": "f", "envs": {"baseline": {"status": "pass"}, "candidate": {"status": status}}}]
    assert exit_code({"workloads": [], "smoke": smoke}) == code
    assert (status in SMOKE_NOT_FAILED) is (code == 0)


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        ("RuntimeError('CPU out of memory: tried to allocate 64 GiB')", "oom", 1),
        ("NotImplementedError(\"'addmm' not implemented for 'BFloat16'\")", "unsupported", 0),
        ("RuntimeError('something else broke')", "error", 1),
    ],
)
def test_bench_exits_by_the_rule_when_a_real_worker_fails_a_workload(
    tmp_path: Path, mpsup_home: Path, raised: str, status: str, code: int
) -> None:
    """A real run whose linear raises what torch raises for each case (a sitecustomize patches F.linear)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        f"import torch\n\n\ndef _fails(*a, **k):\n    raise {raised}\n\n\ntorch.nn.functional.linear = _fails\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexport PYTHONPATH="{hook}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    args = ["--only", "linear/384x384/t1", "--device", "cpu", "--no-smoke", "--budget", "0.05", "--json"]
    res = run_cli("bench", "--python", str(python), *args)
    assert res.returncode == code and "Traceback" not in res.stderr, res.stderr[-2000:]
    (path,) = list_record_paths()
    (w,) = json.loads(path.read_text())["workloads"]
    assert w["status"] == status


# -- --real-weights: the checkpoint's values throughout, or the phase is refused ----------------------------------


def test_real_weights_with_tensors_missing_refuse_the_phase_in_one_line(tmp_path: Path) -> None:
    """Two of a Llama's tensors in the checkpoint: the rest would be random weights under a "real weights" label.
    The phase fails (status error, so bench exits 1) naming how many are missing and the way out."""
    transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")
    from safetensors.torch import load_file, save_file

    from mpsup.worker.device import Device
    from tests.test_whole_model import spec
    from tests.tiny_models import LLAMA, write_llama_folder

    folder = write_llama_folder(tmp_path / "llama")
    full = load_file(str(folder / "model.safetensors"))
    kept = {k: full[k] for k in ("model.embed_tokens.weight", "model.norm.weight")}
    save_file(kept, str(folder / "model.safetensors"), metadata={"format": "pt"})
    from mpsup.worker.whole_model import build_phase

    total = len(transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**LLAMA)).state_dict())
    with pytest.raises(ValueError) as info:
        build_phase(spec(LLAMA, "prefill", weights="real", path=str(folder)), Device("cpu"))
    message = str(info.value)
    assert message.startswith(f"--real-weights: {total - 2} of the model's {total} tensors are missing from {folder}")
    assert message.endswith("give the whole checkpoint, or drop --real-weights") and "\n" not in message
    from mpsup.worker.main import _classify

    assert _classify(info.value) == "error"  # not `unsupported`: the input is short, not the build
