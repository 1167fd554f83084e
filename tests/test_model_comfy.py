"""ComfyUI single files and repackaged folders, FP8 weights, and DiT token counts from the resolution.

Key layouts follow the published files: Flux as Black Forest Labs ship it (and Comfy-Org's fp8 all-in-one
with `vae.` and `text_encoders.`), SD1.5 in LDM naming, SDXL's `conditioner.embedders.N.`, and Comfy-Org's
Wan 2.1 repackaging (split_files/diffusion_models, vae, text_encoders). Only headers are written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from mpsup.model.comfy import split
from mpsup.model.extract import extract_model
from mpsup.model.load import load_model
from mpsup.model.safetensors_header import ITEMSIZE, ModelFormatError

CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "model-configs"


def write_st(
    path: Path, shapes: dict[str, tuple[int, ...]], dtype: str = "BF16", dtypes: dict[str, str] | None = None
) -> Path:
    header, offset = {}, 0
    for name, shape in shapes.items():
        dt = (dtypes or {}).get(name, dtype)
        n = ITEMSIZE[dt]
        for d in shape:
            n *= d
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)  # sparse: the weights are never read
    return path


def flux_dims() -> dict[str, int]:
    """FLUX.1-dev's transformer config (the published one when present, else the same numbers)."""
    path = CONFIGS / "flux1-dev__transformer_config__city96_FLUX.1-dev-gguf_pr34.json"
    cfg = (
        json.loads(path.read_text())
        if path.is_file()
        else {
            "num_attention_heads": 24,
            "attention_head_dim": 128,
            "in_channels": 64,
            "joint_attention_dim": 4096,
            "pooled_projection_dim": 768,
        }
    )
    return {
        "hidden": cfg["num_attention_heads"] * cfg["attention_head_dim"],
        "in": cfg["in_channels"],
        "ctx": cfg["joint_attention_dim"],
        "pooled": cfg["pooled_projection_dim"],
        "head": cfg["attention_head_dim"],
    }


def flux_keys(prefix: str = "", double: int = 2, single: int = 2) -> dict[str, tuple[int, ...]]:
    d = flux_dims()
    h, mlp = d["hidden"], 4 * d["hidden"]
    k = {
        "img_in.weight": (h, d["in"]),
        "txt_in.weight": (h, d["ctx"]),
        "time_in.in_layer.weight": (h, 256),
        "time_in.out_layer.weight": (h, h),
        "vector_in.in_layer.weight": (h, d["pooled"]),
        "vector_in.out_layer.weight": (h, h),
        "guidance_in.in_layer.weight": (h, 256),
        "guidance_in.out_layer.weight": (h, h),
        "final_layer.linear.weight": (d["in"], h),
        "final_layer.adaLN_modulation.1.weight": (2 * h, h),
    }
    for i in range(double):
        for s in ("img", "txt"):
            p = f"double_blocks.{i}.{s}_"
            k |= {
                p + "mod.lin.weight": (6 * h, h),
                p + "attn.qkv.weight": (3 * h, h),
                p + "attn.proj.weight": (h, h),
                p + "attn.norm.query_norm.scale": (d["head"],),
                p + "attn.norm.key_norm.scale": (d["head"],),
                p + "mlp.0.weight": (mlp, h),
                p + "mlp.2.weight": (h, mlp),
            }
    for i in range(single):
        p = f"single_blocks.{i}."
        k |= {
            p + "linear1.weight": (3 * h + mlp, h),
            p + "linear2.weight": (h, h + mlp),
            p + "modulation.lin.weight": (3 * h, h),
            p + "norm.query_norm.scale": (d["head"],),
            p + "norm.key_norm.scale": (d["head"],),
        }
    return {prefix + n: s for n, s in k.items()}


