"""Repeat a CPU A/A run N times and count what `mpsup report` calls in each (issue 28).

    python benchmarks/cpu_aa_repeat.py --runs 40 --out docs/figures/cpu_aa_repeat_after.txt
    python benchmarks/cpu_aa_repeat.py --summarize /tmp/aa/reports --out docs/figures/x.txt

Each run is `mpsup bench --aa --device cpu --only 'linear/*/t1' --budget 0.05 --no-smoke` in a fresh
MPSUP_HOME, then `mpsup report --json`. Per run: the workloads called faster or slower (a flag is a
`change` of "faster" or "slower"), the wall time, and the 1-minute load average before and after (the
machine is shared: the load says what else ran). Over the runs: how many runs flag more than one workload,
and each workload's median A/A speedup over the runs, with its range and how many runs put it below 1x
(an A/A workload that leans one way in every run is a bias, not noise).

The text table goes to --out and the same figures as JSON beside it (.json); each run's report JSON is kept
under --keep (default: a temp folder), so --summarize can rebuild the figure without running again.
`--mpsup` runs another mpsup (e.g. `env PYTHONPATH=/tmp/main-before/src python -m mpsup`) to measure a
frozen copy of an older commit on the same machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

COMMAND = [
    "bench",
    "--aa",
    "--device",
    "cpu",
    "--only",
    "linear/*/t1",
    "--budget",
    "0.05",
    "--no-smoke",
]
FLAGS = ("faster", "slower")


def load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def one_run(mpsup: list[str], extra: list[str], keep: Path, index: int, records: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cpu-aa-") as home:
        env = {**os.environ, "MPSUP_HOME": home}
        before, t0 = load1(), time.monotonic()
        bench = subprocess.run(
            [*mpsup, *COMMAND, *extra, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall, after = time.monotonic() - t0, load1()
        if bench.returncode not in (0, 1):
            raise SystemExit(f"run {index}: bench exited {bench.returncode}: {bench.stderr[-2000:]}")
        rep = subprocess.run(
            [*mpsup, "report", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if rep.returncode not in (0, 1, 3):
            raise SystemExit(f"run {index}: report exited {rep.returncode}: {rep.stderr[-2000:]}")
        report = json.loads(rep.stdout)
        if records:
            for f in (Path(home) / "runs").glob("*.json"):
                (keep / f"record{index:03d}.json").write_bytes(f.read_bytes())
    doc = {
        "index": index,
        "wall_s": wall,
        "load_before": before,
        "load_after": after,
        "report": report,
    }
    (keep / f"run{index:03d}.json").write_text(json.dumps(doc))
    return doc


def visit_leans(records: list[Path]) -> dict[str, Any]:
    """From kept run records: each visit's lean, log(baseline median / candidate median) over the visit's
    rounds, per workload. A lean shared by both visits is what the report's visit rule lets through."""
    leans: dict[str, list[float]] = {}
    both = 0
    for path in records:
        rec = json.loads(path.read_text())
        for w in rec.get("workloads", []):
            per_visit = []
            for v in sorted({r.get("visit") for r in w.get("rounds") or []}):
                rs = [r for r in w["rounds"] if r.get("visit") == v]
                labels = [k for k in rs[0] if k not in ("first", "visit")]
                if len(labels) != 2:
                    continue
                a = median(x for r in rs for x in r[labels[0]])
                b = median(x for r in rs for x in r[labels[1]])
                if a > 0 and b > 0:
                    per_visit.append(math.log(a / b))
            leans.setdefault(w["name"], []).extend(per_visit)
            if (
                len(per_visit) == 2
                and min(abs(x) for x in per_visit) > math.log(1.05)
                and per_visit[0] * per_visit[1] > 0
            ):
                both += 1
    every = [abs(x) for v in leans.values() for x in v]
    if not every:
        return {}
    return {
        "records": len(records),
        "visits": len(every),
        "median_abs_lean": math.expm1(median(every)),
        "visits_leaning_over_10pct": sum(x > math.log(1.1) for x in every),
        "workloads_with_both_visits_over_5pct_same_way": both,
        "linear/896x896/t1": [math.exp(x) for x in leans.get("linear/896x896/t1", [])],
    }


