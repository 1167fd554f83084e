"""Issue 12 validation on CPU: a known change (the same torch on 1 thread instead of 2, through a
wrapper interpreter: big prefill linears must come out slower) and an A/A false-positive table over
repeated runs of a small subset, each call counted under the method before issue 12 and now.

    python benchmarks/calibrate_cpu.py --aa-runs 20 --json cpu_issue12.json

Expected duration on a 2-core machine: ~15 s per A/A run at the defaults plus ~1 minute for the
thread run (about 6 minutes in all)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_h200 import bench, calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only", default="linear/4096x4096/t1,linear/4096x1024/t1,linear/4096x14336/t16,linear/14336x4096/t16"
    )
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--aa-runs", type=int, default=20)
    p.add_argument("--work", type=Path, default=Path("cpu_issue12_runs"))
    p.add_argument("--json", type=Path, default=Path("cpu_issue12.json"))
    args = p.parse_args(argv)
    args.device = "cpu"
    t0 = time.monotonic()
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "aa": []}
    wrapper = args.work / "python-1thread"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nOMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    r = calls(bench(args.work / "threads", ["--candidate", str(wrapper)], args))
    doc["threads"] = r
    prefill = {n: c for n, c in r["calls_after"].items() if "/t16" in n}
    print(f"1 vs 2 threads: prefill calls now {prefill}; before {[r['calls_before'][n] for n in prefill]}", flush=True)
    print(f"{'A/A run':>7} {'wall s':>6} {'n':>3} {'flag before':>11} {'flag after':>10}")
    for k in range(args.aa_runs):
        a = calls(bench(args.work / f"aa{k}", ["--aa"], args))
        doc["aa"].append({x: v for x, v in a.items() if not x.startswith("calls")})
        print(
            f"{k:7d} {a['wall_s']:6.0f} {a['workloads']:3d} {a['flagged_before']:11d} {a['flagged_after']:10d}",
            flush=True,
        )
    aa = doc["aa"]
    doc["summary"] = {
        "runs": len(aa),
        "runs_flagging_before": sum(x["flagged_before"] > 0 for x in aa),
        "runs_flagging_after": sum(x["flagged_after"] > 0 for x in aa),
        "seconds": time.monotonic() - t0,
    }
    print(doc["summary"])
    args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
