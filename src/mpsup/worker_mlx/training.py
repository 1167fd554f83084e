"""The MLX side of a training step (`bench --train` with `--candidate mlx:PYTHON`): one step as mlx_lm's LoRA
trainer takes it (mlx_lm/tuner/trainer.py `train`): `nn.value_and_grad` of `default_loss` (the shifted
cross-entropy over the batch, mean over the tokens that carry it), the optimizer's `update`, compiled with
`mx.compile` over the model's, the optimizer's and the random state, and evaluated every step.

The same definitions as the torch side (worker/training.py): the batch and length, LoRA of the same rank and scale
on the same projections of every block (mlx_lm's `linear_to_lora_layers` with those keys), or every parameter
(`full`), and the same optimizer by name with the same learning rate. Loaded by file location beside main.py,
which passes in what it shares (stdlib + mlx + mlx_lm only, nothing of mpsup)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten

OPTIMIZERS = {
    "adamw": "AdamW",
    "adam": "Adam",
    "sgd": "SGD",
    "adafactor": "Adafactor",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
}
# The torch side's fit (worker/training.py): a block's saved tensors per token of its width and its MLP's, a
# weight's copies under `full` (itself, its gradient, AdamW's two moments), and float32 logits with their gradient.
SAVED_HIDDEN = 12
SAVED_INTER = 3
FULL_COPIES = 4


class Unsupported(Exception):
    """This MLX environment cannot run the step: main.py turns it into its own Unsupported."""


def training_depth(
    model: Any,
    config: dict[str, Any],
    params: dict[str, Any],
    itemsize: int,
    bytes_of: Callable[[Any], int],
    depth_for: Callable[[dict[str, Any], int, int, int, int], int],
) -> int:
    """Blocks to build for a step, by the torch side's rule: the weights (times FULL_COPIES under `full`), the
    logits, and each block's saved activations."""
    layers = int(config.get("num_hidden_layers") or 0)
    blocks = getattr(model, "layers", None)
    if not (layers and isinstance(blocks, list) and len(blocks) == layers):
        return layers
    batch, tokens = int(params["batch"]), int(params["tokens"])
    hidden = int(config.get("hidden_size") or 0)
    inter = int(config.get("intermediate_size") or 4 * hidden)
    vocab = int(config.get("vocab_size") or 0)
    copies = FULL_COPIES if params.get("train") == "full" else 1
    saved = batch * tokens * (SAVED_HIDDEN * hidden + SAVED_INTER * inter) * itemsize
    logits = batch * tokens * vocab * (itemsize + 12)
    total, block = bytes_of(model.parameters()), bytes_of(blocks[0].parameters())
    return depth_for(params, copies * total + logits, copies * block, saved, layers)


def _optimizer(params: dict[str, Any]) -> Any:
    name = str(params.get("optimizer") or "adamw")
    cls = getattr(optim, OPTIMIZERS.get(name, ""), None)
    if cls is None:
        raise Unsupported(f"mlx.optimizers has no optimizer {name!r}")
    return cls(learning_rate=float(params.get("lr") or 1e-5))


def _adapt(model: Any, params: dict[str, Any]) -> dict[str, Any]:
    """LoRA on the asked-for projections of every block (frozen base), or every parameter trainable."""
    model.freeze()
    if params.get("train") == "full":
        if any("scales" in name for name, _ in tree_flatten(model.parameters())):
            raise Unsupported("--train full: quantised weights (--mlx-bits) cannot be trained; train LoRA on them")
        model.unfreeze()
        return {}
    from mlx_lm.tuner.utils import linear_to_lora_layers

    lora = params.get("lora") or {}
    targets = [str(t) for t in lora.get("targets") or ("q_proj", "v_proj")]
    blocks = getattr(model, "layers", None) or []
    keys = sorted({p for b in blocks[:1] for p, _ in b.named_modules() if p.rsplit(".", 1)[-1] in targets})
    if not keys:
        raise Unsupported(f"LoRA: mlx_lm's model has no {', '.join(targets)} in its blocks")
    config = {"rank": int(lora.get("rank") or 8), "scale": float(lora.get("scale") or 1.0), "dropout": 0.0}
    linear_to_lora_layers(model, len(blocks), {**config, "keys": keys})
    return {**config, "targets": targets, "keys": keys}


def train_call(model: Any, vocab: int, params: dict[str, Any], info: dict[str, Any]) -> tuple[Any, int]:
    """(the timed step, tokens that carry a loss per step); `info` gets what trained and how."""
    from mlx_lm.tuner.trainer import default_loss

    batch, tokens = int(params["batch"]), int(params["tokens"])
    lora = _adapt(model, params)
    trainable = sum(int(v.size) for _, v in tree_flatten(model.trainable_parameters()))
    if not trainable:
        raise Unsupported("no parameter of this model is trainable here")
    optimizer = _optimizer(params)
    # The state made now, not at the first update: the compiled step then sees one state structure and compiles
    # once (mlx_lm's loop compiles its first two steps; the timed steps are alike either way).
    optimizer.init(model.trainable_parameters())
    ids = mx.random.randint(0, vocab, (batch, tokens))
    lengths = mx.array([[1, tokens - 1]] * batch)  # default_loss's mask: every one of the tokens - 1 targets
    mx.eval(ids, lengths)
    value_and_grad = nn.value_and_grad(model, default_loss)
    state = [model.state, optimizer.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(inputs: Any, spans: Any) -> Any:
        (loss, count), grad = value_and_grad(model, inputs, spans)
        optimizer.update(model, grad)
        return loss, count

    model.train()

    def run() -> None:
        loss, count = step(ids, lengths)
        mx.eval(state, loss, count)

    info["batch"] = batch
    info["tokens"] = tokens
    info["compiled"] = True
    info["loss"] = "mlx_lm default_loss: shifted cross-entropy, mean over batch x (tokens - 1)"
    info["train"] = {
        "mode": str(params.get("train") or "lora"),
        "parameters": sum(int(v.size) for _, v in tree_flatten(model.parameters())),
        "trainable_parameters": trainable,
        "dropout": "off (LoRA dropout 0)",
        **({"lora": {"rank": lora["rank"], "scale": lora["scale"], "targets": lora["targets"]}} if lora else {}),
    }
    info["optimizer"] = {
        "name": type(optimizer).__name__,
        "requested": str(params.get("optimizer_impl") or "default"),
        "implementation": "mlx (mx.compile)",
        "lr": float(params.get("lr") or 1e-5),
    }
    return run, batch * (tokens - 1)
