"""How much of a whole-model phase its ops, each replayed alone, add up to: in one process, no paired engine.

Builds a Llama-shaped model from a config (random weights) with mpsup's own phase builder, takes the phase's op
census, rebuilds every distinct call with worker/replay.py, and compares the sum of count x time per call with
the phase's own time. Times are the minimum of many calls (robust to preemption on a shared host; a quiet
machine's median sits near it), synchronised on a GPU. This is the yardstick for `phase_attribution`'s coverage.

    python benchmarks/op_coverage.py --help
    python benchmarks/op_coverage.py --hidden 1024 --intermediate 2816 --layers 4 --tokens 128
    python benchmarks/op_coverage.py --device cuda --dtype bf16 --hidden 4096 --intermediate 14336 --layers 4 \\
        --heads 32 --kv-heads 8 --vocab 128256 --tokens 512
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.worker.device import Device
from mpsup.worker.replay import build_op
from mpsup.worker.whole_model import build_phase


def best(fn: Callable[[], Any], sync: Callable[[], None], n: int) -> float:
    fn()
    sync()
    low = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        low = min(low, time.perf_counter() - t0)
    return low


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=128, help="prefill length and decode's cache")
    ap.add_argument("--calls", type=int, default=60, help="calls per minimum (default 60)")
    opts = ap.parse_args()
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": opts.hidden,
        "intermediate_size": opts.intermediate,
        "num_hidden_layers": opts.layers,
        "num_attention_heads": opts.heads,
        "num_key_value_heads": opts.kv_heads,
        "vocab_size": opts.vocab,
        "max_position_embeddings": max(4096, 2 * opts.tokens),
    }
    device = Device(opts.device)
    for phase in ("prefill", "decode"):
        params = {"library": "transformers", "config": config, "causal": True, "tokens": opts.tokens, "phase": phase}
        built = build_phase(
            {"name": f"model/{phase}", "kind": "model_phase", "dtype": opts.dtype, "params": params}, device
        )
        census = (built.info or {}).get("census") or {}
        whole = best(built.fn, device.synchronize, opts.calls)
        total, by_op, failed = 0.0, {}, 0
        for e in census.get("replay") or []:
            try:
                op = build_op(e, device)
            except Exception:
                failed += e["count"]
                continue
            t = best(op.fn, device.synchronize, opts.calls) * e["count"]
            total += t
            name = e["overload"].split(".")[1]
            by_op[name] = by_op.get(name, 0.0) + t
        whole = min(whole, best(built.fn, device.synchronize, opts.calls))
        top = sorted(by_op.items(), key=lambda kv: -kv[1])[:6]
        print(
            f"{phase}: whole {whole * 1e3:.3f} ms; its {census.get('calls')} aten calls replayed alone add up to "
            f"{total * 1e3:.3f} ms = {total / whole:.0%} of it ({failed} calls not replayable); by op: "
            + ", ".join(f"{k} {v / whole:.0%}" for k, v in top)
        )


if __name__ == "__main__":
    main()
