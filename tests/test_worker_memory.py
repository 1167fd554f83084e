"""Per-workload memory on CPU: the worker resets the kernel's peak RSS before each setup, so a small
workload after a big one reports its own figure, not the process's high-water mark."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.tables import memory_cell
from mpsup.errors import UserError
from mpsup.runs.schema import EnvRun, RunRecord
from mpsup.worker import device as device_mod
from mpsup.worker.main import Worker
from tests.synthetic import paired_record
from tests.test_api_conformance import wheel  # noqa: F401  (the real wheels, fetched once and cached)

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
    assert memory_cell(EnvRun.from_json({"memory": memory}, "env")) == shown


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


# --- MPS: the allocator's rules (issue 40 items 3 and 4), as pure functions and through a fake device ---

GIB = 1 << 30
REC = 12 * GIB  # a 16 GB Mac's recommended working set (about 75% of its RAM)


@pytest.mark.parametrize(
    ("env", "safe", "hard", "note"),
    [
        ({}, REC, int(1.7 * REC), ""),  # the default: a hard limit at 1.7x, planned at the recommended size
        ({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.2"}, REC, int(1.2 * REC), ""),
        ({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.5"}, 6 * GIB, 6 * GIB, "stops at 6.0 GiB, below the recommended"),
        ({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0"}, REC, None, "=0: no allocator limit"),
        ({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "2.5"}, REC, None, "is not a ratio torch accepts (0 to 2)"),
        ({"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "lots"}, REC, None, "is not a ratio torch accepts"),
    ],
)
def test_mps_limits_follow_the_allocator_header(env: dict[str, str], safe: int, hard: int | None, note: str):
    limits = device_mod.mps_limits(REC, env, 16 * GIB)
    assert (limits.safe, limits.hard_limit) == (safe, hard)
    assert (note in limits.note) if note else limits.note == ""
    assert "\n" not in limits.note


def test_a_torch_without_recommended_max_memory_gets_half_the_ram_said_in_one_line():
    limits = device_mod.mps_limits(None, {}, 16 * GIB)
    assert limits.safe == 8 * GIB and limits.recommended is None
    assert limits.note == "this torch has no torch.mps.recommended_max_memory: memory bounded at half the RAM (8.0 GiB)"


class _FakeMps:
    """torch.mps as a Mac's torch has it: byte counts that a test sets."""

    def __init__(self, recommended: int | None, driver: list[int]) -> None:
        if recommended is not None:
            self.recommended_max_memory = lambda: recommended
        self.driver = driver
        self.driver_allocated_memory = lambda: self.driver.pop(0) if len(self.driver) > 1 else self.driver[0]
        self.current_allocated_memory = lambda: 3 * GIB


def test_depth_fitting_on_mps_respects_the_high_watermark_ratio(monkeypatch: pytest.MonkeyPatch):
    from mpsup.worker.whole_model import _depth_for

    monkeypatch.setattr(device_mod.torch, "mps", _FakeMps(REC, [0]))
    mps = device_mod.Device("mps")
    params = {"fit_share": 0.5}
    block = GIB // 4
    monkeypatch.delenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", raising=False)
    assert _depth_for(params, 32 * block, block, 0, 32, mps) == 24  # 6 GiB of 12: 24 quarter-GiB blocks
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "0.5")
    assert mps.memory_limit() == 6 * GIB
    assert _depth_for(params, 32 * block, block, 0, 32, mps) == 12  # what the allocator really allows
    assert mps.facts_memory()["memory_limit_note"].startswith("PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.5")


def test_mps_memory_names_the_allocator_peak_and_the_driver_maximum(monkeypatch: pytest.MonkeyPatch):
    """Off-Mac, through a fake torch.mps and torch.accelerator: the allocator's peak is labelled as such, and
    the driver's figure (implicit MPSGraph allocations included) is the largest read at setup and block ends."""
    fake = _FakeMps(REC, [1 * GIB, 5 * GIB, 2 * GIB, 2 * GIB])
    monkeypatch.setattr(device_mod.torch, "mps", fake)
    stats = {"allocated_bytes.all.peak": 4 * GIB}
    acc = type("Acc", (), {"reset_peak_memory_stats": staticmethod(lambda: None), "memory_stats": lambda: stats})
    monkeypatch.setattr(device_mod.torch, "accelerator", acc)
    mps = device_mod.Device("mps")
    mps.reset_peak()  # reads 1 GiB
    mps.after_block()  # 5 GiB: the MPSGraph pad the allocator never sees
    mps.after_block()  # 2 GiB
    memory = mps.memory()
    assert memory["peak_allocated"] == 4 * GIB and memory["peak_kind"] == "allocator"
    assert memory["driver_allocated_max"] == 5 * GIB and memory["driver_reads"] == 4
    assert memory["driver_kind"].startswith("driver maximum")


