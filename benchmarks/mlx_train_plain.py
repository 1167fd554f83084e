"""Time a LoRA training step with plain mlx_lm, in this process, the way mlx_lm's own trainer runs it
(mlx_lm/tuner/trainer.py `train`): the model's linears adapted by `linear_to_lora_layers`, `nn.value_and_grad` of
`default_loss`, the optimizer's `update`, the step compiled with `mx.compile` over the model's, the optimizer's and
the random state, `mx.eval` after every step. The same definitions as `mpsup bench --train --candidate mlx:PYTHON`
(rank 8, scale 20, q_proj and v_proj of every block, AdamW at 1e-5, batch x tokens random ids), so its median sits
beside that run's MLX figure. Nothing of mpsup is imported: run it with the MLX environment's interpreter.

    /path/to/mlx-env/bin/python benchmarks/mlx_train_plain.py MODEL_FOLDER --batch 4 --tokens 64 --calls 20

Prints one JSON line: the median seconds per step, the lowest and highest, tokens/s (batch x (tokens - 1) a step)
and MLX's peak memory."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten
from mlx_lm.tuner.trainer import default_loss
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import _get_classes

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a model folder with config.json (random weights are built from it)")
    ap.add_argument("--batch", type=int, default=4, help="samples a step (default 4)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens a sample (default 64)")
    ap.add_argument("--calls", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--full", action="store_true", help="train every parameter instead of LoRA")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: the config's torch_dtype")
    args = ap.parse_args()
    config = json.loads((args.folder / "config.json").read_text())
    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    model.set_dtype(DTYPES[args.dtype or str(config.get("torch_dtype") or "float32")])
    model.freeze()
    if args.full:
        model.unfreeze()
    else:
        keys = ["self_attn.q_proj", "self_attn.v_proj"]
        linear_to_lora_layers(model, len(model.layers), {"rank": 8, "scale": 20.0, "dropout": 0.0, "keys": keys})
    mx.eval(model.parameters())
    optimizer = optim.AdamW(learning_rate=1e-5)
    optimizer.init(model.trainable_parameters())
    ids = mx.random.randint(0, int(config["vocab_size"]), (args.batch, args.tokens))
    lengths = mx.array([[1, args.tokens - 1]] * args.batch)
    value_and_grad = nn.value_and_grad(model, default_loss)
    state = [model.state, optimizer.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(inputs, spans):  # type: ignore[no-untyped-def]
        (loss, count), grad = value_and_grad(model, inputs, spans)
        optimizer.update(model, grad)
        return loss, count

    model.train()

    def once() -> None:
        loss, count = step(ids, lengths)
        mx.eval(state, loss, count)

    for _ in range(args.warmup):
        once()
    mx.reset_peak_memory()
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    doc = {
        "phase": "train_step",
        "mode": "full" if args.full else "lora",
        "batch": args.batch,
        "tokens": args.tokens,
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "calls": len(times),
        "tokens_per_s": args.batch * (args.tokens - 1) / median,
        "trainable": sum(int(v.size) for _, v in tree_flatten(model.trainable_parameters())),
        "peak_memory": int(mx.get_peak_memory()),
        "mlx": mx.__version__,
    }
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
