"""The worker's hello names its smoke features: the one list, which mpsup's own copy must equal, in order."""

from __future__ import annotations

import sys
from pathlib import Path

from mpsup.bench.suite import SMOKE_FEATURES
from mpsup.bench.workerproc import WorkerProcess


def test_hello_reports_the_smoke_features_in_order():
    w = WorkerProcess(Path(sys.executable))
    try:
        hello = w.request({"op": "hello", "device": "cpu"})
    finally:
        w.close()
    assert hello["type"] == "hello"
    assert hello["smoke_features"] == list(SMOKE_FEATURES)
