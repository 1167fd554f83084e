"""A model read from disk -> the whole-model phases to time in the worker: a causal LM's prefill and decode,
an encoder's forward, a Diffusers pipeline's denoising step, VAE decode and encode and its text encoder's
forward. Each phase is a workload of the same engine as the layers (paired, interleaved, the same calls);
the layers stay, as the explanation of where a phase's time goes.

Nothing here imports transformers or diffusers: whether the measured environment's libraries know the
architecture is found out there, and a phase they cannot build fails alone, with the reason."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from mpsup.model.config import CAUSAL_SUFFIXES, MAX_LEVELS, pipeline_resolution, pipeline_vae_factor
from mpsup.model.geometry import DEFAULT_VIDEO_FRAMES, WAN_TIME_FACTOR
from mpsup.model.training import PHASE as TRAIN_PHASE
from mpsup.model.training import TrainOptions, lm_step_bytes, train_params
from mpsup.workloads import ITEMSIZE, Workload

PHASES = ("prefill", "decode", "forward", "step", "vae_decode", "vae_encode", TRAIN_PHASE)
TEXT_TOKENS = 77
# Of the device's safe memory (a Mac's recommended working set, a GPU's memory, a CPU's RAM), what the models
# of one visit may take together: a paired run holds two, each with its phase's activations. The float64
# reference no longer holds a copy of the model (it draws one module at a time), and it runs after the visits.
FIT_SHARE = 0.7


@dataclass(frozen=True)
class PhaseOptions:
    tokens: int  # prefill / forward length: the largest --tokens size
    cache: int | None = None  # decode's KV-cache length (default: tokens)
    dtype: str = "fp32"
    resolution: tuple[int, int] | None = None
    compile_too: bool = False
    depth: int | None = None  # force this many blocks (else: all that fit)
    real_weights: bool = False
    environments: int = 1
    frames: int | None = None  # a video VAE's frames (None: DEFAULT_VIDEO_FRAMES)
    video: frozenset[str] = frozenset()  # the components whose weights hold 3D convolutions (a video VAE's)
    weights: dict[str, int] | None = None  # a Diffusers component's weight bytes in the phase dtype, where known
    train: TrainOptions | None = None  # --train: a training step as one more phase (model/training.py)


@dataclass
class Phases:
    workloads: list[Workload] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why a phase is not run whole (said on every surface)


def phase_of(w: Workload | dict[str, Any]) -> str | None:
    """The phase a workload measures ("prefill", "decode/compiled" ...), or None for a layer."""
    params = w.params if isinstance(w, Workload) else w
    phase = params.get("phase")
    if not isinstance(phase, str) or phase not in PHASES:
        return None
    return f"{phase}/compiled" if params.get("compile") else phase


def phase_shape(p: dict[str, Any]) -> str:
    """What one call of a phase does, in a few words (`bench --list`)."""
    phase = p.get("phase")
    what = str((p.get("config") or {}).get("_class_name") or (p.get("config") or {}).get("model_type") or "")
    if phase == "prefill":
        text = f"{p.get('tokens')} prompt tokens"
    elif phase == "decode":
        text = f"1 token on a {p.get('cache')}-token cache"
    elif phase == "forward":
        text = f"{p.get('tokens')} tokens"
    elif phase == TRAIN_PHASE:
        size = p.get("resolution")
        each = f"{p.get('tokens')} tokens" if not size else f"{size[0]}x{size[1]} px"
        text = f"{p.get('train')} training step, batch {p.get('batch')} x {each}, {p.get('optimizer')}"
    else:
        size = p.get("resolution") or ["?", "?"]
        frames = f" x {p['frames']} frames" if p.get("frames") else ""
        text = f"{size[0]}x{size[1]} px{frames}"
    depth = f", {p['depth']} blocks" if p.get("depth") else ""
    weights = ", real weights" if p.get("weights") == "real" else ""
    return f"{what} {text}{depth}{weights}".strip()


# --- activation estimates: what one call holds beyond the weights, from the config and the stated sizes ---

# Tensors of the largest level alive at once in a VAE or UNet block (its input, the norm's output, the conv's
# output, the residual sum, and the library's temporaries), and the score matrices of one attention (scores
# and their softmax).
LIVE_TENSORS = 6
LIVE_SCORES = 2
# A causal video VAE's decode holds more (its conv cache, each chunk's temporaries): ten tensors of its largest
# level cover the Wan 2.2 VAE's measured peak with its weights (docs/reference/models.md, "The Wan 2.2 VAE decode").
LIVE_TENSORS_VIDEO = 10
CACHED_FRAMES = 2  # a causal video VAE's conv cache: the last frames of each conv's input
DEFAULT_VAE_CHANNELS = (128, 256, 512, 512)  # SD's VAE: a class whose config lists none is taken as this
DEFAULT_UNET_CHANNELS = (320, 640, 1280, 1280)  # diffusers' UNet2DConditionModel default


@dataclass(frozen=True)
class Estimate:
    """One call's activation bytes, and the part of them that is attention scores: a device whose attention is
    memory-efficient (the CPU's and CUDA's scaled_dot_product_attention) never holds those; MPS's does."""

    bytes: int
    attention: int = 0


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [v for v in value[:MAX_LEVELS] if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def _channels(cfg: dict[str, Any], default: tuple[int, ...]) -> list[int]:
    """Channels per level, top level first: block_out_channels, or a Wan VAE's base_dim x dim_mult."""
    listed = _ints(cfg.get("block_out_channels"))
    if listed:
        return listed
    mult = _ints(cfg.get("dim_mult"))
    if mult:
        base = _int(cfg.get("base_dim"), 96)
        return [base * m for m in mult]
    return list(default)


def vae_activation_bytes(
    cfg: dict[str, Any], width: int, height: int, frames: int | None, itemsize: int, phase: str
) -> Estimate:
    """A VAE decode or encode at this size: the images (and a video's frames) in and out, its largest level's
    live tensors (an upsampler's conv at the level above counts the channels of the level below), and its
    mid-block attention over every latent pixel. A causal Wan VAE decodes a few frames at a time, so only
    the images and latents scale with all frames."""
    channels = _channels(cfg, DEFAULT_VAE_CHANNELS)
    levels = len(channels)
    total_frames = max(1, frames or 1)
    video = str(cfg.get("_class_name", "")).startswith("AutoencoderKLWan")
    work_frames = min(total_frames, WAN_TIME_FACTOR + 1) if video else total_frames
    patch = _int(cfg.get("patch_size"), 1)
    pixels = width * height // (patch * patch)  # Wan 2.2 folds 2x2 pixels into channels before its first conv
    largest = 0
    for i, c in enumerate(channels):
        wider = max(c, channels[i + 1]) if i + 1 < len(channels) else c
        largest = max(largest, wider * (pixels >> (2 * i)) * work_frames)
    image_ch = _int(cfg.get("in_channels"), 3) + _int(cfg.get("out_channels"), 3)
    latent_ch = _int(cfg.get("latent_channels") or cfg.get("z_dim"), 4)
    lowest = max(1, pixels >> (2 * (levels - 1)))
    images = image_ch * width * height * total_frames + 2 * latent_ch * lowest * total_frames
    if video:  # every causal conv keeps its input's last two frames between chunks
        convs = 2 * (_int(cfg.get("num_res_blocks"), 2) + 1) + 2
        sizes = sum(c * (pixels >> (2 * i)) for i, c in enumerate(channels))
        images += min(CACHED_FRAMES, work_frames) * convs * sizes
    scores = 0 if cfg.get("mid_block_add_attention") is False else LIVE_SCORES * lowest * lowest
    del phase  # decode and encode run the same levels, in the other order
    attention = scores * (1 if video else work_frames) * itemsize
    live = LIVE_TENSORS_VIDEO if video else LIVE_TENSORS
    return Estimate((live * largest + images) * itemsize + attention, attention)


def _heads(cfg: dict[str, Any], levels: int) -> list[int]:
    """Attention heads per level: num_attention_heads, else (the diffusers UNet's own reading) attention_head_dim."""
    for key in ("num_attention_heads", "attention_head_dim"):
        value = cfg.get(key)
        if isinstance(value, list):
            heads = _ints(value)
            if heads:
                return (heads + [heads[-1]] * levels)[:levels]
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return [value] * levels
    return [8] * levels


def unet_activation_bytes(cfg: dict[str, Any], width: int, height: int, vae_factor: int, itemsize: int) -> Estimate:
    """One UNet denoising step at this image size: the skip connections every down level keeps for its up
    level, the largest level's live tensors, and the largest attention's scores (self-attention over a level's
    latent pixels, per head), plus the latent and the prompt's embeddings."""
    channels = _channels(cfg, DEFAULT_UNET_CHANNELS)
    levels = len(channels)
    per_block = max(_ints(cfg.get("layers_per_block")) or [_int(cfg.get("layers_per_block"), 2)])
    latent = max(1, (width // max(1, vae_factor)) * (height // max(1, vae_factor)))
    sizes = [max(1, latent >> (2 * i)) for i in range(levels)]
    skips = sum(c * n * (per_block + 1) for c, n in zip(channels, sizes, strict=True))
    largest = max(c * n for c, n in zip(channels, sizes, strict=True))
    heads = _heads(cfg, levels)
    kinds = cfg.get("down_block_types")
    # Attention only where a level's block has it (SDXL's top level has none); diffusers' default: all but the last.
    attends = (
        [isinstance(k, str) and "Attn" in k for k in kinds[:levels]]
        if isinstance(kinds, list) and kinds
        else [i < levels - 1 for i in range(levels)]
    )
    attends += [False] * (levels - len(attends))
    scores = max((h * n * n for h, n, a in zip(heads, sizes, attends, strict=True) if a), default=0)
    context = TEXT_TOKENS * _int(cfg.get("cross_attention_dim"), 768)
    sample = 2 * _int(cfg.get("in_channels"), 4) * latent
    attention = LIVE_SCORES * scores * itemsize
    return Estimate((skips + LIVE_TENSORS * largest + context + sample) * itemsize + attention, attention)


def transformers_activation_bytes(
    cfg: dict[str, Any], tokens: int, cache: int | None, phase: str, itemsize: int
) -> Estimate:
    """A prefill, forward or decode call's activations (as the worker fits depth: hidden states, MLP, float32
    attention scores) and the KV cache of every layer, plus the logits of the last position."""
    hidden = _int(cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("n_embd"), 0)
    inter = _int(cfg.get("intermediate_size") or cfg.get("d_ff"), 4 * hidden)
    heads = _int(cfg.get("num_attention_heads") or cfg.get("n_head"), 1)
    kv_heads = _int(cfg.get("num_key_value_heads"), heads)
    head_dim = _int(cfg.get("head_dim"), hidden // heads if heads else 0)
    layers = _int(cfg.get("num_hidden_layers") or cfg.get("num_layers") or cfg.get("n_layer"), 1)
    vocab = _int(cfg.get("vocab_size"), 0)
    seen = (cache or tokens) + 1 if phase == "decode" else tokens
    step = 1 if phase == "decode" else tokens
    attention = heads * step * seen * 4
    kv = 2 * layers * seen * kv_heads * head_dim * itemsize
    return Estimate(step * (8 * hidden + 3 * inter) * itemsize + attention + kv + vocab * 4, attention)


def _workload(
    name: str,
    phase: str,
    dtype: str,
    params: dict[str, Any],
    source: str,
    opts: PhaseOptions,
    memory: Estimate = Estimate(0),
    weights: int = 0,
) -> list[Workload]:
    base = {
        **params,
        "phase": phase,
        "depth": opts.depth,
        "fit_share": FIT_SHARE / max(1, opts.environments),
    }
    variants = [(name, False)] + ([(f"{name}/compiled", True)] if opts.compile_too else [])
    return [
        Workload(
            n,
            "model_phase",
            "phase",
            dtype,
            {**base, "compile": comp},
            ("phase", phase),
            source,
            weights + memory.bytes,
            1,
            "phase",
            attention_bytes=memory.attention,
        )
        for n, comp in variants
    ]


def _transformers(config: dict[str, Any], opts: PhaseOptions, path: str, prefix: str = "model") -> Phases:
    out = Phases()
    if not isinstance(config.get("model_type"), str):
        out.notes.append(f"{path}: config.json names no model_type, so the model is not run whole")
        return out
    archs = config.get("architectures") or []
    causal = any(isinstance(a, str) and a.endswith(CAUSAL_SUFFIXES) for a in archs)
    common = {
        "library": "transformers",
        "config": config,
        "causal": causal,
        "tokens": opts.tokens,
        "weights": "real" if opts.real_weights else "random",
        # Absolute: the worker runs in its own folder, where a relative path would name another folder (or
        # be taken for a Hub id, after a long wait).
        "path": os.path.abspath(path) if opts.real_weights else None,
    }
    size = ITEMSIZE.get(opts.dtype, 4)

    def memory(phase: str) -> Estimate:
        return transformers_activation_bytes(config, opts.tokens, opts.cache, phase, size)

    if causal:
        out.workloads += _workload(f"{prefix}/prefill", "prefill", opts.dtype, common, path, opts, memory("prefill"))
        out.workloads += _workload(
            f"{prefix}/decode",
            "decode",
            opts.dtype,
            {**common, "cache": opts.cache or opts.tokens},
            path,
            opts,
            memory("decode"),
        )
    else:
        out.workloads += _workload(f"{prefix}/forward", "forward", opts.dtype, common, path, opts, memory("forward"))
    if opts.train is not None:
        out.workloads += _train_lm(config, common, causal, opts, path, prefix, size)
        if not causal:
            out.notes.append(
                f"{TRAIN_PHASE}: --train measures a causal language model's or a Diffusers UNet's training step; "
                f"{', '.join(str(a) for a in archs) or 'this model'} is neither"
            )
    return out


def _train_lm(
    config: dict[str, Any], common: dict[str, Any], causal: bool, opts: PhaseOptions, path: str, prefix: str, size: int
) -> list[Workload]:
    """A causal language model's training step, with what it holds beyond the weights."""
    if not causal or opts.train is None:
        return []
    tokens = opts.train.tokens or opts.tokens
    params = {**common, **train_params(opts.train, "lm", tokens)}
    extra, scores = lm_step_bytes(config, int(params["batch"]), tokens, size, opts.train.mode)
    eager = replace(opts, compile_too=False)  # the training step is timed eager: --compile times inference
    return _workload(f"{prefix}/{TRAIN_PHASE}", TRAIN_PHASE, opts.dtype, params, path, eager, Estimate(extra, scores))


def _diffusers(components: dict[str, dict[str, Any]], opts: PhaseOptions, path: str) -> Phases:
    out = Phases()
    width, height = opts.resolution or pipeline_resolution(components)
    factor = pipeline_vae_factor(components)
    size = ITEMSIZE.get(opts.dtype, 4)
    text_done = False
    for name, cfg in sorted(components.items()):
        cls = str(cfg.get("_class_name", ""))
        common = {"library": "diffusers", "config": cfg, "component": name, "resolution": [width, height]}
        weights = (opts.weights or {}).get(name, 0)
        if cls == "UNet2DConditionModel":
            step = unet_activation_bytes(cfg, width, height, factor, size)
            out.workloads += _workload(
                f"model/{name}/step", "step", opts.dtype, {**common, "vae_factor": factor}, path, opts, step, weights
            )
            if opts.train is not None:
                train = {**common, "vae_factor": factor, **train_params(opts.train, "unet", 0)}
                # Backward keeps what the forward made (about the step's activations again), per image of the batch;
                # `full` adds each weight's gradient and AdamW's two moments.
                batch = int(train["batch"])
                states = 3 * weights if opts.train.mode == "full" else 0
                need = Estimate(2 * batch * step.bytes + states, 2 * batch * step.attention)
                eager = replace(opts, compile_too=False)
                out.workloads += _workload(
                    f"model/{name}/{TRAIN_PHASE}", TRAIN_PHASE, opts.dtype, train, path, eager, need, weights
                )
        elif cls.startswith("Autoencoder"):
            frames = opts.frames or (DEFAULT_VIDEO_FRAMES if name in opts.video else None)
            vae = {**common, "frames": frames} if frames else common
            for phase in ("vae_decode", "vae_encode"):
                need = vae_activation_bytes(cfg, width, height, frames, size, phase)
                out.workloads += _workload(f"model/{name}/{phase}", phase, opts.dtype, vae, path, opts, need, weights)
        elif isinstance(cfg.get("model_type"), str) and not text_done:
            text_done = True
            sub = _transformers(
                cfg,
                PhaseOptions(**{**opts.__dict__, "tokens": TEXT_TOKENS, "real_weights": False, "train": None}),
                path,
                prefix=f"model/{name}",
            )
            out.workloads += sub.workloads
        elif cls:
            out.notes.append(
                f"{name} ({cls}): not run whole yet; its time is estimated from its layers, which cover an "
                "unknown share of its forward"
            )
    return out


def model_phases(
    fmt: str, config: dict[str, Any], components: dict[str, dict[str, Any]] | None, path: str, opts: PhaseOptions
) -> Phases:
    """The phases a model read as `fmt` can run whole, or a note saying why it cannot."""
    if fmt in ("transformers", "transformers-sharded", "transformers-config") and config:
        return _transformers(config, opts, path)
    if fmt == "diffusers" and components:
        return _diffusers(components, opts, path)
    how = {
        "gguf": "a GGUF file carries no config a library can build",
        "comfyui": "a ComfyUI file carries no component config",
        "comfyui-repackaged": "a ComfyUI folder carries no component config",
    }.get(fmt, "no config.json beside the weights names an architecture")
    return Phases(
        notes=[
            f"not run whole ({how}): the figure is estimated from its layers, which cover an unknown share of "
            "the forward; a Transformers or Diffusers folder (config.json beside the weights) is measured whole"
        ]
    )
