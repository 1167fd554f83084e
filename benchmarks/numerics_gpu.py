#!/usr/bin/env python3
"""Same answers? on a GPU (issue 45's GPU figures): paired runs of Llama- and MoE-shaped folders whose verdicts
are known before they run, each through `mpsup bench` and `mpsup report --json`, printed as one table.

  tf32        float32 Llama; the candidate turns TF32 matmuls on: less accurate, a matmul named
  math-attn   bf16 Llama; the candidate runs attention by the math kernel instead of the fused ones: said as is
  aa-dense    float32 Llama against itself: identical (or same accuracy where a kernel is nondeterministic)
  aa-moe      float32 MoE (Qwen3-MoE-shaped: index_add_, nondeterministic on CUDA) against itself, --repeat times:
              same accuracy with a floor above zero, never less accurate
  allocator   float32 Llama; the candidate turns the caching allocator off (a speed-only change): identical or
              same accuracy

Candidates are the same interpreter behind a wrapper script whose sitecustomize (or environment) makes the
change. Runs on a CPU too (`--device cpu`: the TF32 and attention switches then change nothing, and say so).
Usage: python benchmarks/numerics_gpu.py --device cuda [--cases tf32,aa-moe] [--repeat 3] [--budget 0.3]
Exit 1 when a case's verdict is not the expected one."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
MOE = {
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "moe_intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
HOOKS = {
    "tf32": "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n",
    "math-attn": (
        "import torch\n"
        "for name in ('enable_flash_sdp', 'enable_mem_efficient_sdp', 'enable_cudnn_sdp'):\n"
        "    getattr(torch.backends.cuda, name, lambda on: None)(False)\n"
    ),
}
ANY = ("identical", "same accuracy", "less accurate", "more accurate")  # reported as it is, whatever it is
# case: (config, dtype, candidate hook or env or None for --aa, expected verdicts per phase, replay ops)
CASES: dict[str, tuple[dict, str, str | None, tuple[str, ...], bool]] = {
    "tf32": (LLAMA, "float32", "hook:tf32", ("less accurate",), True),
    "math-attn": (
        LLAMA,
        "bfloat16",
        "hook:math-attn",
        ("identical", "same accuracy", "less accurate", "more accurate"),
        True,
    ),
    "aa-dense": (LLAMA, "float32", None, ("identical", "same accuracy"), False),
    "aa-moe": (MOE, "float32", None, ("identical", "same accuracy"), False),
    "allocator": (LLAMA, "float32", "env:PYTORCH_NO_CUDA_MEMORY_CACHING=1", ("identical", "same accuracy"), False),
}


def candidate(root: Path, how: str) -> Path:
    kind, _, what = how.partition(":")
    wrapper = root / f"python-{what.split('=')[0].lower()}"
    if kind == "hook":
        hook = root / f"hook-{what}"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(HOOKS[what])
        body = f'export PYTHONPATH="{hook}"\n'
    else:
        body = f"export {what}\n"
    wrapper.write_text(f'#!/bin/sh\n{body}exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def named(top: dict | None) -> str:
    return f"{top['op']} {top['shapes']} {top['error_ratio'] or 0:.3g}x" if top else "-"


def run_case(name: str, args: argparse.Namespace, root: Path) -> tuple[bool, list[str]]:
    config, dtype, how, expected, ops = CASES[name]
    folder = root / f"model-{name}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype}))
    home = root / f"home-{name}-{time.monotonic_ns()}"
    env = {**os.environ, "MPSUP_HOME": str(home)}
    side = ["--candidate", str(candidate(root, how))] if how else ["--aa"]
    sizes = ["--tokens", str(args.tokens), "--budget", str(args.budget)]
    cmd = [sys.executable, "-m", "mpsup", "bench", "--model", str(folder), "--device", args.device, *sizes]
    cmd += ["--no-smoke", *side, *([] if ops else ["--no-ops"])]
    t0 = time.monotonic()
    bench = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    if bench.returncode != 0:
        return False, [f"{name}: bench failed ({bench.returncode}): {bench.stderr.strip()[-400:]}"]
    report = subprocess.run([sys.executable, "-m", "mpsup", "report", "--json"], env=env, capture_output=True,
                            text=True, check=False)  # fmt: skip
    doc = json.loads(report.stdout)
    if args.out:
        ops = {w["name"]: w.get("numerics") for w in doc.get("workloads") or [] if w.get("part") == "op"}
        keep = {"sentence": doc.get("sentence"), "model_numerics": doc.get("model_numerics"), "op_numerics": ops}
        Path(args.out, f"{name}-{time.monotonic_ns()}.json").write_text(json.dumps(keep, indent=1))
    rows, ok = [], True
    for phase, n in (doc.get("model_numerics") or {}).items():
        sp = (doc.get("model_phases") or {}).get(phase) or {}
        if n is None:
            rows.append(f"{name:10} {phase:8} numerics not measured")
            ok = False
            continue
        top = next((o for o in n.get("ops") or [] if o.get("verdict") in ("less accurate", "broken")), None)
        good = n["verdict"] in expected
        ok &= good

        def e(x: float | None) -> str:
            return "-" if x is None else f"{x:.2e}"

        rows.append(
            f"{name:10} {phase:8} {sp.get('speedup') or 0:6.3f}x  {n['verdict']:14} {e(n['baseline_error']):>9} "
            f"{e(n['candidate_error']):>9} {e(n['error_ratio']):>9} {e(n['between_builds']):>9} {e(n['aa_floor']):>9}"
            f"  {named(top)}"
            f"{'' if good else '   <- expected ' + ' or '.join(expected)}"
        )
    rows.append(f"{name:10} sentence: {doc.get('sentence', '')[:400]}  ({took:.0f} s)")
    return ok, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="runs of each A/A case")
    parser.add_argument("--budget", type=float, default=0.3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", help="a folder: each run's numerics as the report gives them, one file a run")
    parser.add_argument("--small", action="store_true", help="small models (a CPU check of the script itself)")
    args = parser.parse_args()
    if args.small:
        for cfg in (LLAMA, MOE):
            cfg.update(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                       vocab_size=1000)  # fmt: skip
        MOE.update(moe_intermediate_size=64, head_dim=32, num_experts=4, num_experts_per_tok=2)
    print(f"{'case':10} {'phase':8} {'speed':>7}  {'verdict':14} {'base err':>9} {'cand err':>9} {'ratio':>9} "
          f"{'between':>9} {'floor':>9}  top op (error ratio)")  # fmt: skip
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
            for _ in range(args.repeat if name.startswith("aa-") else 1):
                ok, rows = run_case(name, args, root)
                all_ok &= ok
                print("\n".join(rows), flush=True)
    print("all as expected" if all_ok else "SOME CASES NOT AS EXPECTED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
