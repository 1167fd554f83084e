"""One size, one meaning: a video VAE's phases and its 3D convolutions run the same clip, with or without
--frames; a ComfyUI Wan VAE counts --frames as a Diffusers one does; a causal LM's output head is timed at the
token counts its prefill and decode run it at (the last position, one token), told from the config and the
weights' names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mpsup.model.extract import extract, extract_model
from mpsup.model.geometry import DEFAULT_VIDEO_FRAMES, latent_frames
from mpsup.model.load import load_model
from mpsup.model.safetensors_header import TensorInfo
from mpsup.model.sources import WholeModel, open_model
from mpsup.workloads import Workload
from tests.test_model_comfy import wan_dit_keys, write_st
from tests.tiny_models import WAN_VAE

CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "model-configs"
WAN22_VAE = CONFIGS / "wan2.2-ti2v-5b-vae__AutoencoderKLWan_z48__nvidia_Cosmos3-Edge__vae_config.json"
# Wan 2.1's VAE in its original names (ComfyUI's, Comfy-Org's repackaging): a few tensors of each kind.
WAN_VAE_NAMES = {
    "encoder.conv1.weight": (96, 3, 3, 3, 3),
    "encoder.middle.0.residual.2.weight": (384, 384, 3, 3, 3),
    "conv1.weight": (32, 32, 1, 1, 1),
    "conv2.weight": (16, 16, 1, 1, 1),
    "decoder.conv1.weight": (384, 16, 3, 3, 3),
    "decoder.middle.0.residual.0.gamma": (384, 1, 1, 1),
    "decoder.middle.0.residual.2.weight": (384, 384, 3, 3, 3),
    "decoder.head.2.weight": (3, 96, 3, 3, 3),
}


def conv3d_frames(workloads: list[Workload] | tuple[Workload, ...]) -> set[int]:
    """The frames every 3D convolution runs over, read from its input and its name alike."""
    out = set()
    for w in workloads:
        if w.kind == "conv" and len(w.params["input_shape"]) == 5:
            causal = 2 * (w.params["weight_shape"][-1] // 2) if w.params["padding"] == 0 else 0
            frames = w.params["input_shape"][2] - causal  # a causal conv's input carries its time padding
            assert re.search(rf"/{frames}f(/|$)", w.name), w.name
            out.add(frames)
    return out


def diffusers_wan_vae(root: Path, config: dict[str, Any]) -> Path:
    """A Diffusers pipeline holding only a Wan VAE, its weights saved by diffusers (random, tiny)."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")
    (root / "vae").mkdir(parents=True)
    (root / "model_index.json").write_text(
        json.dumps({"_class_name": "WanPipeline", "vae": ["diffusers", "AutoencoderKLWan"]})
    )
    diffusers.AutoencoderKLWan.from_config(config).save_pretrained(root / "vae")
    return root


@pytest.mark.parametrize("frames", [None, 9])
def test_a_video_vae_s_phases_decode_the_clip_its_3d_convolutions_run(tmp_path: Path, frames: int | None) -> None:
    """Without --frames the phases decode the same short clip whose latent frames the 3D convolutions run
    over; the worker's own probe of the VAE's time compression finds the latent count the layers took."""
    from mpsup.worker.device import Device
    from mpsup.worker.whole_model import build_phase

    path = diffusers_wan_vae(tmp_path / "wan", WAN_VAE)
    model = open_model(path, tokens=(1,), resolution=64, whole=WholeModel(frames=frames))
    phases = {w.params["phase"]: w for w in model.workloads if w.kind == "model_phase"}
    clip = frames or DEFAULT_VIDEO_FRAMES
    assert phases["vae_decode"].params["frames"] == phases["vae_encode"].params["frames"] == clip
    built = build_phase(phases["vae_decode"].spec(), Device("cpu"))
    latent = int((built.info or {})["latent"].split("x")[2])
    assert (built.info or {})["frames"] == clip and latent == latent_frames(clip, 2)
    assert conv3d_frames(model.workloads) == {latent}
    note = f"{clip} frames ({latent} latent)"
    assert any(note in n for n in model.doc["notes"]), model.doc["notes"]


def test_an_image_vae_beside_a_video_component_stays_one_image() -> None:
    """Only a component whose own weights hold 3D convolutions runs over frames."""
    from mpsup.model.phases import PhaseOptions, model_phases

    components = {"vae": {"_class_name": "AutoencoderKL"}, "transformer": {"_class_name": "WanTransformer3DModel"}}
    opts = PhaseOptions(tokens=8, resolution=(64, 64), video=frozenset({"transformer"}))
    phases = model_phases("diffusers", {}, components, "/p", opts).workloads
    assert [w.name for w in phases] == ["model/vae/vae_decode", "model/vae/vae_encode"]
    assert not [w for w in phases if "frames" in w.params]


