"""The bundled suite: enough real shapes, each with its source, and dims that match real configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpsup.bench import suite
from mpsup.workloads import select


def test_at_least_90_linear_shapes_with_sources_and_tags():
    ws = suite.linear_workloads((1, 512))
    assert len(ws) >= 90
    assert len({(w.params["tokens"], w.params["in_features"], w.params["out_features"]) for w in ws}) == len(ws)
    for w in ws:
        assert w.source and w.dtype == "bf16"
        assert {"decode", "prefill"} & set(w.tags)
        assert {"small", "large", "output-head"} & set(w.tags)
    tags = [t for w in ws for t in w.tags]
    assert tags.count("output-head") >= 14 and tags.count("small") >= 40
    models = {m for s in suite.linear_shapes() for m in s.sources}
    for needed in (
        "Llama-3-8B",
        "Llama-3-70B",
        "Mistral-7B",
        "Qwen2.5-7B",
        "Qwen3-30B-A3B",
        "Gemma-2-2B",
        "Phi-3-mini",
        "MiniLM-L6",
        "BERT-base",
        "SD-2.1-UNet",
        "FLUX.1-dev",
        "Wan2.2-TI2V-5B-DiT",
    ):
        assert needed in models


def test_llama3_8b_shapes_exact():
    d = next(x for x in suite.DECODERS if x.model == "Llama-3-8B")
    assert suite.decoder_linears(d) == [
        (4096, 4096, "attention"),
        (4096, 1024, "attention"),
        (4096, 4096, "attention"),
        (4096, 14336, "mlp"),
        (14336, 4096, "mlp"),
        (4096, 128256, "output-head"),
    ]


def test_selection():
    ws = suite.build_suite("cpu", (1, 16))
    assert {w.part for w in select(ws, "moe")} == {"moe"}
    assert all(w.params["tokens"] == 1 for w in select(ws, "linear/*/t1"))
    assert {w.name for w in select(ws, "re:^roofline/")} == {
        "roofline/copy/64MiB",
        "roofline/matmul/bf16/1024",
        "roofline/matmul/fp32/1024",
    }


def test_fp8_is_a_memory_trade_with_bf16_twins():
    for device in ("mps", "cuda", "cpu"):
        ws = {w.name: w for w in suite.fp8_workloads(device)}
        mms = [w for w in ws.values() if w.kind == "scaled_mm"]
        assert {w.params["recipe"] for w in mms} == {"tensorwise", "rowwise"}
        for w in mms:
            p = w.params
            twin = ws[f"fp8/bf16-twin/{p['in_features']}x{p['out_features']}/t{p['tokens']}"]
            assert twin.kind == "linear" and twin.dtype == "bf16" and twin.part == "fp8"
            assert twin.name in w.source and "memory-trade" in w.tags and "MiB vs" in w.source
            assert twin.memory_bytes > w.memory_bytes
        decode = min(w.params["tokens"] for w in mms)
        # 2.15's MPS kernels decode 1-4 rows; CUDA's FP8 GEMMs want multiples of 16.
        assert decode == (16 if device == "cuda" else 1)
        embeds = [w for w in ws.values() if w.kind == "embedding"]
        assert {w.dtype for w in embeds} == {"fp8", "bf16"}
    # The CPU emulates FP8 matmul: only small shapes there.
    assert (
        max(w.params["tokens"] * w.params["out_features"] for w in suite.fp8_workloads("cpu") if w.kind == "scaled_mm")
        <= 16 * 4096
    )


def test_new_215_kernels_are_in_the_suite():
    gpu = suite.build_suite("mps", (1, 512))
    names = {w.name for w in gpu}
    assert {"int8/int_mm/4096x4096/t1", "int8/int_mm/4096x14336/t512"} <= names
    moe = [w for w in gpu if w.part == "moe"]
    assert {w.dtype for w in moe} == {"bf16", "fp16", "fp32"}
    assert any(w.params.get("routing") == "skewed" for w in moe)
    conv = [w for w in gpu if w.kind == "conv"]
    assert len(conv) == len(suite.WAN_PAD_SHAPES)
    for w, (c, t, h, wd) in zip(conv, suite.WAN_PAD_SHAPES, strict=True):
        assert w.params["weight_shape"] == [c, c, 3, 3, 3] and w.params["input_shape"] == [1, c, t + 2, h + 2, wd + 2]
    assert (
        min(w.params["tokens"] for w in suite.int8_workloads((1, 512), "cuda")) == 32
    )  # CUDA's _int_mm wants > 16 rows


def test_the_cpu_default_stays_small():
    # The full-suite CPU test runs in CI: what 2.15 added must be small there or left out.
    ws = suite.build_suite("cpu", (1,))
    assert not [w for w in ws if w.part == "moe" and w.dtype != "bf16"]
    conv = [w for w in ws if w.kind == "conv"]
    assert len(conv) == 1 and conv[0].params["weight_shape"][0] == suite.WAN_VAE_BASE_DIM
    assert all(w.memory_bytes < 1 << 30 for w in ws if w.part in ("fp8", "int8", "conv3d"))
    assert not [w for w in ws if w.dtype == "fp16" and w.kind != "metal"]  # a CPU's fp16 matmul takes seconds


def test_metal_roofline_workloads():
    ws = {w.name: w for w in suite.metal_workloads()}
    assert set(ws) == {
        "metal/copy_f32",
        "metal/read_f32x4",
        "metal/write_f32x4",
        "metal/fma_chain",
        "metal/matrix_chain_f16",
        "metal/matrix_chain_bf16",
    }
    roofs = {w.tags[1] for w in ws.values()}
    assert roofs == {"copy", "read", "write", "fp32-fma", "fp16-matrix", "bf16-matrix"}
    assert ws["metal/read_f32x4"].memory_bytes == (1 << 22) * 17 * 4


def _config(model_configs: Path, prefix: str) -> dict:
    files = list(model_configs.glob(prefix + "*.json"))
    assert files, prefix
    return json.loads(files[0].read_text())


@pytest.fixture
def model_configs() -> Path:
    from tests.conftest import MODEL_CONFIGS

    if not MODEL_CONFIGS.is_dir():
        pytest.skip("../shared/data/model-configs is not present")
    return MODEL_CONFIGS


def test_dims_match_published_configs(model_configs: Path):
    llama = _config(model_configs, "llama3-8b")
    d = next(x for x in suite.DECODERS if x.model == "Llama-3-8B")
    assert (d.hidden, d.intermediate, d.heads, d.kv_heads, d.vocab) == (
        llama["hidden_size"],
        llama["intermediate_size"],
        llama["num_attention_heads"],
        llama["num_key_value_heads"],
        llama["vocab_size"],
    )
    mixtral = _config(model_configs, "mixtral-8x7b")
    m = next(x for x in suite.MOES if x.model == "Mixtral-8x7B")
    assert (m.hidden, m.expert_intermediate, m.experts, m.top_k) == (
        mixtral["hidden_size"],
        mixtral["intermediate_size"],
        mixtral["num_local_experts"],
        mixtral["num_experts_per_tok"],
    )
    mistral = next(x for x in suite.DECODERS if x.model == "Mistral-7B")
    assert mistral.vocab == mixtral["vocab_size"]
    qwen = _config(model_configs, "qwen3-30b-a3b")
    q = next(x for x in suite.MOES if x.model == "Qwen3-30B-A3B")
    assert (q.hidden, q.expert_intermediate, q.experts, q.top_k) == (
        qwen["hidden_size"],
        qwen["moe_intermediate_size"],
        qwen["num_experts"],
        qwen["num_experts_per_tok"],
    )
    qshapes = {(i, o) for i, o, _r, model in suite.OTHER_LINEARS if model == "Qwen3-30B-A3B"}
    q_out = qwen["num_attention_heads"] * qwen["head_dim"]
    kv = qwen["num_key_value_heads"] * qwen["head_dim"]
    assert {
        (qwen["hidden_size"], q_out),
        (qwen["hidden_size"], kv),
        (q_out, qwen["hidden_size"]),
        (qwen["hidden_size"], qwen["num_experts"]),
        (qwen["hidden_size"], qwen["vocab_size"]),
    } == qshapes
    minilm = _config(model_configs, "minilm-l6")
    assert (minilm["hidden_size"], minilm["intermediate_size"], "mlp", "MiniLM-L6") in suite.OTHER_LINEARS
    flux = _config(model_configs, "flux1-dev")
    hidden = flux["num_attention_heads"] * flux["attention_head_dim"]
    assert (hidden, 3 * hidden, "attention", "FLUX.1-dev") in suite.OTHER_LINEARS
    unet = _config(model_configs, "sd2.1-base-unet")
    assert (
        unet["cross_attention_dim"],
        unet["block_out_channels"][0],
        "attention",
        "SD-2.1-UNet",
    ) in suite.OTHER_LINEARS
    wan = _config(model_configs, "wan2.2-ti2v-5b-vae")
    assert (wan["base_dim"], tuple(wan["dim_mult"])) == (suite.WAN_VAE_BASE_DIM, suite.WAN_VAE_DIM_MULT)
    widths = {wan["base_dim"] * m for m in wan["dim_mult"]}
    assert {c for c, *_ in suite.WAN_PAD_SHAPES} <= widths
