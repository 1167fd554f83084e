"""Activation sizes of a diffusion model from its architecture and the image (or video) resolution.

A DiT at 1024x1024 runs every linear over thousands of image tokens, and its text stream over the
prompt's tokens: the LLM path's decode/prefill sizes (1, 512 tokens) say nothing about it. Here each
weight gets the token count it really sees, stated with the resolution it assumes:

- Flux: VAE /8, 2x2 patches -> (H/16)(W/16) image tokens; 512 T5 tokens (Flux dev's max_sequence_length);
  `img_*` layers see image tokens, `txt_*` text tokens, single blocks both, modulations one vector.
- SD3 (MMDiT): the same patching; 333 text tokens (77 CLIP + 256 T5).
- Wan 2.1/2.2: VAE /8 in space (/16 for Wan 2.2's 48-channel VAE), /4 in time (+1 frame), 1x2x2 patches;
  512 umT5 tokens for cross-attention keys and values, 257 CLIP image tokens for the i2v image embedder.
- LDM UNets (SD1.x/2.x/SDXL) and VAEs: convolutions at the latent (or pixel) size of each level.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mpsup.model.safetensors_header import ModelFormatError, TensorInfo

# Default (width, height, frames) per architecture: what each is usually run at.
DEFAULTS = {
    "flux": (1024, 1024, 1),
    "sd3": (1024, 1024, 1),
    "wan": (832, 480, 81),
    "ldm-unet": (512, 512, 1),
    "ldm-vae": (512, 512, 1),
}
TEXT_TOKENS = {"flux": 512, "sd3": 333, "wan": 512}
CLIP_IMAGE_TOKENS = 257
MAX_PIXELS = 16384
VAE_FACTOR = 8
PATCH = 2
WAN_TIME_FACTOR = 4
# Without --frames a video VAE runs a short clip, in its phases and its 3D convolutions alike: 13 frames, 4 latent
# at a 4x time compression, enough for the causal cache to carry over between chunks at a few images' cost.
DEFAULT_VIDEO_FRAMES = 13
WAN22_VAE_CHANNELS = 48  # Wan 2.2 TI2V-5B's VAE compresses 16x in space


@dataclass(frozen=True)
class Geometry:
    architecture: str
    width: int
    height: int
    frames: int
    image_tokens: int
    text_tokens: int

    def describe(self) -> str:
        video = f"x{self.frames} frames" if self.frames > 1 else ""
        return (
            f"{self.architecture} at {self.width}x{self.height}{video}: {self.image_tokens} image tokens, "
            f"{self.text_tokens} text tokens"
        )


def latent_frames(frames: int, time_factor: int = WAN_TIME_FACTOR) -> int:
    """Frames a causal video VAE leaves: the first kept, the rest compressed in time (Wan: 1 + 4k -> 1 + k)."""
    return (frames - 1) // time_factor + 1


def check_resolution(resolution: int | tuple[int, int] | None) -> tuple[int, int] | None:
    if resolution is None:
        return None
    w, h = (resolution, resolution) if isinstance(resolution, int) else resolution
    if not all(
        isinstance(x, int) and not isinstance(x, bool) and 16 <= x <= MAX_PIXELS and x % 16 == 0 for x in (w, h)
    ):
        raise ModelFormatError(f"resolution {resolution!r}: expected pixels, a multiple of 16 from 16 to {MAX_PIXELS}")
    return w, h


def _wan_spatial_factor(tensors: dict[str, TensorInfo]) -> int:
    patch = tensors.get("patch_embedding.weight")
    in_dim = patch.shape[1] if patch is not None and len(patch.shape) >= 2 else 16
    return 16 if in_dim == WAN22_VAE_CHANNELS else VAE_FACTOR


def geometry(
    arch: str, tensors: dict[str, TensorInfo], resolution: int | tuple[int, int] | None, frames: int | None = None
) -> Geometry:
    dw, dh, dframes = DEFAULTS.get(arch, (1024, 1024, 1))
    w, h = check_resolution(resolution) or (dw, dh)
    n_frames = frames or dframes
    if arch == "wan":
        f = _wan_spatial_factor(tensors) * PATCH
        image = latent_frames(n_frames) * (h // f) * (w // f)
    else:
        image = (h // (VAE_FACTOR * PATCH)) * (w // (VAE_FACTOR * PATCH))
    return Geometry(arch, w, h, n_frames, image, TEXT_TOKENS.get(arch, 0))


# Which token stream each DiT weight's matmul runs over, by its name in the original checkpoints: the
# first pattern that matches wins, and a weight no pattern names runs over the image tokens. These
# name a DiT's streams, not a layer's role: extract.py's tables (embedding, head, router, attention)
# classify any model's weights by what they are and share no pattern with these.
STREAMS: dict[str, tuple[tuple[re.Pattern[str], str], ...]] = {
    "flux": (
        (re.compile(r"(_mod\.|modulation|^time_in\.|^vector_in\.|^guidance_in\.)"), "vector"),
        (re.compile(r"(^txt_in\.|\.txt_attn\.|\.txt_mlp\.)"), "text"),
        (re.compile(r"^single_blocks\."), "image+text"),  # single blocks run over both streams joined
    ),
    "sd3": (
        (re.compile(r"(adaLN_modulation|^t_embedder\.|^y_embedder\.)"), "vector"),
        (re.compile(r"(\.context_block\.|^context_embedder\.)"), "text"),
    ),
    "wan": (
        (re.compile(r"(^time_embedding\.|^time_projection\.|modulation)"), "vector"),
        (re.compile(r"(^text_embedding\.|\.cross_attn\.(k|v)\.)"), "text"),
        (re.compile(r"(^img_emb\.|\.cross_attn\.(k_img|v_img)\.)"), "image-context"),
    ),
}


def token_rule(g: Geometry) -> Callable[[str], int] | None:
    """name -> the tokens that weight's matmul runs over, for the DiTs named above; None for the rest."""
    rules = STREAMS.get(g.architecture)
    if rules is None:
        return None
    tokens = {
        "vector": 1,
        "text": g.text_tokens,
        "image": g.image_tokens,
        "image+text": g.image_tokens + g.text_tokens,
        "image-context": CLIP_IMAGE_TOKENS,
    }

    def rule(name: str) -> int:
        return tokens[next((stream for pattern, stream in rules if pattern.search(name)), "image")]

    return rule
