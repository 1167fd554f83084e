"""Whole models, run as a user runs them: a Transformers model's prefill and decode (or an encoder's forward),
a Diffusers UNet's denoising step and a VAE's decode and encode, built from the model's config inside the
measured environment, with that environment's own transformers / diffusers (never mpsup's).

Random weights by default: timing does not depend on the values (a router's choices aside), and nothing is
read from disk. The model is first built on the meta device to learn what it needs; where that would not fit
in the stated share of the device's memory, only a prefix of its blocks is built, and the report scales the
time per block (said on every surface). What the model did besides timing (blocks run, ops that fell back to
the CPU, the op census of one forward, the library versions) comes back with the setup's answer as `phase`.
`census_phase` takes that census alone, on the meta device, for `bench --list`: no weights, no device time."""

from __future__ import annotations

import gc
import importlib
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import values, weights
from .census import _census_of, _census_strict
from .core import Built, FallbackWatch, Unsupported, dtype_of, no_deprecations
from .device import Device

_NOT_IMPLEMENTED = re.compile(r"operator '([\w:.]+)' is not currently implemented for the MPS device")
MAX_LAYERS = 10_000
LANGUAGE_ROWS = 32  # prompt positions whose full logits numerics compares between builds
GREEDY_TOKENS = 32
TEXT_TOKENS = 77  # CLIP's context: what a UNet's cross-attention and a pipeline's text encoder see


def _library(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Unsupported(f"{name} is not installed in this environment ({sys.executable}): {exc}") from None


def _bytes_of(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])


def _blocks(model: torch.nn.Module, count: int) -> torch.nn.ModuleList | None:
    """The repeated blocks: the largest ModuleList with one entry per hidden layer."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count]
    return max(lists, key=_bytes_of, default=None)


def _capacity(device: Device) -> int | None:
    """The device's memory as a constant, not what is free now: both environments of a paired run must fit
    the same depth, and the second one sets up while the first one's model still holds its memory."""
    if device.kind == "cuda":
        return int(torch.cuda.mem_get_info()[1])
    if device.kind == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return device.memory_limit()
    # MPS: recommended_max_memory, or less where PYTORCH_MPS_HIGH_WATERMARK_RATIO caps the allocator below it
    # (device.mps_limits); both constants of the machine and the environment.
    return device.memory_limit()


