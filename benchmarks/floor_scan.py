"""How the between-process floor trades A/A false calls against power, on stored paired records.

    git show a4405ec:docs/figures/h200_issue12_records.tgz | tar xz -C /tmp   # records kept in git, not the tree
    git show a4405ec:docs/figures/h200_issue12_final.json > /tmp/h200_issue12_final.json
    python benchmarks/floor_scan.py --aa /tmp/h200_issue12_records/aa[123].json \\
        --candidate /tmp/h200_issue12_records/cublaslt.json --reference /tmp/h200_issue12_final.json

Records and summaries may be plain JSON or .json.gz (what docs/figures keeps).

For each factor on the median disagreement between a workload's two visits (and each neighbourhood
size), prints the workloads flagged in every A/A record and, for the candidate record, how many of the
reference's clear changes are found in its direction and how many flat shapes are flagged. The
reference JSON is what benchmarks/calibrate_h200.py writes (per-workload `reference`: slower, faster,
flat or unclear)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from record_files import read_json_object  # plain or .json.gz

import mpsup.report.analysis as analysis
from mpsup.errors import UserError

CALLED = ("faster", "slower")


def flagged(record: dict[str, Any]) -> list[str]:
    return [w.name for w in analysis.analyze(record).workloads if w.change in CALLED]


def score(record: dict[str, Any], reference: dict[str, Any]) -> tuple[int, int, int, int]:
    calls = {w.name: w.change for w in analysis.analyze(record).workloads}
    clear = [n for n, r in reference.items() if r.get("reference") in CALLED and n in calls]
    flat = [n for n, r in reference.items() if r.get("reference") == "flat" and n in calls]
    found = sum(calls[n] == reference[n]["reference"] for n in clear)
    return found, len(clear), sum(calls[n] in CALLED for n in flat), len(flat)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aa", type=Path, nargs="+", required=True)
    p.add_argument("--candidate", type=Path)
    p.add_argument("--reference", type=Path)
    p.add_argument("--factors", default="0,1.0,1.48,2.22")
    p.add_argument("--neighbours", default="15")
    args = p.parse_args(argv)
    try:
        aa = [read_json_object(path, "run record") for path in args.aa]
        cand = read_json_object(args.candidate, "run record") if args.candidate else None
        ref_doc = read_json_object(args.reference, "calibration summary") if args.reference else {}
    except UserError as exc:
        print(f"floor_scan: {exc}", file=sys.stderr)
        return 2
    reference = ref_doc.get("cublaslt", {}).get("per_workload", {})
    print("| K | factor | A/A flags per run | candidate: clear found | flat flagged |")
    print("|---:|---:|---|---:|---:|")
    for k in (int(x) for x in args.neighbours.split(",")):
        for factor in (float(x) for x in args.factors.split(",")):
            analysis.PROCESS_NEIGHBOURS, analysis.PROCESS_FLOOR_FACTOR = k, factor
            flags = ", ".join(str(len(flagged(r))) for r in aa)
            found = flat = "-"
            if cand is not None and reference:
                f, nc, fl, nf = score(cand, reference)
                found, flat = f"{f} / {nc}", f"{fl} / {nf}"
            print(f"| {k} | {factor:g} | {flags} | {found} | {flat} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
