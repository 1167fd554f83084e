"""A training step, timed as a phase: zero_grad, the forward on one batch, the loss, backward and the optimizer's
step, built in the measured environment with its own transformers or diffusers (and peft for LoRA).

- A causal language model's step: token ids from the value stream (values.py) with an all-ones attention mask (a
  data collator's), the shifted cross-entropy computed in float32 from the logits (float64 in the reference), mean
  over the batch x (length - 1) tokens that carry it.
- A Diffusers UNet's step: a noisy latent, a timestep and a prompt embedding from the stream, the mean squared
  error of the predicted noise against the stream's noise.
- LoRA through peft (`get_peft_model` for a language model, the UNet's own `add_adapter`), its adapters' weights
  drawn from the stream by name (lora_B small, not peft's zeros: lora_A's first gradient is then not zero by
  construction); `full` trains every parameter. Dropout is off (`model.eval()`): its random draws would differ
  between builds, and autograd works the same in either mode.
- The optimizer as `torch.optim` builds it in this build (AdamW unless told), with the implementation that ran
  (for-loop, foreach, fused) read from the ops its step called.

The first step is the build's answer (numerics): the loss, each trainable parameter group's gradient by role
(q_proj, v_proj, mlp, norms, embed...; by ranges of blocks where the model is deep) and each group's weights after
the optimizer's step, sampled as outputs.py samples. The float64 reference builds the same step on the CPU. A
language model's LoRA step is streamed: its frozen weights drawn a module at a time (weights.JustInTime), each block
checkpointed (its forward run again in the backward, its weights drawn again), so it holds one block's weights and
activations, the output head and each block's input, never the model. A full step (every weight's gradient and
AdamW's moments) and a UNet's hold the whole model in float64. Where that would take over half the machine's
memory it says so, and the step's gradients are not compared."""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import census, outputs, values, weights
from .census import _census_of, _census_strict
from .core import Built, FallbackWatch, Unsupported, dtype_of, no_deprecations
from .device import Device
from .train_groups import parameter_groups, sample
from .whole_model import (
    MAX_LAYERS,
    TEXT_TOKENS,
    MetaDevice,
    _blocks,
    _bytes_of,
    _capacity,
    _census_reason,
    _construct,
    _depth_for,
    _first_call,
    _hf_config,
    _hf_model,
    _library,
    _set_depth,
    _unsupported_op,
    _widen_buffers,
    forget,
    over_reference_share,
)

PHASE = "train_step"
# A small lora_B: the adapter moves each output by a few parts in a thousand, as after a few steps of training.
LORA_B_BOUND = 1e-3
# Tensors of a block's width a step saves per token (norms, q, k, v, attention, residuals) and of the MLP's.
SAVED_HIDDEN = 12
SAVED_INTER = 3
FULL_COPIES = 4  # a weight, its gradient and AdamW's two moments
# The LoRA step's float64 reference streamed (one block at a time); off, it holds the whole model, as a full step's.
STREAM_LORA_REFERENCE = True


def _grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    """Each parameter's gradient; zeros where backward left none (a parameter the step did not reach)."""
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]


class _OpNames(TorchDispatchMode):  # type: ignore[misc]
    """The aten ops called while open: which implementation the optimizer's step ran."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.add(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def implementation(ops: set[str]) -> str:
    """fused, foreach or for-loop, from the ops an optimizer's step called."""
    if any(op.startswith("_fused_") for op in ops):
        return "fused"
    if any(op.startswith("_foreach_") for op in ops):
        return "foreach"
    return "for-loop"


