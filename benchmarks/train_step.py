#!/usr/bin/env python3
"""A LoRA fine-tuning step of an 8B-shaped Llama (forward, shifted cross-entropy, backward, AdamW) through
`mpsup bench --train`, with AdamW's for-loop and fused implementations as the two "builds" (this interpreter behind
two wrapper scripts whose sitecustomize forces the implementation), and beside each a plain PEFT/Transformers loop
timed the same way (each step awaited, the median over steps), run by the same wrapper. Prints every figure as
text: each side's step time, tokens/s (tokens that carry a loss) and peak memory, mpsup's against the plain loop's,
then the report's sentence.

    python benchmarks/train_step.py wheels
        what this interpreter lacks to run the rest (mpsup's own needs, peft and its needs), and the
        `pip download` line that fetches them as wheels for a machine without a network
    python benchmarks/train_step.py run --device cuda [--size 8b] [--batch 4] [--tokens 512] [--budget 1]
        [--depth N] [--visits N] [--numerics] [--no-ops] [--out DIR]
        makes the folder (config.json alone: random weights), runs mpsup and the plain loops, prints the table;
        exit 1 where mpsup's step time and the plain loop's differ by more than --agree (default 5%)
    python benchmarks/train_step.py run --device cpu --size tiny --batch 2 --tokens 16 --budget 0.05
        the same on a CPU with a tiny model (what tests/test_benchmark_tools.py runs)

mpsup fits the blocks that both builds' models hold at once on the device (`--depth` forces a number); the plain
loops run the depth mpsup ran, and mpsup's own figure is read unscaled (per step of the blocks built)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.real_size import _LLAMA, SHAPES  # noqa: E402

TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
# AdamW's implementation forced in each "build": every AdamW the process makes takes it.
HOOK = """import functools
import torch
_init = torch.optim.AdamW.__init__
@functools.wraps(_init)
def _forced(self, *args, **kwargs):
    kwargs.update({flags})
    _init(self, *args, **kwargs)
