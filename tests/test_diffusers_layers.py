"""A Diffusers pipeline's layers are sized as the run they explain: --resolution moves the UNet's and the VAE's
convolutions and attention together with the whole-model phases, and a feed-forward inside an attention block
is counted as an MLP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("diffusers", reason="diffusers is in the test extra")

from mpsup.model.config import pipeline_resolution
from mpsup.model.extract import extract
from mpsup.model.safetensors_header import ModelFormatError, TensorInfo
from mpsup.model.sources import WholeModel, open_model
from tests.tiny_models import UNET, VAE


def _pipeline(root: Path, unet: dict[str, Any]) -> Path:
    import diffusers

    for name, cfg in (("vae", VAE), ("unet", unet)):
        cls = getattr(diffusers, cfg["_class_name"])
        cls.from_config({k: v for k, v in cfg.items() if k != "_class_name"}).save_pretrained(root / name)
    index = {"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]}
    (root / "model_index.json").write_text(json.dumps({**index, "unet": ["diffusers", "UNet2DConditionModel"]}))
    return root


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # latent 8px; the VAE's two levels halve the image once, so the pipeline is made for 16x16 images
    return _pipeline(tmp_path_factory.mktemp("pipe"), {**UNET, "sample_size": 8})


def _opened(pipe: Path, resolution: int | None) -> dict[str, Any]:
    m = open_model(pipe, tokens=(1,), resolution=resolution, whole=WholeModel(run=True))
    return {w.name: w for w in m.workloads}


def _conv_sides(items: dict[str, Any], component: str) -> set[int]:
    return {w.params["input_shape"][-1] for n, w in items.items() if n.startswith(f"model/{component}/conv2d/")}


def _tokens(items: dict[str, Any], component: str) -> set[int]:
    return {w.params["tokens"] for n, w in items.items() if n.startswith(f"model/{component}/linear/")}


def test_resolution_sizes_the_unet_and_vae_layers_with_the_phases(pipe: Path) -> None:
    default, big = _opened(pipe, None), _opened(pipe, 64)
    # the phases and the layers describe one image size: the pipeline's own by default, else --resolution
    assert default["model/unet/step"].params["resolution"] == [16, 16]
    assert big["model/unet/step"].params["resolution"] == [64, 64]
    assert big["model/vae/vae_decode"].params["resolution"] == [64, 64]
    # UNet on latents (image / 2 here): 8 and 4 px by default, 32 and 16 px at 64x64
    assert _conv_sides(default, "unet") == {8, 4}
    assert _conv_sides(big, "unet") == {32, 16}
    # the VAE from the image itself down to its latent
    assert _conv_sides(default, "vae") == {16, 8}
    assert _conv_sides(big, "vae") == {64, 32}
    # self-attention runs over every latent pixel of its level; cross-attention keys over the prompt; the
    # timestep MLP on one vector; the VAE's mid-block attention over its latent
    assert _tokens(big, "unet") == {32 * 32, 16 * 16, 77, 1}
    assert _tokens(default, "unet") == {8 * 8, 4 * 4, 77, 1}
    assert _tokens(big, "vae") == {32 * 32}


def test_a_feed_forward_in_an_attention_block_is_an_mlp(pipe: Path) -> None:
    items = _opened(pipe, 64)
    # block 0's transformer: width 8, GEGLU feed-forward 8 -> 2x32 and 32 -> 8, over 32x32 latent tokens
    assert items["model/unet/linear/8x64/t1024"].role == "mlp"
    assert items["model/unet/linear/32x8/t1024"].role == "mlp"
    assert items["model/unet/linear/8x8/t1024"].role == "attention"
    tensors = {
        "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight": TensorInfo("a", "F32", (64, 8), 2048),
        "transformer_blocks.0.ff_context.net.2.weight": TensorInfo("b", "F32", (8, 32), 1024),
        "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight": TensorInfo("c", "F32", (8, 8), 256),
    }
    assert sorted(w.role for w in extract(tensors, {}, tokens=(1,)).workloads) == ["attention", "mlp", "mlp"]


def test_the_pipeline_resolution_comes_from_its_configs() -> None:
    vae = {"_class_name": "AutoencoderKL", "block_out_channels": [128, 256, 512, 512], "sample_size": 768}
    sdxl_unet = {"_class_name": "UNet2DConditionModel", "sample_size": 128}
    assert pipeline_resolution({"vae": vae, "unet": sdxl_unet}) == (1024, 1024)
    assert pipeline_resolution({"vae": vae}) == (768, 768)  # a VAE alone: its own image size
    assert pipeline_resolution({}) == (512, 512)
    assert pipeline_resolution({"unet": {"_class_name": "UNet2DConditionModel", "sample_size": 9}}) == (64, 64)
    with pytest.raises(ModelFormatError, match=r"vae/config\.json.*block_out_channels"):
        pipeline_resolution({"vae": {**vae, "block_out_channels": 5}, "unet": sdxl_unet})


def test_a_patching_vae_starts_from_its_patches() -> None:
    """Wan 2.2's VAE folds 2x2 pixels into channels before its first convolution: at 96x96 its convolutions
    start at 48 px and its lowest level is 96 / 16 = 6 px."""
    from mpsup.model.extract import extract_model

    config = {"_class_name": "AutoencoderKLWan", "patch_size": 2, "dim_mult": [1, 2, 4, 4]}
    tensors = {
        "vae/encoder.conv1.weight": TensorInfo("a", "F32", (160, 12, 3, 3, 3), 4),
        "vae/encoder.down_blocks.3.resnets.0.conv1.weight": TensorInfo("b", "F32", (640, 640, 3, 3, 3), 4),
    }
    ex = extract_model(tensors, None, tokens=(1,), components={"vae": config}, resolution=96)
    # a causal conv3d is measured as its constant pad and the unpadded conv: the pad holds the level's size
    sides = sorted(w.params["shape"][-1] for w in ex.workloads if w.kind == "pad")
    assert sides == [6, 48], ex.workloads
    assert any("AutoencoderKLWan at 96x96: convolutions from 48px" in n for n in ex.notes), ex.notes


def test_frames_size_a_video_vae_s_3d_convolutions_as_its_phases() -> None:
    """bench --frames: 81 frames are 21 once Wan's VAE compresses them 4x in time (its config may say another
    factor); another frame count is another workload name, so two runs at 81 and 9 frames never pair."""
    from mpsup.model.extract import extract_model

    config = {"_class_name": "AutoencoderKLWan", "dim_mult": [1, 2]}
    tensors = {"vae/decoder.conv_in.weight": TensorInfo("a", "F32", (32, 16, 3, 3, 3), 4)}

    def convs(frames: int | None, cfg: dict = config) -> dict[str, list[int]]:
        ex = extract_model(tensors, None, tokens=(1,), components={"vae": cfg}, resolution=64, frames=frames)
        return {w.name: w.params.get("input_shape") or w.params["shape"] for w in ex.workloads}

    at_81 = convs(81)
    (conv,) = [n for n in at_81 if "conv3d" in n]
    assert conv.endswith("/21f") and at_81[conv][2] == 21 + 2  # the causal pad adds two frames
    assert [n for n in convs(9) if "conv3d" in n] == [conv.replace("/21f", "/3f")]
    assert [n for n in convs(None) if "conv3d" in n] == [conv.replace("/21f", "/4f")]  # four latent frames
    assert next(n for n in convs(81, {**config, "scale_factor_temporal": 8}) if "conv3d" in n).endswith("/11f")
    ex = extract_model(tensors, None, tokens=(1,), components={"vae": config}, resolution=64, frames=81)
    assert any(n.endswith(", 81 frames (21 latent)") for n in ex.notes), ex.notes
    image = {"vae/decoder.conv_in.weight": TensorInfo("a", "F32", (32, 16, 3, 3), 4)}
    flat = extract_model(image, None, tokens=(1,), components={"vae": config}, resolution=64, frames=81)
    assert not any("frames" in n for n in flat.notes)  # an image VAE has no frames to size


def test_a_pipeline_without_a_vae_and_odd_configs() -> None:
    from mpsup.model.config import pipeline_vae_factor
    from mpsup.model.extract import extract_model

    ddpm = {"unet": {"_class_name": "UNet2DModel", "sample_size": 256}}
    assert pipeline_vae_factor(ddpm) == 1 and pipeline_resolution(ddpm) == (256, 256)  # pixels, no VAE
    assert pipeline_vae_factor({"unet": {"_class_name": "UNet2DConditionModel"}}) == 8  # latents regardless
    vq = {"_class_name": "VQModel", "block_out_channels": [128, 256, 512]}
    assert pipeline_vae_factor({"vqvae": vq, "unet": {"_class_name": "UNet2DModel", "sample_size": 64}}) == 4
    # a downloaded config's size is a default, capped: 2048 latent x 8 would set a 16384-px decode running
    assert pipeline_resolution({"unet": {"_class_name": "UNet2DConditionModel", "sample_size": 2048}}) == (2048, 2048)
    vae = {"_class_name": "AutoencoderKLWan", "patch_size": "2", "dim_mult": [1, 2]}
    tensors = {"vae/encoder.conv1.weight": TensorInfo("a", "F32", (8, 3, 3, 3), 4)}
    with pytest.raises(ModelFormatError, match=r"vae/config\.json.*patch_size"):
        extract_model(tensors, None, tokens=(1,), components={"vae": vae}, resolution=64)
    ex = extract_model(tensors, None, tokens=(1,), components={"vae": {**vae, "patch_size": 1}}, resolution=(96, 64))
    assert any("at 96x64 (layers at 64px square)" in n for n in ex.notes), ex.notes


def test_an_upsampler_s_convolution_runs_at_the_size_it_upsampled_to() -> None:
    """Its 2x interpolation comes first: at the lowest level's size it was counted at a quarter of its pixels."""
    from mpsup.model.extract import extract

    cfg = {"sample_size": 64, "block_out_channels": [8, 16, 32]}  # 64, 32 and 16 px
    shapes = {
        "up_blocks.0.upsamplers.0.conv.weight": (32, 32, 3, 3),  # lowest block (16 px) upsampling to 32
        "up_blocks.0.resnets.0.conv1.weight": (32, 48, 3, 3),  # the same block's res conv, at 16
        "decoder.up.2.upsample.conv.weight": (16, 16, 3, 3),  # an LDM VAE decoder, level 2 (16 px) up to 32
        "output_blocks.2.1.conv.weight": (8, 8, 3, 3),  # an LDM UNet's Upsample after the lowest level's blocks
        "decoder.up_blocks.0.upsampler.resample.1.weight": (24, 24, 3, 3),  # a Wan VAE decoder's, 16 px up to 32
    }
    tensors = {n: TensorInfo(n, "F32", s, 4) for n, s in shapes.items()}
    sides = {w.params["weight_shape"][1]: w.params["input_shape"][-1] for w in extract(tensors, cfg).workloads}
    assert sides == {32: 32, 48: 16, 16: 32, 8: 32, 24: 32}, sides