def summarize(docs: list[dict[str, Any]], label: str, records: list[Path] | None = None) -> tuple[str, dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    speedups: dict[str, list[float]] = {}
    for d in sorted(docs, key=lambda d: d["index"]):
        flagged = []
        for w in d["report"].get("workloads", []):
            sp = w.get("speedup")
            if isinstance(sp, (int, float)) and math.isfinite(sp) and sp > 0:
                speedups.setdefault(w["name"], []).append(float(sp))
            if w.get("change") in FLAGS:
                flagged.append(f"{w['name']} {w['change']} {sp:.3f}x")
        runs.append(
            {
                "index": d["index"],
                "flagged": flagged,
                "wall_s": d["wall_s"],
                "load_before": d["load_before"],
                "load_after": d["load_after"],
            }
        )
    per = {
        name: {
            "median": median(v),
            "min": min(v),
            "max": max(v),
            "below_1": sum(x < 1 for x in v),
            "runs": len(v),
        }
        for name, v in speedups.items()
    }
    meds = [p["median"] for p in per.values()]
    over1 = sum(len(r["flagged"]) > 1 for r in runs)
    loads = [x for r in runs for x in (r["load_before"], r["load_after"]) if math.isfinite(x)]
    outside = sorted(n for n, p in per.items() if abs(p["median"] - 1) > 0.03)
    summary: dict[str, Any] = {
        "label": label,
        "command": "mpsup " + shlex.join(COMMAND),
        "runs": len(runs),
        "runs_with_more_than_one_flag": over1,
        "runs_with_at_most_one_flag": len(runs) - over1,
        "flags_total": sum(len(r["flagged"]) for r in runs),
        "workload_median_range": [min(meds), max(meds)] if meds else None,
        "workloads_median_outside_3pct": outside,
        "load1_median": median(loads) if loads else None,
        "load1_range": [min(loads), max(loads)] if loads else None,
    }
    lines = [
        f"# {label}",
        f"# {summary['command']}, then mpsup report --json; one fresh MPSUP_HOME per run",
        f"runs: {len(runs)}; runs flagging more than one workload: {over1}; flags in all: {summary['flags_total']}",
    ]
    if meds:
        lines.append(
            f"per-workload A/A median speedup over the runs: {min(meds):.3f}-{max(meds):.3f}x; "
            f"outside 1 +- 3%: {', '.join(outside) or 'none'}"
        )
    if loads:
        lines.append(
            f"1-minute load average (before/after each run): median {median(loads):.2f}, "
            f"range {min(loads):.2f}-{max(loads):.2f}"
        )
    leans = visit_leans(records or [])
    if leans:
        summary["visit_leans"] = leans
        lines.append(
            f"per visit (one pair of workers), from {leans['records']} run records: median |lean| "
            f"{leans['median_abs_lean']:.1%}; {leans['visits_leaning_over_10pct']} of {leans['visits']} "
            f"visits over 10%; {leans['workloads_with_both_visits_over_5pct_same_way']} workload-runs with "
            "both visits over 5% the same way"
        )
        lines.append(
            "linear/896x896/t1 per visit (baseline/candidate): "
            + " ".join(f"{x:.2f}" for x in leans["linear/896x896/t1"])
        )
    lines += ["", "run  flags  wall_s  load  flagged"]
    for r in runs:
        lines.append(
            f"{r['index']:>3}  {len(r['flagged']):>5}  {r['wall_s']:6.0f}  "
            f"{r['load_before']:.2f}/{r['load_after']:.2f}  " + "; ".join(r["flagged"])
        )
    lines += ["", "workload                 median    min    max  below-1x/runs"]
    for name, p in sorted(per.items(), key=lambda kv: kv[1]["median"]):
        lines.append(f"{name:<24} {p['median']:.3f}  {p['min']:.3f}  {p['max']:.3f}  {p['below_1']}/{p['runs']}")
    return "\n".join(lines) + "\n", {"summary": summary, "runs": runs, "workloads": per}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True, help="the text figure (JSON goes beside it)")
    ap.add_argument("--label", default="CPU A/A, repeated")
    ap.add_argument(
        "--keep",
        type=Path,
        help="folder for each run's report (default: a temp folder)",
    )
    ap.add_argument(
        "--mpsup",
        default=f"{shlex.quote(sys.executable)} -m mpsup",
        help="how to run mpsup",
    )
    ap.add_argument("--extra", default="", help="more bench options, e.g. '--threads 1'")
    ap.add_argument("--records", action="store_true", help="keep each run record beside its report")
    ap.add_argument(
        "--summarize",
        type=Path,
        help="rebuild the figure from a --keep folder; runs nothing",
    )
    args = ap.parse_args()
    folder = args.summarize or args.keep
    if args.summarize:
        docs = [json.loads(p.read_text()) for p in sorted(args.summarize.glob("run*.json"))]
    else:
        keep = args.keep or Path(tempfile.mkdtemp(prefix="cpu-aa-reports-"))
        keep.mkdir(parents=True, exist_ok=True)
        start = len(list(keep.glob("run*.json")))
        docs = [json.loads(p.read_text()) for p in sorted(keep.glob("run*.json"))]
        for i in range(start, start + args.runs):
            docs.append(
                one_run(
                    shlex.split(args.mpsup),
                    shlex.split(args.extra),
                    keep,
                    i,
                    args.records,
                )
            )
            text, _ = summarize(docs, args.label)
            print(text.splitlines()[2], file=sys.stderr)
        print(f"reports kept in {keep}", file=sys.stderr)
    records = sorted(folder.glob("record*.json")) if folder else []
    text, doc = summarize(docs, args.label, records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
