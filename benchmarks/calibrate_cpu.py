"""Issue 12 validation on CPU, for a quiet 2-core machine:

1. a known change: the candidate is a wrapper interpreter that runs the same torch on 1 thread
   (OMP_NUM_THREADS=1) against the baseline's 2; big prefill linears (128 tokens, compute-bound), where
   one thread must be ~1.6-2x slower. Per workload: rounds, mpsup's speedup and call, whether the call is
   right (slower), and what the method before issue 12, pyperf and asv would call on the same record;
2. an A/A false-positive table: --aa-runs repeated `--aa` runs of a small subset, counting runs that
   flag >= 1 and >= 2 workloads, per method.

    PYTHONPATH=src python benchmarks/calibrate_cpu.py --aa-runs 20 --json cpu_issue12.json

About 6-7 minutes on a quiet 2-core machine at the defaults (~50 s for the known change, ~15 s per
A/A run); --total-s (default 480) stops the A/A loop early and says so. Run it alone: other load on
the two cores makes the 2-thread baseline stall and both halves meaningless."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_h200 import METHODS, BenchFailed, Budget, bench, calls

from mpsup.report.analysis import analyze

KNOWN = "linear/4096x4096/t128,linear/3584x3584/t128,linear/4096x1024/t128,linear/8192x1024/t128"
SUBSET = (
    "linear/4096x4096/t1,linear/4096x1024/t1,linear/14336x4096/t1,"
    "linear/4096x4096/t16,linear/896x896/t16,linear/896x4864/t1"
)


def known_change(args: argparse.Namespace, budget: Budget) -> dict[str, Any]:
    wrapper = args.work / "python-1thread"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nOMP_NUM_THREADS=1 MKL_NUM_THREADS=1 exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    known = argparse.Namespace(**{**vars(args), "only": args.known_only})
    extra = ["--candidate", str(wrapper), "--tokens", str(args.tokens)]
    rec = bench(args.work / "threads", extra, known, args.known_budget, budget.left())
    got = calls(rec)
    est = {w.name: w.speedup for w in analyze(rec).workloads if w.speedup}
    for n, c in got["per_workload"].items():
        s = est.get(n)
        c["speedup"] = None if s is None else [s.estimate, s.low, s.high] if s.bounded else [s.estimate, None, None]
        c["right"] = c["mpsup"] == "slower"
    got["threads"] = {e.get("label", "?"): e.get("threads") for e in rec.get("environments") or []}
    got["right"] = {m: sum(c[m] == "slower" for c in got["per_workload"].values()) for m in METHODS}
    got["wrong_direction"] = {m: sum(c[m] == "faster" for c in got["per_workload"].values()) for m in METHODS}
    return got


def _iv(s: list[float] | None) -> str:
    if not s:
        return "-"
    if s[1] is None or s[2] is None:
        return f"{s[0]:.3f}x (n/a)"
    return f"{s[0]:.3f}x ({s[1]:.3f}-{s[2]:.3f})"


def summary_lines(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    k = doc.get("known")
    if k:
        lines.append(
            f"Known change, 1 vs 2 threads ({k['wall_s']:.0f} s; threads recorded {k['threads']}): "
            f"verdict {k['verdict']}"
        )
        lines.append(f"  {'workload':24} {'rounds':>6} {'mpsup speedup':>24} {'call':>7} right  before pyperf asv")
        for n, c in k["per_workload"].items():
            lines.append(
                f"  {n:24} {c['rounds']:6d} {_iv(c['speedup']):>24} {c['mpsup']:>7} "
                f"{'yes' if c['right'] else 'NO':5} {c['before']:>7} {c['pyperf']:>6} {c['asv']:>4}"
            )
        n = k["workloads"]
        lines.append(
            "  right (slower): " + ", ".join(f"{m} {k['right'][m]}/{n}" for m in METHODS)
            + "; wrong way: " + ", ".join(f"{m} {k['wrong_direction'][m]}" for m in METHODS)
        )  # fmt: skip
    elif doc.get("known_error"):
        lines.append(f"Known change: not done ({doc['known_error']})")
    aa = doc.get("aa") or []
    if aa:
        lines.append(f"A/A, {len(aa)} runs of {aa[0]['workloads']} workloads: flagged per run")
        lines.append(f"  {'run':>3} {'wall':>5} " + " ".join(f"{m:>6}" for m in METHODS))
        for i, r in enumerate(aa):
            lines.append(f"  {i:3d} {r['wall_s']:5.0f} " + " ".join(f"{r['flagged'][m]:6d}" for m in METHODS))
        lines.append(f"  {'method':7} {'runs >= 1':>9} {'runs >= 2':>9} {'flags/run':>9}")
        for m in METHODS:
            f = [r["flagged"][m] for r in aa]
            lines.append(
                f"  {m:7} {sum(x >= 1 for x in f):4d}/{len(f):<4d} {sum(x >= 2 for x in f):4d}/{len(f):<4d} "
                f"{sum(f) / len(f):9.2f}"
            )
    if doc.get("aa_stopped"):
        lines.append(f"A/A: stopped early ({doc['aa_stopped']})")
    if doc.get("aa_error"):
        lines.append(f"A/A: failed ({doc['aa_error']})")
    lines.append(f"({doc.get('seconds', 0):.0f} s in all; records under {doc['args']['work']})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--known-only", default=KNOWN, help="the known-change workloads (prefill, --tokens)")
    p.add_argument("--tokens", type=int, default=128, help="prefill tokens of the known-change workloads")
    p.add_argument("--known-budget", type=float, default=4.0, help="--budget of the known-change run (>= 12 rounds)")
    p.add_argument("--only", default=SUBSET, help="the A/A subset")
    p.add_argument("--budget", type=float, default=0.25, help="--budget of each A/A run")
    p.add_argument("--aa-runs", type=int, default=20)
    p.add_argument("--total-s", type=float, default=480, help="stop starting A/A runs past this")
    p.add_argument("--skip-known", action="store_true")
    p.add_argument("--work", type=Path, default=Path("cpu_issue12_runs"))
    p.add_argument("--json", type=Path, default=Path("cpu_issue12.json"))
    args = p.parse_args(argv)
    args.device = "cpu"
    budget = Budget(args.total_s)
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "aa": []}
    try:
        args.work.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc))
    except OSError as exc:
        print(f"calibrate_cpu: cannot write {args.work} or {args.json}: {exc.strerror}", file=sys.stderr)
        return 2
    if not args.skip_known:
        try:
            doc["known"] = known_change(args, budget)
        except BenchFailed as exc:
            doc["known_error"] = str(exc)
            print(f"calibrate_cpu: known change failed: {exc}", file=sys.stderr)
        args.json.write_text(json.dumps(doc, indent=1))
    for i in range(args.aa_runs):
        need = doc["aa"][-1]["wall_s"] if doc["aa"] else 10.0
        if budget.left() < need:
            left = budget.left()
            doc["aa_stopped"] = f"{i} of {args.aa_runs} runs; {left:.0f} s left of --total-s {args.total_s:.0f}"
            break
        try:
            r = calls(bench(args.work / f"aa{i}", ["--aa"], args, args.budget, max(budget.left(), 60.0)))
        except BenchFailed as exc:
            doc["aa_error"] = str(exc)
            print(f"calibrate_cpu: A/A run {i} failed: {exc}", file=sys.stderr)
            break
        per = r.pop("per_workload")
        r["flagged_names"] = {m: sorted(n for n, c in per.items() if c[m] not in ("same", "n/a")) for m in METHODS}
        doc["aa"].append(r)
        print(f"A/A run {i}: {r['wall_s']:.0f} s, flagged {r['flagged']}", flush=True)
        args.json.write_text(json.dumps(doc, indent=1))
    doc["seconds"] = budget.spent()
    args.json.write_text(json.dumps(doc, indent=1))
    print("\n".join(summary_lines(doc)))
    print(f"summary in {args.json}")
    return 1 if doc.get("known_error") or doc.get("aa_error") else 0


if __name__ == "__main__":
    sys.exit(main())
