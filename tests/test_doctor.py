from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mpsup.doctor.checks import Status
from mpsup.doctor.run import diagnose
from mpsup.host.snapshot import snapshot_from_json
from tests import snapshots
from tests.conftest import run_cli


def _write(tmp_path: Path, doc: Any, name: str = "snap.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


def _doctor(tmp_path: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    res = run_cli("doctor", "--from-snapshot", str(_write(tmp_path, doc)), "--json")
    assert res.stderr == "" or "Traceback" not in res.stderr
    return res.returncode, json.loads(res.stdout)


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in doc["findings"]}


def test_healthy_mac_is_ready(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.healthy())
    f = _by_name(doc)
    assert rc == 0, doc
    assert doc["ready"] is True
    assert all(x["status"] == "ok" for x in doc["findings"]), doc
    assert "15.1 (24B83)" in f["macos-version"]["summary"]
    assert "Apple M4 Max" in f["gpu-memory"]["summary"] and "40 GPU cores" in f["gpu-memory"]["summary"]


def test_macos14_fails_with_cause(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.macos14())
    f = _by_name(doc)
    assert rc == 1
    assert f["macos-version"]["status"] == "fail"
    assert "14.5" in f["macos-version"]["summary"]
    assert f["torch-mps"]["status"] == "fail"
    assert "needs macOS 15" in f["torch-mps"]["summary"]
    assert f["torch-mps"]["fix"]


def test_rosetta_python_fails(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.rosetta())
    f = _by_name(doc)
    assert rc == 1
    assert f["python-arch"]["status"] == "fail"
    assert "Rosetta" in f["python-arch"]["summary"] and "2.2.2" in f["python-arch"]["summary"]
    assert "arm64 Python" in f["python-arch"]["fix"]
    assert f["python"]["status"] == "ok"
    assert f["torch-wheels"]["status"] == "fail" and "x86_64" in f["torch-wheels"]["summary"]
    assert f["apple-silicon"]["status"] == "ok"


def test_python310_fails_and_no_wheels(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.python310())
    f = _by_name(doc)
    assert rc == 1
    assert f["python"]["status"] == "fail" and "3.11" in f["python"]["summary"]
    assert f["torch-wheels"]["status"] == "fail" and "cp310" in f["torch-wheels"]["summary"]
    assert f["torch-mps"]["status"] == "warn"


def test_mps_built_not_available(tmp_path: Path):
    s = snapshots.healthy()
    s["interpreter"]["torch"]["mps_available"] = False
    rc, doc = _doctor(tmp_path, s)
    f = _by_name(doc)
    assert rc == 1
    assert f["torch-mps"]["status"] == "fail"
    assert "built but not available" in f["torch-mps"]["summary"]


def test_empty_snapshot_all_unknown(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.empty())
    assert rc == 0
    statuses = {x["name"]: x["status"] for x in doc["findings"]}
    assert set(statuses.values()) <= {"unknown", "ok"}
    assert statuses["apple-silicon"] == "unknown"
    assert statuses["mps-env"] == "ok"
    assert len(statuses) == 13  # ten readiness checks, the optional MLX one, the machine state and the energy meter


def test_checks_of_the_target_python_say_once_that_it_could_not_be_run(tmp_path: Path):
    s = snapshots.healthy()
    s["interpreter"] = None
    rc, doc = _doctor(tmp_path, s)
    f = _by_name(doc)
    assert rc == 0  # unknown is no failure
    for name in ("python", "python-arch", "environment", "torch-mps"):
        assert f[name]["status"] == "unknown", f[name]
        assert f[name]["summary"] == "the target Python could not be run"
        assert f[name]["fix"] == "pass a working interpreter with --python PATH"
    assert f["torch-wheels"]["status"] == "unknown" and f["torch-wheels"]["summary"] == "Python version not known"
    assert f["apple-silicon"]["status"] == "ok"  # the host's own facts do not need the Python


def test_compat_version_is_not_trusted():
    s = snapshots.healthy()
    s["interpreter"]["mac_ver"] = "10.16"
    del s["files"]["/System/Library/CoreServices/SystemVersion.plist"]
    s["commands"]["sw_vers"] = {"returncode": 1, "stdout": "", "stderr": "boom"}
    report = diagnose(snapshot_from_json(s, Path("x")))
    f = {x.name: x for x in report.findings}
    assert f["macos-version"].status is Status.OK
    assert "15.1" in f["macos-version"].summary and "10.16" in f["macos-version"].summary


def test_hygiene_warnings(tmp_path: Path):
    s = snapshots.healthy()
    s["commands"]["pmset -g batt"]["stdout"] = snapshots.PMSET_BATT_BATTERY
    s["commands"]["pmset -g"]["stdout"] = " lowpowermode         1\n"
    s["env"] = {"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"}
    rc, doc = _doctor(tmp_path, s)
    f = _by_name(doc)
    assert rc == 0
    assert f["hygiene"]["status"] == "warn"
    assert "plug in" in f["hygiene"]["fix"] and "Low Power Mode" in f["hygiene"]["fix"]
    assert f["mps-env"]["status"] == "warn"
    assert "can freeze" in f["mps-env"]["summary"] and "CPU" in f["mps-env"]["summary"]


def test_crashing_check_does_not_stop_others(monkeypatch: pytest.MonkeyPatch):
    from mpsup.doctor import checks

    def boom(_facts):
        raise RuntimeError("kaput")

    patched = [(n, t, boom if n == "python" else fn) for n, t, fn in checks.CHECKS]
    monkeypatch.setattr(checks, "CHECKS", patched)
    report = diagnose(snapshot_from_json(snapshots.healthy(), Path("x")))
    f = {x.name: x for x in report.findings}
    assert f["python"].status is Status.UNKNOWN and "kaput" in f["python"].summary
    assert f["macos-version"].status is Status.OK


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"schema": "other/2"}), "unsupported snapshot schema"),
        (json.dumps({"schema": "mpsup.snapshot/1", "commands": []}), "'commands' must be an object"),
        (
            json.dumps({"schema": "mpsup.snapshot/1", "commands": {"sw_vers": {"returncode": "0", "stdout": ""}}}),
            "integer returncode",
        ),
        (json.dumps({"schema": "mpsup.snapshot/1", "interpreter": {"torch": 3}}), "interpreter.torch"),
        (json.dumps([1, 2]), "not a snapshot"),
    ],
)
def test_malformed_snapshot(tmp_path: Path, content: str, needle: str):
    p = _write(tmp_path, content)
    res = run_cli("doctor", "--from-snapshot", str(p))
    assert res.returncode == 2
    assert needle in res.stderr and str(p) in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_snapshot_file(tmp_path: Path):
    res = run_cli("doctor", "--from-snapshot", str(tmp_path / "nope.json"))
    assert res.returncode == 2 and "no such snapshot" in res.stderr


