"""How much of a whole-model phase its ops, each replayed alone, add up to: in one process, no paired engine.

Builds a model from a config (random weights) with mpsup's own phase builder (a Llama-shaped folder's prefill
and decode, or a Diffusers AutoencoderKL's decode), takes the phase's op census, rebuilds every distinct call
with worker/replay.py, and compares the sum of count x time per call with the phase's own time. Times are the
minimum of many calls (robust to preemption on a shared host; a quiet machine's median sits near it),
synchronised on a GPU. This is the yardstick for `phase_attribution`'s coverage.

With --per-op it also times every call inside the phase (a dispatch mode around each op, the minimum per call
site over --inside runs) and prints, per op, the in-phase time against the replayed one: where the two differ
is what the replay gets wrong; the whole phase less the in-phase ops is the Python and dispatch between ops.

    python benchmarks/op_coverage.py --help
    python benchmarks/op_coverage.py --hidden 1024 --intermediate 2816 --layers 4 --tokens 128 --per-op 16 --clock cpu
    python benchmarks/op_coverage.py --model vae --resolution 128 --per-op 16
    python benchmarks/op_coverage.py --device cuda --dtype bf16 --hidden 4096 --intermediate 14336 --layers 4 \\
        --heads 32 --kv-heads 8 --vocab 128256 --tokens 512
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.model.op_replay import call_tensors, describe_call, reuse_bytes
from mpsup.worker.device import Device
from mpsup.worker.replay import build_op, describe
from mpsup.worker.whole_model import build_phase

VAE = {
    "_class_name": "AutoencoderKL",
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "block_out_channels": [32, 64],
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 8,
}


# The clock every figure reads: wall time (perf_counter), or with --clock cpu the process's CPU time, which a
# shared host's preemption does not inflate (on a CPU device; its worker threads' spinning counts too).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def best(fn: Callable[[], Any], sync: Callable[[], None], n: int) -> float:
    fn()
    sync()
    low = float("inf")
    clock = CLOCK[0]
    for _ in range(n):
        t0 = clock()
        fn()
        sync()
        low = min(low, clock() - t0)
    return low


def inside(fn: Callable[[], Any], sync: Callable[[], None], runs: int) -> dict[str, float]:
    """Each distinct call's time inside the phase: per call site the minimum over `runs` phase calls, summed
    per census key (the key the census and the replay share)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    times: list[list[float]] = []
    keys: list[str] = []
    clock = CLOCK[0]

    class Timer(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            sync()
            t0 = clock()
            out = func(*args, **(kwargs or {}))
            sync()
            times[-1].append(clock() - t0)
            if len(times) == 1:
                call = {"overload": str(func), "args": describe(args, [], False)}
                if kwargs:
                    call["kwargs"] = describe(kwargs, [], False)
                keys.append(json.dumps(call, sort_keys=True))
            return out

    for _ in range(runs):
        times.append([])
        with Timer():
            fn()
    per_key: dict[str, float] = {}
    for i, key in enumerate(keys):
        per_key[key] = per_key.get(key, 0.0) + min(run[i] for run in times if i < len(run))
    return per_key


def _key(e: dict[str, Any]) -> str:
    call = {"overload": e["overload"], "args": e["args"]}
    if e.get("kwargs"):
        call["kwargs"] = e["kwargs"]
    return json.dumps(call, sort_keys=True)


def _strip_ranges(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip_ranges(v) for v in value]
    if isinstance(value, dict):
        return {k: _strip_ranges(v) for k, v in value.items() if k != "range"}
    return value


def phases(opts: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    if opts.model == "vae":
        side = int(opts.resolution)
        params = {"library": "diffusers", "config": VAE, "resolution": [side, side], "phase": "vae_decode"}
        return [("vae_decode", params)]
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
    return [
        (p, {"library": "transformers", "config": config, "causal": True, "tokens": opts.tokens, "phase": p})
        for p in ("prefill", "decode")
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama", choices=("llama", "vae"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokens", type=int, default=128, help="prefill length and decode's cache")
    ap.add_argument("--resolution", type=int, default=128, help="the VAE's square image side (default 128)")
    ap.add_argument("--calls", type=int, default=60, help="calls per minimum (default 60)")
    ap.add_argument("--per-op", type=int, default=0, metavar="N", help="print the N ops in-phase vs replayed")
    ap.add_argument("--inside", type=int, default=10, help="phase runs timed op by op for --per-op (default 10)")
    ap.add_argument("--hot", action="store_true", help="replay each op on one set of inputs (no rotated weights)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads before anything runs")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"), help="wall (default) or process CPU time")
    ap.add_argument("--json", type=Path, help="write every figure here")
    opts = ap.parse_args()
    if opts.clock == "cpu":
        CLOCK[0] = time.process_time
    if opts.threads:
        torch.set_num_threads(opts.threads)
    device = Device(opts.device)
    figures: dict[str, Any] = {"threads": torch.get_num_threads(), "phases": {}}
    for phase, params in phases(opts):
        built = build_phase(
            {"name": f"model/{phase}", "kind": "model_phase", "dtype": opts.dtype, "params": params}, device
        )
        census = (built.info or {}).get("census") or {}
        whole = best(built.fn, device.synchronize, opts.calls)
        total, rows, failed = 0.0, [], 0
        reuse = 0 if opts.hot else reuse_bytes(census)
        for e in census.get("replay") or []:
            if reuse and any(t.get("param") for t in call_tensors(e)):
                e = {**e, "reuse_bytes": reuse}  # as model/op_replay.py writes it into the op's workload
            try:
                op = build_op(e, device)
            except Exception:
                failed += e["count"]
                continue
            t = best(op.fn, device.synchronize, opts.calls) * e["count"]
            total += t
            rows.append({"key": _key(e), "count": e["count"], "replay_s": t, **describe_call(e)})
        whole = min(whole, best(built.fn, device.synchronize, opts.calls))
        by_op: dict[str, float] = {}
        for r in rows:
            by_op[r["op"]] = by_op.get(r["op"], 0.0) + r["replay_s"]
        top = sorted(by_op.items(), key=lambda kv: -kv[1])[:6]
        print(
            f"{phase}: whole {whole * 1e3:.3f} ms; its {census.get('calls')} aten calls replayed alone add up to "
            f"{total * 1e3:.3f} ms = {total / whole:.0%} of it ({failed} calls not replayable); by op: "
            + ", ".join(f"{k} {v / whole:.0%}" for k, v in top)
        )
        fig: dict[str, Any] = {"whole_s": whole, "replayed_s": total, "not_replayable": failed, "calls": rows}
        if opts.per_op:
            per_key = inside(built.fn, device.synchronize, opts.inside)
            stripped = {json.dumps(_strip_ranges(json.loads(k)), sort_keys=True): v for k, v in per_key.items()}
            for r in rows:
                r["inside_s"] = stripped.get(json.dumps(_strip_ranges(json.loads(r["key"])), sort_keys=True))
            in_ops = sum(per_key.values())
            fig["inside_s"] = in_ops
            print(
                f"  inside the phase its ops take {in_ops * 1e3:.3f} ms ({in_ops / whole:.0%} of the phase; the rest, "
                f"{(whole - in_ops) * 1e3:.3f} ms, is Python and dispatch between ops); replayed / inside "
                f"{total / in_ops:.0%}"
            )
            grouped: dict[tuple[str, str], dict[str, float]] = {}
            for r in rows:
                g = grouped.setdefault((r["op"], r["shapes"]), {"n": 0, "replay": 0.0, "inside": 0.0})
                g["n"] += r["count"]
                g["replay"] += r["replay_s"]
                g["inside"] += r.get("inside_s") or 0.0
            ranked = sorted(grouped.items(), key=lambda kv: -abs(kv[1]["inside"] - kv[1]["replay"]))
            print(f"  {'op':<30} {'shapes':<44} {'n':>4} {'inside ms':>10} {'replay ms':>10} {'ratio':>6}")
            for (name, shapes), g in ranked[: opts.per_op]:
                ratio = g["replay"] / g["inside"] if g["inside"] else float("nan")
                print(
                    f"  {name:<30} {shapes[:44]:<44} {int(g['n']):>4} {g['inside'] * 1e3:>10.3f} "
                    f"{g['replay'] * 1e3:>10.3f} {ratio:>6.2f}"
                )
        figures["phases"][phase] = fig
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
