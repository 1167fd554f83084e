"""Every way to name a model, behind one call: open_model(target) -> the workloads to time and the
record's description of the model. Checkpoints (safetensors, sharded folders, Diffusers and ComfyUI
layouts, GGUF, .pt state dicts) give their layers, read from headers only; a .pt2 export or a
module:function gives the whole model, run end to end in the worker."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.model.training import TrainOptions
from mpsup.workloads import END_TO_END, ITEMSIZE, Workload, justified_bytes


@dataclass(frozen=True)
class ModelWorkloads:
    workloads: tuple[Workload, ...]
    doc: dict[str, Any]  # the run record's `model` entry
    not_measured: tuple[dict[str, Any], ...] = field(default=())
    end_to_end: bool = False


def is_factory(text: str) -> bool:
    """`package.module:function` that is not also a path on disk (never raises, whatever its length)."""
    return bool(re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", text)) and not os.path.lexists(text)


@dataclass(frozen=True)
class WholeModel:
    """How to run the model whole (model/phases.py): decode's cache, a forced depth, real weights."""

    run: bool = True
    cache: int | None = None
    depth: int | None = None
    real_weights: bool = False
    environments: int = 1
    frames: int | None = None  # a video VAE's frames
    train: TrainOptions | None = None  # --train: a training step as one more phase


def open_model(
    target: Path | str,
    *,
    tokens: tuple[int, ...],
    dtype: str | None = None,
    resolution: int | tuple[int, int] | None = None,
    compile_too: bool = False,
    whole: WholeModel | None = None,
    tokens_stated: bool = False,
) -> ModelWorkloads:
    """tokens_stated: the user gave --tokens (else `tokens` are the defaults, and sizes they derive are bounded
    by what the model's input justifies, as are sizes at an unstated resolution)."""
    text = str(target)
    if text.endswith(".pt2") or is_factory(text):
        return _end_to_end(text, compile_too)
    return _layers(
        Path(target),
        tokens=tokens,
        dtype=dtype,
        resolution=resolution,
        compile_too=compile_too,
        whole=whole,
        tokens_stated=tokens_stated,
    )


def _layers(
    path: Path,
    *,
    tokens: tuple[int, ...],
    dtype: str | None,
    resolution: int | tuple[int, int] | None,
    compile_too: bool = False,
    whole: WholeModel | None = None,
    tokens_stated: bool = False,
) -> ModelWorkloads:
    from mpsup.model.extract import extract_model
    from mpsup.model.load import CONFIG_ONLY, checkpoint_dtype, load_model
    from mpsup.model.phases import PhaseOptions, model_phases
    from mpsup.model.sizing import video_components

    loaded = load_model(path)
    config_only = loaded.format == CONFIG_ONLY
    if config_only and whole is not None and whole.real_weights:
        raise UserError(f"{path}: --real-weights, but this folder holds a config.json and no weights")
    ex = extract_model(
        loaded.tensors,
        loaded.config,
        tokens=tokens,
        dtype=dtype,
        components=loaded.components,
        resolution=resolution,
        frames=whole.frames if whole else None,
    )
    whole = whole or WholeModel()
    phases = None
    stored = sum(t.nbytes for t in loaded.tensors.values())
    if whole.run:
        size = (resolution, resolution) if isinstance(resolution, int) else resolution
        opts = PhaseOptions(
            tokens=max(tokens),
            cache=whole.cache,
            dtype=dtype or (ex.workloads[0].dtype if ex.workloads else checkpoint_dtype(loaded.config) or "fp32"),
            resolution=size,
            compile_too=compile_too,
            depth=whole.depth,
            real_weights=whole.real_weights,
            environments=whole.environments,
            frames=whole.frames,
            video=video_components(loaded.tensors),
            weights=_component_bytes(loaded.tensors, dtype),
            train=whole.train,
        )
        phases = model_phases(loaded.format, loaded.config, loaded.components, str(loaded.path), opts)
    if config_only and not (phases and phases.workloads):
        why = "; ".join(phases.notes) if phases and phases.notes else "--layers-only asks for the layers alone"
        raise UserError(f"{path}: a config.json without weights runs only as a whole model ({why})")
    if not ex.workloads and not (phases and phases.workloads):
        raise UserError(f"{path}: no layer mpsup can measure ({len(ex.not_measured)} tensors not measured)")
    config_note = (
        [
            "config.json without weights: the model runs whole with random weights; no layers are listed "
            "(they are read from the weights' headers), so no phase has a layer explanation"
        ]
        if config_only
        else []
    )
    doc = {
        **loaded.describe(),
        "linear_weight_bytes": ex.linear_weight_bytes,
        "fp8_weight_bytes": ex.fp8_weight_bytes,
        "fp8_stored_bytes": ex.fp8_stored_bytes,
        "fp8_upcast_bytes": ex.fp8_upcast_bytes,
        "notes": config_note + list(ex.notes) + (phases.notes if phases else []),
        "not_measured": ex.not_measured,
        "whole": bool(phases and phases.workloads),
    }
    run = (phases.workloads if phases else []) + list(ex.workloads)
    stated = {
        "--resolution": resolution is not None,
        "--frames": whole.frames is not None,
        "--tokens": tokens_stated,
    }
    bound = justified_bytes(stored)
    diffusion = loaded.components is not None
    run = [_bounded(w, stated, bound, diffusion) for w in run]
    return ModelWorkloads(tuple(run), doc, tuple(ex.not_measured))


