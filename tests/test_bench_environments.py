"""The environments a bench names are checked before anything runs, and `--list` refuses what a run refuses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mpsup.bench.command import same_environment
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--python", "/no/such/python"], "no such interpreter"),
        (["--aa", "--candidate", sys.executable], "cannot be combined with --candidate"),
        (["--candidate", "/no/such/env"], "--candidate"),
        (["--candidate", sys.executable], "the baseline's own environment"),
    ],
)
@pytest.mark.parametrize("listing", [True, False], ids=["list", "run"])
def test_list_and_run_refuse_the_same_environments(args: list[str], needle: str, listing: bool, mpsup_home: Path):
    res = run_cli("bench", "--device", "cpu", "--no-smoke", *args, *(["--list"] if listing else []))
    assert res.returncode == 2, res.stdout[-500:] + res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr
    assert not any((mpsup_home / "runs").glob("*.json"))  # nothing recorded


def test_a_venv_s_python_and_python3_are_one_environment(tmp_path: Path) -> None:
    real = tmp_path / "real-python"
    real.write_text("")
    for venv in ("a", "b"):
        (tmp_path / venv / "bin").mkdir(parents=True)
        for name in ("python", "python3"):
            (tmp_path / venv / "bin" / name).symlink_to(real)
    a, b = tmp_path / "a" / "bin", tmp_path / "b" / "bin"
    assert same_environment(a / "python", a / "python3")
    assert same_environment(a / "python", Path(os.path.relpath(a / "python")))
    # Two venvs made from one Python link to the same binary, yet are two environments.
    assert not same_environment(a / "python", b / "python")
    # One venv reached through a link to its folder is that venv.
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert same_environment(a / "python", tmp_path / "link" / "bin" / "python3")
    assert not same_environment(a / "python", tmp_path / "missing" / "python")
