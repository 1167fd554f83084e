"""The evidence's scripts read the JSON kept under docs/evidence/figures compressed (.json.gz); that every
figure a page links exists is tests/test_docs_links.py's job."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_scripts_read_a_gzip_figure_like_the_plain_json(tmp_path: Path) -> None:
    from anchors_compare import records
    from record_files import read_json_object

    kept = ROOT / "docs" / "evidence" / "figures" / "h200_issue12_round5_cublaslt.json.gz"
    doc = read_json_object(kept, "calibration summary")
    assert "cublaslt" in doc
    rec = {"schema": "mpsup.run/1", "environments": [{"label": "a"}, {"label": "b"}], "workloads": []}
    (tmp_path / "run.json.gz").write_bytes(gzip.compress(json.dumps(rec).encode()))
    assert read_json_object(tmp_path / "run.json.gz", "run record") == rec
    assert len(records([tmp_path])) == 1  # a folder of .json.gz records is read too