def ldm_vae_keys(prefix: str = "") -> dict[str, tuple[int, ...]]:
    k = {
        "encoder.conv_in.weight": (128, 3, 3, 3),
        "encoder.down.0.block.0.conv1.weight": (128, 128, 3, 3),
        "encoder.down.3.block.0.conv1.weight": (512, 512, 3, 3),
        "encoder.mid.block_1.conv1.weight": (512, 512, 3, 3),
        "quant_conv.weight": (8, 8, 1, 1),
        "post_quant_conv.weight": (4, 4, 1, 1),
        "decoder.conv_in.weight": (512, 4, 3, 3),
        "decoder.up.3.block.0.conv1.weight": (512, 512, 3, 3),
        "decoder.up.0.block.0.conv1.weight": (128, 128, 3, 3),
        "decoder.conv_out.weight": (3, 128, 3, 3),
    }
    return {prefix + n: s for n, s in k.items()}


def clip_l_keys(prefix: str) -> dict[str, tuple[int, ...]]:
    t = prefix + "transformer.text_model."
    return {
        t + "embeddings.token_embedding.weight": (49408, 768),
        t + "embeddings.position_embedding.weight": (77, 768),
        t + "encoder.layers.0.self_attn.q_proj.weight": (768, 768),
        t + "encoder.layers.0.mlp.fc1.weight": (3072, 768),
        t + "final_layer_norm.weight": (768,),
    }


def sd15_keys() -> dict[str, tuple[int, ...]]:
    u = "model.diffusion_model."
    k = {
        u + "input_blocks.0.0.weight": (320, 4, 3, 3),
        u + "input_blocks.1.0.in_layers.2.weight": (320, 320, 3, 3),
        u + "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight": (320, 320),
        u + "input_blocks.3.0.op.weight": (320, 320, 3, 3),
        u + "input_blocks.11.0.in_layers.2.weight": (1280, 1280, 3, 3),
        u + "middle_block.0.in_layers.2.weight": (1280, 1280, 3, 3),
        u + "output_blocks.0.0.in_layers.2.weight": (1280, 2560, 3, 3),
        u + "output_blocks.11.0.in_layers.2.weight": (320, 640, 3, 3),
        u + "out.2.weight": (4, 320, 3, 3),
        u + "time_embed.0.weight": (1280, 320),
    }
    return k | ldm_vae_keys("first_stage_model.") | clip_l_keys("cond_stage_model.")


def _convs(ex, component: str) -> dict[str, int]:
    return {
        w.name.split("/")[3]: w.params["input_shape"][-1]
        for w in ex.workloads
        if w.kind == "conv" and component in w.tags
    }


def test_sd15_single_file_splits_into_its_three_components(tmp_path: Path):
    loaded = load_model(write_st(tmp_path / "v1-5-pruned-emaonly.safetensors", sd15_keys(), "F16"))
    assert loaded.format == "comfyui" and set(loaded.components or {}) == {"diffusion_model", "vae", "text_encoder"}
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components)
    assert all(any(c in w.tags for c in ("diffusion_model", "vae", "text_encoder")) for w in ex.workloads)
    unet = _convs(ex, "diffusion_model")
    assert unet["4x320k3x3"] == 64 and unet["1280x1280k3x3"] in (8, 16) and unet["320x4k3x3"] == 64  # 512 px / 8
    vae = _convs(ex, "vae")
    assert vae["3x128k3x3"] == 512 and vae["4x512k3x3"] == 64 and vae["128x3k3x3"] == 512
    assert not [w for w in ex.workloads if w.role == "output-head"]  # CLIP's token embedding is no head
    at_1024 = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components, resolution=1024)
    assert _convs(at_1024, "diffusion_model")["4x320k3x3"] == 128 and _convs(at_1024, "vae")["3x128k3x3"] == 1024
    assert any("512x512" in n for n in ex.notes) and any("1024x1024" in n for n in at_1024.notes)
    unet_tokens = {
        w.params["out_features"]: w.params["tokens"]
        for w in ex.workloads
        if w.kind == "linear" and "diffusion_model" in w.tags
    }
    assert unet_tokens == {
        320: 64 * 64,
        1280: 1,
    }  # attn1.to_q over level 0's 64x64 latent pixels; time_embed on one vector