torch.optim.AdamW.__init__ = _forced
"""
BUILDS = {"for-loop": "foreach=False, fused=False", "fused": "fused=True, foreach=False"}
LORA = {"rank": 8, "scale": 20.0, "targets": ["q_proj", "v_proj"]}  # mpsup's (mlx-lm's) LoRA defaults
LR = 1e-5
# What the run needs beyond torch: mpsup's own dependencies and the measured environment's transformers and peft
# (with peft's own needs); each by import name and distribution name.
NEEDS = {
    "typer": "typer",
    "rich": "rich",
    "packaging": "packaging",
    "platformdirs": "platformdirs",
    "transformers": "transformers",
    "peft": "peft",
    "accelerate": "accelerate",
    "psutil": "psutil",
    "yaml": "pyyaml",
    "tqdm": "tqdm",
    "safetensors": "safetensors",
    "huggingface_hub": "huggingface_hub",
}


def wheels() -> int:
    missing = [dist for name, dist in NEEDS.items() if importlib.util.find_spec(name) is None]
    if not missing:
        print(f"{sys.executable} has everything this script needs: {', '.join(NEEDS.values())}")
        return 0
    print(f"{sys.executable} lacks: {', '.join(missing)}")
    print("fetch them as wheels where pip reaches an index (the device machine's Python: 3.12, x86_64):")
    print(
        "  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "
        "--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "
        + " ".join(missing)
    )
    print("and install them there: python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl")
    return 1


# --- the plain loop: no mpsup, run by each build's wrapper ---


def plain(args: argparse.Namespace) -> None:
    import peft
    import torch
    import transformers

    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    config = transformers.AutoConfig.from_pretrained(args.folder)
    config.num_hidden_layers = args.depth
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.requires_grad_(False)
    lora = peft.LoraConfig(
        r=LORA["rank"], lora_alpha=LORA["rank"] * LORA["scale"], target_modules=LORA["targets"], lora_dropout=0.0
    )
    model = peft.get_peft_model(model, lora)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.tokens), device=device)
    targets = ids[:, 1:].reshape(-1)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), targets)
        loss.backward()
        optimizer.step()
        sync()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    impl = (
        "fused" if optimizer.defaults.get("fused") else "foreach" if optimizer.defaults.get("foreach") else "for-loop"
    )
    peak = int(torch.cuda.max_memory_allocated()) if args.device == "cuda" else None
    doc = {"median_s": statistics.median(times), "calls": len(times), "implementation": impl, "peak_bytes": peak}
    sys.stdout.write(json.dumps(doc) + "\n")


# --- the run ---


def _folder(out: Path, size: str, dtype: str) -> Path:
    config = {**_LLAMA, **(TINY if size == "tiny" else SHAPES[size])}
    config["torch_dtype"] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    folder = out / f"llama-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def _builds(out: Path) -> dict[str, Path]:
    pythons = {}
    for name, flags in BUILDS.items():
        hook = out / f"hook-{name}"
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "sitecustomize.py").write_text(HOOK.format(flags="{" + ", ".join(_kw(flags)) + "}"))
        python = out / f"python-{name}"
        inherited = os.environ.get("PYTHONPATH", "")
        path = f"{hook}:{inherited}" if inherited else str(hook)
        python.write_text(f'#!/bin/sh\nexport PYTHONPATH="{path}"\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        pythons[name] = python
    return pythons


def _kw(flags: str) -> list[str]:
    return [f"'{k.strip()}': {v.strip()}" for k, v in (f.split("=") for f in flags.split(","))]


def _mpsup(args: argparse.Namespace, *more: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MPSUP_HOME": str(args.out / "mpsup-home")}
    env["PYTHONPATH"] = f"{ROOT / 'src'}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "mpsup", *more], env=env, capture_output=True, text=True, check=False)


def _side(record: dict[str, Any], label: str) -> dict[str, Any]:
    """mpsup's figures of one side of the step: its median per step of the blocks built, tokens/s, peak, facts."""
    w = next(w for w in record["workloads"] if w["name"] == "model/train_step")
    env = w["envs"][label]
    info = env.get("phase") or {}
    memory = env.get("memory") or {}
    return {
        "median_s": env.get("median"),
        "tokens": env.get("items_per_call"),
        "peak_bytes": memory.get("peak_allocated") or memory.get("workload_peak"),
        "depth": info.get("depth"),
        "layers": info.get("layers"),
        "implementation": (info.get("optimizer") or {}).get("implementation"),
        "status": env.get("status") or w.get("status"),
        "reason": env.get("reason") or w.get("reason"),
    }


def _gib(x: Any) -> str:
    return f"{x / 2**30:.2f} GiB" if isinstance(x, (int, float)) else "-"


