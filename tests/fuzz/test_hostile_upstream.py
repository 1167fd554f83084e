"""The `mpsup report` CLI campaign (tests/fuzz/hostile_upstream.py) runs from the repository root: one bad
phase field and one hostile string in every format, each in a fresh process, with no traceback. The whole
campaign is `python -m tests.fuzz.hostile_upstream` (add --bench for the hostile folder name)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def campaign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.fuzz.hostile_upstream", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_campaign_says_how_to_run_it() -> None:
    res = campaign("--help")
    assert res.returncode == 0, res.stderr
    assert "python -m tests.fuzz.hostile_upstream" in res.stdout and "--limit" in res.stdout


@pytest.mark.slow
def test_one_case_of_each_kind_ends_without_a_traceback() -> None:
    res = campaign("--limit", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    # 6 formats for the bad field (exit 2), 8 for the hostile string (exit 0).
    assert re.search(r"^14 runs, 0 tracebacks, exit codes \{2: 6, 0: 8\}, 0 unexpected$", res.stdout, re.M)
