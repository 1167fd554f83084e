"""Two single-environment runs of the same torch, compared the way `mpsup report --baseline A --candidate B`
compares them: what an unpaired comparison calls when nothing changed.

    mkdir -p /tmp/r && tar xJf docs/figures/h200_issue12_round5_records.tar.xz -C /tmp/r
    python benchmarks/unpaired_aa.py /tmp/r/h200_issue12_round5_records/single{1,2,3}.json

For every pair of the records given (in order, the earlier as the baseline): the report's verdict and
suite geometric mean, the workloads it calls faster or slower, and how far the two runs put single
workloads apart (the largest and smallest ratio of their medians, and the median distance by duration,
below and above 100 us). Every figure comes from `mpsup.report.analysis.analyze` on the merged record,
as the report builds it. Bad input: one line naming the file, exit 2.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.errors import UserError
from mpsup.report.analysis import analyze
from mpsup.runs.schema import as_record
from mpsup.runs.select import merge_single_runs
from mpsup.store import read_json_object


def pair_line(name: str, base: dict, cand: dict) -> str:
    a = analyze(merge_single_runs(as_record(base), as_record(cand)))
    called = [w for w in a.workloads if w.change in ("faster", "slower")]
    ratios = [w for w in a.workloads if w.speedup and w.baseline_s]
    small = [abs(math.log(w.speedup.estimate)) for w in ratios if w.baseline_s < 100e-6]  # type: ignore[union-attr,operator]
    large = [abs(math.log(w.speedup.estimate)) for w in ratios if w.baseline_s >= 100e-6]  # type: ignore[union-attr,operator]
    est = [w.speedup.estimate for w in ratios if w.speedup]
    suite = a.suite_geomean
    suite_text = f"{suite.estimate:.3f}x ({suite.low:.3f}-{suite.high:.3f})" if suite else "-"
    return (
        f"| {name} | {a.verdict} | {suite_text} | {len(called)} of {len(ratios)} "
        f"| {min(est):.2f}x / {max(est):.2f}x "
        f"| {_typical(small):.1%} / {_typical(large):.1%} |"
    )


def _typical(logs: list[float]) -> float:
    return math.expm1(median(logs)) if logs else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path, help="single-environment run records of one torch")
    args = ap.parse_args(argv)
    if len(args.records) < 2:
        print("unpaired_aa: give at least two records", file=sys.stderr)
        return 2
    docs = []
    for p in args.records:
        try:
            docs.append((p.name, read_json_object(p, "run record")))
        except UserError as exc:
            print(f"unpaired_aa: {exc}", file=sys.stderr)
            return 2
    print(
        "| baseline / candidate | verdict | suite geomean (95% CI) | workloads called | smallest / largest ratio "
        "| median distance < / >= 100 us |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for (na, a), (nb, b) in itertools.combinations(docs, 2):
        try:
            print(pair_line(f"{na} / {nb}", a, b))
        except (UserError, KeyError, TypeError, ValueError) as exc:
            print(f"unpaired_aa: {na} / {nb}: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
