"""Side-by-side install: built and pointed at its final name in a build folder, one rename commits it,
the record comes last (issue 10, item 18). An interruption at every step is injected.

The venv and the installer are stand-ins (a folder shaped like a venv, whose files name their own
path as venv's do), so each case takes milliseconds; the real thing runs in test_install_rc.py.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.envs import execute
from mpsup.envs.plan import InstallPlan, InstallRequest, NothingToDo, plan_install
from mpsup.errors import OperationFailed
from tests.pkgindex import LINUX_PROBE, build_wheel, fake_torch_files, write_index

BASELINE = LINUX_PROBE
NEW = {**BASELINE, "torch": {"version": "2.16.0rc1", "mps_built": False, "mps_available": False}}


def _fake_venv(_base: Path, prefix: Path, *, with_pip: bool) -> None:
    """What `python -m venv` leaves that names the venv's own path: pyvenv.cfg, activate, script shebangs."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    (prefix / "pyvenv.cfg").write_text(
        f"home = {Path(sys.executable).parent}\ncommand = {sys.executable} -m venv {prefix}\n"
    )
    (prefix / "bin" / "activate").write_text(f'VIRTUAL_ENV="{prefix}"\nexport VIRTUAL_ENV\n')
    (prefix / "bin" / "pip").write_text(f"#!{prefix}/bin/python\nimport sys\n")


@pytest.fixture
def index(tmp_path: Path) -> str:
    wheel = build_wheel(tmp_path / "built", "torch", "2.16.0rc1", "py3-none-any", fake_torch_files("2.16.0rc1"))
    write_index(tmp_path / "idx", [wheel])
    return (tmp_path / "idx" / "simple").as_uri()


def _plan(index: str) -> InstallPlan | NothingToDo:
    return plan_install(
        InstallRequest(python=Path(sys.executable), index_url=index, installer="uv"), probe=lambda _p: BASELINE
    )


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute, "create_venv", _fake_venv)
    monkeypatch.setattr(execute, "_install", lambda *_a: None)
    monkeypatch.setattr(execute, "verify", lambda _plan, _py, _probe: {**NEW, "companions": {}})


def _install(plan: InstallPlan, probe: Any = lambda _p: NEW) -> execute.InstallResult:
    return execute.install_side_by_side(plan, execute.Seams(probe=probe, free_bytes=lambda _p: 1 << 40))


def _entries(home: Path) -> list[str]:
    envs = home / "envs"
    return sorted(p.name for p in envs.iterdir()) if envs.is_dir() else []


def test_the_installed_environment_points_at_itself_and_is_recorded_last(
    index: str, mpsup_home: Path, stand_ins: None
) -> None:
    plan = _plan(index)
    assert isinstance(plan, InstallPlan)
    order: list[str] = []
    real_move, real_write = execute.commit_move, execute.write_record

    def move(a: Path, b: Path) -> None:
        order.append("move")
        real_move(a, b)

    def write(folder: Path, record: Any) -> Path:
        order.append("record")
        assert not (folder / "mpsup-env.json").exists()
        return real_write(folder, record)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(execute, "commit_move", move)
        mp.setattr(execute, "write_record", write)
        result = _install(plan)
    assert order == ["move", "record"]
    prefix = plan.prefix
    assert _entries(mpsup_home) == [prefix.name]
    for rel in ("pyvenv.cfg", "bin/activate", "bin/pip"):
        text = (prefix / rel).read_text()
        assert str(prefix) in text and ".building-" not in text, rel
    wheel = result.record.wheel
    assert (
        wheel["sha256"] == hashlib.sha256(Path(plan.wheel_path).read_bytes()).hexdigest()
        and wheel["sha256_from"] == "index"
    )
    assert wheel["seen_at"] and result.record.channel == "test"
    assert isinstance(_plan(index), NothingToDo)


STEPS = ["create_venv", "_install", "verify", "point_at", "commit_move", "probe", "write_record"]