@dataclass
class Step:
    """One training step of a built model: `run` is what is timed; `answer` is the first step, with what numerics
    compares."""

    optimizer: Any  # a torch.optim optimizer, of whichever class the step was asked for
    groups: dict[str, list[torch.nn.Parameter]]
    loss: Callable[[], torch.Tensor]
    keep: tuple[Any, ...] = ()
    implementation: str = ""
    stage: list[str] = field(default_factory=lambda: census.STAGE)

    def run(self) -> None:
        stage = self.stage
        stage[0] = "forward"
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        stage[0] = "backward"
        loss.backward()
        stage[0] = "optimizer"
        self.optimizer.step()
        stage[0] = ""

    def answer(self) -> outputs.NamedAnswers:
        """The first step: the loss, each group's gradient and each group's weights after the optimizer's step
        (judged against their own scale: an update a dtype cannot hold is lost in it, as in training), the
        optimizer's implementation noted as it ran."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        answers: dict[str, torch.Tensor] = {"loss": loss.detach().to("cpu")}
        answers.update({f"grad.{g}": sample(_grads(ps)) for g, ps in self.groups.items()})
        with _OpNames() as seen:
            self.optimizer.step()
        self.implementation = implementation(seen.names)
        answers.update({f"weights.{g}": sample(list(ps)) for g, ps in self.groups.items()})
        return outputs.NamedAnswers(answers)


# --- the pieces both kinds of model share ---


def _peft() -> Any:
    """peft, or the one line that says which package to add."""
    try:
        return importlib.import_module("peft")
    except ImportError:
        raise Unsupported(
            f"LoRA needs peft, which this environment ({sys.executable}) lacks: `pip install peft` there, "
            "or measure every parameter with --train full"
        ) from None


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A loss's input in float32 at least (float64 stays: the reference's)."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


OPTIMIZER_CLASSES = {
    "adamw": "AdamW",
    "adam": "Adam",
    "sgd": "SGD",
    "adafactor": "Adafactor",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
}


def _optimizer(params: dict[str, Any], trainable: list[torch.nn.Parameter]) -> tuple[Any, str]:
    """The optimizer as this build's torch.optim makes it: its defaults but the learning rate, the implementation
    forced where asked (the reference takes the default: float64 on the CPU, where every one is exact enough)."""
    name = str(params.get("optimizer") or "adamw")
    cls = getattr(torch.optim, OPTIMIZER_CLASSES.get(name, ""), None)
    if cls is None:
        raise Unsupported(f"torch {torch.__version__} has no optimizer {name!r} (torch.optim)")
    impl = params.get("optimizer_impl")
    kwargs: dict[str, Any] = {"lr": float(params.get("lr") or 1e-5)}
    if impl and not values.TRUTH.on:
        takes = set(inspect.signature(cls).parameters)
        wanted = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[str(impl)]
        missing = [k for k in wanted if k not in takes]
        if missing:
            raise Unsupported(f"torch {torch.__version__}'s {cls.__name__} has no {impl} implementation")
        kwargs.update(wanted)
    try:
        return cls(trainable, **kwargs), str(impl or "default")
    except (RuntimeError, ValueError) as exc:  # fused on a device or dtype this build has no kernel for
        raise Unsupported(f"{cls.__name__}({impl}): {' '.join(str(exc).split())[:200]}") from None


@torch.no_grad()
def _draw_adapters(named: list[tuple[str, torch.nn.Parameter]], value_dtype: torch.dtype) -> None:
    """The adapters' weights from the stream, by name (peft's init draws from torch's generator, which no two
    builds share): lora_A uniform at 1/sqrt(fan-in), lora_B small."""
    for name, p in named:
        if p.is_meta:
            continue
        fan = max(1, math.prod(p.shape[1:])) if p.dim() >= 2 else 1
        bound = LORA_B_BOUND if ".lora_B." in name else math.sqrt(3.0 / fan)
        key = name.removeprefix("base_model.model.")
        drawn = values.floats(tuple(p.shape), value_dtype, p.device, low=-bound, high=bound, seed=values.name_seed(key))
        p.copy_(drawn.to(p.device, p.dtype))


def _reference_fits(need: int, streamed: bool = False) -> None:
    """The reference's float64 step (the whole model with its gradients and activations, or streamed: one block's
    and the head's): refused, in one line, where that is over REFERENCE_MEMORY_SHARE of the machine."""
    if over := over_reference_share(need):
        holds = (
            "one block's weights and activations, the output head and each block's input"
            if streamed
            else "the whole model with its gradients and every block's activations"
        )
        raise MemoryError(
            f"out of memory: the float64 training reference holds {holds}, {need / 2**30:.1f} GiB, {over}"
        )