def test_sdxl_embedders_are_separate_text_encoders():
    from mpsup.model.safetensors_header import TensorInfo

    shapes = {f"model.diffusion_model.input_blocks.{i}.0.in_layers.2.weight": (320, 320, 3, 3) for i in range(9)}
    shapes["model.diffusion_model.input_blocks.0.0.weight"] = (320, 4, 3, 3)
    shapes |= clip_l_keys("conditioner.embedders.0.") | {
        "conditioner.embedders.1.model.token_embedding.weight": (49408, 1280),
        "conditioner.embedders.1.model.transformer.resblocks.0.mlp.c_fc.weight": (5120, 1280),
    }
    parts = split({n: TensorInfo(n, "F16", s, 2) for n, s in shapes.items()})
    assert parts is not None and [p.name for p in parts] == ["diffusion_model", "text_encoder_0", "text_encoder_1"]
    assert parts[0].architecture == "ldm-unet"


def test_flux_fp8_all_in_one_tokens_and_both_fp8_paths(tmp_path: Path):
    shapes = flux_keys("model.diffusion_model.") | ldm_vae_keys("vae.") | clip_l_keys("text_encoders.clip_l.")
    fp8 = {n: "F8_E4M3" for n, s in shapes.items() if n.startswith("model.diffusion_model.") and len(s) == 2}
    loaded = load_model(write_st(tmp_path / "flux1-dev-fp8.safetensors", shapes, "BF16", fp8))
    assert loaded.components is not None and loaded.components["diffusion_model"]["_mpsup_architecture"] == "flux"
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1, 512), components=loaded.components)
    dit = [w for w in ex.workloads if "diffusion_model" in w.tags]
    h = flux_dims()["hidden"]
    by_shape: dict[tuple[int, int], set[int]] = {}
    for w in dit:
        if w.kind == "linear":
            by_shape.setdefault((w.params["in_features"], w.params["out_features"]), set()).add(w.params["tokens"])
    assert by_shape[(h, 3 * h)] == {4096, 512, 1}  # img_attn.qkv, txt_attn.qkv, single modulation
    assert by_shape[(h, 6 * h)] == {1}  # img_mod / txt_mod: one vector
    assert by_shape[(h, 7 * h)] == {4096 + 512}  # single blocks' linear1 runs over both streams
    assert by_shape[(flux_dims()["ctx"], h)] == {512}  # txt_in
    assert by_shape[(flux_dims()["in"], h)] == {4096}  # img_in at 1024x1024 / 8 / 2x2 patches
    assert all(w.dtype == "bf16" for w in dit if w.kind == "linear")  # upcast path computes in bf16
    mm = [w for w in dit if w.kind == "scaled_mm"]
    casts = [w for w in dit if w.kind == "fp8_cast"]
    assert mm and casts and all(w.dtype == "fp8" and w.params["recipe"] == "tensorwise" for w in mm)
    assert sum(w.count for w in casts) == len(fp8)  # one upcast per FP8 weight
    stored = sum(loaded.tensors["diffusion_model/" + n[len("model.diffusion_model.") :]].nbytes for n in fp8)
    assert ex.fp8_stored_bytes == stored and ex.fp8_upcast_bytes == 2 * stored
    cast = casts[0]
    assert cast.memory_bytes == 3 * cast.params["numel"]  # the stored byte and its bf16 copy
    assert any("4096 image tokens" in n and "512 text tokens" in n for n in ex.notes)
    small = extract_model(
        loaded.tensors, loaded.config, tokens=(1,), components=loaded.components, resolution=(512, 768)
    )
    img_in = [w for w in small.workloads if w.kind == "linear" and w.params["in_features"] == flux_dims()["in"]]
    assert [w.params["tokens"] for w in img_in] == [(512 // 16) * (768 // 16)]


def test_no_fp8_weight_is_measured_as_an_fp8_linear(tmp_path: Path):
    """F8_E4M3 weights are measured as they run (bf16 after upcast, or scaled_mm), never as an FP8 F.linear."""
    loaded = load_model(
        write_st(tmp_path / "flux-transformer-fp8.safetensors", flux_keys(double=1, single=1), "F8_E4M3")
    )
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components)
    assert not [w for w in ex.workloads if w.kind in ("linear", "conv", "grouped_mm") and w.dtype == "fp8"]


def wan_dit_keys(dim: int = 1536, ffn: int = 8960, in_dim: int = 16, layers: int = 2) -> dict[str, tuple[int, ...]]:
    """Wan 2.1 T2V 1.3B's key layout (Comfy-Org/Wan_2.1_ComfyUI_repackaged)."""
    k = {
        "patch_embedding.weight": (dim, in_dim, 1, 2, 2),
        "text_embedding.0.weight": (dim, 4096),
        "text_embedding.2.weight": (dim, dim),
        "time_embedding.0.weight": (dim, 256),
        "time_embedding.2.weight": (dim, dim),
        "time_projection.1.weight": (6 * dim, dim),
        "head.head.weight": (4 * in_dim, dim),
        "head.modulation": (1, 2, dim),
    }
    for i in range(layers):
        p = f"blocks.{i}."
        k |= {
            p + "self_attn.q.weight": (dim, dim),
            p + "self_attn.o.weight": (dim, dim),
            p + "cross_attn.q.weight": (dim, dim),
            p + "cross_attn.k.weight": (dim, dim),
            p + "cross_attn.v.weight": (dim, dim),
            p + "ffn.0.weight": (ffn, dim),
            p + "ffn.2.weight": (dim, ffn),
            p + "modulation": (1, 6, dim),
        }
    return k


def test_wan_repackaged_folder(tmp_path: Path):
    root = tmp_path / "Wan_2.1_ComfyUI_repackaged"
    write_st(root / "split_files" / "diffusion_models" / "wan2.1_t2v_1.3B_fp16.safetensors", wan_dit_keys(), "F16")
    write_st(
        root / "split_files" / "vae" / "wan_2.1_vae.safetensors", {"encoder.conv1.weight": (96, 3, 3, 3, 3)}, "F16"
    )
    write_st(
        root / "split_files" / "text_encoders" / "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        {"shared.weight": (256384, 4096), "encoder.block.0.layer.0.SelfAttention.q.weight": (4096, 4096)},
        "F8_E4M3",
    )
    loaded = load_model(root)
    assert loaded.format == "comfyui-repackaged"
    names = set(loaded.components or {})
    assert names == {
        "diffusion_model-wan2.1_t2v_1.3B_fp16",
        "vae-wan_2.1_vae",
        "text_encoder-umt5_xxl_fp8_e4m3fn_scaled",
    }
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1, 512), components=loaded.components)
    dit = {
        (w.params.get("in_features"), w.params.get("out_features"), w.params.get("tokens"))
        for w in ex.workloads
        if w.kind == "linear" and "diffusion_model-wan2.1_t2v_1.3B_fp16" in w.tags
    }
    video = 21 * (480 // 16) * (832 // 16)  # 81 frames at 832x480: 21 latent frames of 30x52 patches
    assert (1536, 8960, video) in dit and (1536, 1536, 1) in dit and (4096, 1536, 512) in dit
    te = [w for w in ex.workloads if "text_encoder-umt5_xxl_fp8_e4m3fn_scaled" in w.tags]
    assert {w.kind for w in te} >= {"embedding", "linear", "scaled_mm", "fp8_cast"} and not [
        w for w in te if w.role == "output-head"
    ]


def test_other_models_are_not_taken_for_comfyui(tmp_path: Path):
    shapes = {f"net.layers.{i}.fc.weight": (64, 64) for i in range(8)}
    loaded = load_model(write_st(tmp_path / "plain.safetensors", shapes))
    assert loaded.format == "safetensors" and loaded.components is None


@pytest.mark.parametrize("bad", [0, 17, (1024, -16), 10**6, True])
def test_bad_resolutions_are_one_line(tmp_path: Path, bad):
    loaded = load_model(write_st(tmp_path / "f.safetensors", flux_keys(double=1, single=1)))
    with pytest.raises(ModelFormatError, match="resolution"):
        extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components, resolution=bad)