@pytest.mark.parametrize(("frames", "latent"), [(None, 4), (81, 21), (17, 5)])
def test_a_comfyui_wan_vae_counts_frames_as_a_diffusers_one(tmp_path: Path, frames: int | None, latent: int) -> None:
    """--frames is the frames a user decodes, in every layout: Diffusers' Wan VAE (its config's time
    compression), ComfyUI's single file (the VAE under `vae.`, known by its names), a repackaged folder's
    vae/ file and the same file alone."""
    diffusers_cfg = json.loads(WAN22_VAE.read_text()) if WAN22_VAE.is_file() else {"_class_name": "AutoencoderKLWan"}
    tensors = {n: TensorInfo(n, "BF16", s, 0) for n, s in (("vae/decoder.conv_in.weight", (16, 4, 3, 3, 3)),)}
    diffusers = extract_model(tensors, None, tokens=(1,), components={"vae": diffusers_cfg}, frames=frames)
    comfy_file = {f"model.diffusion_model.{n}": s for n, s in wan_dit_keys(dim=64, ffn=128).items()}
    comfy_file |= {f"vae.{n}": s for n, s in WAN_VAE_NAMES.items()}
    write_st(tmp_path / "wan_all_in_one.safetensors", comfy_file)
    write_st(tmp_path / "repack" / "vae" / "wan_2.1_vae.safetensors", WAN_VAE_NAMES)
    write_st(tmp_path / "wan_2.1_vae.safetensors", WAN_VAE_NAMES)
    counted = {"diffusers": conv3d_frames(diffusers.workloads)}
    notes = []
    for name in ("wan_all_in_one.safetensors", "repack", "wan_2.1_vae.safetensors"):
        loaded = load_model(tmp_path / name)
        ex = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components, frames=frames)
        vae = [w for w in ex.workloads if w.kind == "conv" and "diffusion_model" not in w.name]
        counted[name] = conv3d_frames(vae)
        notes.append(ex.notes)
    assert counted == {key: {latent} for key in counted}
    assert all(any("a Wan VAE (by its tensor names), 4x in time" in n for n in said) for said in notes), notes


def test_3d_convolutions_without_a_known_vae_are_stated_as_taken() -> None:
    """3D weights no name or config places are taken as a video VAE's (their convolutions already run as a
    causal one's), and the note says so rather than calling them Wan's."""
    ex = extract_model(
        {"net.conv.weight": TensorInfo("net.conv.weight", "BF16", (8, 8, 3, 3, 3), 0)}, None, tokens=(1,), frames=81
    )
    assert conv3d_frames(ex.workloads) == {21}
    assert ex.notes == ["the model: 3D convolutions taken as a video VAE's, 4x in time: 81 frames (21 latent)"]


def llama_tensors(tied: bool = False) -> dict[str, TensorInfo]:
    shapes = {"model.embed_tokens.weight": (1000, 64), "model.layers.0.mlp.up_proj.weight": (128, 64)}
    if not tied:
        shapes["lm_head.weight"] = (1000, 64)
    return {n: TensorInfo(n, "BF16", s, 0) for n, s in shapes.items()}


def head_tokens(workloads: list[Workload] | tuple[Workload, ...]) -> set[int]:
    return {w.params["tokens"] for w in workloads if w.role == "output-head"}


@pytest.mark.parametrize("tied", [False, True])
def test_a_causal_lm_s_head_is_timed_on_the_last_position_only(tmp_path: Path, tied: bool) -> None:
    """Prefill keeps the last position's logits and decode has one token: no phase runs the head over the
    prompt, so neither does its layer workload; the other linears still run at every --tokens size."""
    folder = tmp_path / "llama"
    folder.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": tied}
    (folder / "config.json").write_text(json.dumps(config))
    write_st(folder / "model.safetensors", {n: t.shape for n, t in llama_tensors(tied).items()})
    model = open_model(folder, tokens=(1, 512), whole=WholeModel())
    prefill = next(w for w in model.workloads if w.params.get("phase") == "prefill")
    assert prefill.params["causal"] and prefill.params["tokens"] == 512
    assert head_tokens(model.workloads) == {1}
    assert {w.params["tokens"] for w in model.workloads if w.role == "mlp"} == {1, 512}
    assert any("output head over 1 token" in n for n in model.doc["notes"])


@pytest.mark.parametrize(
    ("config", "names", "expected"),
    [
        ({"architectures": ["BertForMaskedLM"]}, {}, {1, 512}),  # a masked LM's head sees every token
        ({}, {}, {1, 512}),  # no config naming the architecture: nothing says it generates
        ({}, {"token_embd.weight": (1000, 64), "output.weight": (1000, 64)}, {1}),  # llama.cpp's LM names
    ],
)
def test_the_head_s_token_counts_come_from_the_config_and_the_names(
    config: dict[str, Any], names: dict[str, tuple[int, ...]], expected: set[int]
) -> None:
    tensors = {n: TensorInfo(n, "BF16", s, 0) for n, s in names.items()} or llama_tensors()
    ex = extract(tensors, config, tokens=(1, 512))
    assert head_tokens(ex.workloads) == expected