def _adapters_in_memory(model: torch.nn.Module) -> None:
    """A streamed model's adapters on the CPU: peft puts them where their base layer's weight is, the meta device."""
    for sub in model.modules():
        for key, p in list(sub._parameters.items()):
            if p is not None and p.is_meta and p.requires_grad:
                sub._parameters[key] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), requires_grad=True)


def _checkpointed(blocks: torch.nn.ModuleList) -> None:
    """Each block's forward under activation checkpointing: the first pass keeps its input only, and the backward
    runs it again, its weights drawn again, just before it needs them."""
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        forward = block.forward

        def again(*args: Any, _forward: Callable[..., Any] = forward, **kwargs: Any) -> Any:
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        block.forward = again  # type: ignore[method-assign]


def _trainable(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _lora(model: Any, params: dict[str, Any], peft: Any, value_dtype: torch.dtype, unet: bool) -> tuple[Any, str]:
    """The model with peft's LoRA on the asked-for projections, its adapters drawn from the stream; the adapters'
    dtype (peft keeps them in float32 under a half-precision model)."""
    lora = params.get("lora") or {}
    rank = int(lora.get("rank") or 8)
    targets = [str(t) for t in lora.get("targets") or ()]
    alpha = rank * float(lora.get("scale") or 1.0)
    model.requires_grad_(False)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none")
    with no_deprecations():
        if unet and hasattr(model, "add_adapter"):
            model.add_adapter(config)  # diffusers' own, as its LoRA training scripts call it
        else:
            model = peft.get_peft_model(model, config)
    _adapters_in_memory(model)
    named = _trainable(model)
    if not named:
        raise Unsupported(f"LoRA: this model has no {', '.join(targets)} to adapt; --train full trains every parameter")
    _draw_adapters(named, value_dtype)
    model.eval()  # the wrapper and the adapters' modules too: no dropout draws anywhere
    return model, str(named[0][1].dtype).removeprefix("torch.")


def _train_info(
    model: Any, named: list[tuple[str, torch.nn.Parameter]], params: dict[str, Any], adapter_dtype: str
) -> dict[str, Any]:
    total = sum(p.numel() for p in model.parameters())
    train: dict[str, Any] = {
        "mode": str(params.get("train") or "lora"),
        "parameters": int(total),
        "trainable_parameters": int(sum(p.numel() for _, p in named)),
        "dropout": "off (model.eval())",
    }
    if train["mode"] == "lora":
        peft = sys.modules.get("peft")
        lora = params.get("lora") or {}
        train["lora"] = {
            "rank": int(lora.get("rank") or 8),
            "scale": float(lora.get("scale") or 1.0),
            "targets": [str(t) for t in lora.get("targets") or ()],
            "adapter_dtype": adapter_dtype,
            "peft_version": str(getattr(peft, "__version__", "")),
        }
    return train


def _finish(step: Step, params: dict[str, Any], info: dict[str, Any], items: int, device: Device) -> Built:
    """The first step (the answer, watched for CPU fallbacks), then the census of another; the reference takes the
    answer alone, the meta device the census alone."""
    if values.TRUTH.on:
        out = step.answer()
        return Built(lambda: None, None, None, items, step.keep, info, first_output=out, has_first_output=True)
    if device.kind == "meta":
        info["census"] = _census_strict(step.run, ranges=False)
        return Built(step.run, None, None, items, step.keep, info)
    try:
        info["fallback_ops"], out = _first_call(step.answer, device.synchronize)
    except NotImplementedError as exc:
        _unsupported_op(exc)
        raise
    info["optimizer"]["implementation"] = step.implementation
    if params.get("census", True) is not False:
        info["census"] = _census_of(step.run, device.synchronize)
    return Built(step.run, None, None, items, step.keep, info, first_output=out, has_first_output=True)


# --- a causal language model ---


def _lm_model(
    auto: Any,
    config: Any,
    params: dict[str, Any],
    dtype: torch.dtype,
    device: Device,
    value_dtype: torch.dtype,
    streamed: bool = False,
) -> Any:
    """The whole model with its values, on the device; the reference's in float64 on the CPU, all at once or
    (`streamed`) a module at a time as it runs."""
    if params.get("weights") == "real" and params.get("path"):
        on = values.TRUTH.on
        values.TRUTH.on = False  # loaded in the builds' dtype, noted as theirs, then widened (exactly)
        try:
            model = _hf_model(auto, config, params, value_dtype, Device("cpu") if on else device, value_dtype)
        finally:
            values.TRUTH.on = on
        if on and streamed:
            _widen_buffers(model)
            weights.JustInTime(model, value_dtype, widen=True, for_backward=True)
            return model
        return model.to(dtype) if on else model
    with torch.device(device.torch_device), weights.parameters_without_values():
        model = _construct(auto, config, dtype)
    if streamed:
        weights.JustInTime(model, value_dtype, for_backward=True)
    elif device.kind != "meta":
        weights.materialize(model, device.torch_device, value_dtype)
    return model


def _lm_fit(
    auto: Any,
    config: Any,
    params: dict[str, Any],
    dtype: torch.dtype,
    device: Device,
    fit: dict[str, Any],
    streamed: bool = False,
) -> int:
    """Blocks to build: all, --depth, or as many as fit with the step's activations, gradients and optimizer
    state (learnt on the meta device); the reference checks what it holds against the machine."""
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    batch, tokens = int(params["batch"]), int(params["tokens"])
    full = params.get("train") == "full"
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 0) or 4 * hidden)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    with torch.device("meta"):
        meta = _construct(auto, config, dtype)
    total = _bytes_of(meta)
    blocks = _blocks(meta, layers) if layers else None
    block = _bytes_of(blocks[0]) if blocks is not None and len(blocks) else 0
    del meta
    itemsize = torch.empty((), dtype=dtype).element_size()
    saved = batch * tokens * (SAVED_HIDDEN * hidden + SAVED_INTER * inter) * itemsize
    logits = batch * tokens * vocab * (itemsize + 12)
    copies = FULL_COPIES if full else 1
    if values.TRUTH.on:
        depth = int(params.get("depth") or layers)
        if streamed:
            head = vocab * hidden * itemsize
            inputs = depth * batch * tokens * hidden * itemsize
            _reference_fits(block + saved + head + inputs + logits, streamed=True)
        else:
            _reference_fits(copies * total * depth // max(1, layers) + depth * saved + logits)
        return depth
    depth = layers
    if block:
        depth = _depth_for(params, copies * total + logits, copies * block, saved, layers, device, fit)
    return depth


def _lm_step(params: dict[str, Any], device: Device, value_dtype: torch.dtype) -> Built:
    tf = _library("transformers")
    if not params.get("causal"):
        raise Unsupported("a training step is measured for a causal language model (its shifted cross-entropy)")
    config = _hf_config(tf, params["config"])
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    if layers > MAX_LAYERS:
        raise Unsupported(f"num_hidden_layers {layers} is beyond any real model (at most {MAX_LAYERS})")
    batch, tokens = int(params["batch"]), int(params["tokens"])
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and 0 < limit < tokens:
        raise Unsupported(f"--train-tokens {tokens} exceeds this model's max_position_embeddings {limit}")
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab <= 0:
        raise Unsupported("the config names no vocab_size")
    peft = _peft() if params.get("train") == "lora" else None
    dtype = torch.float64 if values.TRUTH.on else value_dtype
    streamed = values.TRUTH.on and peft is not None and STREAM_LORA_REFERENCE
    auto = tf.AutoModelForCausalLM
    fit: dict[str, Any] = {}
    depth = _lm_fit(auto, config, params, dtype, device, fit, streamed)
    if depth < layers:
        _set_depth(config, depth)
    target = Device("cpu") if values.TRUTH.on else device
    model = _lm_model(auto, config, params, dtype, target, value_dtype, streamed)
    model.eval()
    architecture = type(model).__name__
    attention = str(getattr(getattr(model, "config", config), "_attn_implementation", None) or "")
    adapter_dtype = ""
    if peft is not None:
        model, adapter_dtype = _lora(model, params, peft, value_dtype, unet=False)
        if streamed:
            blocks = _blocks(model, depth)
            if blocks is None:
                raise Unsupported("the streamed float64 reference finds no repeated blocks in this model")
            _checkpointed(blocks)
    else:
        model.requires_grad_(True)
    named = _trainable(model)
    optimizer, requested = _optimizer(params, [p for _, p in named])
    dev = target.torch_device
    ids = values.ints((batch, tokens), torch.int64, dev, 0, vocab - 1).to(dev)
    targets = ids[:, 1:].reshape(-1)
    mask = torch.ones_like(ids)  # as a data collator hands a batch of full-length samples to the model

    def loss() -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        return torch.nn.functional.cross_entropy(_wide(logits[:, :-1]).reshape(-1, logits.shape[-1]), targets)

    step = Step(optimizer, parameter_groups(named, depth), loss, keep=(model, optimizer, ids))
    info: dict[str, Any] = {
        "library": "transformers",
        "library_version": str(tf.__version__),
        "architecture": architecture,
        "attention": attention,
        "layers": layers,
        "depth": depth,
        "tokens": tokens,
        "batch": batch,
        "loss": "shifted cross-entropy in float32, mean over batch x (tokens - 1)",
        "train": _train_info(model, named, params, adapter_dtype),
        "optimizer": _optimizer_info(optimizer, requested),
        **({"fit": fit} if fit else {}),
    }
    return _finish(step, params, info, batch * (tokens - 1), target)


def _optimizer_info(optimizer: Any, requested: str) -> dict[str, Any]:
    return {
        "name": type(optimizer).__name__,
        "requested": requested,
        "implementation": "",
        "lr": float(optimizer.defaults.get("lr") or 0.0),
    }


# --- a Diffusers UNet ---


def _unet_step(params: dict[str, Any], device: Device, value_dtype: torch.dtype) -> Built:
    df = _library("diffusers")
    cfg = params["config"]
    name = cfg.get("_class_name")
    cls = getattr(df, name, None) if isinstance(name, str) and name.isidentifier() else None
    if cls is None:
        raise Unsupported(f"diffusers {df.__version__} has no model class {name!r}")
    peft = _peft() if params.get("train") == "lora" else None
    truth = values.TRUTH.on
    dtype = torch.float64 if truth else value_dtype
    batch = int(params["batch"])
    width, height = params["resolution"]
    factor = int(params.get("vae_factor") or 8)
    with torch.device("meta"), no_deprecations():
        meta = cls.from_config(dict(cfg))
    count = sum(p.numel() for p in meta.parameters())
    del meta
    copies = FULL_COPIES if params.get("train") == "full" else 1
    itemsize = torch.empty((), dtype=dtype).element_size()
    need = copies * count * itemsize
    if truth:
        _reference_fits(need)
    else:
        capacity, share = _capacity(device), float(params.get("fit_share", 0.25))
        if capacity and need > share * capacity:
            raise MemoryError(
                f"out of memory: its weights, gradients and optimizer state need {need / 2**30:.1f} GiB, over "
                f"{share:.0%} of {capacity / 2**30:.1f} GiB"
            )
    target = Device("cpu") if truth else device
    dev = target.torch_device
    with torch.device(dev), no_deprecations(), weights.parameters_without_values():
        model = cls.from_config(dict(cfg)).to(dtype)
    if target.kind != "meta":
        weights.materialize(model, dev, value_dtype)
    model.eval()
    adapter_dtype = ""
    if peft is not None:
        model, adapter_dtype = _lora(model, params, peft, value_dtype, unet=True)
    else:
        model.requires_grad_(True)
    named = _trainable(model)
    optimizer, requested = _optimizer(params, [p for _, p in named])
    unit = 3.0**0.5  # unit variance, as the inference step's latents and embeddings

    def rand(*shape: int) -> torch.Tensor:
        return values.floats(tuple(shape), value_dtype, dev, low=-unit, high=unit).to(dev)

    channels = int(cfg.get("in_channels", 4))
    noisy = rand(batch, channels, height // factor, width // factor)
    noise = rand(batch, int(cfg.get("out_channels", channels)), height // factor, width // factor)
    context = rand(batch, TEXT_TOKENS, int(cfg.get("cross_attention_dim") or 768))
    step_kw: dict[str, Any] = {}
    if cfg.get("addition_embed_type") == "text_time":  # SDXL: pooled text and size conditioning
        time_dim = int(cfg.get("addition_time_embed_dim") or 256)
        pooled = int(cfg.get("projection_class_embeddings_input_dim") or 2816) - 6 * time_dim
        step_kw["added_cond_kwargs"] = {"text_embeds": rand(batch, pooled), "time_ids": rand(batch, 6)}
    timestep = torch.full((batch,), 500, device=dev)

    def loss() -> torch.Tensor:
        pred = model(noisy, timestep, encoder_hidden_states=context, **step_kw).sample
        return torch.nn.functional.mse_loss(_wide(pred), _wide(noise))

    step = Step(optimizer, parameter_groups(named, 0, unet=True), loss, keep=(model, optimizer, noisy, context))
    info: dict[str, Any] = {
        "library": "diffusers",
        "library_version": str(df.__version__),
        "architecture": type(model).__name__,
        "component": str(params.get("component", "")),
        "resolution": f"{width}x{height}",
        "latent": "x".join(str(d) for d in noisy.shape),
        "batch": batch,
        "weights_bytes": count * torch.empty((), dtype=value_dtype).element_size(),
        "loss": "noise-prediction mean squared error in float32",
        "train": _train_info(model, named, params, adapter_dtype),
        "optimizer": _optimizer_info(optimizer, requested),
    }
    return _finish(step, params, info, batch, target)


def build_train_step(spec: dict[str, Any], device: Device) -> Built:
    """The training step, built and run once (its answer), its census taken; every device run of the build is
    watched for CPU fallbacks, as a phase's are. The model is never kept: the step trains it."""
    params = spec["params"]
    value_dtype = dtype_of(spec.get("dtype", "fp32"))
    forget()  # an inference phase's kept model is memory the step needs, and the step would change its weights
    library = params.get("library")
    if library not in ("transformers", "diffusers"):
        raise ValueError(f"unknown whole-model library {library!r}")
    try:
        with FallbackWatch() as watch, no_deprecations():
            build_step = _lm_step if library == "transformers" else _unet_step
            built = build_step(params, device, value_dtype)
    except NotImplementedError as exc:
        _unsupported_op(exc)
        raise
    finally:
        census.STAGE[0] = ""
    if watch.ops and built.info is not None and device.kind != "meta":
        built.info["setup_fallback_ops"] = watch.ops
    return built


def census_train_step(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """One step's op census on the meta device (`bench --list`): the forward's, backward's and optimizer's ops at
    the model's real size, every block built, no weights; (census, "") or (None, why not)."""
    params = {**spec.get("params", {}), "depth": None, "weights": "random", "path": None}
    try:
        built = build_train_step({**spec, "params": params}, MetaDevice())
    except Exception as exc:  # the census is an extra: any failure is its reason, never the caller's error
        return None, _census_reason(exc)
    doc = (built.info or {}).get("census")
    return (doc, "") if isinstance(doc, dict) else (None, "the census came back empty")