def test_live_on_linux_says_not_a_mac(tmp_path: Path):
    import sys

    if sys.platform == "darwin":
        pytest.skip("this test checks the off-Mac answer")
    res = run_cli("doctor", "--json", "--save-snapshot", str(tmp_path / "live.json"))
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    live = json.loads(res.stdout)
    f = _by_name(live)
    assert f["apple-silicon"]["status"] == "fail"
    assert "not a Mac" in f["apple-silicon"]["summary"]
    assert f["python-arch"]["status"] == "fail" and f["torch-wheels"]["status"] != "ok"
    assert live["environments"] == [] and "mpsup install-rc" in live["suggestion"]
    # The snapshot taken here replays to the same answer.
    res2 = run_cli("doctor", "--json", "--from-snapshot", str(tmp_path / "live.json"))
    assert res2.returncode == 1
    saved = json.loads((tmp_path / "live.json").read_text())
    assert saved["schema"] == "mpsup.snapshot/1"
    assert saved["environments"] == [] and saved["interpreter"]["proc_translated"] is None
    assert saved["interpreter"]["torch"]["version"]
    assert saved["commands"]["sw_vers"]["returncode"] != 0


def test_live_table_output():
    import sys

    if sys.platform == "darwin":
        pytest.skip("this test checks the off-Mac answer")
    res = run_cli("doctor", env={"COLUMNS": "220"})
    assert res.returncode == 1
    assert "not a Mac" in res.stdout and "Not ready" in res.stdout
    # Issue 15 item 10: a tick only for what was checked; this x86_64 Linux Python is no Mac's.
    ticked = [ln for ln in res.stdout.splitlines() if ln.startswith("│ ✓")]
    assert ticked and not [ln for ln in ticked if any(w in ln for w in ("macOS", "arm64", "Apple", "Mac"))], ticked
    assert "native arm64" not in res.stdout
    # Issue 15 item 11: no candidate recorded in this test's data dir, so install-rc is suggested.
    assert "no candidate environment recorded: `mpsup install-rc`" in res.stdout


