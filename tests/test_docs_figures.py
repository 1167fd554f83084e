"""The docs' evidence: every figure file a page links or names exists, and the scripts read the JSON kept
there compressed (.json.gz)."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _figure_names(text: str, named_too: bool) -> set[str]:
    linked = re.findall(r"\]\((?:docs/)?(figures/[^)#\s]+)\)", text)
    named = re.findall(r"`docs/(figures/[^`\s]+)`", text) if named_too else []
    return {n for n in linked + named if not n.endswith("/")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_a_page_links_exists(page: Path) -> None:
    # history.md names removed files as `docs/figures/...` code (they are in git); its links must resolve.
    names = _figure_names(page.read_text(), named_too=page.name != "history.md")
    missing = sorted(n for n in names if not (ROOT / "docs" / n).is_file())
    assert not missing, missing


def test_the_scripts_read_a_gzip_figure_like_the_plain_json(tmp_path: Path) -> None:
    from anchors_compare import records
    from record_files import read_json_object

    kept = ROOT / "docs" / "figures" / "h200_issue12_round5_cublaslt.json.gz"
    doc = read_json_object(kept, "calibration summary")
    assert "cublaslt" in doc
    rec = {"schema": "mpsup.run/1", "environments": [{"label": "a"}, {"label": "b"}], "workloads": []}
    (tmp_path / "run.json.gz").write_bytes(gzip.compress(json.dumps(rec).encode()))
    assert read_json_object(tmp_path / "run.json.gz", "run record") == rec
    assert len(records([tmp_path])) == 1  # a folder of .json.gz records is read too
