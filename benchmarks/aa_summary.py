"""Stored A/A records, summarised the way docs/methodology.md quotes them; optionally, the power a real
change keeps when each A/A run is its stored A/A floor.

    # the raw records are kept in git, not in the tree (docs/history.md)
    mkdir -p /tmp/r && git show a4405ec:docs/figures/h200_issue12_round6_records.tar.xz | tar xJ -C /tmp/r
    git show a4405ec:docs/figures/h200_issue12_round5_records.tar.xz | tar xJ -C /tmp/r
    python benchmarks/aa_summary.py $(ls /tmp/r/h200_issue12_round6_records/full_*.json | sort -V) \\
        --candidate /tmp/r/h200_issue12_round5_records/cublaslt.json \\
        --reference docs/figures/h200_issue12_round5_cublaslt.json.gz

Per A/A record: workloads flagged (mpsup, the method before issue 12, pyperf's and asv's rules, as
`calibrate_h200.py` counts them), median interval half-width over all workloads and over those above
100 us, rounds, the time in workloads and in warmup plus discarded blocks, and the practical threshold
each workload gets once the run's between-process floor is applied (median over workloads, the
largest, and how many are raised above 3%). Over the records: the spread (sd) of each workload's
log estimate across runs, and how far apart the two environments' medians sit (what two single
runs' medians can be expected to differ by, at the least). With --candidate and --reference: the
candidate record analysed with each A/A record as its stored A/A floor, scored against the
reference's clear and flat shapes.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from statistics import median, pstdev
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from calibrate_h200 import METHODS, calls, score
from record_files import read_json_object  # plain or .json.gz
from speed import breakdown, widths

from mpsup.errors import UserError
from mpsup.report.analysis import analyze, process_floors
from mpsup.runs.schema import as_record
from mpsup.stats import PRACTICAL_THRESHOLD

THRESHOLD = PRACTICAL_THRESHOLD


def thresholds(rec: dict[str, Any]) -> list[float]:
    """Each workload's threshold under the run's own between-process floor."""
    typed = as_record(rec)
    floors, _ = process_floors(typed, typed.environments[0].label)
    return [max(THRESHOLD, math.expm1(v)) for v in floors.values()]


def run_row(name: str, rec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    c = calls(rec)
    every, slow, units = widths(rec)
    b = breakdown(rec)
    t = thresholds(rec)
    row = {
        "flagged": c["flagged"],
        "hw_all": median(every) if every else math.nan,
        "hw_slow": median(slow) if slow else math.nan,
        "rounds_min": min(units) if units else 0,
        "rounds_median": median(units) if units else 0,
        "in_workloads_s": b["in_workloads_s"],
        "warmup_s": b["warmup_s"],
        "threshold_median": median(t) if t else THRESHOLD,
        "threshold_max": max(t) if t else THRESHOLD,
        "raised": sum(x > THRESHOLD for x in t),
        "workloads": len(t),
    }
    line = (
        f"| {name} | {' / '.join(str(c['flagged'][m]) for m in METHODS)} | {row['hw_all']:.2%} / {row['hw_slow']:.2%} "
        f"| {row['rounds_min']} / {row['rounds_median']:.1f} | {row['in_workloads_s']:.1f} s | {row['warmup_s']:.1f} s "
        f"| {row['threshold_median']:.1%} / {row['threshold_max']:.1%} | {row['raised']} of {row['workloads']} |"
    )
    return line, row


def spread(records: list[dict[str, Any]]) -> list[float]:
    """Per workload, the sd of its log speedup estimate across the records."""
    logs: dict[str, list[float]] = {}
    for rec in records:
        for w in analyze(rec).workloads:
            if w.speedup and w.speedup.estimate > 0:
                logs.setdefault(w.name, []).append(math.log(w.speedup.estimate))
    return sorted(pstdev(v) for v in logs.values() if len(v) > 1)


def process_disagreement(records: list[dict[str, Any]]) -> list[float]:
    """Per workload and record, |log| of one environment's median over the other's: how far two sets
    of processes of the same torch put the same workload apart, which is as close as a single run's
    median can be taken to another run's."""
    out = []
    for rec in records:
        for w in as_record(rec).workloads:
            meds = [e.median for e in w.envs.values() if e.status == "ok" and e.median]
            ratio = meds[0] / meds[1] if len(meds) == 2 else 0.0
            if w.status == "ok" and 0 < ratio < math.inf:
                out.append(abs(math.log(ratio)))
    return sorted(out)


