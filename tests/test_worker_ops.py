"""Workload builders and error classification: the FP8 matmul API choice, routing, the 2.15 kernels'
workloads built and run on the CPU, and the MPS error texts of older torch read as "unsupported"."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mpsup.worker import ops
from mpsup.worker.build import build
from mpsup.worker.device import Device
from mpsup.worker.ops import Unsupported, is_unsupported_error, routing_sizes, scaled_mm_op, scaled_mm_scales

CPU = Device("cpu")

# Texts of the real macOS wheels (libtorch_cpu strings of 2.14 and 2.15, and c10's dispatcher).
MPS_UNSUPPORTED = [
    "Trying to convert Float8_e4m3fn to the MPS backend but it does not have support for that dtype.",
    "Undefined type Float8_e4m3fn",
    "Could not run 'aten::_int_mm' with arguments from the 'MPS' backend. This could be because the operator doesn't exist",
    "MPS _scaled_mm_v2 only supports TensorWise or RowWise scaling with one Float scale per operand, got recipe_a=[2]",
    "Cannot convert a float64 Tensor to MPS as the MPS framework doesn't support float64. Please use float32 instead.",
]
REAL_FAILURES = [
    "mat1 and mat2 shapes cannot be multiplied (4x8 and 16x4)",
    "MPS _scaled_mm_v2 requires m, n and k to fit in int32",
    "CUDA error: an illegal memory access was encountered",
]


@pytest.mark.parametrize("text", MPS_UNSUPPORTED)
def test_older_torch_fp8_errors_are_unsupported(text: str):
    assert is_unsupported_error(RuntimeError(text))


@pytest.mark.parametrize("text", REAL_FAILURES)
def test_real_failures_stay_failures(text: str):
    assert not is_unsupported_error(RuntimeError(text))


def _fp8_operands(m: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)
    return a, b


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_scaled_mm_prefers_the_public_api_and_scales_right(recipe: str):
    api, fn = scaled_mm_op(recipe)
    assert api == "torch.nn.functional.scaled_mm"  # torch 2.10+: the only FP8 matmul with an MPS kernel (2.15)
    a, b = _fp8_operands(3, 64, 32)
    sa, sb = scaled_mm_scales(recipe, 3, 32, torch.device("cpu"), torch.Generator().manual_seed(4))
    got = fn(a, b.t(), sa, sb)
    want = (a.float() * sa) @ (b.float() * (sb.reshape(-1, 1) if recipe == "rowwise" else sb)).t()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)
    if recipe == "rowwise":
        assert sa.shape == (3, 1) and sb.shape == (1, 32) and sa.dtype == sb.dtype == torch.float32


def test_scaled_mm_falls_back_to_the_private_op(monkeypatch: pytest.MonkeyPatch):
    # torch 2.6-2.9: no F.scaled_mm; torch._scaled_mm (CPU, CUDA, XPU kernels) is what there is.
    monkeypatch.delattr(F, "scaled_mm")
    api, fn = scaled_mm_op("tensorwise")
    assert api == "torch._scaled_mm"
    a, b = _fp8_operands(16, 64, 32)
    sa, sb = scaled_mm_scales("tensorwise", 16, 32, torch.device("cpu"))
    torch.testing.assert_close(
        fn(a, b.t(), sa, sb).float(), (a.float() * sa) @ (b.float() * sb).t(), rtol=1e-2, atol=1e-2
    )
    monkeypatch.delattr(torch, "_scaled_mm")
    with pytest.raises(Unsupported):
        scaled_mm_op("tensorwise")
    with pytest.raises(ValueError):
        scaled_mm_op("blockwise")


def test_routing_sizes():
    assert routing_sizes(10, 4) == [3, 3, 2, 2]
    skewed = routing_sizes(256 * 8, 128, "skewed")
    assert sum(skewed) == 2048 and len(skewed) == 128
    assert skewed == sorted(skewed, reverse=True) and skewed[0] > 10 * skewed[-1]
    assert sum(routing_sizes(2, 8, "skewed")) == 2
    with pytest.raises(ValueError):
        routing_sizes(4, 2, "random")


@pytest.mark.parametrize(
    "spec",
    [
        {
            "kind": "scaled_mm",
            "dtype": "fp8",
            "params": {"tokens": 1, "in_features": 128, "out_features": 64, "recipe": "rowwise"},
        },
        {"kind": "scaled_mm", "dtype": "fp8", "params": {"tokens": 16, "in_features": 128, "out_features": 64}},
        {"kind": "int_mm", "dtype": "int8", "params": {"tokens": 1, "in_features": 64, "out_features": 32}},
        {"kind": "embedding", "dtype": "fp8", "params": {"tokens": 5, "num_embeddings": 50, "embedding_dim": 16}},
        {
            "kind": "conv",
            "dtype": "bf16",
            "params": {"input_shape": [1, 4, 4, 6, 6], "weight_shape": [4, 4, 3, 3, 3], "padding": 0},
        },
        {
            "kind": "grouped_mm",
            "dtype": "fp16",
            "params": {
                "tokens": 8,
                "top_k": 2,
                "experts": 4,
                "in_features": 16,
                "out_features": 8,
                "method": "grouped",
                "routing": "skewed",
            },
        },
    ],
    ids=["scaled_mm-rowwise-decode", "scaled_mm", "int_mm", "fp8-embedding", "conv3d", "grouped-fp16-skewed"],
)
def test_new_workloads_build_and_run_on_cpu(spec: dict):
    built = build(spec, CPU)
    out = built.fn()
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    assert built.bytes_per_call and built.bytes_per_call > 0
    if spec["kind"] == "embedding":
        assert out.dtype == torch.float8_e4m3fn and out.shape == (5, 16)
    if spec["kind"] == "scaled_mm":
        assert out.shape == (spec["params"]["tokens"], 64) and built.flops_per_call == 2.0 * out.numel() * 128


def test_grouped_skewed_routing_reaches_the_kernel(monkeypatch: pytest.MonkeyPatch):
    seen = {}

    def fake_gmm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        seen["offs"] = offs.tolist()
        return a.new_zeros(a.shape[0], b.shape[-1])

    monkeypatch.setattr(ops, "grouped_mm_fn", lambda: fake_gmm)
    build(
        {
            "kind": "grouped_mm",
            "dtype": "bf16",
            "params": {
                "tokens": 64,
                "top_k": 1,
                "experts": 4,
                "in_features": 8,
                "out_features": 8,
                "routing": "skewed",
            },
        },
        CPU,
    )
    sizes = routing_sizes(64, 4, "skewed")
    assert seen["offs"] == [sum(sizes[: i + 1]) for i in range(4)] and sizes[0] > sizes[-1]