def test_the_mps_rules_are_those_of_the_real_wheels_headers(wheel: Any):  # noqa: F811  (the fixture)
    """The constants mps_limits uses, read from MPSAllocator.h of the real 2.6.0 and 2.15.0 macOS wheels."""
    import re

    header = wheel.read("torch/include/ATen/mps/MPSAllocator.h") or ""

    def constant(name: str) -> float:
        found = re.search(rf"constexpr static double {name}\w* = ([0-9.]+);", header)
        assert found, name
        return float(found.group(1))

    assert constant("default_high_watermark_ratio") == device_mod.MPS_DEFAULT_HIGH_WATERMARK
    assert constant("default_high_watermark_upper_bound") == device_mod.MPS_HIGH_WATERMARK_UPPER
    assert constant("default_low_watermark_ratio") == device_mod.MPS_DEFAULT_LOW_WATERMARK  # unified memory
    assert "high watermark ratio is a hard limit" in header
    assert "0. : disables high watermark limit" in header
    assert "implicit allocations from MPS/MPSGraph" in header  # the driver's figure, outside the allocator


def _phase_record(device: str, versions: tuple[str, str]) -> dict[str, Any]:
    def env(peak: int, driver: int) -> dict[str, Any]:
        memory = {"peak_allocated": peak, "peak_kind": "allocator", "driver_allocated_max": driver}
        return {"status": "ok", "median": 0.5, "ci_low": 0.49, "ci_high": 0.51, "memory": memory}

    workload = {
        "name": "model/vae/vae_decode",
        "part": "phase",
        "phase": "vae_decode",
        "status": "ok",
        "envs": {"baseline": env(2 * GIB, 9 * GIB), "candidate": env(2 * GIB, 3 * GIB)},
    }
    environments = [
        {"label": "baseline", "torch_version": versions[0]},
        {"label": "candidate", "torch_version": versions[1]},
    ]
    return {"device": device, "environments": environments, "workloads": [workload]}


@pytest.mark.parametrize(
    ("device", "versions", "beside"),
    [
        ("mps", ("2.14.0", "2.15.0"), True),
        ("mps", ("2.15.0", "2.15.1"), False),
        ("mps", ("2.15.0", "weird"), True),
        ("cuda", ("2.14.0", "2.15.0"), False),
    ],
)
def test_the_phase_table_labels_the_allocator_peak_and_puts_the_driver_maximum_beside_it(
    device: str, versions: tuple[str, str], beside: bool
):
    """Issue 40 item 4: the allocator's peak reads 2 GiB on both sides where the driver saw 9 GiB and 3 GiB."""
    from rich.console import Console

    from mpsup.bench.phase_table import render_phases

    out = io.StringIO()
    render_phases(_phase_record(device, versions), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "allocator peak" in text and "2.00 GiB" in text
    assert ("driver max" in text and "9.00 GiB / 3.00 GiB" in text) == beside
    assert ("currentAllocatedSize" in text) == beside


def test_a_skip_on_a_conservatively_bounded_mac_says_why_the_bound_is_low():
    from types import SimpleNamespace

    from mpsup.bench.runner import _guard
    from mpsup.workloads import Workload

    limits = device_mod.mps_limits(None, {}, 16 * GIB)
    facts = {"memory_limit": limits.safe, "memory_limit_note": limits.note, "device": "mps"}
    w = Workload("w", "linear", "model", "bf16", {"tokens": 512, "in_features": 8192, "out_features": 128256})
    reason = _guard(w, [SimpleNamespace(facts=facts), SimpleNamespace(facts=facts)], 0.5, "mps")  # type: ignore[list-item]
    assert reason is not None and "\n" not in reason
    assert reason.endswith(
        "; this torch has no torch.mps.recommended_max_memory: memory bounded at half the RAM (8.0 GiB)"
    )
