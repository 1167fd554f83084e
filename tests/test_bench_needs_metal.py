"""A Metal kernel off MPS is said by the worker as a field (`needs_metal`), which the bench screen reads: one line
for every such workload, never a search through the error's text."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from mpsup.bench import command
from mpsup.bench.screen import render_run


def _screen(record: dict) -> str:
    buf = io.StringIO()
    render_run(record, Console(file=buf, width=120, color_system=None, force_terminal=False))
    return buf.getvalue()


def test_a_metal_kernel_off_mps_is_a_field_of_the_workers_answer(mpsup_home: Path):
    plan = command.prepare(command.BenchRequest(device="cpu", budget=0.01, only="metal/copy_f32", smoke=True))
    result = command.run(plan, progress=lambda _e: None, warn=lambda _m: None)
    record = result.record
    (w,) = record["workloads"]
    assert w["status"] == "unsupported" and w["envs"]["baseline"]["needs_metal"] is True
    smoke = {s["feature"]: s["envs"]["baseline"] for s in record["smoke"]}
    assert smoke["metal_kernels"]["needs_metal"] is True
    # Only the Metal kernels carry it: another feature that fails here says why in its message alone.
    assert not any(r.get("needs_metal") for feature, r in smoke.items() if feature != "metal_kernels")
    text = _screen(record)
    assert "- Metal kernels, 1 workload: unsupported off a Mac" in text
    assert "metal_kernels cannot run off a Mac" in text


def test_the_screen_reads_the_field_not_the_message(mpsup_home: Path):
    plan = command.prepare(command.BenchRequest(device="cpu", budget=0.01, only="metal/copy_f32", smoke=False))
    record = command.run(plan, progress=lambda _e: None, warn=lambda _m: None).record
    env = record["workloads"][0]["envs"]["baseline"]
    del env["needs_metal"]  # the same words, without the field: an unsupported workload like any other
    text = _screen(record)
    assert "Metal kernels, 1 workload" not in text
    assert "metal/copy_f32: unsupported: Metal kernels need the mps device" in text
