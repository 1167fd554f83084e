"""How big a checkpoint's activations are, from its names, its config and the stated sizes: the latent pixels
of each convolution's level, the latent frames of a video VAE's 3D convolutions, and the token count each
linear of a UNet or DiT runs over, with the note that states what was assumed (`extract_model` applies them
component by component)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mpsup.model.comfy import ARCHITECTURE_KEY
from mpsup.model.config import MAX_LEVELS, UNET_CLASSES, VAE_CLASSES, ModelConfig, model_config, vae_patch
from mpsup.model.geometry import (
    DEFAULT_VIDEO_FRAMES,
    VAE_FACTOR,
    WAN_TIME_FACTOR,
    geometry,
    latent_frames,
    token_rule,
)
from mpsup.model.safetensors_header import TensorInfo

# Activation sizes for convolutions: the config's sample_size (latent pixels) halves at each down block and
# doubles back up, 64 latent pixels without one; a 3D convolution runs over the latent frames of a video's
# frames (the stated ones, else geometry.DEFAULT_VIDEO_FRAMES).
DEFAULT_RESOLUTION = 64
MAX_TIME_FACTOR = 64  # far above any video VAE's; a config asking more is not taken at its word
DEFAULT_LEVELS = 4


def conv_frames(cfg: ModelConfig) -> int:
    """The latent frames a 3D convolution runs over: the video's frames (stated, else the default clip)
    compressed by the VAE's time factor."""
    return latent_frames(cfg.frames or DEFAULT_VIDEO_FRAMES, cfg.time_factor or WAN_TIME_FACTOR)


# Original (LDM/SGM) names, as ComfyUI files keep them: a UNet's input_blocks run three to a level (two res
# blocks and a downsample), output_blocks three to a level from the lowest up; a VAE's encoder.down.N and
# decoder.up.N are both indexed by level, the decoder starting from the lowest (its conv_in and the quant convs).
LDM_LEVEL = re.compile(r"^(input_blocks|output_blocks|encoder\.down|decoder\.up)\.(\d+)\.")
LDM_LOWEST = re.compile(
    r"^(middle_block\.|decoder\.conv_in\.|decoder\.mid\.|encoder\.mid\.|quant_conv\.|post_quant_conv\.)"
)


