"""Smoke tests of what 2.15 changed on MPS, run for real on the CPU, and shown able to fail: a device
that writes a wrong pad past 2^16-element planes, a matmul that drops its scales, errors older torch
raises for FP8 on MPS."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from mpsup.bench.suite import SMOKE_FEATURES
from mpsup.worker import ops, smoke
from mpsup.worker.device import Device
from mpsup.worker.smoke import FEATURES, PLANE_LIMIT_CASES, run_feature

CPU = Device("cpu")


def test_suite_and_worker_agree_on_features():
    assert set(SMOKE_FEATURES) == set(FEATURES)
    for new in (
        "scaled_mm_fp8_rowwise",
        "scaled_mm_fp8_decode",
        "constant_pad_bf16_5d_64k",
        "fp8_constant_pad_5d_64k",
        "fp8_embedding",
        "fp8_index",
        "fp8_eq_ne",
        "fp8_eye",
        "grouped_mm_uneven",
        "compile_small_model",
    ):
        assert new in SMOKE_FEATURES


@pytest.mark.parametrize(
    "feature",
    [
        "scaled_mm_fp8",
        "scaled_mm_fp8_rowwise",
        "scaled_mm_fp8_decode",
        "constant_pad_bf16_5d_64k",
        "fp8_constant_pad_5d_64k",
        "fp8_embedding",
        "fp8_eq_ne",
        "fp8_eye",
        "grouped_mm_uneven",
    ],
)
def test_features_pass_on_cpu(feature: str):
    result = run_feature(feature, CPU, [])
    assert result["status"] == "pass", result


def test_notes_say_which_api_ran():
    assert run_feature("scaled_mm_fp8_decode", CPU, [])["message"].startswith("torch.nn.functional.scaled_mm")
    note = run_feature("constant_pad_bf16_5d_64k", CPU, [])["message"]
    planes = [h * w for h, w, _ in PLANE_LIMIT_CASES]
    assert min(planes) < 1 << 16 <= max(planes) and f"{max(planes)} elements" in note


def test_plane_cases_straddle_the_limit_on_both_sides():
    ins = [h * w for h, w, _ in PLANE_LIMIT_CASES]
    outs = [(h + 2) * (w + 2) for h, w, _ in PLANE_LIMIT_CASES]
    assert 1 << 16 in ins and 1 << 16 in outs  # exactly at the limit, as input and as output
    assert any(i < 1 << 16 < o for i, o in zip(ins, outs, strict=True))
    assert any(v != 0 for *_hw, v in PLANE_LIMIT_CASES)


def _buggy_pad(limit: int = 1 << 16):
    """F.pad as MPSGraph did it up to 2.14: wrong values once a plane reaches 2^16 elements. The
    device's call comes first in each case, the CPU reference second: only the first is wrong."""
    calls = {"n": 0}

    def pad(x: torch.Tensor, p: tuple, mode: str = "constant", value: float = 0.0) -> torch.Tensor:
        calls["n"] += 1
        out = F.pad(x, p, mode=mode, value=value)
        if calls["n"] % 2 == 1 and x.shape[-1] * x.shape[-2] >= limit:
            out.view(torch.uint8).view(-1)[-7] ^= 0x10
        return out

    return SimpleNamespace(pad=pad, embedding=F.embedding)


@pytest.mark.parametrize("feature", ["constant_pad_bf16_5d_64k", "fp8_constant_pad_5d_64k"])
def test_a_wrong_large_plane_pad_fails(monkeypatch: pytest.MonkeyPatch, feature: str):
    monkeypatch.setattr(smoke, "F", _buggy_pad())
    result = run_feature(feature, CPU, [])
    assert result["status"] == "fail"
    assert "256x256 (65536 elements)" in result["message"]  # the first case at the limit, named


