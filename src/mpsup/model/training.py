"""A training step as a measured phase (`bench --model PATH --train [lora|full]`): its options, the parameters the
worker builds it from, and what one step holds in memory beyond the weights.

One step is what a fine-tuning loop repeats: zero_grad, a forward on a batch, the loss, backward, the optimizer's
step, synchronised. A causal language model's loss is the shifted cross-entropy over token ids from the value
stream (tokens/s counts the tokens that carry a loss: batch x (length - 1)); a Diffusers UNet's is the
noise-prediction mean squared error on one latent batch. LoRA is mlx-lm's (rank 8 on q_proj and v_proj, scale 20)
for a language model and the Diffusers LoRA scripts' (rank 4 on the attention projections) for a UNet; `full`
trains every parameter. The optimizer is AdamW as `torch.optim.AdamW` builds it in each build, unless
`--optimizer` names another (and, after a colon, the implementation: for-loop, foreach or fused).

Nothing here imports torch: the worker builds the step in the measured environment (worker/training.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpsup.errors import UserError

PHASE = "train_step"
MODES = ("lora", "full")
# torch.optim's names as mpsup takes them (lower case), each with its MLX counterpart in mlx.optimizers.
OPTIMIZERS = {
    "adamw": "AdamW",
    "adam": "Adam",
    "sgd": "SGD",
    "adafactor": "Adafactor",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
}
IMPLEMENTATIONS = ("for-loop", "foreach", "fused")
DEFAULT_OPTIMIZER = "adamw"
# mlx-lm's LoRA trainer's defaults (mlx_lm/lora.py): batch 4, learning rate 1e-5, rank 8, scale 20, no dropout.
LM_BATCH = 4
UNET_BATCH = 1  # a Mac's DreamBooth or LoRA run of a UNet holds one image a step
LEARNING_RATE = 1e-5
LM_LORA = {"rank": 8, "scale": 20.0, "targets": ("q_proj", "v_proj")}
# diffusers' examples/text_to_image/train_text_to_image_lora.py: rank 4, alpha = rank, these four projections.
UNET_LORA = {"rank": 4, "scale": 1.0, "targets": ("to_q", "to_k", "to_v", "to_out.0")}
# Sequence length per sample, where --train-tokens is not given: a common fine-tuning length on a GPU; a CPU
# runs the same definitions at a length it can time in seconds.
TRAIN_TOKENS = {"cpu": 64}
DEFAULT_TRAIN_TOKENS = 512
MAX_BATCH = 4096
MAX_TRAIN_TOKENS = 1_000_000


@dataclass(frozen=True)
class TrainOptions:
    """What `--train`, `--train-batch`, `--train-tokens` and `--optimizer` asked for, checked."""

    mode: str = "lora"
    batch: int | None = None  # None: LM_BATCH for a language model, UNET_BATCH for a UNet
    tokens: int | None = None  # None: the device's default (train_tokens)
    optimizer: str = DEFAULT_OPTIMIZER
    implementation: str | None = None  # None: whatever the build's torch.optim chooses for the device


def train_tokens(device: str) -> int:
    return TRAIN_TOKENS.get(device, DEFAULT_TRAIN_TOKENS)


def parse_optimizer(text: str | None) -> tuple[str, str | None]:
    """`adamw`, `AdamW:fused`, `sgd:for-loop` -> (name, implementation or None); one line for anything else."""
    if text is None:
        return DEFAULT_OPTIMIZER, None
    name, _, impl = text.strip().partition(":")
    name = name.strip().lower()
    impl = impl.strip().lower().replace("forloop", "for-loop").replace("for_loop", "for-loop")
    if name not in OPTIMIZERS or (impl and impl not in IMPLEMENTATIONS):
        names = ", ".join(OPTIMIZERS)
        raise UserError(
            f"--optimizer {text!r}: expected one of {names}, optionally with :for-loop, :foreach or :fused "
            "(e.g. adamw:fused)"
        )
    return name, impl or None


def check_train(
    mode: str | None, batch: int | None, tokens: int | None, optimizer: str | None, model: bool
) -> TrainOptions | None:
    """The request's training options as TrainOptions, or None where no training step is asked for; a one-line
    refusal for an option that means nothing alone or a value out of range."""
    if mode is None:
        for flag, value in (("--train-batch", batch), ("--train-tokens", tokens), ("--optimizer", optimizer)):
            if value is not None:
                raise UserError(f"{flag} sets the training step: add --train (lora or full)")
        return None
    if not model:
        raise UserError("--train measures your model's training step: give --model PATH")
    if mode not in MODES:
        raise UserError(f"--train {mode!r}: expected lora (the default) or full")
    if batch is not None and not 1 <= batch <= MAX_BATCH:
        raise UserError(f"--train-batch {batch}: expected a whole number from 1 to {MAX_BATCH}")
    if tokens is not None and not 2 <= tokens <= MAX_TRAIN_TOKENS:
        raise UserError(f"--train-tokens {tokens}: expected a whole number from 2 to {MAX_TRAIN_TOKENS}")
    name, impl = parse_optimizer(optimizer)
    return TrainOptions(mode, batch, tokens, name, impl)


def train_params(opts: TrainOptions, kind: str, tokens: int) -> dict[str, Any]:
    """What the worker needs beyond the model's own parameters: the mode, the batch, the sequence length (a
    language model's), LoRA's shape, the optimizer and the learning rate."""
    lora = LM_LORA if kind == "lm" else UNET_LORA
    batch = opts.batch or (LM_BATCH if kind == "lm" else UNET_BATCH)
    doc: dict[str, Any] = {
        "train": opts.mode,
        "batch": batch,
        "optimizer": opts.optimizer,
        "optimizer_impl": opts.implementation,
        "lr": LEARNING_RATE,
    }
    if kind == "lm":
        doc["tokens"] = tokens
    if opts.mode == "lora":
        doc["lora"] = {"rank": lora["rank"], "scale": lora["scale"], "targets": list(lora["targets"])}  # type: ignore[call-overload]
    return doc


# --- memory: what one step holds beyond the weights ---

# Tensors of a block's width one step saves for backward per token (the norms' inputs and outputs, q, k, v, the
# attention's output, the residual sums) and of the MLP's width (gate, up, their product).
SAVED_HIDDEN = 12
SAVED_INTER = 3
# Parameters, their gradients and AdamW's two moments: what `full` holds per weight, against LoRA's one.
FULL_COPIES = 4


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def lm_weights(cfg: dict[str, Any]) -> int:
    """A decoder's parameter count from its config: each block's attention and MLP, the embedding and an untied
    head (norms and biases are too small to count)."""
    hidden = _int(cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("n_embd"), 0)
    inter = _int(cfg.get("intermediate_size") or cfg.get("d_ff"), 4 * hidden)
    heads = _int(cfg.get("num_attention_heads") or cfg.get("n_head"), 1)
    kv = _int(cfg.get("num_key_value_heads"), heads)
    head_dim = _int(cfg.get("head_dim"), hidden // heads if heads else 0)
    layers = _int(cfg.get("num_hidden_layers") or cfg.get("num_layers") or cfg.get("n_layer"), 1)
    vocab = _int(cfg.get("vocab_size"), 0)
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    return layers * (attention + 3 * hidden * inter) + vocab * hidden + head


def lm_step_bytes(cfg: dict[str, Any], batch: int, tokens: int, itemsize: int, mode: str) -> tuple[int, int]:
    """(bytes beyond the weights, of which attention scores) one language-model step holds: every block's saved
    activations, the float32 logits with their gradient, and under `full` each weight's gradient and AdamW state.
    The scores count where a device's attention keeps them for backward (MPS's; the CPU's and CUDA's
    memory-efficient kernels do not)."""
    hidden = _int(cfg.get("hidden_size") or cfg.get("d_model") or cfg.get("n_embd"), 0)
    inter = _int(cfg.get("intermediate_size") or cfg.get("d_ff"), 4 * hidden)
    heads = _int(cfg.get("num_attention_heads") or cfg.get("n_head"), 1)
    layers = _int(cfg.get("num_hidden_layers") or cfg.get("num_layers") or cfg.get("n_layer"), 1)
    vocab = _int(cfg.get("vocab_size"), 0)
    n = batch * tokens
    saved = layers * n * (SAVED_HIDDEN * hidden + SAVED_INTER * inter) * itemsize
    scores = layers * batch * heads * tokens * tokens * itemsize * 2
    logits = n * vocab * (itemsize + 4 * 3)  # the logits, their float32 copy, log-softmax and its gradient
    states = (FULL_COPIES - 1) * lm_weights(cfg) * itemsize if mode == "full" else 0
    return saved + scores + logits + states, scores
