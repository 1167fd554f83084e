"""Issue 46 item 3's Show: torch-vs-MLX runs and phase-only A/A runs against plain timings, interleaved.

    python benchmarks/visits_show.py MODEL_DIR --mlx /path/to/mlx-env/bin/python --runs 10 --out OUT.json
        [--kinds mlx,aa] [--tokens 64] [--budget 0.5] [--plain-pairs 1]

Per iteration, in this order (the plain pair's order alternates between iterations):
  1. plain torch (`benchmarks/whole_model.py plain`, a fresh process) and plain mlx_lm (`benchmarks/mlx_plain.py`,
     a fresh process): one plain paired ratio per phase, torch median / MLX median;
  2. `mpsup bench --model MODEL_DIR --candidate mlx:PY` and `mpsup report` on it (kind mlx);
  3. `mpsup bench --model MODEL_DIR --aa --no-ops` and `mpsup report` on it (kind aa).
The load average (1 min) is read before each step and printed beside the run: the machine is shared.

The yardstick is the median over every plain pair of the run (at least five pairs for the Show; --plain-pairs K
takes K a iteration, so a yardstick that is itself an estimate is a tighter one), printed with its own 95%
order-statistic interval. A torch-vs-MLX
run passes a phase when its estimate is within 10% of the yardstick and the yardstick is inside its interval; an
A/A run passes when no phase is called faster or slower. Prints one table; OUT keeps every figure.

mpsup is run as the `mpsup` on PATH (this checkout's venv); MPSUP_HOME is left as set."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mpsup.paths import runs_dir
from mpsup.stats import median_ci

HERE = Path(__file__).resolve().parent
PHASES = ("prefill", "decode")


def load() -> float:
    return os.getloadavg()[0]


def sh(cmd: list[str], timeout: float = 900) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode not in (0, 1):  # bench/report exit 1 on a called regression
        raise RuntimeError(f"{' '.join(cmd)} -> {done.returncode}: {done.stderr[-800:]}")
    return done.stdout


def plain_torch(model: Path, tokens: int, reps: int) -> dict[str, float]:
    out = Path(f"/tmp/visits_plain_{os.getpid()}.json")
    cmd = [sys.executable, str(HERE / "whole_model.py"), "plain", str(model), "--device", "cpu"]
    sh([*cmd, "--tokens", str(tokens), "--cache", str(tokens), "--reps", str(reps), "--json", str(out)])
    doc = json.loads(out.read_text())
    return {p: doc["phases"][p]["median_s"] for p in PHASES}


def plain_mlx(mlx: str, model: Path, tokens: int, calls: int) -> dict[str, float]:
    cmd = [mlx, str(HERE / "mlx_plain.py"), str(model), "--tokens", str(tokens), "--cache", str(tokens)]
    lines = sh([*cmd, "--calls", str(calls)]).splitlines()
    docs = [json.loads(x) for x in lines if x.startswith("{")]
    return {d["phase"]: d["median_s"] for d in docs}


def mpsup_run(args: list[str]) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    bench = json.loads(sh(["mpsup", "bench", *args, "--json"]))
    took = time.monotonic() - t0
    report = json.loads(sh(["mpsup", "report", "--run", bench["id"], "--json"]))
    phases = {}
    for name, p in report["model_phases"].items():
        w = next((x for x in report["workloads"] if x["name"] == p.get("workload")), {})
        phases[name.split("/")[-1]] = {
            "speedup": p["speedup"],
            "low": p["low"],
            "high": p["high"],
            "change": p["change"],
            "baseline_s": p["baseline_s"],
            "candidate_s": w.get("candidate_measured_s") or p["candidate_s"],
            "units": w.get("units"),
            "rounds": w.get("rounds"),
        }
    return {"id": bench["id"], "phases": phases, "took_s": took}, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--mlx", required=True, help="the MLX environment's python")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--kinds", default="mlx,aa")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--plain-reps", type=int, default=20)
    ap.add_argument("--plain-calls", type=int, default=10)
    ap.add_argument("--plain-pairs", type=int, default=1, help="plain pairs per iteration")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    doc: dict[str, Any] = {"model": str(a.model), "plain": [], "runs": []}
    common = ["--model", str(a.model), "--tokens", str(a.tokens), "--budget", str(a.budget)]
    for i in range(a.runs):
        if "mlx" in kinds:
            for j in range(a.plain_pairs):
                pair: dict[str, Any] = {"load": load(), "iteration": i}
                order = ("torch", "mlx") if (i * a.plain_pairs + j) % 2 == 0 else ("mlx", "torch")
                for side in order:
                    pair[side] = (
                        plain_torch(a.model, a.tokens, a.plain_reps)
                        if side == "torch"
                        else plain_mlx(a.mlx, a.model, a.tokens, a.plain_calls)
                    )
                pair["ratio"] = {p: pair["torch"][p] / pair["mlx"][p] for p in PHASES}
                doc["plain"].append(pair)
                ratios = " ".join(f"{p} {pair['ratio'][p]:.4f}x" for p in PHASES)
                print(f"plain {i}.{j}: load {pair['load']:.2f} {ratios}", flush=True)
            ld = load()
            run, _ = mpsup_run([*common, "--candidate", f"mlx:{a.mlx}"])
            doc["runs"].append({"kind": "mlx", "load": ld, **run})
            print(f"mlx {i}: load {ld:.2f} {json.dumps(run['phases'])} {run['took_s']:.0f} s", flush=True)
        if "aa" in kinds:
            ld = load()
            run, _ = mpsup_run([*common, "--aa", "--no-ops"])
            doc["runs"].append({"kind": "aa", "load": ld, **run})
            print(f"aa {i}: load {ld:.2f} {json.dumps(run['phases'])} {run['took_s']:.0f} s", flush=True)
        a.out.write_text(json.dumps(doc, indent=1))
    table(doc)


def table(doc: dict[str, Any]) -> None:
    plain = doc["plain"]
    yard = {p: statistics.median(x["ratio"][p] for x in plain) for p in PHASES} if plain else {}
    if plain:
        for p in PHASES:
            rs = [x["ratio"][p] for x in plain]
            ts = [x["torch"][p] * 1e3 for x in plain]
            ms = [x["mlx"][p] * 1e3 for x in plain]
            ci = median_ci(rs)
            print(
                f"plain {p}: {len(rs)} pairs, ratio median {yard[p]:.4f}x (95% CI {ci.low:.4f}-{ci.high:.4f}; "
                f"pairs {min(rs):.4f}-{max(rs):.4f}); "
                f"torch {statistics.median(ts):.1f} ms ({min(ts):.1f}-{max(ts):.1f}), "
                f"MLX {statistics.median(ms):.1f} ms ({min(ms):.1f}-{max(ms):.1f})"
            )
    head = f"{'kind':4} {'run':22} {'load':>5} {'phase':7} {'speedup':>8} {'95% CI':>17} {'n':>3} {'change':8} "
    print(head + f"{'base ms':>8} {'cand ms':>8} {'pass':5} {'took':>5}")
    passes = {"mlx": [0, 0], "aa": [0, 0]}
    for r in doc["runs"]:
        ok_run = True
        for p in PHASES:
            ph = r["phases"].get(p) or {}
            est, lo, hi = ph.get("speedup"), ph.get("low"), ph.get("high")
            if r["kind"] == "aa":
                ok = ph.get("change") not in ("faster", "slower")
            else:
                y = yard.get(p)
                ok = bool(y and est and lo and hi and abs(est / y - 1) <= 0.10 and lo <= y <= hi)
            ok_run &= ok
            ci = f"{lo:.4f}-{hi:.4f}" if lo and hi else "-"
            print(
                f"{r['kind']:4} {r['id']:22} {r['load']:5.2f} {p:7} {est or 0:8.4f} {ci:>17} {ph.get('units') or 0:3} "
                f"{ph.get('change', '-'):8} {1e3 * (ph.get('baseline_s') or 0):8.2f} "
                f"{1e3 * (ph.get('candidate_s') or 0):8.2f} {'yes' if ok else 'NO':5} {r['took_s']:5.0f}"
            )
        passes[r["kind"]][0] += ok_run
        passes[r["kind"]][1] += 1
    for k, (ok, n) in passes.items():
        if n:
            print(f"{k}: {ok} of {n} runs pass every phase")
    sides(doc)


def sides(doc: dict[str, Any]) -> None:
    """Each torch-vs-MLX run's torch side three ways: its rounds' median (each timed call right after the other
    stack's turn, no block discarded where either side's sample is a second or more), its warmup median
    (consecutive calls in the same process) and the plain torch median of the iteration's plain process."""
    home = runs_dir()
    mlx = [r for r in doc["runs"] if r["kind"] == "mlx"]
    if not mlx:
        return
    print("torch side, ms: rounds median / warmup median / plain (same iteration); MLX likewise")
    for i, r in enumerate(mlx):
        path = home / f"{r['id']}.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        mine = [x for k, x in enumerate(doc["plain"]) if x.get("iteration", k) == i]
        plain = mine[0] if mine else None
        cells = []
        for w in rec["workloads"]:
            p = w["name"].split("/")[-1]
            for label, side in (("baseline", "torch"), ("candidate", "mlx")):
                e = w["envs"][label]
                rounds = 1e3 * statistics.median(e["samples"])
                warm = 1e3 * statistics.median(e["warmup"]) if e.get("warmup") else float("nan")
                ref = 1e3 * plain[side][p] if plain else float("nan")
                cells.append(f"{p} {side} {rounds:.1f}/{warm:.1f}/{ref:.1f}")
        print(f"  {r['id']}: " + "; ".join(cells))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        table(json.loads(Path(sys.argv[2]).read_text()))
    else:
        main()
