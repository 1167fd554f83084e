"""Which op did it, shown: candidates that change ONE op class, and whether the report's top mover is that op.

Each candidate is this interpreter behind a wrapper script whose startup hook (a sitecustomize.py on
PYTHONPATH) registers a CPU kernel for one aten op that computes it --times times through torch's own decomposition:
real extra work in the kernel, where a build's change would be, so the phase and the op replayed alone both
see it (a Python wrapper of torch.nn.functional would slow the phase and not the op the census recorded).

For each case it runs `mpsup bench --model DIR --candidate WRAPPER` (ops replayed, the default), then
`mpsup report --json`, and prints per phase: the phase's speedup and interval, the replay's coverage in both
builds, the share of the change the ops explain, and the top mover with its share. With --overhead it runs the
same pair again with --no-ops and prints the two wall times (what replay adds).

    python benchmarks/op_attribution.py --help
    python benchmarks/op_attribution.py --cases llama-sdpa,vae-groupnorm --overhead --out /tmp/opattr
    python benchmarks/op_attribution.py --cases llama-aa --repeat 3      # A/A: no op should be called changed
    python benchmarks/op_attribution.py kinds RECORD.json ...          # each phase's op kinds, and the spread rule

Cases: llama-sdpa (a Llama-shaped folder, attention slowed), llama-norm (its RMSNorm's mean slowed),
vae-groupnorm (a Diffusers AutoencoderKL, group_norm slowed), llama-aa (no change: the A/A control),
llama-threads (the candidate capped at one CPU thread, the baseline torch's own: every op kind that runs in
parallel slows, so the report should say the change is spread over the op kinds, not name the biggest),
llama-mixed (attention at 2x and one linear call in ten computed twice, 1.1x: one kind moved more, so not spread;
SDPA named), and on CUDA llama-alloc (the caching allocator off) and llama-launch (CUDA_LAUNCH_BLOCKING=1),
changes every call shares.
Works on CPU and on CUDA (--device cuda): the hook registers the kernel for the device's dispatch key."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SITECUSTOMIZE = '''"""Slows one aten op of this torch with real extra work (MPSUP_SLOW_OP, MPSUP_SLOW_KEY), or caps its
CPU threads (MPSUP_CAP_THREADS): every op that runs in parallel slows, as in a build with a smaller thread pool."""
import os
import warnings

_cap = os.environ.get("MPSUP_CAP_THREADS", "")
if _cap:
    import torch

    _set_threads = torch.set_num_threads
    _set_threads(int(_cap))
    # The worker sets the thread count it was asked for after startup: the cap stays under it.
    torch.set_num_threads = lambda n, _set=_set_threads: _set(min(int(n), int(_cap)))

_often = os.environ.get("MPSUP_OFTEN_OPS", "")
if _often:
    import torch

    _lib_often = torch.library.Library("aten", "IMPL")
    _every = int(os.environ.get("MPSUP_OFTEN_EVERY", "10"))
    for _name in _often.split(","):
        _base = getattr(torch.ops.aten, _name).default

        def _now_and_then(*a, _op=_base, _count=[0], **kw):
            # One call in _every computes twice: about 1.1x for every shape of the op, in the phase and replayed.
            _count[0] += 1
            if _count[0] % _every == 0:
                _op.decompose(*a, **kw)
            return _op.decompose(*a, **kw)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _lib_often.impl(_name, _now_and_then, os.environ.get("MPSUP_SLOW_KEY", "CPU"))

_which = os.environ.get("MPSUP_SLOW_OP", "")
if _which:
    import torch

    _lib = torch.library.Library("aten", "IMPL")
    for _name in _which.split(","):
        _op = getattr(torch.ops.aten, _name).default

        _times = int(os.environ.get("MPSUP_SLOW_TIMES", "2"))

        def _twice(*a, _op=_op, **kw):
            for _ in range(_times - 1):
                _op.decompose(*a, **kw)
            return _op.decompose(*a, **kw)

        def _mean_twice(x, dim, keepdim=False, dtype=None):
            n = 1
            for d in dim:
                n *= x.shape[d]
            for _ in range(_times - 1):
                torch.ops.aten.sum.dim_IntList(x, dim, keepdim, dtype=dtype)
            return torch.ops.aten.sum.dim_IntList(x, dim, keepdim, dtype=dtype) / n

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if _name == "mean":
                _lib.impl("mean.dim", _mean_twice, os.environ.get("MPSUP_SLOW_KEY", "CPU"))
            else:
                _lib.impl(_name, _twice, os.environ.get("MPSUP_SLOW_KEY", "CPU"))
'''

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
}
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
# case -> (model, the slowed op (empty: A/A), the op the report should name, extra bench options)
CASES: dict[str, tuple[str, str, str, list[str]]] = {
    "llama-sdpa": ("llama", "scaled_dot_product_attention", "scaled_dot_product_attention", []),
    "llama-norm": ("llama", "mean", "mean", []),
    "vae-groupnorm": ("vae", "group_norm", "group_norm", ["--only", "model/vae/vae_decode"]),
    "llama-aa": ("llama", "", "", []),
    "llama-threads": ("llama", "", "", []),
    "llama-mixed": ("llama", "scaled_dot_product_attention", "scaled_dot_product_attention", []),
    "llama-alloc": ("llama", "", "", []),
    "llama-launch": ("llama", "", "", []),
}
# case -> the candidate's CPU threads (a cap under the baseline's own)
THREADS = {"llama-threads": 1}
# case -> ops of which one call in ten computes twice (1.1x), beside the slowed op at 2x: one kind moves and the
# others move less, which must not read as spread
OFTEN = {"llama-mixed": "linear"}
TIMES = {"llama-mixed": 2}
# case -> the candidate's environment (CUDA only): the caching allocator off, and every launch awaited
ENV = {
    "llama-alloc": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
    "llama-launch": {"CUDA_LAUNCH_BLOCKING": "1"},
}


def make_models(work: Path, tokens: int, size: dict[str, int], vae_too: bool, weights: bool) -> dict[str, Path]:
    llama = work / ("llama-weights" if weights else "llama")
    llama.mkdir(parents=True, exist_ok=True)
    config = {**LLAMA, **size, "max_position_embeddings": max(4096, 2 * tokens)}
    (llama / "config.json").write_text(json.dumps(config))
    if weights and not (llama / "model.safetensors").exists():
        # With weights, mpsup lists the layers too (read from the headers): a run as a user's folder makes it.
        import transformers

        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
        model.save_pretrained(llama)
    vae = work / "sd-vae"
    if not vae_too:
        return {"llama": llama}
    (vae / "vae").mkdir(parents=True, exist_ok=True)
    (vae / "model_index.json").write_text(
        json.dumps({"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]})
    )
    if not (vae / "vae" / "diffusion_pytorch_model.safetensors").exists():
        # mpsup reads a Diffusers folder's layers from its weights' headers: random weights, saved once.
        import diffusers

        diffusers.AutoencoderKL.from_config(VAE).save_pretrained(vae / "vae")
    return {"llama": llama, "vae": vae}


def make_wrapper(
    work: Path,
    name: str,
    slow: str,
    key: str,
    times: int = 2,
    threads: int | None = None,
    often: str = "",
    env: dict[str, str] | None = None,
) -> Path:
    hook = work / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = work / f"env-{name}"
    lines = ["#!/bin/sh"]
    if slow or threads or often:
        lines.append(f"export PYTHONPATH={hook}${{PYTHONPATH:+:$PYTHONPATH}}")
    if slow:
        lines += [f"export MPSUP_SLOW_OP={slow}", f"export MPSUP_SLOW_KEY={key}", f"export MPSUP_SLOW_TIMES={times}"]
    if often:
        lines += [f"export MPSUP_OFTEN_OPS={often}", f"export MPSUP_SLOW_KEY={key}"]
    lines += [f"export {k}={v}" for k, v in (env or {}).items()]
    if threads:
        # The pool is sized at startup from OMP_NUM_THREADS, over what the measuring tool exports.
        lines += [f"export MPSUP_CAP_THREADS={threads}", f"export OMP_NUM_THREADS={threads}"]
    lines.append(f'exec "{sys.executable}" "$@"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def mpsup(args: list[str], home: Path) -> tuple[dict[str, Any], float]:
    env = {**os.environ, "MPSUP_HOME": str(home), "COLUMNS": "200"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "mpsup", *args, "--json"], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    try:
        return json.loads(out.stdout), took
    except json.JSONDecodeError:
        sys.exit(f"mpsup {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")


def summarise(report: dict[str, Any], expect: str) -> list[dict[str, Any]]:
    rows = []
    attribution = report.get("phase_attribution") or {}
    for phase, fig in (report.get("model_phases") or {}).items():
        attr = attribution.get(phase) or {}
        # By op, all shapes together: a kernel change moves every call of it.
        by_op: dict[str, dict[str, Any]] = {}
        for o in attr.get("ops") or []:
            if o.get("together"):
                continue  # the phase's other calls, replayed together: no op to name
            slot = by_op.setdefault(o["op"], {"op": o["op"], "share_of_change": 0.0, "speedup": o.get("speedup")})
            slot["share_of_change"] += o.get("share_of_change") or 0.0
        top = max(by_op.values(), key=lambda c: c["share_of_change"], default={})
        called = [
            w["name"]
            for w in report.get("workloads", [])
            if w.get("part") == "op" and w.get("change") != "same" and w.get("change") in ("faster", "slower")
        ]
        rows.append(
            {
                "phase": phase,
                "speedup": fig.get("speedup"),
                "low": fig.get("low"),
                "high": fig.get("high"),
                "change": fig.get("change"),
                "coverage": attr.get("coverage"),
                "explained_change": attr.get("explained_change"),
                "top_op": top.get("op"),
                "top_share": top.get("share_of_change"),
                "top_speedup": top.get("speedup"),
                "top_is_expected": bool(expect) and top.get("op") == expect,
                "ops_called_changed": called,
                "spread": attr.get("spread"),
            }
        )
    return rows


def fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="llama-sdpa,vae-groupnorm", help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mpsup-op-attribution"), help="work folder")
    ap.add_argument("--budget", type=float, default=0.5, help="mpsup bench --budget (default 0.5, mpsup's own)")
    ap.add_argument("--tokens", type=int, default=256, help="prefill length and decode cache (default 256)")
    ap.add_argument("--resolution", default="128", help="the VAE's --resolution (default 128)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the hook slows the op on that device)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case")
    ap.add_argument("--overhead", action="store_true", help="also run each case with --no-ops: what replay adds")
    ap.add_argument("--times", type=int, default=4, help="the slowed op computes this many times (default 4)")
    ap.add_argument("--weights", action="store_true", help="save random weights in the Llama folder (layers too)")
    ap.add_argument("--dtype", help="mpsup bench --dtype (default: the model's, fp32 here)")
    ap.add_argument("--hidden", type=int, default=LLAMA["hidden_size"], help="the Llama folder's hidden_size")
    ap.add_argument("--intermediate", type=int, default=LLAMA["intermediate_size"], help="its intermediate_size")
    ap.add_argument("--layers", type=int, default=LLAMA["num_hidden_layers"], help="its num_hidden_layers")
    ap.add_argument("--heads", type=int, default=LLAMA["num_attention_heads"], help="its num_attention_heads")
    ap.add_argument("--kv-heads", type=int, default=LLAMA["num_key_value_heads"], help="its num_key_value_heads")
    ap.add_argument("--vocab", type=int, default=LLAMA["vocab_size"], help="its vocab_size")
    opts = ap.parse_args()
    work = opts.out
    work.mkdir(parents=True, exist_ok=True)
    size = {
        "hidden_size": opts.hidden,
        "intermediate_size": opts.intermediate,
        "num_hidden_layers": opts.layers,
        "num_attention_heads": opts.heads,
        "num_key_value_heads": opts.kv_heads,
        "vocab_size": opts.vocab,
    }
    cases = [c.strip() for c in opts.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        sys.exit(f"--cases: unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    models = make_models(work, opts.tokens, size, any(CASES[c][0] == "vae" for c in cases), opts.weights)
    key = "CUDA" if opts.device == "cuda" else "CPU"
    base = make_wrapper(work, "baseline", "", key)
    print(
        f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    results = []
    for case in cases:
        model, slow, expect, extra = CASES[case]
        if case in ENV and opts.device != "cuda":
            sys.exit(f"--cases {case}: a CUDA candidate (--device cuda)")
        times = TIMES.get(case, opts.times)
        cand = make_wrapper(work, case, slow, key, times, THREADS.get(case), OFTEN.get(case, ""), ENV.get(case))
        shape = ["--tokens", str(opts.tokens)] if model == "llama" else ["--resolution", opts.resolution]
        common = ["bench", "--model", str(models[model]), "--device", opts.device, "--no-smoke"]
        common += ["--budget", str(opts.budget), *shape, *extra, *(["--dtype", opts.dtype] if opts.dtype else [])]
        changed = slow or case in THREADS or case in ENV
        pair = ["--aa"] if not changed else ["--baseline", str(base), "--candidate", str(cand)]
        for rep in range(opts.repeat):
            home = work / f"home-{case}-{rep}"
            bench, took = mpsup([*common, *pair], home)
            report, _ = mpsup(["report", str(bench["path"])], home)
            row = {"case": case, "rep": rep, "wall_s": took, "phases": summarise(report, expect)}
            row["sentence"] = report.get("sentence")
            if opts.overhead:
                _, bare = mpsup([*common, *pair, "--no-ops"], home)
                row["wall_no_ops_s"] = bare
            results.append(row)
            print(
                f"## {case} run {rep + 1}: {took:.0f} s"
                + (f" (--no-ops {row['wall_no_ops_s']:.0f} s)" if opts.overhead else "")
            )
            for p in row["phases"]:
                cov = p["coverage"] or {}
                print(
                    f"  {p['phase']}: {fmt(p['speedup'], '.3f')}x ({fmt(p['low'], '.3f')}-{fmt(p['high'], '.3f')}) "
                    f"{p['change']}; replay covers {fmt(cov.get('baseline'), '.0%')} / "
                    f"{fmt(cov.get('candidate'), '.0%')}"
                    f"; ops explain {fmt(p['explained_change'], '.0%')} of the change; top mover {p['top_op']} "
                    f"{fmt(p['top_share'], '.0%')} ({fmt(p['top_speedup'], '.2f')}x)"
                    + ("" if not expect else " <- the slowed op" if p["top_is_expected"] else f" (expected {expect})")
                    + (f"; ops called changed: {len(p['ops_called_changed'])}" if not changed else "")
                    + "; "
                    + (
                        f"spread over {p['spread']['op_kinds']} op kinds ({p['spread']['low']:.2f}-"
                        f"{p['spread']['high']:.2f}x)"
                        if p["spread"]
                        else "not spread"
                    )
                )
            print(f"  sentence: {row['sentence']}")
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"# all figures: {work / 'results.json'}")


def kinds(paths: list[Path]) -> None:
    """Each record's phases, each op kind's speedup over its timed calls (time-weighted, 95% interval) and share of
    the phase's change, and what the spread rule makes of them, read with this checkout's report code."""
    from mpsup.report.analysis import analyze
    from mpsup.report.attribution import common_band, heterogeneity_p, kind_ratios, op_classes, spread_of
    from mpsup.runs.store import load_record

    for path in paths:
        for phase, attr in analyze(load_record(path)).attribution.items():
            ks = kind_ratios(attr)
            q = f"{heterogeneity_p(ks):.3g}" if len(ks) > 1 else "-"
            band = common_band(ks) if ks else "-"
            print(f"{path.name} {phase}: kinds {len(ks)} Q p={q} band={band} spread={spread_of(attr)}")
            shares = {c.op: c.share_of_change or 0.0 for c in op_classes(attr)}
            for k in sorted(ks, key=lambda k: k.log_speedup):
                iv = k.interval
                share = shares.get(k.op, 0.0)
                print(f"   {k.op:32s} {iv.estimate:.3f} ({iv.low:.3f}-{iv.high:.3f}) share {share:.0%}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "kinds":
        kinds([Path(a) for a in sys.argv[2:]])
    else:
        main()
