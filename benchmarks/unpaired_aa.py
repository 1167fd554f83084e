"""Two single-environment runs of the same torch, compared the way `mpsup report --baseline A --candidate B`
compares them: what an unpaired comparison calls when nothing changed.

    python benchmarks/unpaired_aa.py RUN1.json RUN2.json [RUN3.json ...]    (plain JSON or .json.gz)

Each record is `mpsup bench --json`'s (or ~/.mpsup/runs/*.json) from a single-environment run of the same
torch on the same machine.

For every pair of the records given (in order, the earlier as the baseline): the report's verdict and
suite geometric mean, the workloads it calls faster or slower, and how far the two runs put single
workloads apart (the largest and smallest ratio of their medians, and the median distance by duration,
below and above 100 us), and how many workloads a floor built from the pair itself would still call
(each threshold raised by how far its 15 nearest-duration neighbours moved, as the report's
between-process floor does within a paired run). Every figure comes from
`mpsup.report.analysis.analyze` on the merged record, as the report builds it. Bad input: one line
naming the file, exit 2.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import sys
import zlib
from pathlib import Path
from statistics import median
from typing import Any

from mpsup.errors import UserError
from mpsup.report.analysis import analyze
from mpsup.report.floors import FLOOR_CAP, PROCESS_FLOOR_FACTOR, PROCESS_NEIGHBOURS
from mpsup.runs.schema import as_record
from mpsup.runs.select import merge_single_runs
from mpsup.safe_files import DEFAULT_MAX_JSON_BYTES, parse_json, read_bytes_bounded
from mpsup.stats import PRACTICAL_THRESHOLD, classify_change


def read_json_object(path: Path, what: str, max_bytes: int = DEFAULT_MAX_JSON_BYTES) -> dict[str, Any]:
    """mpsup.safe_files.read_json_object, also for `NAME.json.gz` (recognised by its gzip magic, not its name)."""
    data = read_bytes_bounded(path, what, max_bytes)
    if data[:2] == b"\x1f\x8b":
        try:
            # Decompressed in bounded steps: a small file must not expand past the same limit.
            d = zlib.decompressobj(wbits=31)
            data = d.decompress(data, max_bytes + 1)
        except (zlib.error, EOFError, gzip.BadGzipFile) as exc:
            raise UserError(f"{path}: {what} is not readable gzip ({exc})") from None
        if len(data) > max_bytes:
            raise UserError(f"{path}: {what} is larger than {max_bytes >> 20} MiB uncompressed; refusing to read it")
    doc = parse_json(data, path, what)
    if not isinstance(doc, dict):
        raise UserError(f"{path}: {what} must be a JSON object, found {type(doc).__name__}")
    return doc


def called_under_neighbour_floor(ws: list) -> int:
    """Workloads still called if each one's threshold were raised by how far its nearest-duration
    neighbours moved between the two runs (the between-process floor's rule, applied to the pair)."""
    pts = [(math.log(w.baseline_s), abs(math.log(w.speedup.estimate))) for w in ws]
    called = 0
    for w in ws:
        here = math.log(w.baseline_s)
        nearest = sorted(pts, key=lambda p: abs(p[0] - here))[:PROCESS_NEIGHBOURS]
        typical = median(d for _, d in nearest)
        floor = max(PRACTICAL_THRESHOLD, math.expm1(min(PROCESS_FLOOR_FACTOR * typical, FLOOR_CAP)))
        called += classify_change(w.speedup, floor) != "same"
    return called


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
        f"| {called_under_neighbour_floor(ratios)} "
        f"| {min(est):.2f}x / {max(est):.2f}x "
        f"| {_typical(small):.1%} / {_typical(large):.1%} |"
    )


def _typical(logs: list[float]) -> float:
    return math.expm1(median(logs)) if logs else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        "| baseline / candidate | verdict | suite geomean (95% CI) | workloads called | with a neighbour floor "
        "| smallest / largest ratio | median distance < / >= 100 us |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for (na, a), (nb, b) in itertools.combinations(docs, 2):
        try:
            print(pair_line(f"{na} / {nb}", a, b))
        except (UserError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
            print(f"unpaired_aa: {na} / {nb}: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
