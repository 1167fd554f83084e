"""Per-workload memory on CPU: the worker resets the kernel's peak RSS before each setup, so a small
workload after a big one reports its own figure, not the process's high-water mark."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.render import _memory
from mpsup.errors import UserError
from mpsup.runs.schema import RunRecord
from mpsup.worker import device as device_mod
from mpsup.worker.main import Worker
from tests.synthetic import paired_record

BF16 = 2


def _resettable() -> bool:
    return sys.platform.startswith("linux") and os.access(device_mod.CLEAR_REFS, os.W_OK)


needs_reset = pytest.mark.skipif(not _resettable(), reason="needs Linux with a writable /proc/self/clear_refs")


def _linear(tokens: int, k: int, n: int) -> dict[str, Any]:
    params = {"tokens": tokens, "in_features": k, "out_features": n}
    return {"name": f"linear/{k}x{n}/t{tokens}", "kind": "linear", "dtype": "bf16", "params": params}


def _tensor_bytes(spec: dict[str, Any]) -> int:
    p = spec["params"]
    t, k, n = p["tokens"], p["in_features"], p["out_features"]
    return (t * k + n * k + t * n) * BF16


def _measure(worker: Worker, spec: dict[str, Any]) -> dict[str, Any]:
    """One workload through the worker's own ops, in process: setup, a sample, teardown."""
    ready = worker.setup({"workload": spec, "calls": 2})
    assert ready["type"] == "ready"
    assert worker.sample({"count": 2})["type"] == "samples"
    done = worker.teardown({})
    assert done["type"] == "done"
    return done["memory"]


def _cpu_worker() -> Worker:
    worker = Worker(io.StringIO())
    assert worker.hello({"device": "cpu"})["available"]
    return worker


@needs_reset
def test_small_workload_after_a_big_one_reports_its_own_peak():
    worker = _cpu_worker()
    small, big = _linear(1, 384, 384), _linear(16, 4096, 16384)  # 288 KiB and 128 MiB of tensors
    first = _measure(worker, small)
    heavy = _measure(worker, big)
    after = _measure(worker, small)
    for mem in (first, heavy, after):
        assert mem["workload_peak"] >= 0 and mem["peak_source"]
        assert mem["peak_rss"] > 0  # kept for older readers
    # The big linear's figure is its tensors (every page is written), give or take a packed weight copy.
    assert 0.9 * _tensor_bytes(big) <= heavy["workload_peak"] <= 2 * _tensor_bytes(big)
    # The old figure, the process's high-water mark, would have carried the big one's 128 MiB over.
    assert after["workload_peak"] < heavy["workload_peak"] / 4
    assert after["workload_peak"] < 32 * 2**20


def test_no_figure_where_the_peak_cannot_be_reset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # As on macOS CPU or a /proc that refuses the write: nothing rather than the process's high-water mark.
    monkeypatch.setattr(device_mod, "CLEAR_REFS", str(tmp_path / "absent" / "clear_refs"))
    mem = _measure(_cpu_worker(), _linear(1, 384, 384))
    assert "workload_peak" not in mem and "peak_source" not in mem
    assert mem["peak_rss"] > 0


def test_no_figure_without_proc_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(device_mod, "PROC_STATUS", str(tmp_path / "status"))
    mem = _measure(_cpu_worker(), _linear(1, 384, 384))
    assert "workload_peak" not in mem


@pytest.mark.parametrize(
    ("memory", "shown"),
    [
        ({"peak_allocated": 3 * 2**20, "workload_peak": 5 * 2**20}, "3.0 MiB"),
        ({"workload_peak": 5 * 2**20, "peak_rss": 2 * 2**30}, "5.0 MiB"),
        ({"peak_rss": 2 * 2**30}, "-"),  # the process's high-water mark is never a workload's peak
        ({"driver_allocated": 2 * 2**30, "current_allocated": 1}, "-"),  # one reading at teardown, not a peak
        ({}, "-"),
    ],
)
def test_peak_mem_column_shows_only_a_workloads_own_peak(memory: dict[str, Any], shown: str):
    assert _memory({"memory": memory}) == shown


@needs_reset
@pytest.mark.skipif(device_mod._malloc_trim() is None, reason="needs glibc's malloc_trim")
def test_a_repeated_mid_sized_workload_is_not_read_as_free():
    # glibc keeps freed blocks under its adaptive mmap threshold (up to 32 MiB) in the process after a big
    # free: without handing them back at teardown the second and third runs of an 8 MiB layer read 0.
    worker = _cpu_worker()
    mid = _linear(16, 1024, 4096)
    _measure(worker, _linear(16, 4096, 16384))
    for _ in range(3):
        assert _measure(worker, mid)["workload_peak"] >= 0.9 * _tensor_bytes(mid)


@pytest.mark.parametrize("bad", ["130 MiB", -1, True])
def test_a_record_with_a_broken_workload_peak_is_refused_in_one_line(bad: Any):
    doc = paired_record(1.2, seed=5, count=2, rounds=8)
    doc["workloads"][0]["envs"]["baseline"]["memory"] = {"workload_peak": bad}
    with pytest.raises(
        UserError, match=r"^r\.json: corrupt run record \(workloads\[0\]\.envs\.baseline\.memory\.workload_peak"
    ):
        RunRecord.from_json(doc, Path("r.json"))
