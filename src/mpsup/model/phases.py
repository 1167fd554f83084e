"""A model read from disk -> the whole-model phases to time in the worker: a causal LM's prefill and decode,
an encoder's forward, a Diffusers pipeline's denoising step, VAE decode and encode and its text encoder's
forward. Each phase is a workload of the same engine as the layers (paired, interleaved, the same calls);
the layers stay, as the explanation of where a phase's time goes.

Nothing here imports transformers or diffusers: whether the measured environment's libraries know the
architecture is found out there, and a phase they cannot build fails alone, with the reason."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mpsup.model.config import pipeline_resolution, pipeline_vae_factor
from mpsup.workloads import Workload

PHASES = ("prefill", "decode", "forward", "step", "vae_decode", "vae_encode")
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
TEXT_TOKENS = 77
# Of the device's safe memory, what one environment's whole model may take: a paired run holds two models.
FIT_SHARE = 0.5


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
    frames: int | None = None  # a video VAE's frames (None: one image)


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
    else:
        size = p.get("resolution") or ["?", "?"]
        frames = f" x {p['frames']} frames" if p.get("frames") else ""
        text = f"{size[0]}x{size[1]} px{frames}"
    depth = f", {p['depth']} blocks" if p.get("depth") else ""
    weights = ", real weights" if p.get("weights") == "real" else ""
    return f"{what} {text}{depth}{weights}".strip()


def _workload(
    name: str, phase: str, dtype: str, params: dict[str, Any], source: str, opts: PhaseOptions
) -> list[Workload]:
    base = {
        **params,
        "phase": phase,
        "depth": opts.depth,
        "fit_share": FIT_SHARE / max(1, opts.environments),
    }
    variants = [(name, False)] + ([(f"{name}/compiled", True)] if opts.compile_too else [])
    return [
        Workload(n, "model_phase", "phase", dtype, {**base, "compile": comp}, ("phase", phase), source, 0, 1, "phase")
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
    if causal:
        out.workloads += _workload(f"{prefix}/prefill", "prefill", opts.dtype, common, path, opts)
        out.workloads += _workload(
            f"{prefix}/decode", "decode", opts.dtype, {**common, "cache": opts.cache or opts.tokens}, path, opts
        )
    else:
        out.workloads += _workload(f"{prefix}/forward", "forward", opts.dtype, common, path, opts)
    return out


def _diffusers(components: dict[str, dict[str, Any]], opts: PhaseOptions, path: str) -> Phases:
    out = Phases()
    width, height = opts.resolution or pipeline_resolution(components)
    factor = pipeline_vae_factor(components)
    text_done = False
    for name, cfg in sorted(components.items()):
        cls = str(cfg.get("_class_name", ""))
        common = {"library": "diffusers", "config": cfg, "component": name, "resolution": [width, height]}
        if cls == "UNet2DConditionModel":
            out.workloads += _workload(
                f"model/{name}/step", "step", opts.dtype, {**common, "vae_factor": factor}, path, opts
            )
        elif cls.startswith("Autoencoder"):
            vae = {**common, "frames": opts.frames} if opts.frames else common
            for phase in ("vae_decode", "vae_encode"):
                out.workloads += _workload(f"model/{name}/{phase}", phase, opts.dtype, vae, path, opts)
        elif isinstance(cfg.get("model_type"), str) and not text_done:
            text_done = True
            sub = _transformers(
                cfg,
                PhaseOptions(**{**opts.__dict__, "tokens": TEXT_TOKENS, "real_weights": False}),
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
