"""doctor and install-rc in an 80-column terminal: one block per check or environment, nothing squeezed into slivers."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from mpsup.doctor.checks import Status
from mpsup.doctor.render import render_doctor
from mpsup.doctor.run import diagnose
from mpsup.envs.plan import InstallPlan, PlannedWheel
from mpsup.envs.records import EnvRecord, now_iso, write_record
from mpsup.envs.render import render_plan
from mpsup.host.snapshot import snapshot_from_json
from mpsup.paths import envs_dir
from tests import snapshots
from tests.conftest import run_cli

NARROW_ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def _assert_fits(text: str, width: int = 80) -> None:
    too_wide = [ln for ln in text.splitlines() if len(ln.rstrip()) > width]
    assert not too_wide, too_wide[:3]
    assert "…" not in text, [ln for ln in text.splitlines() if "…" in ln][:3]


def _flat(text: str) -> str:
    """The text as one line: what a wrapped sentence reads as."""
    return re.sub(r"\s+", " ", text)


def _snapshot_file(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    return path


def _failing() -> dict:
    """macOS 14.5 and an MPS that does not work: failures and warnings, each with a fix to show."""
    return snapshots.mps_unavailable(snapshots.macos14(), "2.15.0", "MPS backend is not available on this macOS")


@pytest.mark.parametrize("doc", [snapshots.healthy(), _failing(), snapshots.rosetta()], ids=["ok", "fail", "rosetta"])
def test_doctor_at_80_columns_keeps_each_check_readable(tmp_path: Path, doc: dict):
    res = run_cli("doctor", "--from-snapshot", str(_snapshot_file(tmp_path, doc)), env=NARROW_ENV)
    report = diagnose(snapshot_from_json(doc, Path("s.json")))
    assert res.returncode == (0 if report.ready else 1), res.stderr
    _assert_fits(res.stdout)
    lines = [ln.rstrip() for ln in res.stdout.splitlines()]
    flat = _flat(res.stdout)
    marks = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗", Status.UNKNOWN: "?"}
    for f in report.findings:
        # the title whole on its own line after the mark: not folded into a 20-column cell
        assert f"{marks[f.status]} {f.title}" in lines, f.title
        assert _flat(f.summary) in flat
        if f.fix:
            assert _flat(f"fix: {f.fix}") in flat
    assert "┃" not in res.stdout and "│" not in res.stdout  # no four-column table left to squeeze
    assert lines[-1] == report.summary()


def test_doctor_wide_keeps_the_table(tmp_path: Path):
    res = run_cli("doctor", "--from-snapshot", str(_snapshot_file(tmp_path, _failing())), env={"COLUMNS": "200"})
    header = next(ln for ln in res.stdout.splitlines() if "check" in ln)
    assert "finding" in header and "fix" in header


def test_doctor_verbose_details_at_80_columns():
    report = diagnose(snapshot_from_json(snapshots.healthy(), Path("s.json")))
    buf = io.StringIO()
    render_doctor(report, Console(file=buf, width=80, color_system=None), verbose=True)
    _assert_fits(buf.getvalue())
    flat = _flat(buf.getvalue())
    for f in report.findings:
        shown = {k: v for k, v in f.details.items() if v is not None}
        for key, value in shown.items():
            assert f"{key}={value}" in flat


def test_doctor_candidate_environments_at_80_columns_indent_their_wrapped_lines():
    env = {
        "name": "torch-2.17.0.dev20261201",
        "torch_version": "2.17.0.dev20261201",
        "python_version": "3.12.4",
        "channel": "nightly",
        "mode": "side-by-side",
        "created_at": "2026-12-01T09:00:00+00:00",
        "python": "/e/a/bin/python",
        "python_present": True,
    }
    doc = snapshots.healthy() | {"environments": [env]}
    buf = io.StringIO()
    render_doctor(diagnose(snapshot_from_json(doc, Path("s.json"))), Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    _assert_fits(text)
    at = next(i for i, ln in enumerate(text.splitlines()) if "torch-2.17.0.dev20261201:" in ln)
    block = text.splitlines()[at : at + 2]
    assert all(ln.startswith("  ") for ln in block), block
    assert "installed 2026-12-01T09:00:00+00:00" in _flat(text)


def _record(name: str, version: str, **extra: object) -> EnvRecord:
    prefix = envs_dir() / name
    return EnvRecord(
        name=name,
        mode="side-by-side",
        prefix=str(prefix),
        python=str(prefix / "bin" / "python"),
        python_version="3.12.4",
        torch_version=version,
        torch_version_full=version,
        channel="nightly" if "dev" in version else "test",
        index_url=None,
        installer="uv",
        created_at=now_iso(),
        baseline_python="/Users/me/venv/bin/python",
        baseline_torch="2.15.0",
        mps_built=True,
        mps_available=True,
        wheel={"filename": f"torch-{version}-cp312-none-macosx_11_0_arm64.whl", "sha256": "cd" * 32, **extra},
    )


def test_install_rc_list_at_80_columns_one_block_per_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # A Mac's data dir has a space in it; names and versions as long as nightlies make them.
    monkeypatch.setenv("MPSUP_HOME", str(tmp_path / "Library" / "Application Support" / "mpsup"))
    names = {"torch-2.16.0rc1": "2.16.0rc1", "torch-2.17.0.dev20261201": "2.17.0.dev20261201"}
    for name, version in names.items():
        write_record(envs_dir() / name, _record(name, version, upload_time="2026-11-30T10:00:00Z"))
    res = run_cli("install-rc", "--list", env=NARROW_ENV)
    assert res.returncode == 0, res.stderr
    _assert_fits(res.stdout)
    lines = res.stdout.splitlines()
    assert lines[0] == "2 recorded environments"
    flat = _flat(res.stdout)
    for name, version in names.items():
        # the name and version whole, at the start of a line: the table cut them into 14-letter pieces
        assert any(ln.startswith(f"{name}: torch {version}, Python 3.12.4") for ln in lines), name
        # a path longer than the line is folded; every character of it is still there, in order
        assert re.sub(r"\s", "", str(envs_dir() / name)) in re.sub(r"\s", "", res.stdout)
    assert flat.count("sha256 cdcdcdcdcdcd, listed 2026-11-30") == 2
    assert "┃" not in res.stdout and "│" not in res.stdout
    # the wide table and the JSON are what they were
    wide = run_cli("install-rc", "--list", env={"COLUMNS": "250"}).stdout
    assert "┃ name" in wide and "torch-2.17.0.dev20261201" in wide
    listed = json.loads(run_cli("install-rc", "--list", "--json", env=NARROW_ENV).stdout)
    assert sorted(d["name"] for d in listed) == sorted(names)


def _plan(prefix: Path) -> InstallPlan:
    filename = "torch-2.16.0rc1-cp312-none-macosx_11_0_arm64.whl"
    return InstallPlan(
        mode="side-by-side",
        channel="test",
        index_url="https://download.pytorch.org/whl/test/cpu",
        index_label="https://download.pytorch.org/whl/test/cpu",
        baseline_python=Path("/Users/someone/projects/llm/.venv/bin/python"),
        baseline_torch="2.15.0",
        target="cp312 on macOS 15.1 arm64",
        target_platform="macosx_15_0_arm64",
        to_version="2.16.0rc1",
        wheel=PlannedWheel(filename, f"https://download.pytorch.org/whl/test/{filename}", "ab" * 32, 78_000_000),
        companions=("torchvision", "torchaudio"),
        installer="uv",
        uv="/opt/homebrew/bin/uv",
        prefix=prefix,
        python=prefix / "bin" / "python",
        wheel_path=prefix.parent / filename,
        notes=("torchvision 0.31.0rc1 is the companion built for torch 2.16.0rc1",),
    )


def test_install_plan_at_80_columns_marks_each_command_and_keeps_labels_apart():
    plan = _plan(Path("/Users/someone/Library/Application Support/mpsup/envs/torch-2.16.0rc1"))
    buf = io.StringIO()
    render_plan(plan, Console(file=buf, width=80, color_system=None))
    text = buf.getvalue()
    _assert_fits(text)
    lines = text.splitlines()
    assert lines[0].startswith("Plan: torch 2.15.0 -> 2.16.0rc1 (side-by-side)")
    for label in ("from", "to", "into", "channel", "index", "wheel", "for", "command", "note"):
        assert any(ln.split()[:1] == [label] for ln in lines), label
    # every command begins on a line of its own, so a wrapped one cannot run into the next
    starts = [ln for ln in lines if ln.lstrip().removeprefix("command").lstrip().startswith("$ ")]
    assert len(starts) == len(plan.commands())
    assert plan.wheel.filename in text  # whole, on one line
    assert str(plan.baseline_python) in text
    assert "│" not in text and "┃" not in text


def test_install_plan_wide_keeps_its_frame_and_plain_commands():
    plan = _plan(Path("/Users/someone/envs/torch-2.16.0rc1"))
    buf = io.StringIO()
    render_plan(plan, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "│ command │" in text and "$ " not in text
