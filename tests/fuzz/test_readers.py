"""A small, fixed run of the reader fuzz harness (tests/fuzz/readers.py): every reader of untrusted input,
fed generated hostile inputs, raises nothing but the project's own errors. The full run (1,500 inputs per
reader) is `python -m tests.fuzz.readers`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz import readers as fuzz

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 60  # per reader; the same inputs every run (hypothesis derandomized)


@pytest.mark.parametrize("reader", fuzz.READERS, ids=[r.name for r in fuzz.READERS])
def test_reader_raises_only_project_errors(reader, tmp_path: Path):
    tally = fuzz.run_reader(reader, EXAMPLES, None, tmp_path / reader.name)
    assert tally.inputs >= EXAMPLES
    assert tally.foreign_total == 0, "\n".join(tally.examples.values())


def test_the_harness_prints_a_table_and_exits_0(capsys: pytest.CaptureFixture[str]):
    assert fuzz.main(["--examples", "5", "--reader", "safetensors-header", "--reader", "index-page-json"]) == 0
    out = capsys.readouterr().out
    assert "safetensors-header" in out and "index-page-json" in out and "foreign" in out


def test_the_harness_runs_as_a_module_from_the_repository_root():
    res = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.readers", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert "python -m tests.fuzz.readers" in res.stdout and "--examples" in res.stdout
