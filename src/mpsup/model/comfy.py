"""ComfyUI checkpoints: one file holding the diffusion model, the VAE and the text encoders, split by
ComfyUI's own key prefixes, and the architecture of the diffusion model told by ComfyUI's markers.

The prefixes and markers follow ComfyUI (Comfy-Org/ComfyUI): `comfy/model_detection.py`
(`unet_prefix_from_state_dict`: `model.diffusion_model.` for LDM/SGM files, `model.model.` for audio
models, `net.` for Cosmos, each needing more than five keys; the Flux marker
`double_blocks.0.img_attn.norm.key_norm.scale` with `img_in.weight`; Wan's `head.modulation`; SD3's
`joint_blocks.0.context_block.attn.qkv.weight`; the LDM UNet's `input_blocks.`) and
`comfy/supported_models_base.py` / `supported_models.py` (`first_stage_model.` or `vae.` for the VAE;
`cond_stage_model.`, `conditioner.embedders.N.`, `text_encoders.` or `text_encoder.` for text encoders) and
`comfy/sd.py` (the Wan VAE, 2.1 and 2.2 alike, by `decoder.middle.0.residual.0.gamma`).
Nothing here is ComfyUI's code: only the names it documents by using them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mpsup.model.safetensors_header import TensorInfo

DIFFUSION_PREFIXES = ("model.diffusion_model.", "model.model.", "net.")
MIN_DIFFUSION_KEYS = 6  # ComfyUI takes a prefix only when more than five keys carry it
VAE_PREFIXES = ("first_stage_model.", "vae.")
TEXT_PREFIX = re.compile(r"^(cond_stage_model\.|conditioner\.embedders\.(\d+)\.|text_encoders\.|text_encoder\.)")
ARCHITECTURE_KEY = (
    "_mpsup_architecture"  # set in a component's synthesized config; underscore keys are metadata, as in Diffusers
)


@dataclass(frozen=True)
class Component:
    name: str
    tensors: dict[str, TensorInfo]
    architecture: str | None


def diffusion_prefix(names: list[str]) -> str | None:
    counts = {p: sum(1 for n in names if n.startswith(p)) for p in DIFFUSION_PREFIXES}
    top = max(counts, key=lambda p: counts[p])
    return top if counts[top] >= MIN_DIFFUSION_KEYS else None


def architecture(names: set[str], prefix: str = "") -> str | None:
    """The diffusion model's architecture from ComfyUI's markers, or None when none matches."""

    def has(key: str) -> bool:
        return prefix + key in names

    if has("double_blocks.0.img_attn.norm.key_norm.scale") and has("img_in.weight"):
        return "flux"
    if has("head.modulation"):
        return "wan"
    if has("joint_blocks.0.context_block.attn.qkv.weight"):
        return "sd3"
    if has("input_blocks.0.0.weight"):
        return "ldm-unet"
    return None


def is_ldm_vae(names: set[str], prefix: str = "") -> bool:
    return prefix + "encoder.conv_in.weight" in names or prefix + "decoder.conv_in.weight" in names


WAN_VAE_MARKER = "decoder.middle.0.residual.0.gamma"


def vae_architecture(names: set[str], prefix: str = "") -> str | None:
    """A VAE's architecture from its names: the Wan VAE's (a causal video VAE, 4x in time) or the LDM one's."""
    if prefix + WAN_VAE_MARKER in names:
        return "wan-vae"
    return "ldm-vae" if is_ldm_vae(names, prefix) else None


def _strip(tensors: dict[str, TensorInfo], prefix: str) -> dict[str, TensorInfo]:
    return {n[len(prefix) :]: t for n, t in tensors.items() if n.startswith(prefix)}


def split(tensors: dict[str, TensorInfo]) -> list[Component] | None:
    """The components of a ComfyUI file, or None when it is not one. A file with a diffusion-model prefix is
    split; so is a repackaged diffusion model or VAE saved bare (no prefix; told by its markers). Tensors
    under no known prefix form an `other` component, so every workload belongs to some component."""
    names = list(tensors)
    prefix = diffusion_prefix(names)
    if prefix is None:
        arch = architecture(set(names))
        if arch in ("flux", "wan", "sd3"):
            return [Component("diffusion_model", dict(tensors), arch)]
        return None
    parts: dict[str, dict[str, TensorInfo]] = {}
    for name, t in tensors.items():
        if name.startswith(prefix):
            component, short = "diffusion_model", name[len(prefix) :]
        elif vae := next((p for p in VAE_PREFIXES if name.startswith(p)), None):
            component, short = "vae", name[len(vae) :]
        elif m := TEXT_PREFIX.match(name):
            component = f"text_encoder_{m.group(2)}" if m.group(2) is not None else "text_encoder"
            short = name[m.end() :]
        else:
            component, short = "other", name
        parts.setdefault(component, {})[short] = t
    arch = architecture(set(parts["diffusion_model"]))
    if prefix != DIFFUSION_PREFIXES[0] and arch is None and set(parts) <= {"diffusion_model", "other"}:
        return None  # `net.` or `model.model.` alone, with nothing else of a checkpoint: some other model's names
    return [
        Component(c, ts, arch if c == "diffusion_model" else (vae_architecture(set(ts)) if c == "vae" else None))
        for c, ts in sorted(parts.items())
    ]


def component_for(kind: str, tensors: dict[str, TensorInfo]) -> Component:
    """One file of a repackaged layout (diffusion_models/, vae/, text_encoders/), its architecture told by names."""
    names = set(tensors)
    arch = architecture(names) if kind == "diffusion_model" else vae_architecture(names) if kind == "vae" else None
    return Component(kind, tensors, arch)


def repackaged_kind(folder_name: str) -> str | None:
    """ComfyUI's models/ folders (and Comfy-Org's `split_files/` repackagings) name what each file is."""
    return {
        "diffusion_models": "diffusion_model",
        "unet": "diffusion_model",
        "vae": "vae",
        "text_encoders": "text_encoder",
        "clip": "text_encoder",
        "checkpoints": None,
    }.get(folder_name)
