"""What mpsup's CPU thread binding does to a plain timing: fresh `whole_model.py plain` processes, alternately as a
user runs them (the scheduler places torch's threads) and under the environment a bench worker gets on this CPU
(`--affinity auto`: each intra-op thread bound to one CPU, OpenMP's spin shortened; bench/workerproc.py).

    python benchmarks/plain_binding.py MODEL_DIR --pairs 8 --tokens 16 [--reps 40] [--out OUT.json]

Prints each pair's prefill and decode medians both ways, then per phase the median bound / free ratio over the
pairs and how many pairs read bound faster. Under 1x: a bench worker's torch reads faster than the user's own
process, and a ratio against another stack (MLX) leans the same way."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

PHASES = ("prefill", "decode")


def plain(model: Path, tokens: int, reps: int, env: dict[str, str]) -> dict[str, float]:
    out = Path(f"/tmp/plain_binding_{os.getpid()}.json")
    cmd = [sys.executable, str(HERE / "whole_model.py"), "plain", str(model), "--device", "cpu"]
    cmd += ["--tokens", str(tokens), "--cache", str(tokens), "--reps", str(reps), "--json", str(out)]
    subprocess.run(cmd, env={**os.environ, **env}, check=True, capture_output=True, text=True)
    doc = json.loads(out.read_text())
    out.unlink()
    return {p: doc["phases"][p]["median_s"] for p in PHASES}


def main() -> None:
    from mpsup.bench.workerproc import worker_env
    from mpsup.host.affinity import choose

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, help="a Transformers folder with config.json")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    bound = worker_env(None, choose(None, "cpu").threads_on)
    print(f"# load {os.getloadavg()[0]:.2f}; bound: {json.dumps(bound)}", flush=True)
    rows = []
    for i in range(a.pairs):
        row: dict[str, dict[str, float]] = {}
        for how in ("free", "bound") if i % 2 == 0 else ("bound", "free"):
            row[how] = plain(a.model, a.tokens, a.reps, bound if how == "bound" else {})
        rows.append(row)
        cells = " ".join(f"{p} {1e3 * row['free'][p]:.2f} / {1e3 * row['bound'][p]:.2f} ms" for p in PHASES)
        print(f"pair {i} (free / bound): {cells}; load {os.getloadavg()[0]:.2f}", flush=True)
    for p in PHASES:
        ratios = [r["bound"][p] / r["free"][p] for r in rows]
        faster = sum(x < 1 for x in ratios)
        print(
            f"{p}: bound / free median {statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}), "
            f"bound faster in {faster} of {len(ratios)} pairs"
        )
    if a.out:
        a.out.write_text(json.dumps({"bound_env": bound, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