def _depth_for(
    params: dict[str, Any],
    total: int,
    block: int,
    per_block_extra: int,
    layers: int,
    device: Device,
    fit: dict[str, Any] | None = None,
) -> int:
    """Blocks to build: all of them, the forced --depth, or as many as fit in the stated share of memory; `fit`
    gets what the rule weighed (the whole model's bytes with its activations, what one build may hold)."""
    forced = params.get("depth")
    if forced:
        return max(1, min(int(forced), layers))
    limit = _capacity(device)
    if not limit:
        return layers
    share = float(params.get("fit_share", 0.25))
    budget = share * limit
    fixed = total - block * layers
    need = fixed + (block + per_block_extra) * layers
    if fit is not None:
        fit.update(need_bytes=int(need), allowed_bytes=int(budget), capacity_bytes=int(limit), share=share)
    if need <= budget:
        return layers
    fits = int((budget - fixed) // max(1, block + per_block_extra))
    if fits < 1:
        raise MemoryError(
            f"out of memory: even one block needs {(fixed + block + per_block_extra) / 2**30:.1f} GiB, over "
            f"{budget / 2**30:.1f} GiB ({params.get('fit_share', 0.25):.0%} of {limit / 2**30:.1f} GiB)"
        )
    return fits


def _first_call(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[list[str], Any]:
    """Run once, collecting the ops torch said fell back to the CPU (MPS); and what the call returned."""
    with FallbackWatch() as watch:
        out = fn()
        sync()
    return watch.ops, out


def _quiet(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Libraries warn on every call (deprecations): keep that out of the worker's log. For the calls the worker
    times, the worker sets these filters once per request instead (a timed call pays for nothing of mpsup's)."""

    def call() -> Any:
        with no_deprecations():
            return fn()

    return call


def _unsupported_op(exc: BaseException) -> None:
    m = _NOT_IMPLEMENTED.search(str(exc))
    if m:
        raise Unsupported(
            f"{m.group(1)} has no MPS kernel in this torch (bench --allow-cpu-fallback runs it on the CPU)"
        ) from None


# --- Transformers ---


def _hf_config(tf: Any, doc: dict[str, Any]) -> Any:
    mapping = tf.models.auto.configuration_auto.CONFIG_MAPPING
    model_type = doc.get("model_type")
    if not isinstance(model_type, str) or model_type not in mapping:
        raise Unsupported(f"transformers {tf.__version__} does not know model_type {model_type!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mapping[model_type].from_dict(dict(doc))


def _set_depth(config: Any, depth: int) -> None:
    config.num_hidden_layers = depth
    for key in ("layer_types",):  # per-layer lists must match the depth (Qwen3, Gemma)
        value = getattr(config, key, None)
        if isinstance(value, list):
            setattr(config, key, value[:depth])


def _construct(auto: Any, config: Any, dtype: torch.dtype) -> Any:
    """from_config with the dtype under the spelling this transformers takes (5.x: dtype=, 4.x: torch_dtype=)."""
    with no_deprecations():
        try:
            model = auto.from_config(config, dtype=dtype)
        except TypeError:
            model = auto.from_config(config, torch_dtype=dtype)
    return model.to(dtype)


def _kv_bytes_per_block(config: Any, tokens: int, itemsize: int) -> int:
    heads = getattr(config, "num_attention_heads", 0) or 0
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", 0) or 0
    head_dim = getattr(config, "head_dim", None) or (hidden // heads if heads else 0)
    return 2 * tokens * kv_heads * head_dim * itemsize


def _activation_bytes(config: Any, tokens: int, itemsize: int) -> int:
    hidden = getattr(config, "hidden_size", 0) or 0
    inter = getattr(config, "intermediate_size", 0) or 4 * hidden
    heads = getattr(config, "num_attention_heads", 0) or 0
    return tokens * (8 * hidden + 3 * inter) * itemsize + heads * tokens * tokens * 4


def _hf_sizes(tf: Any, params: dict[str, Any]) -> tuple[Any, int, int, int]:
    """The config, its layer count and the phase's tokens and cache, each checked against what the model takes."""
    config = _hf_config(tf, params["config"])
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    if layers > MAX_LAYERS:  # even on the meta device, building millions of blocks would take hours
        raise Unsupported(f"num_hidden_layers {layers} is beyond any real model (at most {MAX_LAYERS})")
    tokens = int(params["tokens"])
    cache = int(params.get("cache") or tokens)
    limit_pos = getattr(config, "max_position_embeddings", None)
    if (
        isinstance(limit_pos, int)
        and limit_pos > 0
        and tokens + (cache if params["phase"] == "decode" else 0) > limit_pos
    ):
        raise Unsupported(f"{tokens} tokens (+ cache {cache}) exceed this model's max_position_embeddings {limit_pos}")
    return config, layers, tokens, cache


def _fit_depth(
    tf: Any,
    auto: Any,
    config: Any,
    params: dict[str, Any],
    dtype: torch.dtype,
    device: Device,
    sizes: tuple[int, ...],
    fit: dict[str, Any] | None = None,
) -> int:
    """Blocks to build (the config cut to them): all, --depth, or as many as fit, learnt on the meta device."""
    layers, tokens, cache = sizes
    if values.TRUTH.on and not params.get("depth"):
        return layers  # the reference holds one module at a time (weights.JustInTime): the whole model fits
    itemsize = torch.empty((), dtype=dtype).element_size()
    with torch.device("meta"):
        try:
            meta = _construct(auto, config, dtype)
        except ValueError as exc:  # an architecture this AutoModel class does not map
            raise Unsupported(f"transformers {tf.__version__} cannot build this model: {exc}") from None
    total = _bytes_of(meta)
    blocks = _blocks(meta, layers) if layers else None
    block_bytes = _bytes_of(blocks[0]) if blocks is not None and len(blocks) else 0
    del meta
    depth = layers
    if blocks is not None and block_bytes:
        extra = _kv_bytes_per_block(config, cache + 1 if params["phase"] == "decode" else tokens, itemsize)
        depth = _depth_for(
            params, total + _activation_bytes(config, tokens, itemsize), block_bytes, extra, layers, device, fit
        )
    if depth < layers:
        _set_depth(config, depth)
    return depth


def _hf_model(
    auto: Any, config: Any, params: dict[str, Any], dtype: torch.dtype, device: Device, value_dtype: torch.dtype
) -> Any:
    """The model on the device: the checkpoint's weights where --real-weights asks (all of them), else weights
    from the version-proof stream (values.py), rounded to `value_dtype` (the builds' dtype: the float64 reference
    widens what the builds compute on, one module at a time: weights.JustInTime)."""
    if params.get("weights") == "real" and params.get("path"):
        with no_deprecations():
            try:
                model, loaded = auto.from_pretrained(
                    params["path"], config=config, dtype=dtype, output_loading_info=True
                )
            except TypeError:
                model, loaded = auto.from_pretrained(
                    params["path"], config=config, torch_dtype=dtype, output_loading_info=True
                )
        missing = sorted(str(k) for k in loaded.get("missing_keys") or ())
        if missing:
            # Asked for real weights, a user would not want some of them random: timed, neither model is measured.
            raise ValueError(
                f"--real-weights: {len(missing)} of the model's {len(model.state_dict())} tensors are missing from "
                f"{params['path']} (first: {missing[0]}) and would be random; give the whole checkpoint, or drop "
                "--real-weights"
            )
        values.note_parameters(model)
        if values.TRUTH.on:  # widened a module at a time, never the whole model at once
            _widen_buffers(model)
            weights.JustInTime(model, value_dtype, widen=True)
        else:
            model = model.to(device.torch_device)
    else:
        with torch.device(device.torch_device), weights.parameters_without_values():
            model = _construct(auto, config, dtype)
        _give_values(model, device, value_dtype)
    model.eval()
    return model


def _give_values(model: torch.nn.Module, device: Device, value_dtype: torch.dtype) -> None:
    """A model built without values gets them from the stream: all at once on the device for a build, a module
    at a time in float64 for the reference; on the meta device (a census) none."""
    if device.kind == "meta":
        return
    if values.TRUTH.on:
        _one_module_fits(model)
        weights.JustInTime(model, value_dtype)
    else:
        weights.materialize(model, device.torch_device, value_dtype)


# Of this machine's memory, the most the float64 reference's one module may take (a Mac shares it with its GPU).
REFERENCE_MEMORY_SHARE = 0.5


def over_reference_share(need: int) -> str | None:
    """Where the reference's `need` bytes are over REFERENCE_MEMORY_SHARE of this machine, the words that say so."""
    machine = _capacity(Device("cpu"))
    if machine and need > REFERENCE_MEMORY_SHARE * machine:
        return f"over {REFERENCE_MEMORY_SHARE:.0%} of this machine's {machine / 2**30:.1f} GiB"
    return None


def _one_module_fits(model: torch.nn.Module) -> None:
    """The reference holds one module's weights in float64 at a time: a model whose largest module alone would
    take over REFERENCE_MEMORY_SHARE of the machine is not judged here, said so."""
    need = weights.meta_bytes(model)
    if over := over_reference_share(need):
        raise MemoryError(f"out of memory: its largest module alone needs {need / 2**30:.1f} GiB in float64, {over}")


def _widen_buffers(model: torch.nn.Module) -> None:
    """A loaded model's float buffers (rotary frequencies, masks) in float64, as its parameters will be."""
    for sub in model.modules():
        for key, b in list(sub._buffers.items()):
            if b is not None and b.is_floating_point():
                sub._buffers[key] = b.to(torch.float64)


@dataclass
class _Kept:
    """The last model this process built, kept for the next phase of the same model (a visit's prefill and decode
    build it once); in the reference, with the float64 KV cache its prefill left."""

    key: str
    model: Any
    recorded: str  # the digest of its weights' notes (values.Values.recording)
    prefill_cache: tuple[int, Any] | None = None  # (prompt tokens, the cache), the reference's prefill only


_KEPT: list[_Kept] = []


def forget() -> None:
    """The kept model dropped (another workload needs the memory). It was frozen with the rest of the process's
    objects between workloads, where a cycle of its would never be collected: unfrozen first."""
    if _KEPT:
        _KEPT.clear()
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def _model_key(
    params: dict[str, Any], config: Any, dtype: torch.dtype, value_dtype: torch.dtype, device: Device
) -> str:
    """What makes two phases' models the same model: everything but the phase and its sizes."""
    doc = {
        "library": params.get("library"),
        "causal": bool(params.get("causal")),
        "config": config.to_dict() if hasattr(config, "to_dict") else config,
        "component": params.get("component"),
        "weights": params.get("weights"),
        "path": params.get("path"),
        "dtype": str(dtype),
        "value_dtype": str(value_dtype),
        "device": str(device.torch_device),
        "truth": values.TRUTH.on,
    }
    return json.dumps(doc, sort_keys=True, default=str)


def _kept_or_built(key: str, build_model: Callable[[], Any], device: Device) -> _Kept:
    """The kept model where it is this one (its weights' notes re-entered in the digest, its bytes counted in the
    phase's memory), else a new one."""
    if _KEPT and _KEPT[0].key == key:
        kept = _KEPT[0]
        values.TRUTH.absorb(kept.recorded)
        model = kept.model[0] if isinstance(kept.model, tuple) else kept.model
        device.already_resident(_bytes_of(model))
        return kept
    forget()
    with values.TRUTH.recording() as recorded:
        model = build_model()
    kept = _Kept(key, model, recorded[0])
    _KEPT.append(kept)
    return kept


def _transformers_phase(params: dict[str, Any], dtype: torch.dtype, device: Device, value_dtype: torch.dtype) -> Built:
    tf = _library("transformers")
    causal = bool(params.get("causal"))
    auto = tf.AutoModelForCausalLM if causal else tf.AutoModel
    config, layers, tokens, cache = _hf_sizes(tf, params)
    fit: dict[str, Any] = {}
    depth = _fit_depth(tf, auto, config, params, dtype, device, (layers, tokens, cache), fit)
    key = _model_key(params, config, dtype, value_dtype, device)
    if device.kind == "meta":
        kept = _Kept(key, _hf_model(auto, config, params, dtype, device, value_dtype), "")
    else:
        kept = _kept_or_built(key, lambda: _hf_model(auto, config, params, dtype, device, value_dtype), device)
    model = kept.model
    sig = inspect.signature(model.forward).parameters
    architecture = type(model).__name__
    attention = str(getattr(getattr(model, "config", config), "_attn_implementation", None) or "")
    model = _maybe_compiled(model, params)
    extra_kw: dict[str, Any] = {}
    if causal:
        # generate() asks for the last position's logits only; a full-vocabulary head over every prompt
        # token is work no user's prefill does.
        for name in ("logits_to_keep", "num_logits_to_keep"):
            if name in sig:
                extra_kw[name] = 1
                break
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab <= 0:
        raise Unsupported("the config names no vocab_size")
    info: dict[str, Any] = {
        "library": "transformers",
        "library_version": str(tf.__version__),
        "architecture": architecture,
        "attention": attention,
        "layers": layers,
        "depth": depth,
        "tokens": tokens,
        **({"logits_kept": 1} if extra_kw else {}),
        **({"fit": fit} if fit else {}),
    }
    call = _HfCall(model, sig, extra_kw, vocab, device.torch_device, kept=kept)
    if params["phase"] == "decode":
        run, items = call.decode(cache), 1
        info["cache"] = cache
    else:
        run, items = call.forward(tokens, causal), tokens
    built = _finish(run, params, model, info, items, device)
    if causal and params["phase"] != "decode" and not values.TRUTH.on:
        built.extra_answers = call.language
    if causal and params["phase"] == "prefill" and values.TRUTH.on:
        # Decode's truth continues this float64 cache (the same prompt) rather than computing it again.
        kept.prefill_cache = (tokens, getattr(built.first_output, "past_key_values", None))
    return built


@dataclass
class _HfCall:
    """One timed call of a built Transformers model, on token ids from the stream (values.py)."""

    model: Any
    sig: Any  # the parameters its forward takes
    extra_kw: dict[str, Any]
    vocab: int
    dev: Any
    prompt: torch.Tensor | None = None
    kept: _Kept | None = None

    def ids(self, n: int) -> torch.Tensor:
        return values.ints((1, n), torch.int64, self.dev, 0, self.vocab - 1).to(self.dev)

    def decode(self, cache: int) -> Callable[[], Any]:
        """One token on a KV cache of `cache` tokens, cropped back after every call so each sees the same."""
        model, extra_kw = self.model, self.extra_kw
        cache_name = "past_key_values" if "past_key_values" in self.sig else "cache" if "cache" in self.sig else None
        if cache_name is None:
            raise Unsupported(f"{type(model).__name__}.forward takes no KV cache")
        prompt = self.ids(cache)
        kv = self._prefill_cache(cache)
        if kv is None:
            with torch.inference_mode(), no_deprecations():
                kv = model(input_ids=prompt, use_cache=True, **extra_kw).past_key_values
        one = self.ids(1)
        roll_back = getattr(kv, "crop", None)
        if kv is None or (roll_back is None and not isinstance(kv, tuple)):
            raise Unsupported(f"decode: this model's cache ({type(kv).__name__}) cannot be rolled back between calls")

        def run() -> Any:
            with torch.inference_mode():
                out = model(input_ids=one, use_cache=True, **{cache_name: kv}, **extra_kw)
                if roll_back is not None:
                    roll_back(-1)  # every timed call sees the same cache length (negative: drop, in every version)
                return out

        return run

    def _prefill_cache(self, cache: int) -> Any:
        """The reference's prefill cache of the same model, cut to `cache` tokens (its prompt's first tokens are
        decode's whole prompt: the same draw), or None. Used once: the decode call then grows it."""
        kept = self.kept
        if not values.TRUTH.on or kept is None or kept.prefill_cache is None:
            return None
        tokens, kv = kept.prefill_cache
        kept.prefill_cache = None
        crop = getattr(kv, "crop", None)
        if tokens < cache or crop is None:
            return None
        if tokens > cache:
            crop(cache - tokens)  # negative: drop that many, in every version
        return kv

    def language(self) -> dict[str, torch.Tensor]:
        """What a language model's answers come to, beside the timed phase (numerics, untimed): the logits over
        up to LANGUAGE_ROWS of the prompt's positions, and a greedy continuation of GREEDY_TOKENS tokens."""
        prompt = self.prompt
        with torch.inference_mode(), no_deprecations():
            logits = self.model(input_ids=prompt).logits[0]
            rows = logits[:: max(1, logits.shape[0] // LANGUAGE_ROWS)][:LANGUAGE_ROWS]
            ids, kv, generated = prompt, None, []
            for _ in range(GREEDY_TOKENS):
                out = self.model(input_ids=ids, past_key_values=kv, use_cache=True)
                kv = out.past_key_values
                ids = out.logits[:, -1:].argmax(dim=-1)
                generated.append(ids)
        return {"logits_rows": rows, "greedy": torch.cat(generated, dim=1)[0]}

    def forward(self, tokens: int, causal: bool) -> Callable[[], Any]:
        """A prompt of `tokens` (a causal LM's prefill, with a fresh KV cache), or an encoder's forward."""
        model, extra_kw = self.model, self.extra_kw
        prompt = self.prompt = self.ids(tokens)
        kw = {"use_cache": True} if causal else {}

        def run() -> Any:
            with torch.inference_mode():
                return model(input_ids=prompt, **kw, **extra_kw)

        return run


# --- Diffusers ---


def _diffusers_model(
    df: Any, cfg: dict[str, Any], dtype: torch.dtype, device: Device, share: float, value_dtype: torch.dtype
) -> Any:
    name = cfg.get("_class_name")
    cls = getattr(df, name, None) if isinstance(name, str) and name.isidentifier() else None
    if cls is None:
        raise Unsupported(f"diffusers {df.__version__} has no model class {name!r}")
    with torch.device("meta"), no_deprecations():
        meta = cls.from_config(dict(cfg))
    need = sum(p.numel() for p in meta.parameters()) * torch.empty((), dtype=value_dtype).element_size()
    del meta
    capacity = _capacity(device)
    if capacity and need > share * capacity and not values.TRUTH.on:
        raise MemoryError(
            f"out of memory: its weights need {need / 2**30:.1f} GiB, over {share:.0%} of {capacity / 2**30:.1f} GiB"
        )
    with torch.device(device.torch_device), no_deprecations(), weights.parameters_without_values():
        model = cls.from_config(dict(cfg)).to(dtype)
    _give_values(model, device, value_dtype)
    model.eval()
    return model, need


def _is_video(vae: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv3d) for m in vae.modules())


def _diffusers_phase(params: dict[str, Any], dtype: torch.dtype, device: Device, value_dtype: torch.dtype) -> Built:
    df = _library("diffusers")
    cfg = params["config"]
    width, height = params["resolution"]
    phase = params["phase"]
    share = float(params.get("fit_share", 0.25))
    if device.kind == "meta":
        model, weights = _diffusers_model(df, cfg, dtype, device, share, value_dtype)
    else:
        key = _model_key(params, cfg, dtype, value_dtype, device)
        kept = _kept_or_built(key, lambda: _diffusers_model(df, cfg, dtype, device, share, value_dtype), device)
        model, weights = kept.model
    info: dict[str, Any] = {
        "library": "diffusers",
        "library_version": str(df.__version__),
        "architecture": type(model).__name__,
        "component": params.get("component", ""),
        "resolution": f"{width}x{height}",
        "weights_bytes": weights,
    }
    unit = 3.0**0.5  # uniform over +-sqrt(3): the unit variance of the Gaussian latents and embeddings it stands for

    def rand(*shape: int) -> torch.Tensor:
        return values.floats(tuple(shape), value_dtype, device.torch_device, low=-unit, high=unit)

    if phase in ("vae_decode", "vae_encode"):
        run = _vae_call(model, params, rand, info)
    elif phase == "step":
        run = _step_call(model, params, rand, device, info)
    else:
        raise Unsupported(f"phase {phase!r} is not run for a Diffusers {type(model).__name__}")
    return _finish(run, params, model, info, 1, device)


def _vae_call(
    model: Any, params: dict[str, Any], rand: Callable[..., torch.Tensor], info: dict[str, Any]
) -> Callable[[], Any]:
    """A VAE's decode of a random latent or encode of a random image (a video's frames, in the VAE's own time
    compression, probed), at the resolution; `info` gets the latent's shape, the factor and the frames."""
    cfg = params["config"]
    width, height = params["resolution"]
    video = _is_video(model)
    frames = int(params.get("frames") or 1)  # video frames, as a user counts them
    if frames > 1 and not video:
        raise Unsupported(f"--frames {frames}: {type(model).__name__} encodes images, not video")
    channels = int(cfg.get("in_channels", 3) or 3)
    patch = cfg.get("patch_size")
    if isinstance(patch, int) and patch > 1 and channels % (patch * patch) == 0:
        channels //= patch * patch  # the image is patchified into in_channels before the first conv
    # Five frames tell the time compression; one image needs no such probe, and on a CPU each probe frame of a
    # full-size video VAE costs seconds.
    probe, probe_frames = 128, 5 if frames > 1 else 1
    image = rand(1, channels, probe_frames, probe, probe) if video else rand(1, channels, probe, probe)
    with torch.inference_mode(), no_deprecations():
        small = _latent(model.encode(image))
    factor = probe // int(small.shape[-1])
    if width % factor or height % factor:
        raise Unsupported(f"--resolution {width}x{height} is not a multiple of this VAE's factor {factor}")
    # A causal video VAE keeps the first frame and compresses the rest in time (Wan: 1 + 4k frames -> 1 + k).
    per_latent = (probe_frames - 1) // max(1, int(small.shape[2]) - 1) if video and frames > 1 else 1
    latent_frames = (frames - 1) // per_latent + 1
    time_dims = (latent_frames,) if video else ()
    latent_shape = (1, int(small.shape[1]), *time_dims, height // factor, width // factor)
    info["latent"] = "x".join(str(d) for d in latent_shape)
    info["factor"] = factor
    if video:
        info["frames"] = 1 + per_latent * (latent_frames - 1)
    if params["phase"] == "vae_decode":
        latent = rand(*latent_shape)

        def run() -> Any:
            with torch.inference_mode():
                return model.decode(latent)

        return run
    image = rand(1, channels, *((1 + per_latent * (latent_frames - 1),) if video else ()), height, width)

    def encode() -> Any:
        with torch.inference_mode():
            return model.encode(image)

    return encode


def _step_call(
    model: Any, params: dict[str, Any], rand: Callable[..., torch.Tensor], device: Device, info: dict[str, Any]
) -> Callable[[], Any]:
    """One UNet denoising step on a random latent and prompt embedding (SDXL's added conditioning too)."""
    cfg = params["config"]
    width, height = params["resolution"]
    factor = int(params.get("vae_factor") or 8)
    sample = rand(1, int(cfg.get("in_channels", 4)), height // factor, width // factor)
    context = rand(1, TEXT_TOKENS, int(cfg.get("cross_attention_dim") or 768))
    step_kw: dict[str, Any] = {}
    if cfg.get("addition_embed_type") == "text_time":  # SDXL: pooled text and size conditioning
        time_dim = int(cfg.get("addition_time_embed_dim") or 256)
        pooled = int(cfg.get("projection_class_embeddings_input_dim") or 2816) - 6 * time_dim
        step_kw["added_cond_kwargs"] = {"text_embeds": rand(1, pooled), "time_ids": rand(1, 6)}
    timestep = torch.tensor([500], device=device.torch_device)
    unet = _maybe_compiled(model, params)

    def run() -> Any:
        with torch.inference_mode():
            return unet(sample, timestep, encoder_hidden_states=context, **step_kw)

    info["latent"] = "x".join(str(d) for d in sample.shape)
    return run


def _latent(encoded: Any) -> torch.Tensor:
    dist = getattr(encoded, "latent_dist", None)
    if dist is not None:
        return dist.mode()
    latent = getattr(encoded, "latent", None)
    if isinstance(latent, torch.Tensor):
        return latent
    if isinstance(encoded, tuple) and encoded and hasattr(encoded[0], "mode"):
        return encoded[0].mode()
    raise Unsupported(f"cannot read a latent from {type(encoded).__name__}")


# --- shared ---


def _maybe_compiled(model: Any, params: dict[str, Any]) -> Any:
    """The module under torch.compile for --compile's variants (called the same way as the module)."""
    return torch.compile(model) if params.get("compile") else model


def _finish(
    run: Callable[[], Any], params: dict[str, Any], model: Any, info: dict[str, Any], items: int, device: Device
) -> Built:
    fn = run
    info["compiled"] = bool(params.get("compile"))
    if values.TRUTH.on:
        # The float64 reference: one call, its answer; no census, no fallbacks to watch on the CPU.
        out = _quiet(fn)()
        return Built(_quiet(fn), None, None, items, (model,), info, first_output=out, has_first_output=True)
    if device.kind == "meta":
        # Nothing runs for real on the meta device, so nothing to time or fall back: the census is the whole
        # answer, taken strictly, and whatever stops it is the reason the caller reports.
        info["census"] = _census_strict(_quiet(fn), ranges=False)
        return Built(_quiet(fn), None, None, items, (model,), info)
    try:
        info["fallback_ops"], out = _first_call(fn, device.synchronize)
    except NotImplementedError as exc:
        _unsupported_op(exc)
        raise
    if not params.get("compile") and params.get("census", True) is not False:
        info["census"] = _census_of(_quiet(fn), device.synchronize)
    return Built(fn, None, None, items, (model,), info, first_output=out, has_first_output=True)


def build_phase(spec: dict[str, Any], device: Device) -> Built:
    """The phase, built and run once. Every device run of the build (construction, probes, the KV cache's fill)
    is watched for CPU fallbacks: the first call's are the phase's `fallback_ops`, the rest `setup_fallback_ops`."""
    params = spec["params"]
    value_dtype = dtype_of(spec.get("dtype", "fp32"))
    # The float64 reference builds the same model wider: its weights and inputs are the builds' values, widened.
    dtype = torch.float64 if values.TRUTH.on else value_dtype
    library = params.get("library")
    if library not in ("transformers", "diffusers"):
        raise ValueError(f"unknown whole-model library {library!r}")
    try:
        with FallbackWatch() as watch:
            phase = _transformers_phase if library == "transformers" else _diffusers_phase
            built = phase(params, dtype, device, value_dtype)
    except NotImplementedError as exc:
        _unsupported_op(exc)
        raise
    if watch.ops and built.info is not None and device.kind != "meta":
        built.info["setup_fallback_ops"] = watch.ops
    return built


# --- the census alone (`bench --list`) ---

CENSUS_REASON_CHARS = 300


@dataclass
class MetaDevice(Device):
    """The phase builders' device for a census without weights: tensors carry shapes and dtypes but no data,
    so a model of any size builds in no memory, and every block is built (no memory limit to fit)."""

    kind: str = "meta"

    def memory_limit(self) -> int | None:
        return None


def _census_reason(exc: BaseException) -> str:
    """One line: an Unsupported says it in its own words; anything else is named, as the meta device's."""
    own = isinstance(exc, Unsupported)
    text = " ".join((str(exc) if own else f"{type(exc).__name__}: {exc}").split())  # torch's span lines
    text = text if len(text) <= CENSUS_REASON_CHARS else text[: CENSUS_REASON_CHARS - 3] + "..."
    return text if own else f"on the meta device: {text}"


def census_phase(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """One call's op census of a whole-model phase, taken on the meta device: (census, "") or (None, why not).

    The ops are those the model asks for at its real size and dtype; a device's own kernels may split them
    further. Every block is built and the weights are random (none are read), whatever the measured run
    would do: a census of a prefix would undercount, and reading weights is what the meta device avoids."""
    if spec.get("kind") != "model_phase":
        return None, f"{spec.get('kind')!r} is not a whole-model phase"
    params = {**spec.get("params", {}), "depth": None, "compile": False, "weights": "random", "path": None}
    try:
        built = build_phase({**spec, "params": params}, MetaDevice())
    except Exception as exc:  # the census is an extra: any failure is its reason, never the caller's error
        return None, _census_reason(exc)
    census = (built.info or {}).get("census")
    if not isinstance(census, dict):
        return None, "the census came back empty"
    return census, ""
