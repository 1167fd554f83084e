"""Wall-clock time of the runs mpsup sets speed targets for, with the precision they reached.

    python benchmarks/speed.py --runs main                         # README.md's main job on this machine
    python benchmarks/speed.py --device cuda --runs single,paired  # full suite, then A/A linears
    python benchmarks/speed.py --device cuda --runs paired --candidate /path/to/python

Runs (each `python -m mpsup bench` in a fresh MPSUP_HOME, output discarded, the record read back):

- main:   `mpsup bench` (README.md's main job, the default budget; smoke tests included) target <= 90 s
- single: `mpsup bench --device D --no-smoke` (the single-environment full suite)     target <= 60 s
- paired: `mpsup bench --device D --aa --only linear --no-smoke` (or --candidate C)  target <= 150 s,
          median per-workload 95% half-width <= 1% over workloads above 100 us and <= 3% over all

Prints two tables (and --json FILE writes them): the targets, and where each run's time went
(timed samples, warmup, setup and the pipe, workloads visited again). Expected duration: the runs'
own time plus worker startup.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mpsup.stats import median_ci, round_ratio_ci  # noqa: E402

# Wall-time targets in seconds per run: the main job, the single-environment suite, the paired linears.
TARGETS = {"main": 90.0, "single": 60.0, "paired": 150.0}


def command(run: str, args: argparse.Namespace) -> list[str]:
    base = [args.python, "-m", "mpsup", "bench"]
    if run == "main":
        return [*base, *(["--device", args.device] if args.device else [])]
    dev = ["--device", args.device] if args.device else []
    budget = ["--budget", str(args.budget)] if args.budget else []
    if run == "single":
        return [*base, *dev, *budget, "--no-smoke"]
    pair = ["--candidate", args.candidate] if args.candidate else ["--aa"]
    return [*base, *dev, *budget, *pair, "--only", args.only, "--no-smoke"]


def widths(rec: dict[str, Any]) -> tuple[list[float], list[float], list[int]]:
    """Relative half-widths over all workloads and over those above 100 us, and rounds per workload
    (samples for a single-environment run)."""
    every: list[float] = []
    slow: list[float] = []
    units: list[int] = []
    label = rec["environments"][0]["label"]
    for w in rec["workloads"]:
        env = w.get("envs", {}).get(label, {})
        if w.get("ratios"):
            hw = round_ratio_ci(w["ratios"]).rel_half_width
            units.append(len(w["ratios"]))
        elif env.get("samples"):
            hw = median_ci(env["samples"]).rel_half_width
            units.append(len(env["samples"]))
        else:
            continue
        every.append(hw)
        if (env.get("median") or 0) > 100e-6:
            slow.append(hw)
    return every, slow, units


def breakdown(rec: dict[str, Any]) -> dict[str, float]:
    """Where a run's time went, from its record: timed samples, warmup (with a paired round's discarded
    block after each switch), the rest of each workload's time (setup, calibration, teardown, the pipe),
    and the workloads that were visited more than once with what they took in all."""
    timed = warm = inside = again = 0.0
    revisited = 0
    for w in rec["workloads"]:
        inside += w.get("elapsed_s") or 0.0
        if (w.get("visits") or 1) > 1:
            revisited += 1
            again += w.get("elapsed_s") or 0.0
        for env in (w.get("envs") or {}).values():
            calls = env.get("calls") or 0
            timed += sum(env.get("samples") or []) * calls
            warm += sum(x for x in env.get("warmup") or [] if isinstance(x, (int, float))) * calls
    return {
        "in_workloads_s": inside,
        "timed_s": timed,
        "warmup_s": warm,
        "setup_and_pipe_s": max(0.0, inside - timed - warm),
        "revisited": revisited,
        "revisited_s": again,
        **too_slow(rec),
    }


def too_slow(rec: dict[str, Any]) -> dict[str, Any]:
    """The workloads the run skipped as too slow for its budget (status too_slow), and what deciding took."""
    ws = [w for w in rec["workloads"] if w.get("status") == "too_slow"]
    calls = [w["call_s"] for w in ws if isinstance(w.get("call_s"), (int, float))]
    return {
        "too_slow": len(ws),
        "too_slow_predicted": sum(1 for w in ws if w.get("call_predicted")),
        "too_slow_s": sum(w.get("elapsed_s") or 0.0 for w in ws),
        "too_slow_calls_s": [min(calls), max(calls)] if calls else None,
    }


def run_one(run: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = command(run, args)
    with tempfile.TemporaryDirectory(prefix=f"mpsup-speed-{run}-") as home:
        env = {**os.environ, "MPSUP_HOME": home, "COLUMNS": "100"}
        if args.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([args.pythonpath, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        records = sorted((Path(home) / "runs").glob("*.json"))
        if not records:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"run": run, "command": " ".join(cmd[1:]), "wall_s": wall, "error": " | ".join(tail)}
        rec = json.loads(records[-1].read_text())
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            (Path(args.keep) / f"{run}.json").write_text(json.dumps(rec))
    every, slow, units = widths(rec)

    def med(xs: list[float]) -> float | None:
        finite = [x for x in xs if math.isfinite(x)]
        return median(finite) if finite and len(finite) == len(xs) else (median(xs) if xs else None)

    return {
        "run": run,
        "command": " ".join(cmd[1:]),
        "exit": proc.returncode,
        "wall_s": wall,
        "target_s": TARGETS[run],
        "workloads": len(rec["workloads"]),
        "median_hw_all": med(every),
        "median_hw_over_100us": med(slow),
        "p90_hw_all": sorted(every)[max(0, math.ceil(0.9 * len(every)) - 1)] if every else None,
        "min_units": min(units) if units else None,
        "median_units": median(units) if units else None,
        "second_visits": sum(1 for w in rec["workloads"] if w.get("visits", 1) > 1),
        **breakdown(rec),
    }


def pct(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if not math.isfinite(x) else f"{x:.1%}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="main", help="comma-separated: main, single, paired")
    ap.add_argument("--device", default=None, help="cpu, cuda or mps (default: mpsup's default)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs mpsup (and the baseline)")
    ap.add_argument("--candidate", default=None, help="paired: a candidate interpreter instead of --aa")
    ap.add_argument("--only", default="linear", help="paired: the workloads (default: the linears)")
    ap.add_argument("--budget", type=float, default=None, help="single/paired: --budget (default: mpsup's)")
    ap.add_argument("--pythonpath", default=None, help="prepended to PYTHONPATH (a machine without mpsup installed)")
    ap.add_argument("--keep", default=None, help="folder to copy each run's record to")
    ap.add_argument("--json", default=None, help="write the table as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for run in [r.strip() for r in args.runs.split(",") if r.strip()]:
        if run not in TARGETS:
            sys.exit(f"--runs: unknown run {run!r} (main, single, paired)")
        rows.append(run_one(run, args))
        r = rows[-1]
        print(f"{run}: {r['wall_s']:.0f} s{' ERROR ' + r['error'] if 'error' in r else ''}", file=sys.stderr)
    print(
        "| run | wall | target | workloads | rounds/samples min / median | second visits "
        "| median half-width all / >100 us | p90 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['run']} | {r['wall_s']:.0f} s | {TARGETS[r['run']]:.0f} s | failed: {r['error']} | | | | |")
            continue
        print(
            f"| {r['run']} | {r['wall_s']:.0f} s | {r['target_s']:.0f} s | {r['workloads']} | "
            f"{r['min_units']} / {r['median_units']} | {r['second_visits']} | "
            f"{pct(r['median_hw_all'])} / {pct(r['median_hw_over_100us'])} | {pct(r['p90_hw_all'])} |"
        )
    print()
    print(
        "| run | wall | in workloads | timed samples | warmup + discarded "
        "| setup, calibration, pipe | visited again (their time) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" not in r:
            print(
                f"| {r['run']} | {r['wall_s']:.0f} s | {r['in_workloads_s']:.1f} s | {r['timed_s']:.1f} s | "
                f"{r['warmup_s']:.1f} s | {r['setup_and_pipe_s']:.1f} s | {r['revisited']} ({r['revisited_s']:.1f} s) |"
            )
    for r in rows:
        if r.get("too_slow"):
            lo, hi = r["too_slow_calls_s"] or (math.nan, math.nan)
            print(
                f"{r['run']}: {r['too_slow']} workloads skipped as too slow for the budget ({lo:.2f}-{hi:.2f} s a "
                f"call; {r['too_slow_predicted']} predicted without a call), {r['too_slow_s']:.1f} s spent deciding"
            )
    for r in rows:
        print(f"{r['run']}: {r['command']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