def _ldm_level(name: str, levels: int) -> int | None:
    m = LDM_LEVEL.match(name)
    if m:
        i = int(m.group(2))
        return {"input_blocks": i // 3, "output_blocks": levels - 1 - i // 3}.get(m.group(1), i)
    return levels - 1 if LDM_LOWEST.match(name) else None


# An upsampler's convolution runs after its 2x interpolation, at the size of the level above its block:
# Diffusers' `up_blocks.N.upsamplers.0.conv`, an LDM VAE's `decoder.up.N.upsample.conv`, an LDM UNet's
# `output_blocks.N.{1,2}.conv` (the Upsample module after a res block, and an attention block where present),
# a Wan VAE decoder's `up_blocks.N.upsampler.resample.1` (its upsample, then this conv).
AFTER_UPSAMPLE = re.compile(
    r"(\.upsamplers\.\d+\.conv\.|\.upsample\.conv\.|^output_blocks\.\d+\.[12]\.conv\.|\.upsampler\.resample\.1\.)"
)


def conv_resolution(name: str, cfg: ModelConfig) -> int:
    base = cfg.sample_size or DEFAULT_RESOLUTION
    levels = cfg.levels or DEFAULT_LEVELS
    ldm = _ldm_level(name, levels)
    depth = max(0, min(ldm, levels - 1)) if ldm is not None else _diffusers_depth(name, levels)
    if depth is None:
        return base
    if AFTER_UPSAMPLE.search(name):
        depth = max(0, depth - 1)
    return max(4, base >> depth)


# Diffusers names: down blocks from the top level down, up blocks from the lowest up (a UNet's and a VAE
# decoder's alike), the mid block and a VAE's latent-side convolutions at the lowest level.
DIFFUSERS_LEVEL = re.compile(r"(down_blocks|downsamples|up_blocks|upsamples)\.(\d+)")
DIFFUSERS_LOWEST = re.compile(r"(mid|^encoder\.conv_out\.|^encoder\.conv_norm_out\.)")


def _diffusers_depth(name: str, levels: int) -> int | None:
    """How many levels below the top this weight runs (0: full size); None: a name at no level (the top)."""
    m = DIFFUSERS_LEVEL.search(name)
    if m:
        i = int(m.group(2))
        depth = i if m.group(1).startswith("down") else levels - 1 - i
        return max(0, min(depth, levels - 1))
    return levels - 1 if DIFFUSERS_LOWEST.search(name) else None


LDM_TEXT_TOKENS = 77  # CLIP's context length, SD1.x to SDXL
LDM_VECTOR = re.compile(r"(^time_embed\.|^label_emb\.|\.emb_layers\.)")
LDM_CONTEXT = re.compile(r"\.attn2\.(to_k|to_v)\.")


def _unet_tokens(
    latent: int, levels: int, vector: re.Pattern[str], depth_of: Callable[[str, int], int | None]
) -> Callable[[str], int]:
    """A UNet's linears: the timestep (and SDXL's added) embeddings, named by `vector`, on one vector,
    cross-attention keys/values on the prompt, the rest (projections, self-attention, feed-forward) on every
    latent pixel of their level, which `depth_of` reads from the name (LDM's names or Diffusers')."""

    def rule(name: str) -> int:
        if vector.search(name):
            return 1
        if LDM_CONTEXT.search(name):
            return LDM_TEXT_TOKENS
        side = max(1, latent >> max(0, min(depth_of(name, levels) or 0, levels - 1)))
        return side * side

    return rule


DIFFUSERS_VECTOR = re.compile(r"(^time_embedding\.|^add_embedding\.|^class_embedding\.|\.time_emb_proj\.)")


def diffusers_plan(
    config: dict[str, Any],
    resolution: tuple[int, int],
    vae_factor: int,
    component: str,
    frames: int | None = None,
    video: bool = False,
) -> tuple[ModelConfig, Callable[[str], int], str] | None:
    """A Diffusers UNet or VAE (its own config.json) at this image size: the convolutions' sizes and the
    linears' token counts a forward at that size runs, and the statement of both; None for other classes.
    `video`: a VAE with 3D convolutions, run over `frames` (bench --frames; None: the default clip) as its
    3D convolutions see them once compressed in time."""
    cls = str(config.get("_class_name", ""))
    unet = cls in UNET_CLASSES
    if not unet and not cls.startswith(VAE_CLASSES):
        return None
    source = f"{component}/config.json"
    cfg = model_config(config, source)
    levels = cfg.levels or DEFAULT_LEVELS
    width, height = resolution
    # The UNet runs on latents (the image divided by the VAE factor), the VAE from the image itself, or
    # from its patches where it first folds pixels into channels (Wan 2.2's VAE: 2x2, 16x in all).
    size = max(4, min(width, height) // (vae_factor if unet else vae_patch(config, source)))
    if unet:
        rule = _unet_tokens(size, levels, DIFFUSERS_VECTOR, _diffusers_depth)
        what = f"latent {size}px, attention over {size * size} latent tokens at the top level"
        what += f", {LDM_TEXT_TOKENS} text tokens"
    else:
        lowest = max(1, size >> (levels - 1))
        rule = lambda _name: lowest * lowest  # noqa: E731  (a VAE's only linears: its mid-block attention)
        what = f"convolutions from {size}px, mid-block attention over {lowest * lowest} tokens"
    # Layers are sized square, at the shorter side: what a non-square image's extra pixels add is not counted.
    square = "" if width == height else f" (layers at {min(width, height)}px square)"
    note = f"{component}: {cls} at {width}x{height}{square}: {what}, {levels} levels"
    if video and not unet:
        cfg = replace(cfg, frames=frames or cfg.frames, time_factor=_time_factor(config))
        note += f", {frames_note(cfg)}"
    return replace(cfg, sample_size=size, levels=levels, tie_word_embeddings=False), rule, note


def frames_note(cfg: ModelConfig) -> str:
    """The frames a video VAE's phases decode and its 3D convolutions' latent frames, as the notes state them."""
    frames = cfg.frames or DEFAULT_VIDEO_FRAMES
    latent = conv_frames(cfg)
    clip = "" if cfg.frames else ", a short clip (--frames sets another)"
    return f"{frames} frames ({latent} latent){clip}"


def video_plan(
    cfg: ModelConfig, doc: dict[str, Any] | None, arch: str | None, frames: int | None, what: str
) -> tuple[ModelConfig, str]:
    """3D convolutions outside a Diffusers pipeline (a ComfyUI VAE, a bare file): a Wan VAE's, known by its names,
    compresses 4x in time, as does any other a config gives no factor for (its 3x3x3 convolutions already run
    as a causal video VAE's)."""
    factor = _time_factor(doc or {})
    cfg = replace(cfg, frames=frames or cfg.frames, time_factor=factor)
    who = "a Wan VAE (by its tensor names)" if arch == "wan-vae" else "3D convolutions taken as a video VAE's"
    return cfg, f"{what}: {who}, {factor}x in time: {frames_note(cfg)}"


def _time_factor(config: dict[str, Any]) -> int:
    """A video VAE's compression in time, from its config, as the whole-model phase's probe finds it: a Wan
    VAE's halvings (`temperal_downsample`, which its `scale_factor_temporal` only restates), else
    scale_factor_temporal or temporal_compression_ratio (CogVideoX, LTX, HunyuanVideo), else Wan's 4."""
    halvings = config.get("temperal_downsample")
    if isinstance(halvings, list) and 0 < len(halvings) <= MAX_LEVELS and all(isinstance(h, bool) for h in halvings):
        return int(2 ** sum(halvings))
    for key in ("scale_factor_temporal", "temporal_compression_ratio"):
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_TIME_FACTOR:
            return v
    return WAN_TIME_FACTOR


def has_3d(tensors: dict[str, TensorInfo]) -> bool:
    """Whether the weights hold a 3D convolution: a video VAE's, run over frames."""
    return any(len(t.shape) == 5 for t in tensors.values())


def video_components(tensors: dict[str, TensorInfo]) -> frozenset[str]:
    """A pipeline's components (`vae/...` tensors) whose weights hold 3D convolutions: their phases run over
    frames as their layers do."""
    return frozenset(n.split("/", 1)[0] for n, t in tensors.items() if "/" in n and len(t.shape) == 5)


def _ldm_levels(tensors: dict[str, TensorInfo], arch: str) -> int:
    """Levels of an LDM UNet (three input blocks each) or VAE (one encoder.down.N each), from the names."""
    pattern = r"^input_blocks\.(\d{1,6})\." if arch == "ldm-unet" else r"^encoder\.down\.(\d{1,6})\."
    per_level = 3 if arch == "ldm-unet" else 1
    # A block index past MAX_LEVELS levels is no level of a real UNet or VAE: it is left out, as a name mpsup does
    # not place, so that a crafted index never becomes the level count.
    found = [i for n in tensors if (m := re.match(pattern, n)) and (i := int(m.group(1))) // per_level < MAX_LEVELS]
    if not found:
        return DEFAULT_LEVELS
    return max(found) // per_level + 1


def component_plan(
    part: dict[str, TensorInfo],
    config: dict[str, Any],
    resolution: int | tuple[int, int] | None,
    component: str,
    frames: int | None = None,
) -> tuple[dict[str, Any] | ModelConfig, Callable[[str], int] | None, str | None]:
    """A ComfyUI component (its config synthesized with the architecture at load) -> the config extraction
    uses at this resolution, the DiT token rule, and the statement of what was assumed. `frames`: a video
    VAE's (bench --frames), counted as a Diffusers VAE's are."""
    arch = config.get(ARCHITECTURE_KEY) if isinstance(config, dict) else None
    if arch == "wan-vae" or (arch is None and not config.get("_class_name") and has_3d(part)):
        cfg, note = video_plan(model_config(config, component), config, arch, frames, component)
        return cfg, None, note
    if not isinstance(arch, str):
        return config, None, None
    cfg = model_config(config, component)
    g = geometry(arch, part, resolution, cfg.frames)
    if arch in ("ldm-unet", "ldm-vae"):
        levels = _ldm_levels(part, arch)
        side = min(g.width, g.height)
        size = side if arch == "ldm-vae" else side // VAE_FACTOR
        note = f"{component}: {arch} at {g.width}x{g.height}: convolutions from {size}px over {levels} levels"
        rule = _unet_tokens(size, levels, LDM_VECTOR, _ldm_level) if arch == "ldm-unet" else None
        if rule:
            note += f"; attention over {size * size} latent tokens at the top level, {LDM_TEXT_TOKENS} text tokens"
        return ModelConfig(top_k=cfg.top_k, tie_word_embeddings=False, sample_size=size, levels=levels), rule, note
    return cfg, token_rule(g), f"{component}: {g.describe()}"
