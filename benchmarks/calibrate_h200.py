"""Issue 12 validation on a CUDA machine (the H200), in one invocation that keeps to a time budget:

1. the cuBLASLt candidate: a wrapper interpreter that sets TORCH_BLAS_PREFER_CUBLASLT=1, paired
   against this interpreter over the linears, and an in-process reference that alternates
   `torch.backends.cuda.preferred_blas_library` over 5 rounds (200 back-to-back calls, CUDA events);
2. A/A runs at the default budget, repeated while time remains (at least --aa-runs if it fits),
   counting flagged workloads per run under the method before issue 12 and the current one.

    python benchmarks/calibrate_h200.py --total-s 540 --json h200_issue12.json

Expected duration: --total-s (default 540 s = 9 minutes) plus at most one run's overrun. Every run's
record is kept under --work (default ./h200_issue12_runs) for `benchmarks/anchors_compare.py`."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from mpsup.report.analysis import analyze
from mpsup.stats import bootstrap_geomean_ci, classify_change, paired_ratio_ci


def bench(home: Path, extra: list[str], args: argparse.Namespace) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "mpsup",
        "bench",
        "--device",
        args.device,
        "--only",
        args.only,
        "--no-smoke",
        "--budget",
        str(args.budget),
        *extra,
    ]
    t0 = time.monotonic()
    subprocess.run(cmd, env={**os.environ, "MPSUP_HOME": str(home)}, check=True, stdout=subprocess.DEVNULL)
    runs = sorted((home / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime)
    rec = json.loads(runs[-1].read_text())
    rec["_wall_s"] = time.monotonic() - t0
    return rec


def calls(rec: dict[str, Any]) -> dict[str, Any]:
    """Per-workload calls and the suite interval, before issue 12 and now, on the same record."""
    paired = [w for w in rec["workloads"] if w.get("ratios")]
    old = {w["name"]: classify_change(paired_ratio_ci(w["ratios"], seed=i)) for i, w in enumerate(paired)}
    old_suite = bootstrap_geomean_ci([w["ratios"] for w in paired])
    a = analyze(rec)
    new = {w.name: w.change for w in a.workloads if w.ratios}
    s = a.suite_geomean
    hw = sorted(w.speedup.rel_half_width for w in a.workloads if w.speedup and w.speedup.bounded)
    return {
        "run": rec["id"],
        "wall_s": round(rec["_wall_s"], 1),
        "workloads": len(paired),
        "flagged_before": sum(c != "same" for c in old.values()),
        "flagged_after": sum(c not in ("same", "n/a") for c in new.values()),
        "suite_before": [old_suite.estimate, old_suite.low, old_suite.high],
        "suite_after": [s.estimate, s.low, s.high] if s else None,
        "verdict": a.verdict,
        "median_half_width": hw[len(hw) // 2] if hw else None,
        "p90_half_width": hw[int(0.9 * (len(hw) - 1))] if hw else None,
        "unbounded": sum(1 for w in a.workloads if w.speedup and not w.speedup.bounded),
        "calls_after": new,
        "calls_before": old,
    }


def reference(rec: dict[str, Any], rounds: int = 5, calls_per: int = 200) -> dict[str, list[float]]:
    """Per shape, the per-round ratio time(default BLAS) / time(cuBLASLt): > 1 means cuBLASLt is faster."""
    import torch

    out: dict[str, list[float]] = {}
    for w in rec["workloads"]:
        if not w.get("ratios") or "in_features" not in w:
            continue
        x = torch.randn(int(w["tokens"]), int(w["in_features"]), device="cuda", dtype=torch.bfloat16)
        lin = torch.nn.Linear(
            int(w["in_features"]), int(w["out_features"]), bias=False, device="cuda", dtype=torch.bfloat16
        )
        ratios = []
        for _ in range(rounds):
            t = {}
            for lib in ("cublas", "cublaslt"):
                torch.backends.cuda.preferred_blas_library(lib)
                for _ in range(20):
                    lin(x)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls_per):
                    lin(x)
                end.record()
                torch.cuda.synchronize()
                t[lib] = start.elapsed_time(end)
            ratios.append(t["cublas"] / t["cublaslt"])
        out[w["name"]] = ratios
        del x, lin
    torch.backends.cuda.preferred_blas_library("default")
    return out


def cublaslt(args: argparse.Namespace) -> dict[str, Any]:
    wrapper = args.work / "python-cublaslt"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nTORCH_BLAS_PREFER_CUBLASLT=1 exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    rec = bench(args.work / "cublaslt", ["--candidate", str(wrapper), "--budget", str(args.candidate_budget)], args)
    got = calls(rec)
    ref = reference(rec)
    clear = {n for n, r in ref.items() if all(abs(x - 1) > 0.05 for x in r) and len({x > 1 for x in r}) == 1}
    flat = {n for n, r in ref.items() if all(abs(x - 1) < 0.01 for x in r)}
    want = {n: "faster" if median(ref[n]) > 1 else "slower" for n in clear}
    found = sum(got["calls_after"].get(n) == want[n] for n in clear)
    found_before = sum(got["calls_before"].get(n) == want[n] for n in clear)
    logs = [math.log(median(r)) for r in ref.values()]
    est = {w.name: w.speedup.estimate for w in analyze(rec).workloads if w.speedup}
    dev = sorted(abs(est[n] / median(r) - 1) for n, r in ref.items() if n in est)
    return {
        **{k: v for k, v in got.items() if not k.startswith("calls")},
        "clear": len(clear),
        "clear_found_after": found,
        "clear_found_before": found_before,
        "flat": len(flat),
        "flat_flagged_after": sum(got["calls_after"].get(n) not in ("same", "n/a") for n in flat),
        "flat_flagged_before": sum(got["calls_before"].get(n) != "same" for n in flat),
        "reference_geomean": math.exp(sum(logs) / len(logs)) if logs else None,
        "mpsup_vs_reference_median": dev[len(dev) // 2] if dev else None,
        "mpsup_vs_reference_p90": dev[int(0.9 * (len(dev) - 1))] if dev else None,
        "reference": ref,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", default="linear")
    p.add_argument("--budget", type=float, default=1.0, help="the A/A runs' --budget (1.0 is the default)")
    p.add_argument("--candidate-budget", type=float, default=0.25, help="the cuBLASLt run's --budget")
    p.add_argument("--aa-runs", type=int, default=5, help="A/A runs wanted; more run while time remains")
    p.add_argument("--total-s", type=float, default=540)
    p.add_argument("--skip-cublaslt", action="store_true")
    p.add_argument("--work", type=Path, default=Path("h200_issue12_runs"))
    p.add_argument("--json", type=Path, default=Path("h200_issue12.json"))
    args = p.parse_args(argv)
    t0 = time.monotonic()
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "aa": []}
    if not args.skip_cublaslt:
        doc["cublaslt"] = c = cublaslt(args)
        print(
            f"cuBLASLt: {c['wall_s']} s; clear changes found {c['clear_found_after']}/{c['clear']} "
            f"(before: {c['clear_found_before']}); flat flagged {c['flat_flagged_after']}/{c['flat']} "
            f"(before: {c['flat_flagged_before']}); suite {c['suite_after']} vs reference {c['reference_geomean']}",
            flush=True,
        )
    print(
        f"{'A/A run':>7} {'wall s':>6} {'n':>4} {'flag before':>11} {'flag after':>10} {'suite after':>22} "
        f"{'med hw':>6} {'p90 hw':>6}"
    )
    k = 0
    while True:
        left = args.total_s - (time.monotonic() - t0)
        last = doc["aa"][-1]["wall_s"] if doc["aa"] else 0.0
        if left <= 0 or left < last or (k >= args.aa_runs and left < 2 * last):
            break
        r = calls(bench(args.work / f"aa{k}", ["--aa"], args))
        doc["aa"].append({x: v for x, v in r.items() if not x.startswith("calls")})
        s = r["suite_after"]
        print(
            f"{k:7d} {r['wall_s']:6.0f} {r['workloads']:4d} {r['flagged_before']:11d} {r['flagged_after']:10d} "
            f"{s[0]:.3f} ({s[1]:.3f}-{s[2]:.3f})x {r['median_half_width'] or 0:6.1%} {r['p90_half_width'] or 0:6.1%}",
            flush=True,
        )
        k += 1
        args.json.write_text(json.dumps(doc, indent=1))
    doc["seconds"] = time.monotonic() - t0
    args.json.write_text(json.dumps(doc, indent=1))
    print(f"({doc['seconds']:.0f} s; records under {args.work}, summary in {args.json})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
