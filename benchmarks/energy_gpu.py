"""Energy per phase beside time, shown: NVML per phase for a Llama-shaped model run whole, A/A runs, a candidate that
does more work per call, and one that sleeps on the CPU after each call's first op.

Each candidate is this interpreter behind a wrapper script whose startup hook (a sitecustomize.py on PYTHONPATH)
registers a kernel for one aten op on the device: `more` computes scaled_dot_product_attention --times times (more
GPU work per call: time and energy both up), `sleep` sleeps --sleep-ms on the CPU before each embedding (the GPU
waits: time up, GPU energy above idle flat, so its energy ratio must part from its time ratio). The A/A runs
(`--aa`) must call nothing.

Every run is `bench --energy`: energy per call comes from energy windows after each phase's timed rounds
(docs/explanation/energy.md). For each run it prints per phase the time ratio (candidate / baseline time, from the
report's speedup) beside the energy ratio (candidate / baseline energy above idle per token, from the windows) with
their 95% intervals, the GPU's watts, and what the first design's per-turn readings (still in the record) say
beside it (`turns`), with the seconds the windows and the reads took out of the run.
It never changes the card's power settings. Without a meter (this CPU, or no nvidia-ml-py) each run prints the
report's one line saying so.

    python benchmarks/energy_gpu.py --device cuda --out /tmp/energy       # the GPU: 5 A/A, more, sleep
    python benchmarks/energy_gpu.py --device cpu --aa 1 --cases ""         # a CPU: says "no energy meter"

nvidia-ml-py: the machine has no network, so its wheel travels in the repository's ignored `.whl/` folder
(`pip download nvidia-ml-py --no-deps -d .whl`, carried with the tree) and --wheel installs it first."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HOOK = '''"""Changes one aten op of this torch on one device (MPSUP_HOOK=more|sleep, MPSUP_HOOK_KEY)."""
import os
import time
import warnings

_how = os.environ.get("MPSUP_HOOK", "")
if _how:
    import torch

    _lib = torch.library.Library("aten", "IMPL")
    _key = os.environ.get("MPSUP_HOOK_KEY", "CPU")
    _times = int(os.environ.get("MPSUP_HOOK_TIMES", "3"))
    _sleep = float(os.environ.get("MPSUP_HOOK_SLEEP_S", "0.002"))
    _name = "scaled_dot_product_attention" if _how == "more" else "embedding"
    _op = getattr(torch.ops.aten, _name).default

    def _more(*a, **kw):
        for _ in range(_times - 1):
            _op.decompose(*a, **kw)
        return _op.decompose(*a, **kw)

    def _sleepy(weight, indices, *a, **kw):
        # One embedding per forward: the CPU sleeps once per call, then the lookup runs as index_select (aten's
        # embedding has no decomposition to fall back on).
        time.sleep(_sleep)
        return torch.ops.aten.index_select(weight, 0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _lib.impl(_name, _more if _how == "more" else _sleepy, _key)
'''

# Llama-3-8B's shape (lightblue/suzume-llama-3-8B-japanese's config, as in ../shared/data/model-configs/), 4 layers.
LLAMA_8B = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
}
SMALL = {**LLAMA_8B, "hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 8, "num_key_value_heads": 4}
SMALL["vocab_size"] = 1024


def wrapper(work: Path, name: str, env: dict[str, str]) -> Path:
    hook = work / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    path = work / f"env-{name}"
    lines = ["#!/bin/sh", f"export PYTHONPATH={hook}${{PYTHONPATH:+:$PYTHONPATH}}"]
    lines += [f"export {k}={v}" for k, v in env.items()]
    lines.append(f'exec "{sys.executable}" "$@"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def mpsup(args: list[str], home: Path) -> dict[str, Any]:
    env = {**os.environ, "MPSUP_HOME": str(home), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "mpsup", *args, "--json"], env=env, capture_output=True, text=True)
    try:
        doc = dict(json.loads(out.stdout))
    except json.JSONDecodeError:
        doc = {}
    if out.returncode not in (0, 1, 3) or doc.get("status") == "error":
        sys.exit(f"mpsup {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return doc


def fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def inv(x: Any) -> Any:
    return None if not x else 1.0 / x


def show(case: str, rep: int, took: float, report: dict[str, Any]) -> list[dict[str, Any]]:
    print(f"## {case} run {rep + 1}: {took:.0f} s, verdict {report.get('verdict')}")
    energy = report.get("model_energy") or {}
    rows = []
    for phase, p in (report.get("model_phases") or {}).items():
        e = energy.get(phase) or {}
        row = {
            "case": case,
            "rep": rep,
            "phase": phase,
            "time_ratio": inv(p.get("speedup")),
            "time_low": inv(p.get("high")),
            "time_high": inv(p.get("low")),
            "change": p.get("change"),
            **{k: e.get(k) for k in ("energy_ratio", "low", "high", "total_ratio", "baseline_w", "candidate_w")},
            "idle_w": e.get("idle_w"),
            "baseline_j": e.get("baseline_j"),
            "candidate_j": e.get("candidate_j"),
            "per": e.get("per"),
        }
        rows.append(row)
        print(
            f"  {phase}: time {fmt(row['time_ratio'], '.3f')}x ({fmt(row['time_low'], '.3f')}-"
            f"{fmt(row['time_high'], '.3f')}) {row['change']}; energy above idle {fmt(row['energy_ratio'], '.3f')}x "
            f"({fmt(row['low'], '.3f')}-{fmt(row['high'], '.3f')}), total {fmt(row['total_ratio'], '.3f')}x; "
            f"{fmt(row['baseline_j'], '.3g')} -> {fmt(row['candidate_j'], '.3g')} J/{row['per'] or 'call'}; "
            f"GPU {fmt(row['baseline_w'], '.0f')} -> {fmt(row['candidate_w'], '.0f')} W "
            f"(idle {fmt(row['idle_w'], '.0f')} W)"
        )
    return rows


def turns(path: Path, meter: dict[str, Any]) -> dict[str, str]:
    """Each phase's energy ratio as the first design paired it, turn by turn, from the same record."""
    from mpsup.model.phases import phase_of
    from mpsup.report.energy import turn_energy
    from mpsup.runs.store import load_record

    rec = load_record(path)
    labels = [str(e.get("label")) for e in rec.to_json().get("environments") or []]
    if len(labels) != 2:
        return {}
    out = {}
    for w in rec.workloads:
        phase = phase_of(w.to_json()) if w.part == "phase" else None
        if phase:
            f = turn_energy(meter, w, labels[0], labels[1]) or {}
            ci = f"({fmt(f.get('low'), '.3f')}-{fmt(f.get('high'), '.3f')})"
            out[phase] = f"{fmt(f.get('energy_ratio'), '.3f')}x {ci}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (NVML) or cpu (RAPL where readable, else none)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mpsup-energy"), help="work folder")
    ap.add_argument("--aa", type=int, default=5, help="A/A runs (default 5)")
    ap.add_argument("--cases", default="more,sleep", help="candidates after the A/A runs: more, sleep")
    ap.add_argument("--budget", type=float, default=0.5, help="mpsup bench --budget (default 0.5)")
    ap.add_argument("--tokens", type=int, default=512, help="prefill length and decode cache (default 512)")
    ap.add_argument("--times", type=int, default=3, help="`more`: attention computed this many times")
    ap.add_argument("--sleep-ms", type=float, default=2.0, help="`sleep`: CPU sleep before each embedding")
    ap.add_argument("--dtype", default="bf16", help="mpsup bench --dtype: bf16 (default), fp16 or fp32")
    ap.add_argument("--small", action="store_true", help="a small Llama (default on cpu): hidden 256, vocab 1024")
    ap.add_argument("--wheel", type=Path, help="an nvidia-ml-py wheel to install first, offline (pip --no-index)")
    opts = ap.parse_args()
    if opts.wheel:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", str(opts.wheel)], check=True)
    work = opts.out
    model = work / "llama"
    model.mkdir(parents=True, exist_ok=True)
    config = SMALL if opts.small or opts.device == "cpu" else LLAMA_8B
    (model / "config.json").write_text(json.dumps(config))
    key = "CUDA" if opts.device == "cuda" else "CPU"
    cases = [c.strip() for c in opts.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in ("more", "sleep")]
    if unknown:
        sys.exit(f"--cases: unknown case {unknown[0]!r} (known: more, sleep)")
    common = ["bench", "--model", str(model), "--device", opts.device, "--no-smoke", "--no-ops", "--no-numerics"]
    common += ["--energy"]
    common += ["--budget", str(opts.budget), "--tokens", str(opts.tokens), "--dtype", opts.dtype]
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {opts.device} {json.dumps(config)}")
    runs = [("aa", i, ["--aa"]) for i in range(opts.aa)]
    for case in cases:
        hook = {"MPSUP_HOOK": case, "MPSUP_HOOK_KEY": key, "MPSUP_HOOK_TIMES": str(opts.times)}
        hook["MPSUP_HOOK_SLEEP_S"] = str(opts.sleep_ms / 1000)
        runs.append((case, 0, ["--baseline", sys.executable, "--candidate", str(wrapper(work, case, hook))]))
    rows: list[dict[str, Any]] = []
    for case, rep, pair in runs:
        home = work / f"home-{case}-{rep}"
        t0 = time.perf_counter()
        bench = mpsup([*common, *pair], home)
        took = time.perf_counter() - t0
        report = mpsup(["report", str(bench["path"])], home)
        meter = json.loads(Path(bench["path"]).read_text()).get("energy_meter") or {}
        if not meter.get("name"):
            print(f"## {case} run {rep + 1}: no energy meter on this machine ({meter.get('why')})")
        else:
            print(
                f"# meter {meter['name']}: read {fmt(meter.get('read_s'), '.4f')} s, cadence {meter.get('cadence_s')}"
            )
        rows += show(case, rep, took, report)
        if meter.get("name"):
            print(
                f"  windows {fmt(meter.get('windows_total_s'), '.1f')} s, "
                f"reads {fmt(meter.get('read_total_s'), '.2f')} s of {took:.0f} s; "
                f"plans {json.dumps(meter.get('windows'))}"
            )
            for phase, old in turns(Path(bench["path"]), meter).items():
                print(f"  {phase} turns (first design): {old}")
    (work / "energy_gpu.json").write_text(json.dumps(rows, indent=1))
    print(f"# rows: {work / 'energy_gpu.json'}")


if __name__ == "__main__":
    main()
