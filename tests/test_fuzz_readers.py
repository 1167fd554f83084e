"""A small, fixed run of benchmarks/fuzz_readers.py: every reader of untrusted input, fed generated
hostile inputs, raises nothing but the project's own errors (issue 10). The full run (10,500 inputs)
is `python benchmarks/fuzz_readers.py`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_readers.py"
EXAMPLES = 60  # per reader; the same inputs every run (hypothesis derandomized)


def _load():
    spec = importlib.util.spec_from_file_location("fuzz_readers", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_readers"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


fuzz = _load()


@pytest.mark.parametrize("reader", fuzz.READERS, ids=[r.name for r in fuzz.READERS])
def test_reader_raises_only_project_errors(reader, tmp_path: Path):
    tally = fuzz.run_reader(reader, EXAMPLES, None, tmp_path / reader.name)
    assert tally.inputs >= EXAMPLES
    assert tally.foreign_total == 0, "\n".join(tally.examples.values())


def test_the_script_prints_a_table_and_exits_0(capsys: pytest.CaptureFixture[str]):
    assert fuzz.main(["--examples", "5", "--reader", "safetensors-header", "--reader", "index-page-json"]) == 0
    out = capsys.readouterr().out
    assert "safetensors-header" in out and "index-page-json" in out and "foreign" in out