def _inject(monkeypatch: pytest.MonkeyPatch, step: str, exc: BaseException) -> Any:
    """Make `step` fail after doing its real work (the harder case); returns the probe to use."""
    if step == "probe":
        return lambda p: None if ".building-" not in str(p) else NEW
    if step == "write_record":  # cut mid-write: the atomic writer's temp file is all there is

        def cut(folder: Path, _record: Any) -> Path:
            (folder / ".mpsup-env.json.x.tmp").write_text('{"name": "torch-2.16')
            raise exc

        monkeypatch.setattr(execute, step, cut)
        return lambda _p: NEW
    real = getattr(execute, step)

    def failing(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise exc

    monkeypatch.setattr(execute, step, failing)
    return lambda _p: NEW


@pytest.mark.parametrize("step", STEPS)
def test_a_failure_at_any_step_leaves_nothing(
    step: str, index: str, mpsup_home: Path, stand_ins: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(index)
    assert isinstance(plan, InstallPlan)
    probe = _inject(monkeypatch, step, KeyboardInterrupt())
    with pytest.raises((KeyboardInterrupt, OperationFailed)):
        _install(plan, probe)
    assert _entries(mpsup_home) == []  # neither the build folder nor a half-moved environment
    assert isinstance(_plan(index), InstallPlan)


@pytest.mark.parametrize("step", STEPS)
def test_a_hard_interruption_at_any_step_is_never_called_installed(
    step: str, index: str, mpsup_home: Path, stand_ins: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a power cut or kill -9 would: the step stops and no cleanup runs. The next plan must not say
    "already installed", and the next install replaces what was left."""
    plan = _plan(index)
    assert isinstance(plan, InstallPlan)
    with monkeypatch.context() as mp:
        probe = _inject(mp, step, KeyboardInterrupt())
        mp.setattr(execute, "remove_tree", lambda _p: None)
        with pytest.raises((KeyboardInterrupt, OperationFailed)):
            _install(plan, probe)
    left = _entries(mpsup_home)
    assert left, "the interrupted step should have left something behind"
    assert not (plan.prefix / "mpsup-env.json").exists()
    again = _plan(index)
    assert isinstance(again, InstallPlan), again
    assert again.replaces_leftover == plan.prefix.exists()
    if plan.prefix.exists():
        assert any("interrupted install" in n for n in again.notes)
    _install(again)
    assert _entries(mpsup_home) == [plan.prefix.name]
    assert (plan.prefix / "mpsup-env.json").is_file() and ".building-" not in (
        plan.prefix / "bin" / "activate"
    ).read_text()


def test_a_folder_at_the_final_name_that_is_not_ours_is_refused(index: str, mpsup_home: Path, stand_ins: None) -> None:
    from mpsup.errors import UserError

    plan = _plan(index)
    assert isinstance(plan, InstallPlan)
    plan.prefix.mkdir(parents=True)
    (plan.prefix / "precious.txt").write_text("mine")
    with pytest.raises(UserError, match="holds no mpsup record"):
        _plan(index)
    with pytest.raises(UserError, match="holds no mpsup record"):
        _install(plan)
    assert (plan.prefix / "precious.txt").read_text() == "mine"


def test_an_accepted_unhashed_wheel_records_the_hash_of_what_was_downloaded(
    tmp_path: Path, mpsup_home: Path, stand_ins: None
) -> None:
    wheel = build_wheel(tmp_path / "plain", "torch", "2.16.0rc1", "py3-none-any", fake_torch_files("2.16.0rc1"))
    page = tmp_path / "nohash" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>')
    request = InstallRequest(
        python=Path(sys.executable), index_url=(tmp_path / "nohash").as_uri(), installer="uv", allow_unhashed=True
    )
    plan = plan_install(request, probe=lambda _p: BASELINE)
    assert isinstance(plan, InstallPlan) and plan.wheel.sha256 is None
    record = _install(plan).record
    assert (
        record.wheel["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        and record.wheel["sha256_from"] == "download"
    )