def test_a_thermal_state_not_read_is_unknown_not_false(tmp_path: Path):
    s = snapshots.healthy()
    s["commands"].pop("pmset -g therm", None)  # not read (off a Mac, or pmset failed)
    _rc, doc = _doctor(tmp_path, s)
    assert _by_name(doc)["hygiene"]["details"]["thermal_warning"] is None
    # Apple silicon's "No ... has been recorded" notes say nothing under any load: still not known.
    _rc, doc = _doctor(tmp_path, snapshots.healthy())
    assert _by_name(doc)["hygiene"]["details"]["thermal_warning"] is None
    # An Intel Mac's pmset prints CPU_Speed_Limit: that one says something, and says all is well.
    intel = snapshots.healthy()
    intel["commands"]["pmset -g therm"]["stdout"] += "CPU_Scheduler_Limit \t= 100\nCPU_Speed_Limit \t= 100\n"
    _rc, doc = _doctor(tmp_path, intel)
    assert _by_name(doc)["hygiene"]["details"]["thermal_warning"] is False


@pytest.mark.parametrize(
    ("torch_version", "value", "status"),
    [("2.15.0", "", "warn"), ("2.15.0", "0", "ok"), ("2.15.0", "00", "warn"), ("2.6.0", "00", "ok")],
)
def test_the_fallback_variable_is_read_as_the_target_torch_reads_it(torch_version: str, value: str, status: str):
    # torch 2.15 turns it on for anything but "0" ("" included); 2.6 parses a number (tests/test_worker_mps_env.py).
    s = snapshots.healthy()
    s["interpreter"]["torch"]["version"] = torch_version
    s["env"] = {"PYTORCH_ENABLE_MPS_FALLBACK": value}
    f = {x.name: x for x in diagnose(snapshot_from_json(s, Path("x"))).findings}
    assert f["mps-env"].status is Status(status), f["mps-env"].summary


def test_the_energy_meter_is_named_or_why_there_is_none(tmp_path: Path):
    rc, doc = _doctor(tmp_path, snapshots.healthy())
    assert _by_name(doc)["energy-meter"]["status"] == "ok"
    assert "apple-ioreport" in _by_name(doc)["energy-meter"]["summary"]
    none = snapshots.healthy()
    none["energy_meter"] = {
        "name": None,
        "why": "zeus-apple-silicon is not installed (pip install 'mpsup[energy-mac]')",
    }
    rc, doc = _doctor(tmp_path, none)
    f = _by_name(doc)["energy-meter"]
    assert rc == 0 and f["status"] == "warn" and "not installed" in f["summary"] and "energy-mac" in f["fix"]
    # A snapshot from before the key: not known, and the rest of the doctor's answer stands.
    old = snapshots.healthy()
    del old["energy_meter"]
    rc, doc = _doctor(tmp_path, old)
    assert rc == 0 and doc["ready"] is True and _by_name(doc)["energy-meter"]["status"] == "unknown"