def _size_options(w: Workload, diffusion: bool) -> tuple[str, ...]:
    """The options that state this workload's activation sizes: a diffusion model's (and any convolution's) run
    at --resolution, a 3D convolution's over --frames too, a language model's over --tokens."""
    if w.kind in ("conv", "pad"):
        three_d = len(w.params.get("input_shape") or w.params.get("shape") or ()) == 5
        return ("--resolution", "--frames") if three_d else ("--resolution",)
    if w.kind == "model_phase" and w.params.get("phase") == "train_step":
        return ()  # --train sized it: its batch and length are a fine-tuning run's, stated or the said defaults
    if w.kind == "model_phase":
        return ("--resolution",) if w.params.get("library") == "diffusers" else ("--tokens",)
    if w.kind in ("linear", "embedding", "grouped_mm", "scaled_mm"):
        return ("--resolution",) if diffusion else ("--tokens",)
    return ()  # sized by its weights alone (an FP8 cast)


def _bounded(w: Workload, stated: dict[str, bool], bound: int, diffusion: bool) -> Workload:
    """The workload with the bound its input justifies, where an option that sizes it was not given."""
    unstated = [o for o in _size_options(w, diffusion) if not stated.get(o)]
    if not unstated:
        return w
    return replace(w, sized_by=" and ".join(unstated), justified=bound)


def _component_bytes(tensors: dict[str, Any], dtype: str | None) -> dict[str, int]:
    """Each Diffusers component's weights (`vae/...` tensors), in the phase dtype where one is forced."""
    out: dict[str, int] = {}
    for name, t in tensors.items():
        component = name.split("/", 1)[0] if "/" in name else ""
        size = ITEMSIZE[dtype] * _numel(t.shape) if dtype in ITEMSIZE else t.nbytes
        out[component] = out.get(component, 0) + size
    return out


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _end_to_end(target: str, compile_too: bool) -> ModelWorkloads:
    if target.endswith(".pt2"):
        from mpsup.model.load import pt2_fingerprint

        path = Path(target)
        fingerprint = pt2_fingerprint(path)  # a regular zip file, or one line; reads at most 2 MiB
        params: dict[str, Any] = {"source": "pt2", "path": os.path.realpath(path)}
        doc: dict[str, Any] = {"path": str(path), "format": "pt2", "fingerprint": fingerprint}
    else:
        params = {"source": "factory", "target": target, "cwd": str(Path.cwd())}
        doc = {
            "path": target,
            "format": "module:function",
            "fingerprint": hashlib.sha256(target.encode()).hexdigest()[:16],
        }
    doc |= {"linear_weight_bytes": 0, "fp8_weight_bytes": 0, "not_measured": []}
    variants = [(END_TO_END, False)] + ([(f"{END_TO_END}/compiled", True)] if compile_too else [])
    workloads = tuple(
        Workload(
            name,
            "end_to_end",
            "model",
            "fp32",
            {**params, "compile": comp},
            tags=("end-to-end",),
            source=doc["path"],
            role="end-to-end",
        )
        for name, comp in variants
    )
    return ModelWorkloads(workloads, doc, end_to_end=True)