def run(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    folder = _folder(args.out, args.size, args.dtype)
    builds = _builds(args.out)
    started = time.time()
    cmd = ["bench", "--model", str(folder), "--device", args.device, "--train", "lora", "--train-batch",
           str(args.batch), "--train-tokens", str(args.tokens), "--only", "model/train_step",
           "--baseline", str(builds["for-loop"]), "--candidate", str(builds["fused"]), "--budget", str(args.budget),
           "--no-smoke", "--json"]  # fmt: skip
    cmd += ["--depth", str(args.depth)] if args.depth else []
    cmd += [] if args.numerics else ["--no-numerics"]
    cmd += [] if args.ops else ["--no-ops"]
    cmd += ["--visits", str(args.visits)] if args.visits else []
    what = f"{args.size}, {args.dtype}, batch {args.batch} x {args.tokens} tokens"
    print(f"mpsup {' '.join(cmd[:2])} ... ({what})", flush=True)
    bench = _mpsup(args, *cmd)
    if bench.returncode not in (0, 1):
        print(bench.stderr[-3000:])
        return 2
    path = Path(json.loads(bench.stdout)["path"])
    record = json.loads(path.read_text())
    sides = {"for-loop": _side(record, "baseline"), "fused": _side(record, "candidate")}
    print(f"mpsup bench: {time.time() - started:.0f} s, record {path}", flush=True)
    depth = next((s["depth"] for s in sides.values() if s["depth"]), None) or args.depth
    if not depth or any(s["median_s"] is None for s in sides.values()):
        print("mpsup measured no step:", {k: (s["status"], s["reason"]) for k, s in sides.items()})
        return 2
    worst = 0.0
    print(
        f"\nLoRA step, {depth} of {sides['fused']['layers']} blocks, {args.batch} x {args.tokens} tokens, {args.dtype}"
    )
    print(f"{'build':10} {'mpsup s/step':>13} {'plain s/step':>13} {'mpsup/plain':>11} {'tokens/s':>10} "
          f"{'peak (mpsup)':>13} {'peak (plain)':>13}  implementation (mpsup, plain)")  # fmt: skip
    for name, python in builds.items():
        proc = subprocess.run(
            [str(python), __file__, "plain", str(folder), "--device", args.device, "--depth", str(depth),
             "--batch", str(args.batch), "--tokens", str(args.tokens), "--dtype", args.dtype,
             "--calls", str(args.calls), "--warmup", str(args.warmup)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"{name}: the plain loop failed: {proc.stderr[-2000:]}")
            return 2
        mine, theirs = sides[name], json.loads(proc.stdout.strip().splitlines()[-1])
        ratio = mine["median_s"] / theirs["median_s"]
        worst = max(worst, abs(ratio - 1))
        tokens = mine["tokens"] / mine["median_s"] if mine["tokens"] else float("nan")
        print(
            f"{name:10} {mine['median_s']:13.4f} {theirs['median_s']:13.4f} {ratio:11.3f} {tokens:10.0f} "
            f"{_gib(mine['peak_bytes']):>13} {_gib(theirs['peak_bytes']):>13}  "
            f"{mine['implementation']}, {theirs['implementation']}"
        )
    report = _mpsup(args, "report", "--run", str(record["id"]), "--json")
    doc = json.loads(report.stdout) if report.stdout.strip() else {}
    print(f"\nreport: {doc.get('sentence', report.stderr.strip()[-500:])}")
    agree = worst <= args.agree
    print(f"\nmpsup's step and the plain loop's agree within {worst:.1%} ({'within' if agree else 'over'} "
          f"{args.agree:.0%}); total {time.time() - started:.0f} s")  # fmt: skip
    return 0 if agree else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("wheels", help="what this interpreter lacks, and how to fetch it as wheels")
    r = sub.add_parser("run", help="mpsup against the plain loop, fused against for-loop AdamW")
    r.add_argument("--device", default="cuda", choices=("cuda", "cpu", "mps"))
    r.add_argument("--size", default="8b", choices=("tiny", *SHAPES))
    r.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    r.add_argument("--batch", type=int, default=4, help="samples a step (default 4, mlx-lm's)")
    r.add_argument("--tokens", type=int, default=512, help="tokens a sample (default 512)")
    r.add_argument("--depth", type=int, default=None, help="blocks to build (default: what mpsup fits)")
    r.add_argument("--budget", type=float, default=1.0, help="mpsup's --budget (default 1)")
    r.add_argument("--visits", type=int, default=None, help="mpsup's --visits (default: its own)")
    r.add_argument("--calls", type=int, default=20, help="the plain loop's timed steps (default 20)")
    r.add_argument("--warmup", type=int, default=3, help="the plain loop's untimed steps first (default 3)")
    r.add_argument("--numerics", action="store_true", help="also judge gradients against float64 (CPU, slow)")
    r.add_argument("--no-ops", dest="ops", action="store_false", help="skip replaying the step's ops (quicker)")
    r.add_argument("--agree", type=float, default=0.05, help="the largest mpsup/plain difference (default 0.05)")
    r.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mpsup-train-step")
    p = sub.add_parser("plain", help="(internal) the plain PEFT/Transformers loop in this interpreter")
    p.add_argument("folder", type=Path)
    p.add_argument("--device", default="cuda")
    p.add_argument("--depth", type=int, required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.command == "wheels":
        return wheels()
    if args.command == "plain":
        plain(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