def test_a_matmul_that_drops_its_scales_fails(monkeypatch: pytest.MonkeyPatch):
    real = ops.scaled_mm_op

    def unscaled(recipe: str):
        api, fn = real(recipe)
        return api, lambda a, b, sa, sb: fn(a, b, torch.ones_like(sa), torch.ones_like(sb))

    monkeypatch.setattr(smoke, "scaled_mm_op", unscaled)
    for feature in ("scaled_mm_fp8", "scaled_mm_fp8_rowwise", "scaled_mm_fp8_decode"):
        assert run_feature(feature, CPU, [])["status"] == "fail", feature


@pytest.mark.parametrize(
    "text",
    [
        "Trying to convert Float8_e4m3fn to the MPS backend but it does not have support for that dtype.",
        "Undefined type Float8_e4m3fn",
    ],
)
def test_older_torch_fp8_on_mps_is_unsupported_not_fail(monkeypatch: pytest.MonkeyPatch, text: str):
    # What torch 2.14 and earlier raise for an FP8 tensor on MPS (texts from the real wheel).
    def raises(_d: Device) -> float:
        raise RuntimeError(text)

    monkeypatch.setitem(FEATURES, "fp8_cast", raises)
    result = run_feature("fp8_cast", CPU, [])
    assert result["status"] == "unsupported" and text[:20] in result["message"]


def test_fp8_index_is_pass_or_unsupported_on_cpu():
    # CPU torch has no FP8 gather ("scatter_gather_tensor_cpu" not implemented): an honest "unsupported".
    assert run_feature("fp8_index", CPU, [])["status"] in ("pass", "unsupported")


def test_compile_small_model_matches_eager():
    result = run_feature("compile_small_model", CPU, [])
    assert result["status"] == "pass", result
    assert result["message"] == "backend=aot_eager"


def test_metal_kernels_need_mps():
    from mpsup.metal import load_manifest

    assert run_feature("metal_kernels", CPU, load_manifest())["status"] == "unsupported"


def test_the_compile_smoke_test_compiles_in_process_on_a_gpu_and_leaves_the_pool_setting_alone(monkeypatch):
    """Inductor's compile pool (a process per CPU) cost more than the four kernels it compiles; a user's
    `--compile` workloads, run later in the same worker, must still get the pool."""
    inductor_config = pytest.importorskip("torch._inductor.config")
    monkeypatch.setattr(inductor_config, "compile_threads", 8)
    seen: list[tuple[str, int]] = []

    def recording_compile(model, backend, fullgraph):
        seen.append((backend, inductor_config.compile_threads))
        return model  # eager stands in for the compiled model: only the setting during the compile is checked

    monkeypatch.setattr(torch, "compile", recording_compile)
    gpu_like = SimpleNamespace(kind="cuda", torch_device=torch.device("cpu"))
    worst, detail = smoke.compile_small_model(gpu_like)
    assert seen == [("inductor", 1)] and detail == "backend=inductor" and worst == 0.0
    assert inductor_config.compile_threads == 8
    seen.clear()
    smoke.compile_small_model(CPU)
    assert seen == [("aot_eager", 8)]


def test_a_smoke_test_that_ran_an_op_on_the_cpu_is_fallback_never_pass(monkeypatch: pytest.MonkeyPatch):
    # A real C++ TORCH_WARN_ONCE (aten's Cross.cpp; tests/test_whole_model.py shows it is one), its flag spent
    # first as an earlier smoke test would have spent MPSFallback.mm's.
    import re
    import warnings

    from mpsup.worker import core

    def cross(_d: Device) -> float:
        torch.cross(torch.ones(3, 3), torch.ones(3, 3))
        return 0.0

    monkeypatch.setattr(core, "FALLBACK", re.compile(r"Using (torch\.cross) without specifying the dim arg"))
    monkeypatch.setitem(FEATURES, "int_mm", cross)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cross(CPU)
    result = run_feature("int_mm", CPU, [])
    assert result["status"] == "fallback"
    assert result["ops"] == ["torch.cross"] and "ran on the CPU" in result["message"]
    monkeypatch.setitem(FEATURES, "int_mm", lambda d: 0.0)
    assert run_feature("int_mm", CPU, [])["status"] == "pass"
