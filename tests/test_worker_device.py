"""The device seam's Mac-only paths, off-Mac: MPS memory figures and event semantics, with torch.mps
and torch.accelerator replaced by fakes that behave as the real wheels' APIs do (names checked
against the wheels in test_api_conformance.py)."""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch

from mpsup.worker import device as device_mod
from mpsup.worker.device import Device, event_timing
from mpsup.worker.timing import time_block


@pytest.mark.parametrize(
    ("version", "want"),
    [
        ("2.6.0", "cpu-callback"),
        ("2.14.1", "cpu-callback"),
        ("2.15.0", "gpu"),
        ("2.15.0rc2", "gpu"),
        ("2.16.0.dev20261101", "gpu"),
        ("2.9.0a0+git1234", "cpu-callback"),
    ],
)
def test_mps_event_timing_by_release(monkeypatch: pytest.MonkeyPatch, version: str, want: str):
    # Where the build ships no MPSEvent.h to read (the header decides otherwise: tests/test_worker_classify.py).
    monkeypatch.setattr(device_mod, "_mps_event_header", lambda: None)
    monkeypatch.setattr(torch, "__version__", version)
    assert event_timing("mps") == want
    assert event_timing("cuda") == "gpu"
    assert event_timing("cpu") is None


def test_hello_facts_carry_event_timing():
    assert Device("cpu").facts()["event_timing"] is None


class FakeMps:
    """torch.mps as far as the seam uses it: driver memory moves as the test says."""

    def __init__(self, driver: list[int]) -> None:
        self.driver = list(driver)
        self.reads = 0

    def driver_allocated_memory(self) -> int:
        value = self.driver[min(self.reads, len(self.driver) - 1)]
        self.reads += 1
        return value

    def current_allocated_memory(self) -> int:
        return 1000

    def synchronize(self) -> None:
        return None


class FakeAccelerator:
    def __init__(self, peak: int | None, reset_raises: bool = False) -> None:
        self.peak = peak
        self.reset_raises = reset_raises
        self.resets = 0

    def reset_peak_memory_stats(self) -> None:
        if self.reset_raises:
            raise RuntimeError("getDeviceStats is not implemented for this allocator")
        self.resets += 1

    def memory_stats(self) -> OrderedDict:
        return OrderedDict() if self.peak is None else OrderedDict([("allocated_bytes.all.peak", self.peak)])


def _mps(monkeypatch: pytest.MonkeyPatch, driver: list[int], accelerator: object | None) -> tuple[Device, FakeMps]:
    fake = FakeMps(driver)
    monkeypatch.setattr(torch, "mps", fake)
    if accelerator is None:
        monkeypatch.delattr(torch, "accelerator", raising=False)
    else:
        monkeypatch.setattr(torch, "accelerator", accelerator)
    return Device("mps"), fake


def test_allocator_peak_and_driver_maximum_over_timed_blocks(monkeypatch: pytest.MonkeyPatch):
    # torch 2.13+: the allocator's own peak; driver memory (MPSGraph's allocations included) read
    # after every block, its maximum kept: the Wan VAE pad case grows outside the allocator.
    acc = FakeAccelerator(peak=5000)
    dev, fake = _mps(monkeypatch, [100, 400, 9000, 300, 200], acc)
    dev.reset_peak()
    for _ in range(3):
        time_block(lambda: None, 2, dev.synchronize)
    mem = dev.memory()
    assert acc.resets == 1
    assert mem["peak_allocated"] == 5000 and mem["peak_source"] == "torch.accelerator.max_memory_allocated"
    assert mem["driver_allocated_max"] == 9000  # not the 200 left at the end
    assert mem["driver_reads"] == fake.reads - 1  # every read but the end value's own
    assert mem["driver_allocated"] == 200 and mem["current_allocated"] == 1000


@pytest.mark.parametrize(
    "accelerator",
    [None, FakeAccelerator(peak=None), FakeAccelerator(peak=0), FakeAccelerator(peak=7, reset_raises=True)],
    ids=["no-api", "no-stats", "zero", "reset-raises"],
)
def test_no_peak_is_called_a_peak_without_allocator_statistics(
    monkeypatch: pytest.MonkeyPatch, accelerator: object | None
):
    # torch before 2.13 (no MPS statistics behind torch.accelerator), or older without the API at all.
    dev, _fake = _mps(monkeypatch, [100, 800, 300], accelerator)
    dev.reset_peak()
    time_block(lambda: None, 1, dev.synchronize)
    mem = dev.memory()
    assert "peak_allocated" not in mem and "peak_source" not in mem
    assert mem["driver_allocated_max"] == 800


def test_a_new_workload_starts_its_figures_afresh(monkeypatch: pytest.MonkeyPatch):
    dev, fake = _mps(monkeypatch, [9000], FakeAccelerator(peak=5))
    dev.reset_peak()
    time_block(lambda: None, 1, dev.synchronize)
    assert dev.memory()["driver_allocated_max"] == 9000
    fake.driver, fake.reads = [10, 20], 0
    dev.reset_peak()
    assert dev.memory()["driver_allocated_max"] == 20


def test_memory_reads_stay_outside_the_timed_span():
    clock = SimpleNamespace(now=0.0)
    events: list[str] = []

    class Seam:
        def synchronize(self) -> None:
            events.append("sync")

        def after_block(self) -> None:
            events.append("read")
            clock.now += 5.0  # a slow read must not count

    def work() -> None:
        clock.now += 0.25

    bt = time_block(work, 4, Seam().synchronize, clock=lambda: clock.now)
    assert bt.host_s == pytest.approx(1.0)
    assert events == ["sync", "sync", "read"]


def test_cpu_memory_keeps_peak_rss_and_adds_the_workloads_own_only_where_resettable():
    dev = Device("cpu")
    dev.reset_peak()
    dev.after_block()
    resettable = sys.platform.startswith("linux") and os.access(device_mod.CLEAR_REFS, os.W_OK)
    want = {"peak_rss", "workload_peak", "peak_source"} if resettable else {"peak_rss"}
    assert set(dev.memory()) == want


def test_release_parse_is_defensive(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch, "__version__", "garbage")
    monkeypatch.setattr(device_mod, "_mps_event_header", lambda: None)
    assert device_mod._torch_release() == (0, 0)
    assert event_timing("mps") == "cpu-callback"


def test_device_samples_are_comparable_only_under_one_semantics():
    from mpsup.report.analysis import device_time_semantics

    old, new = {"event_timing": "cpu-callback"}, {"event_timing": "gpu"}
    assert device_time_semantics(old, new) == {"baseline": "cpu-callback", "candidate": "gpu", "comparable": False}
    assert device_time_semantics(new, dict(new))["comparable"]
    assert not device_time_semantics({}, {})["comparable"]  # records from before the label: unknown never matches