def power_lines(candidate: dict[str, Any], reference: dict[str, list[float]], aa: list[tuple[str, Any]]) -> list[str]:
    def per_workload(floor: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
        a = analyze(candidate, aa_reference=floor)
        return {w.name: {**dict.fromkeys(METHODS, "n/a"), "mpsup": w.change} for w in a.workloads if w.ratios}

    out = []
    base = score(reference, per_workload(None))["mpsup"]
    out.append(
        f"no A/A floor: found {base['found']} of {base['clear']}, wrong way {base['wrong_direction']}, "
        f"flat flagged {base['flat_flagged']} of {base['flat']}"
    )
    found = []
    for name, rec in aa:
        s = score(reference, per_workload(rec))["mpsup"]
        found.append(s["found"])
        out.append(
            f"{name} as the A/A floor: found {s['found']} of {s['clear']}, wrong way {s['wrong_direction']}, "
            f"flat flagged {s['flat_flagged']} of {s['flat']}"
        )
    if found:
        out.append(f"found: min {min(found)}, median {median(found):g}, max {max(found)} (of {base['clear']})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("aa", nargs="+", type=Path, help="A/A run records")
    ap.add_argument("--candidate", type=Path, help="a paired record of a real change")
    ap.add_argument("--reference", type=Path, help="calibrate_h200.py's JSON for that candidate (reference_rounds)")
    args = ap.parse_args(argv)
    try:
        aa = [(p.name, read_json_object(p, "A/A record")) for p in args.aa]
        cand = read_json_object(args.candidate, "candidate record") if args.candidate else None
        ref_doc = read_json_object(args.reference, "reference") if args.reference else None
        print(
            "| record | flagged (mpsup / before / pyperf / asv) | median half-width all / >100 us "
            "| rounds min / median | in workloads | warmup + discarded | threshold median / max | raised |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        rows = []
        for name, rec in aa:
            line, row = run_row(name, rec)
            rows.append(row)
            print(line)
    except (UserError, KeyError, TypeError, ValueError) as exc:
        print(f"aa_summary: {exc}", file=sys.stderr)
        return 2
    for m in METHODS:
        fl = [r["flagged"][m] for r in rows]
        print(
            f"{m}: flagged per run {fl}; runs with >= 1: {sum(x >= 1 for x in fl)}/{len(fl)}, "
            f">= 2: {sum(x >= 2 for x in fl)}/{len(fl)}"
        )
    sds = spread([rec for _, rec in aa])
    if sds:
        print(
            f"sd of a workload's log estimate across the {len(aa)} runs: median {median(sds):.2%}, "
            f"p90 {sds[int(0.9 * (len(sds) - 1))]:.2%} ({len(sds)} workloads)"
        )
    apart = process_disagreement([rec for _, rec in aa])
    if apart:
        q = [apart[int(p * (len(apart) - 1))] for p in (0.5, 0.75, 0.9)]
        print(
            "one environment's median against the other's (its processes against the other's): "
            f"median {math.expm1(q[0]):.2%}, p75 {math.expm1(q[1]):.2%}, p90 {math.expm1(q[2]):.2%} "
            f"({len(apart)} workload runs)"
        )
    for key, fmt in (
        ("hw_all", ".2%"),
        ("hw_slow", ".2%"),
        ("threshold_median", ".1%"),
        ("raised", "d"),
        ("in_workloads_s", ".1f"),
        ("warmup_s", ".1f"),
    ):
        xs = [r[key] for r in rows]
        print(f"{key}: {min(xs):{fmt}} - {max(xs):{fmt}}")
    if cand is not None and ref_doc is not None:
        per = (ref_doc.get("cublaslt") or {}).get("per_workload") or {}
        reference = {
            n: v["reference_rounds"] for n, v in per.items() if isinstance(v, dict) and v.get("reference_rounds")
        }
        if not reference:
            print(f"aa_summary: {args.reference}: no reference_rounds under cublaslt.per_workload", file=sys.stderr)
            return 2
        print()
        print("\n".join(power_lines(cand, reference, aa)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
