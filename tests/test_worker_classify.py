"""How the worker names a failure and what its device events time, without a Mac: MPSAllocator's "Invalid buffer
size" is out of memory (oom), not an error; and a 2.15 nightly is labelled as timing on the GPU only where its own
MPSEvent.h says so (the real wheels' headers: tests/test_api_conformance.py)."""

from __future__ import annotations

import io

import pytest
import torch

from mpsup.worker import device as device_mod
from mpsup.worker.main import Worker, _answer, _classify


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RuntimeError("Invalid buffer size: 24.00 GiB"), "oom"),
        (RuntimeError("MPS backend out of memory (MPS allocated: 1.00 GiB, other allocations: 0 bytes)"), "oom"),
        (MemoryError(), "oom"),
        (RuntimeError("shape mismatch"), "error"),
        (NotImplementedError("The operator 'aten::x' is not currently implemented for the MPS device"), "unsupported"),
    ],
)
def test_failures_are_named_as_mpsup_reports_them(exc: BaseException, status: str) -> None:
    assert _classify(exc) == status


def test_a_workload_past_the_largest_buffer_is_answered_as_out_of_memory() -> None:
    worker = Worker(io.StringIO())

    def setup(_req: dict) -> dict:
        raise RuntimeError("Invalid buffer size: 24.00 GiB")

    answer = _answer(worker, {"setup": setup}, {"op": "setup"})
    assert answer["type"] == "error" and answer["status"] == "oom"


CPU_CLOCK_HEADER = "static uint64_t getTime() { return clock_gettime_nsec_np(CLOCK_MONOTONIC_RAW); }"
GPU_TIME_HEADER = "// Enables measuring the GPU completion time of this event.\\n double m_completion_time = 0.0;"


@pytest.mark.parametrize(
    ("version", "header", "want"),
    [
        ("2.15.0.dev20260801", CPU_CLOCK_HEADER, "cpu-callback"),  # a nightly from before the change
        ("2.15.0.dev20261001", GPU_TIME_HEADER, "gpu"),
        ("2.15.0.dev20261001", None, None),  # no header: unknown, never compared
        ("2.15.0", None, "gpu"),
        ("2.14.0", None, "cpu-callback"),
        ("2.16.0.dev20270101", None, "gpu"),
        ("2.15.0", "neither", "gpu"),  # a header that says nothing: the release decides
    ],
)
def test_event_timing_follows_the_build_s_own_header(
    monkeypatch: pytest.MonkeyPatch, version: str, header: str | None, want: str | None
) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(device_mod, "_mps_event_header", lambda: header)
    assert device_mod.event_timing("mps") == want
    assert device_mod.event_timing("cuda") == "gpu" and device_mod.event_timing("cpu") is None


def test_the_installed_torch_s_header_is_read() -> None:
    header = device_mod._mps_event_header()
    if header is None:
        pytest.skip("this torch ships no ATen/mps/MPSEvent.h")
    assert device_mod.event_timing_in_header(header) in ("gpu", "cpu-callback")
