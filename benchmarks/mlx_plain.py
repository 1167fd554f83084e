"""Time a model folder's prefill and decode with plain mlx_lm, in this process, by the definitions `mpsup bench`
uses for its MLX side: prefill of P tokens on a fresh cache with the head on the last position only, decode of
one token on a C-token cache trimmed back by one after every call. Nothing of mpsup is imported: run it with the
MLX environment's own interpreter, and set its medians beside `mpsup bench --candidate mlx:PYTHON`'s.

    /path/to/mlx-env/bin/python benchmarks/mlx_plain.py MODEL_FOLDER --tokens 64 --cache 64 --calls 20

Prints one JSON line per phase: the median seconds per call, the lowest and highest, and MLX's peak memory.

`--save-random OUT` instead writes the random weights (safetensors) and a word-level tokenizer beside a copy of the
config, so that `python -m mlx_lm benchmark --model OUT` (which loads weights and a tokenizer) runs the same model."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache
from mlx_lm.utils import _get_classes

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def build(folder: Path, dtype: str | None) -> tuple[nn.Module, dict]:
    config = json.loads((folder / "config.json").read_text())
    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    model.set_dtype(DTYPES[dtype or str(config.get("torch_dtype") or "float32")])
    mx.eval(model.parameters())
    return model, config


def last_only(model: nn.Module) -> None:
    """The head on the last position only, as generation (and torch's logits_to_keep=1) needs."""
    trunk = model.model

    class LastOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = trunk

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(super().__getattr__("inner"), name)

        def __call__(self, *a, **k):  # type: ignore[no-untyped-def]
            return self.inner(*a, **k)[:, -1:, :]

    model.model = LastOnly()


def timed(fn, calls: int, warmup: int) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a model folder with config.json (random weights are built from it)")
    ap.add_argument("--tokens", type=int, default=64, help="prefill length P (default 64)")
    ap.add_argument("--cache", type=int, default=None, help="decode's cache length C (default: --tokens)")
    ap.add_argument("--calls", type=int, default=20, help="timed calls per phase (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: the config's torch_dtype")
    ap.add_argument("--phase", choices=("prefill", "decode", "both"), default="both")
    ap.add_argument("--save-random", type=Path, default=None, metavar="OUT", help="write weights + a tokenizer; stop")
    args = ap.parse_args()
    model, config = build(args.folder, args.dtype)
    if args.save_random is not None:
        save_random(model, config, args.save_random)
        return
    vocab = int(config["vocab_size"])
    mx.random.seed(0)
    cache_len = args.cache or args.tokens
    if args.phase in ("decode", "both"):
        mx.reset_peak_memory()
        cache = make_prompt_cache(model)
        model(mx.random.randint(0, vocab, (1, cache_len)), cache=cache)
        mx.eval([c.state for c in cache])
        one = mx.random.randint(0, vocab, (1, 1))

        def decode() -> None:
            mx.eval(model(one, cache=cache))
            trim_prompt_cache(cache, 1)

        report("decode", timed(decode, args.calls, args.warmup), cache=cache_len)
    if args.phase in ("prefill", "both"):
        last_only(model)
        mx.reset_peak_memory()
        prompt = mx.random.randint(0, vocab, (1, args.tokens))

        def prefill() -> None:
            cache = make_prompt_cache(model)
            mx.eval(model(prompt, cache=cache), [c.state for c in cache])

        report("prefill", timed(prefill, args.calls, args.warmup), tokens=args.tokens)


def save_random(model: nn.Module, config: dict, out: Path) -> None:
    """The model's random weights and a tokenizer of vocab_size made-up words: what mlx_lm's loader needs."""
    from mlx.utils import tree_flatten
    from tokenizers import Tokenizer, models, pre_tokenizers

    out.mkdir(parents=True, exist_ok=False)
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out / "config.json").write_text(json.dumps(config, indent=1))
    vocab = {f"w{i}": i for i in range(int(config["vocab_size"]))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "w0", "eos_token": "w1"})
    )


def report(phase: str, times: list[float], **what: int) -> None:
    doc = {
        "phase": phase,
        **what,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "calls": len(times),
        "peak_memory": int(mx.get_peak_memory()),
        "mlx": mx.__version__,
    }
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
