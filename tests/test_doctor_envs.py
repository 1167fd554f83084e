"""Issue 15 item 11: the doctor lists install-rc's candidate environments, or suggests install-rc."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from mpsup.doctor.render import render_doctor
from mpsup.doctor.run import diagnose
from mpsup.envs.records import EnvRecord, now_iso, write_record
from mpsup.host.snapshot import recorded_environment_summaries, snapshot_from_json
from mpsup.paths import envs_dir
from tests import snapshots
from tests.conftest import run_cli


def _record(name: str, python: str, torch_version: str, **extra: Any) -> EnvRecord:
    return EnvRecord(
        name=name,
        mode="side-by-side",
        prefix=str(envs_dir() / name),
        python=python,
        python_version="3.12.4",
        torch_version=torch_version,
        torch_version_full=torch_version,
        channel="test",
        index_url="https://user:secret-token@mirror.example/whl/test",
        installer="uv",
        created_at=now_iso(),
        baseline_python="/Users/me/venv/bin/python",
        baseline_torch="2.14.0",
        mps_built=True,
        mps_available=True,
        **extra,
    )


def _write_records() -> None:
    write_record(envs_dir() / "torch-2.15.0", _record("torch-2.15.0", sys.executable, "2.15.0"))
    write_record(envs_dir() / "gone", _record("gone", "/nonexistent/bin/python", "2.15.0"))


def test_summaries_keep_what_is_listed_and_drop_the_index_url():
    _write_records()
    envs = {e["name"]: e for e in recorded_environment_summaries() or []}
    assert set(envs) == {"torch-2.15.0", "gone"}
    assert envs["torch-2.15.0"]["python_present"] is True and envs["gone"]["python_present"] is False
    assert envs["torch-2.15.0"]["torch_version"] == "2.15.0" and envs["torch-2.15.0"]["channel"] == "test"
    assert "secret-token" not in json.dumps(envs)


def test_no_record_folder_means_none_recorded():
    assert recorded_environment_summaries() == []


def test_hostile_record_values_are_dropped_or_shown_verbatim():
    folder = envs_dir() / "odd"
    folder.mkdir(parents=True)
    (folder / "mpsup-env.json").write_text(
        json.dumps({"python": "/x/[old]/python", "name": "[/x]", "mps_available": "yes", "torch_version_full": 5})
    )
    (env,) = recorded_environment_summaries() or []
    assert env["name"] == "[/x]" and env["python"] == "/x/[old]/python" and env["python_present"] is False
    assert "mps_available" not in env and "torch_version_full" not in env
    doc = snapshots.healthy() | {"environments": [env]}
    console = Console(record=True, width=300, color_system=None)
    render_doctor(diagnose(snapshot_from_json(doc, Path("s.json"))), console)
    assert "[/x]: torch ?" in console.export_text()


def _with_environments(envs: list[dict[str, Any]], macos: str = "15.1") -> dict[str, Any]:
    s = snapshots.healthy() if macos == "15.1" else snapshots.with_macos(snapshots.healthy(), macos, "23F79")
    s["environments"] = envs
    return s


def test_listed_with_a_note_judged_against_this_mac(tmp_path: Path):
    envs = [
        {
            "name": "torch-2.15.0",
            "torch_version": "2.15.0",
            "python_version": "3.12.4",
            "channel": "test",
            "mode": "side-by-side",
            "python": "/e/a/bin/python",
            "python_present": True,
            "mps_available": True,
        },
        {
            "name": "gone",
            "torch_version": "2.15.0",
            "python_version": "3.12.4",
            "mode": "side-by-side",
            "python": "/e/b/bin/python",
            "python_present": False,
        },
    ]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_with_environments(envs, macos="14.5")))
    res = run_cli("doctor", "--from-snapshot", str(p), "--json")
    doc = json.loads(res.stdout)
    listed = {e["name"]: e for e in doc["environments"]}
    assert listed["torch-2.15.0"]["note"] == "its MPS needs macOS 15.0; this Mac runs 14.5"
    assert "install-rc --remove gone" in listed["gone"]["note"]
    assert doc["suggestion"] is None


def test_table_lists_candidates_or_suggests_install_rc():
    env = {
        "name": "torch-2.15.0",
        "torch_version": "2.15.0",
        "python_version": "3.12.4",
        "channel": "test",
        "mode": "side-by-side",
        "created_at": "2026-12-01T09:00:00+00:00",
        "python": "/e/a/bin/python",
        "python_present": True,
    }
    for envs, expected in (
        ([env], "torch-2.15.0: torch 2.15.0 (test), Python 3.12.4, side-by-side, installed 2026-12-01"),
        ([], "no candidate environment recorded: `mpsup install-rc`"),
    ):
        console = Console(record=True, width=300, color_system=None)
        render_doctor(diagnose(snapshot_from_json(_with_environments(envs), Path("s.json"))), console)
        assert expected in console.export_text()


def test_older_snapshot_says_not_recorded():
    report = diagnose(snapshot_from_json(snapshots.healthy(), Path("s.json")))
    assert report.environments is None and report.to_json()["environments"] is None
    console = Console(record=True, width=300, color_system=None)
    render_doctor(report, console)
    assert "not recorded in this snapshot" in console.export_text()
