"""Real-size models for `mpsup bench --model`: Llama-shaped folders of 1B, 3B, 8B and 70B parameters (the public
shapes of Llama 3.2 1B and 3B, Llama 3 8B and 70B; weights never downloaded: a sparse safetensors file names
every tensor and holds no data), and a paired run of one, timed whole and taken apart.

    python benchmarks/real_size.py make 3b DIR [--dtype bf16] [--layers N]
    python benchmarks/real_size.py run DIR --device cpu (--aa | --candidate PY | --candidate-hook NAME) [--out FILE]
        [--mpsup CMD] [--bench-args "--budget 0.3 ..."]
        runs `mpsup bench --model DIR --json ...` and prints where the time went: wall time, the builds (each
        visit's setup), the timed phases, the op replay, the float64 reference (its time and peak memory), and
        every phase's speed and answers verdict from `mpsup report --json`
    python benchmarks/real_size.py parts RECORD.json
        the same breakdown, from a saved run record

Run it under each mpsup to compare (`--mpsup "python -m mpsup"` with PYTHONPATH pointing at a checkout)."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.whole_model import make

_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "vocab_size": 128256,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
# The public shapes (config.json of each model's release).
SHAPES: dict[str, dict[str, Any]] = {
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True},
    "3b": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
           "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True},
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "tie_word_embeddings": False, "max_position_embeddings": 8192},
    "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
            "num_key_value_heads": 8, "tie_word_embeddings": False, "max_position_embeddings": 8192},
}  # fmt: skip


# Candidates made of the baseline's interpreter behind a wrapper whose sitecustomize changes one op.
HOOKS = {
    # A norm's rsqrt computed through bfloat16 (a model in bf16 computes its RMSNorm in float32): one small op's
    # numerics, nothing else.
    "rsqrt-bf16": (
        "import torch\n"
        "_lib = torch.library.Library('aten', 'IMPL')\n"
        "def _rsqrt(x):\n"
        "    return x.to(torch.bfloat16).sqrt().reciprocal().to(x.dtype)\n"
        "for _key in ('CPU', 'CUDA'):\n"
        "    _lib.impl('rsqrt', _rsqrt, _key)\n"
    ),
}


def hooked_python(name: str, root: Path) -> Path:
    """A wrapper script running this interpreter with the hook `name` in its sitecustomize."""
    hook = root / f"hook-{name}"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOKS[name])
    wrapper = root / f"python-{name}"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{hook}${{PYTHONPATH:+:$PYTHONPATH}}"\nexec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def make_size(size: str, out: Path, dtype: str, layers: int | None) -> None:
    config = {**_LLAMA, **SHAPES[size]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        make(path, out, layers, dtype)


def _sum(xs: Any) -> float:
    return float(sum(x for x in xs if isinstance(x, (int, float)))) if isinstance(xs, list) else 0.0


def parts(record: dict[str, Any]) -> dict[str, Any]:
    """Where a run's time went, from its record."""
    out: dict[str, Any] = {
        "builds_s": 0.0,
        "builds": 0,
        "phases_s": 0.0,
        "layers_s": 0.0,
        "ops_s": 0.0,
        "reference_s": 0.0,
    }
    phases: dict[str, Any] = {}
    peak = 0
    for w in record.get("workloads") or []:
        envs = w.get("envs") or {}
        setups = [x for e in envs.values() for x in (e.get("setup_s") or [])]
        out["builds_s"] += _sum(setups)
        out["builds"] += len(setups)
        elapsed = float(w.get("elapsed_s") or 0.0)
        if w.get("part") == "phase":
            out["phases_s"] += elapsed
            depth = {str((e.get("phase") or {}).get("depth")) + "/" + str((e.get("phase") or {}).get("layers"))
                     for e in envs.values()}  # fmt: skip
            phases[w["name"]] = {
                "visits": w.get("visits"),
                "elapsed_s": round(elapsed, 1),
                "builds_s": [round(x, 2) for x in setups],
                "blocks": sorted(depth),
                "median_s": {k: e.get("median") for k, e in envs.items()},
            }
        elif w.get("part") == "op":
            out["ops_s"] += elapsed
        else:
            out["layers_s"] += elapsed
        num = w.get("numerics") or {}
        if isinstance(num.get("took_s"), (int, float)):
            out["reference_s"] += num["took_s"]
        ref_peak = (num.get("reference") or {}).get("peak_rss_bytes")
        if isinstance(ref_peak, int):
            peak = max(peak, ref_peak)
        if w.get("part") == "phase":
            phases[w["name"]]["numerics"] = num.get("status"), num.get("reason")
    out["reference_peak_rss_gib"] = round(peak / 2**30, 2) if peak else None
    out["numerics_pass"] = record.get("numerics_pass")
    out["phases"] = phases
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def run(args: argparse.Namespace) -> None:
    mpsup = shlex.split(args.mpsup)
    if args.candidate_hook:
        args.candidate = str(hooked_python(args.candidate_hook, Path(tempfile.mkdtemp(prefix="mpsup-hook-"))))
    side = ["--aa"] if args.aa else ["--candidate", args.candidate]
    cmd = [*mpsup, "bench", "--model", str(args.dir), "--device", args.device, "--no-smoke", *side, "--json"]
    cmd += shlex.split(args.bench_args)
    t0 = time.perf_counter()
    bench = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if bench.returncode not in (0, 1):
        sys.exit(f"bench failed ({bench.returncode}): {bench.stderr[-3000:]}")
    summary = json.loads(bench.stdout)
    record = json.loads(Path(summary["path"]).read_text())
    report = subprocess.run([*mpsup, "report", "--json"], capture_output=True, text=True)
    verdicts: dict[str, Any] = {}
    if report.stdout.strip():
        doc = json.loads(report.stdout)
        for phase, n in (doc.get("model_numerics") or {}).items():
            top = n.get("top_op") or {}
            verdicts[phase] = {
                "answers": n.get("verdict"),
                "reason": n.get("reason"),
                "top_op": top.get("op"),
                "baseline_error": n.get("baseline_error"),
                "candidate_error": n.get("candidate_error"),
            }
        for phase, ph in (doc.get("model_phases") or {}).items():
            lo, hi = ph.get("low"), ph.get("high")
            interval = f" ({lo:.3f}-{hi:.3f})" if lo is not None and hi is not None else ""
            speed = f"{ph.get('speedup') or 0:.3f}x{interval} {ph.get('change')}"
            verdicts.setdefault(phase, {})["speed"] = speed
        verdicts["sentence"] = doc.get("sentence")
    result = {"cmd": " ".join(cmd), "wall_s": round(wall, 1), **parts(record), "verdicts": verdicts}
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("size", choices=sorted(SHAPES))
    m.add_argument("dir", type=Path)
    m.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    m.add_argument("--layers", type=int)
    r = sub.add_parser("run")
    r.add_argument("dir", type=Path)
    r.add_argument("--device", default="cpu")
    group = r.add_mutually_exclusive_group(required=True)
    group.add_argument("--aa", action="store_true")
    group.add_argument("--candidate")
    group.add_argument("--candidate-hook", choices=sorted(HOOKS), help="this interpreter with one op changed")
    r.add_argument("--out")
    r.add_argument("--mpsup", default=f"{sys.executable} -m mpsup")
    r.add_argument("--bench-args", default="", help="further bench arguments, as one string")
    p = sub.add_parser("parts")
    p.add_argument("record", type=Path)
    args = ap.parse_args()
    if args.cmd == "make":
        make_size(args.size, args.dir, args.dtype, args.layers)
    elif args.cmd == "run":
        run(args)
    else:
        print(json.dumps(parts(json.loads(args.record.read_text())), indent=1))


if __name__ == "__main__":
    main()
