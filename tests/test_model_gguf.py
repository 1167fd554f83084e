"""GGUF headers written here byte by byte (llama.cpp's names; city96's Flux GGUF keeps Flux's own names)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mpsup.model.extract import extract_model
from mpsup.model.gguf import GGML_TYPES, read_gguf
from mpsup.model.load import load_model
from mpsup.model.safetensors_header import ModelFormatError
from tests.test_model_comfy import flux_keys

TYPE_IDS = {name: i for i, (name, _, _) in GGML_TYPES.items()}


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def write_gguf(
    path: Path, tensors: dict[str, tuple[tuple[int, ...], str]], kv: dict[str, object] | None = None
) -> Path:
    body = b""
    for key, value in (kv or {}).items():
        body += _s(key)
        if isinstance(value, str):
            body += struct.pack("<I", 8) + _s(value)
        elif isinstance(value, list):  # an array of strings, as a tokenizer's vocabulary
            body += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_s(v) for v in value)
        else:
            body += struct.pack("<I", 4) + struct.pack("<I", value)
    offset = 0
    for name, (shape, dtype) in tensors.items():
        _, block, block_bytes = GGML_TYPES[TYPE_IDS[dtype]]
        n = 1
        for d in shape:
            n *= d
        body += _s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        body += struct.pack("<IQ", TYPE_IDS[dtype], offset)
        offset += -(-n // block) * block_bytes
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv or {}))
    with path.open("wb") as fh:
        fh.write(head + body)
        fh.truncate(len(head) + len(body) + offset)
    return path


def qwen3_moe_gguf(path: Path) -> Path:
    t = {
        "token_embd.weight": ((1000, 64), "Q6_K"),
        "output.weight": ((1000, 64), "Q6_K"),
        "output_norm.weight": ((64,), "F32"),
    }
    for i in range(2):
        p = f"blk.{i}."
        t |= {
            p + "attn_q.weight": ((64, 64), "Q4_K"),
            p + "attn_output.weight": ((64, 64), "Q4_K"),
            p + "ffn_gate_inp.weight": ((8, 64), "F32"),
            p + "ffn_gate_exps.weight": ((8, 128, 64), "Q4_K"),
            p + "ffn_down_exps.weight": ((8, 64, 128), "Q6_K"),
        }
    return write_gguf(
        path,
        t,
        {
            "general.architecture": "qwen3moe",
            "qwen3moe.expert_used_count": 4,
            "tokenizer.ggml.tokens": ["a", "b", "<s>"],
        },
    )


def test_llm_gguf_maps_to_the_same_workloads(tmp_path: Path):
    loaded = load_model(qwen3_moe_gguf(tmp_path / "Qwen3-30B-A3B-Q4_K_M.gguf"))
    assert loaded.format == "gguf" and loaded.tensors["blk.0.attn_q.weight"].shape == (64, 64)
    assert loaded.tensors["blk.0.ffn_gate_exps.weight"].shape == (8, 128, 64)
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1,))
    roles = {w.role for w in ex.workloads}
    assert {"attention", "router", "experts", "output-head", "embedding"} <= roles
    assert {w.params["top_k"] for w in ex.workloads if w.kind == "grouped_mm"} == {4}
    assert all(w.dtype in ("bf16", "fp32") for w in ex.workloads)
    assert any("Q4_K dequantization not measured" in n["reason"] for n in ex.not_measured)
    stored = sum(t.nbytes for n, t in loaded.tensors.items() if len(t.shape) >= 2 and n != "token_embd.weight")
    assert ex.linear_weight_bytes == stored  # as stored (quantized blocks), not as the bf16 they compute in


def test_flux_gguf_is_split_like_a_comfyui_file(tmp_path: Path):
    shapes = {n: (s, "Q8_0" if len(s) == 2 else "F32") for n, s in flux_keys(double=1, single=1).items()}
    loaded = load_model(write_gguf(tmp_path / "flux1-dev-Q8_0.gguf", shapes))
    assert loaded.components == {"diffusion_model": {"_mpsup_architecture": "flux"}}
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components, resolution=512)
    assert {w.params["tokens"] for w in ex.workloads if w.kind == "linear"} >= {1024, 512, 1024 + 512, 1}


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"GGML" + b"\0" * 20, "no GGUF magic"),
        (b"GGUF" + struct.pack("<IQQ", 9, 0, 0), "version 9"),
        (b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0), "beyond"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 50), "beyond"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("k") + struct.pack("<IIQ", 9, 0, 1 << 21) + b"\0" * 10,
            "ends early",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("k") + struct.pack("<I", 99), "value type 99"),
        (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _s("w") + struct.pack("<IQQIQ", 2, 4096, 4096, 0, 0), "past the end"),
        (b"GGUF" + struct.pack("<I", 3), "ends early"),
    ],
)
def test_hostile_gguf_is_one_line(tmp_path: Path, data: bytes, needle: str):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError, match=needle) as err:
        read_gguf(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_every_truncation_of_a_real_layout_is_one_line(tmp_path: Path):
    whole = qwen3_moe_gguf(tmp_path / "whole.gguf").read_bytes()
    header_end = whole.index(b"blk.1.ffn_down_exps.weight") + 80  # past the last tensor entry
    cut = tmp_path / "cut.gguf"
    for n in range(0, header_end, 7):
        cut.write_bytes(whole[:n])
        with pytest.raises(ModelFormatError):
            read_gguf(cut)
