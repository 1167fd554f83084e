"""What the numerics comparison adds to a paired run: the same paired run with --numerics and --no-numerics.

For each target (a small Llama-shaped float32 config folder run whole, with its ops replayed; a selection of the
bundled suite) it runs `mpsup bench ... --aa` (a paired run of this interpreter against itself; `--candidate
PYTHON` instead with --candidate) at the default budget, alternating --numerics and --no-numerics, --repeat times
each, each run in its own MPSUP_HOME, and prints each run's wall time, the median of each arm, the added share
(issue 45's bound: at most +25%), and the record's per-workload `took_s` (the float64 reference's own time) summed.
The machine's load average is printed beside every run: on a shared machine, wall time moves with it.

    python benchmarks/numerics_cost.py --help
    python benchmarks/numerics_cost.py --repeat 3
    python benchmarks/numerics_cost.py --targets suite --only 'linear/896x*' --repeat 3

Exits 1 when a target's median added share is above --bound (default 0.25)."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from numerics_candidates import LLAMA  # the candidates' folder: its cost is the one their figures paid


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# bench's progress bars on stderr end with each part's elapsed time: "numerics ━━━ 12/12 0:00:10 ..."
BAR = re.compile(r"^(smoke|workloads|numerics)\s+\S+\s+\d+/\d+\s+(\d+):(\d\d):(\d\d)", re.M)


def parts(stderr: str) -> dict[str, float]:
    """Each progress bar's last elapsed time, seconds."""
    out: dict[str, float] = {}
    for m in BAR.finditer(stderr.replace("\r", "\n")):
        out[m.group(1)] = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4))
    return out


def run(args: list[str], home: Path) -> tuple[float, dict[str, Any], dict[str, float]]:
    env = {**os.environ, "MPSUP_HOME": str(home), "COLUMNS": "200"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "mpsup", *args, "--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"mpsup {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    path = doc.get("path") or sorted((home / "runs").glob("*.json"))[-1]
    return wall, json.loads(Path(path).read_text()), parts(out.stderr)


def numerics_figures(record: dict[str, Any]) -> dict[str, Any]:
    took, compared, other = 0.0, 0, 0
    reasons: dict[str, int] = {}
    for w in record.get("workloads") or []:
        n = w.get("numerics")
        if not isinstance(n, dict):
            continue
        took += float(n.get("took_s") or 0.0)
        if n.get("status") == "compared":
            compared += 1
        else:
            other += 1
            why = str(n.get("reason") or "")[:70]
            reasons[why] = reasons.get(why, 0) + 1
    return {"took_s": took, "compared": compared, "not_compared": other, "reasons": reasons}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="llama,suite", help="comma-separated of llama, suite")
    ap.add_argument("--only", default="linear/896x*", help="the suite selection (bench --only)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per arm and target (default 3)")
    ap.add_argument("--budget", type=float, help="bench --budget (default: mpsup's own)")
    ap.add_argument("--tokens", type=int, default=32, help="the Llama's --tokens (default 32)")
    ap.add_argument("--candidate", help="a candidate interpreter (default: --aa, this one against itself)")
    ap.add_argument("--bound", type=float, default=0.25, help="the largest added share allowed (default 0.25)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mpsup-numerics-cost"), help="work folder")
    opts = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    work = opts.out
    work.mkdir(parents=True, exist_ok=True)
    llama = work / "llama"
    llama.mkdir(exist_ok=True)
    (llama / "config.json").write_text(json.dumps(LLAMA))
    pair = ["--candidate", opts.candidate] if opts.candidate else ["--aa"]
    common = ["bench", "--no-smoke", *pair, *(["--budget", str(opts.budget)] if opts.budget else [])]
    targets = {
        "llama": ["--model", str(llama), "--tokens", str(opts.tokens)],
        "suite": ["--only", opts.only],
    }
    chosen = [t.strip() for t in opts.targets.split(",") if t.strip()]
    if any(t not in targets for t in chosen):
        ap.error(f"--targets: of {', '.join(targets)}")
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load()} nproc {os.cpu_count()}")
    fails, rows = [], []
    for target in chosen:
        walls: dict[str, list[float]] = {"--numerics": [], "--no-numerics": []}
        took: list[float] = []
        timed: dict[str, list[float]] = {"--numerics": [], "--no-numerics": []}
        judged: list[float] = []
        print(f"## {target}: bench {' '.join(targets[target])} {' '.join(pair)}")
        for i in range(opts.repeat):
            order = ["--numerics", "--no-numerics"] if i % 2 == 0 else ["--no-numerics", "--numerics"]
            for arm in order:
                before = load()
                wall, record, bars = run([*common, *targets[target], arm], work / f"home-{target}-{arm[2:]}-{i}")
                timed[arm].append(bars.get("workloads", float("nan")))
                if arm == "--numerics":
                    judged.append(bars.get("numerics", float("nan")))
                walls[arm].append(wall)
                fig = numerics_figures(record)
                if arm == "--numerics":
                    took.append(fig["took_s"])
                n_work = sum(1 for w in record.get("workloads") or [] if w.get("status") != "skipped")
                print(
                    f"  run {i + 1} {arm:<14} {wall:6.1f} s  {n_work} workloads, timed part "
                    f"{bars.get('workloads', float('nan')):.0f} s"
                    + (
                        f", numerics pass {bars.get('numerics', float('nan')):.0f} s (took_s {fig['took_s']:.1f} s), "
                        f"{fig['compared']} compared, {fig['not_compared']} not"
                        if arm == "--numerics"
                        else ""
                    )
                    + f"  (load {before} -> {load()})"
                )
                if arm == "--numerics" and fig["reasons"]:
                    for why, n in fig["reasons"].items():
                        print(f"      not compared x{n}: {why}")
        on, off = statistics.median(walls["--numerics"]), statistics.median(walls["--no-numerics"])
        share = on / off - 1
        pairs = [a / b - 1 for a, b in zip(walls["--numerics"], walls["--no-numerics"], strict=False)]
        rows.append((target, on, off, share, min(pairs), max(pairs), statistics.median(took)))
        t_on, t_off = statistics.median(timed["--numerics"]), statistics.median(timed["--no-numerics"])
        print(
            f"  {target}: medians: timed part {t_on:.0f} s with numerics, {t_off:.0f} s without; numerics pass "
            f"{statistics.median(judged):.0f} s, of which the reference's took_s {statistics.median(took):.1f} s"
        )
        if share > opts.bound:
            fails.append(f"{target}: numerics adds {share:+.0%} (bound {opts.bound:+.0%})")
    print(f"{'target':<8} {'numerics':>9} {'no-numerics':>11} {'added':>7} {'pairs':>15} {'reference took_s':>17}")
    for target, on, off, share, lo, hi, t in rows:
        print(f"{target:<8} {on:8.1f}s {off:10.1f}s {share:+7.0%} {lo:+6.0%}..{hi:+6.0%} {t:16.1f}s")
    print(f"# load at the end {load()}")
    for f in fails:
        print(f"FAIL {f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
