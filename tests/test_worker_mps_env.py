"""The environment a worker gets: PYTORCH_ENABLE_MPS_FALLBACK=0 whatever the user's shell exports (an inherited 1
times a missing MPS kernel's CPU run as if the device had it), 1 only on --allow-cpu-fallback; the MPS variables
the worker saw, in its hello and so in the run record; and how torch itself reads the variable, which the doctor
mirrors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.bench.workerproc import worker_env
from mpsup.doctor.mps_env import mps_fallback_on
from mpsup.runs.schema import Environment


def test_a_worker_runs_with_the_cpu_fallback_off_whatever_the_shell_exports(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "0.8")
    monkeypatch.setenv("PYTORCH_MPS_PREFER_METAL", "1")
    monkeypatch.setenv("MTL_SHADER_VALIDATION", "1")
    runner = Runner([EnvSpec("baseline", Path(sys.executable))], BenchOptions(device="cpu", smoke=False))
    try:
        (facts,) = runner.start()
    finally:
        runner.close()
    assert facts["mps_env"] == {
        "PYTORCH_ENABLE_MPS_FALLBACK": "0",
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.8",
        "PYTORCH_MPS_PREFER_METAL": "1",
        "MTL_SHADER_VALIDATION": "1",
    }
    # The record's environment entry is the hello's facts: the variables are read back, typed.
    env = Environment.from_json({"label": "baseline", **facts}, "environments[0]")
    assert env.mps_env is not None and env.mps_env["PYTORCH_ENABLE_MPS_FALLBACK"] == "0"
    assert env.to_json()["mps_env"] == facts["mps_env"]


def test_only_the_opt_in_turns_the_cpu_fallback_on() -> None:
    assert worker_env(None)["PYTORCH_ENABLE_MPS_FALLBACK"] == "0"
    assert worker_env(2, cpu_fallback=True)["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    opts = BenchOptions(device="mps", policy=SamplingPolicy(budget_s=0.01), allow_cpu_fallback=True)
    assert opts.allow_cpu_fallback


def test_a_record_s_mps_env_of_the_wrong_type_is_one_line() -> None:
    from mpsup.runs.schema import Corrupt

    with pytest.raises(Corrupt, match=r"environments\[0\]\.mps_env"):
        Environment.from_json({"label": "b", "mps_env": ["PYTORCH_ENABLE_MPS_FALLBACK"]}, "environments[0]")
    with pytest.raises(Corrupt, match=r"mps_env\.PYTORCH_ENABLE_MPS_FALLBACK"):
        Environment.from_json({"label": "b", "mps_env": {"PYTORCH_ENABLE_MPS_FALLBACK": 1}}, "environments[0]")
    assert Environment.from_json({"label": "b"}, "environments[0]").mps_env is None  # an older record


@pytest.mark.parametrize("command", ["bench", "bisect"])
def test_allow_cpu_fallback_reaches_the_request(monkeypatch: pytest.MonkeyPatch, command: str):
    from mpsup import cli
    from mpsup.errors import UserError

    seen: list[Any] = []

    def stop(request: Any, *_a: Any, **_k: Any) -> Any:
        seen.append(request)
        raise UserError("stopped here")

    if command == "bench":
        monkeypatch.setattr("mpsup.bench.command.prepare", stop)
        args = ["bench", "--device", "cpu"]
    else:
        monkeypatch.setattr("mpsup.bisect.command.run", stop)
        args = ["bisect", "a", "b"]
    runner = CliRunner()
    runner.invoke(cli.app, args)
    runner.invoke(cli.app, [*args, "--allow-cpu-fallback"])
    assert [r.allow_cpu_fallback for r in seen] == [False, True]


# torch's reading, from the machine code of the real macOS wheels (docs/reference/doctor.md): 2.15 compares with "0";
# 2.6 parses with std::stoi, which throws on text without a number.
@pytest.mark.parametrize(
    ("value", "on_215", "on_26"),
    [
        (None, False, False),
        ("0", False, False),
        ("1", True, True),
        ("", True, None),
        ("00", True, False),
        (" 0", True, False),
        ("false", True, None),
        ("2", True, True),
        ("-1", True, True),
        ("1x", True, True),
        ("99999999999", True, None),
        ("2147483647", True, True),
        ("-2147483648", True, True),
        ("2147483648", True, None),
        ("0" * 30 + "1", True, True),
        (" -" + "0" * 30, True, False),
        ("1" + "0" * 5000, True, None),
        ("-" + "9" * 400, True, None),
    ],
)
def test_the_fallback_variable_is_read_as_each_torch_reads_it(value: str | None, on_215: bool, on_26: bool | None):
    assert mps_fallback_on(value, "2.15.0") is on_215
    assert mps_fallback_on(value, "2.16.0.dev20270101") is on_215
    assert mps_fallback_on(value, "2.6.0") is on_26
    between = mps_fallback_on(value, "2.10.0")
    assert between is (on_215 if on_215 == on_26 else None)


def test_doctor_reads_a_fallback_variable_of_thousands_of_digits_as_out_of_std_stoi_s_range(tmp_path: Path) -> None:
    """More digits than int() takes: std::stoi throws out_of_range, so torch 2.6 fails at import; the doctor warns
    rather than crashing its check."""
    import json

    from tests import snapshots
    from tests.conftest import run_cli

    doc = snapshots.healthy()
    doc["interpreter"]["torch"]["version"] = "2.6.0"
    doc["env"] = {"PYTORCH_ENABLE_MPS_FALLBACK": "1" * 5000}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    res = run_cli("doctor", "--from-snapshot", str(path), "--json")
    finding = next(f for f in json.loads(res.stdout)["findings"] if f["name"] == "mps-env")
    assert finding["status"] == "warn", finding
    assert "torch 2.6 cannot read it (std::stoi throws" in finding["summary"]
    assert "(5000 characters)" in finding["summary"] and len(finding["summary"]) < 400


def test_the_worker_records_the_variables_the_doctor_reads() -> None:
    """The worker imports nothing of mpsup, so its tuple is a copy: read from its source, it must be the doctor's."""
    import ast

    from mpsup.host import snapshot

    source = Path(snapshot.__file__).parent.parent / "worker" / "main.py"
    tree = ast.parse(source.read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MPS_ENV_PREFIXES"]
    ]
    worker_prefixes = ast.literal_eval(value)
    assert worker_prefixes == snapshot.MPS_ENV_PREFIXES
    for name in ("MTL_SHADER_VALIDATION", "MTL_DEBUG_LAYER", "METAL_DEVICE_WRAPPER_TYPE", "PYTORCH_METAL_X"):
        assert name.startswith(worker_prefixes) and snapshot.mps_env({name: "1"}) == {name: "1"}


def test_doctor_warns_of_metal_s_validation_layers() -> None:
    from mpsup.doctor.mps_env import active_variables, describe

    active = active_variables({"MTL_SHADER_VALIDATION": "1", "MTL_DEBUG_LAYER": "0", "HOME": "/x"})
    assert set(active) == {"MTL_SHADER_VALIDATION", "MTL_DEBUG_LAYER"}
    summary, risky = describe(active, "2.15.0")
    assert risky == ["MTL_SHADER_VALIDATION"]
    assert "MTL_SHADER_VALIDATION=1: Metal validates every shader" in summary
