"""The CLI shell: --version, flags (and --help) shown without `<bool>`, and a reader that closes the pipe early."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mpsup import __version__
from tests.conftest import run_cli


def test_version():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"mpsup {__version__}"


@pytest.mark.parametrize("command", [[], ["doctor"], ["bench"], ["report"], ["install-rc"], ["bisect"]])
@pytest.mark.parametrize("columns", ["80", "160"])
def test_help_shows_flags_without_bool_noise(command, columns):
    """No flag shows a type, `--help` itself included (typer's vendored click builds that one)."""
    res = run_cli(*command, "--help", env={"COLUMNS": columns})
    assert res.returncode == 0 and "--help" in res.stdout
    assert "<bool>" not in res.stdout
    assert "<list[" not in res.stdout  # a repeated argument (bisect's environments) shows no type either


def _read_then_close(args: list[str], nbytes: int) -> subprocess.CompletedProcess[bytes]:
    """Like `mpsup ARGS | head -c NBYTES`: read a little, close the pipe, let mpsup keep writing.
    With 0 the reader is gone before mpsup's first write, so the write surely meets a closed pipe."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpsup", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    if nbytes:
        proc.stdout.read(nbytes)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    return subprocess.CompletedProcess(args, proc.returncode, b"", err)


def test_a_closed_stdout_pipe_exits_0_quietly():
    res = _read_then_close(["bench", "--list", "--device", "cpu"], 0)
    assert res.returncode == 0, res.stderr.decode()[-1000:]
    assert b"Traceback" not in res.stderr and b"BrokenPipe" not in res.stderr


def test_a_real_failure_into_a_pipe_keeps_its_code():
    res = _read_then_close(["bench", "--dtype", "x"], 0)
    assert res.returncode == 2 and b"--dtype" in res.stderr
