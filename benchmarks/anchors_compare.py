"""The anchors on the same samples: how many workloads pyperf's `compare_to` and asv's `compare`
decision rules would flag in mpsup run records, beside mpsup's own calls.

Pure-Python restatements of the decision rules (not their code):
- pyperf: two-sample Student t-test on the raw samples of each side (pooled variance), significant
  when |t| exceeds the 95% two-sided critical value; no practical threshold.
- asv: Mann-Whitney U on the samples (normal approximation, tie-corrected), different when p < 0.002,
  and flagged only when the ratio of medians also passes the factor (default 1.1).

    python benchmarks/anchors_compare.py RUN.json|DIR [...] [--json anchors.json]"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import NormalDist, fmean, median, variance
from typing import Any

from mpsup.report.analysis import analyze


def t_critical_95(df: int) -> float:
    # Cornish-Fisher expansion of Student's t quantile: within 0.1% of tables from df = 3 on.
    z = NormalDist().inv_cdf(0.975)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    return z + g1 / df + g2 / df**2


def pyperf_like(a: list[float], b: list[float]) -> bool:
    n1, n2 = len(a), len(b)
    if n1 < 2 or n2 < 2:
        return False
    sp = ((n1 - 1) * variance(a) + (n2 - 1) * variance(b)) / (n1 + n2 - 2)
    if sp == 0:
        return fmean(a) != fmean(b)
    t = (fmean(a) - fmean(b)) / math.sqrt(sp * (1 / n1 + 1 / n2))
    return abs(t) > t_critical_95(n1 + n2 - 2)


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks = [0.0] * len(pooled)
    i, ties = 0, 0.0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    n1, n2 = len(a), len(b)
    u = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0) - n1 * (n1 + 1) / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return 2 * (1 - NormalDist().cdf(max(z, 0.0)))


def asv_like(a: list[float], b: list[float], factor: float = 1.1) -> bool:
    if not a or not b:
        return False
    r = median(a) / median(b)
    return mann_whitney_p(a, b) < 0.002 and (r > factor or r < 1 / factor)


def sides(w: dict[str, Any], labels: tuple[str, str]) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for r in w.get("rounds") or []:
        a += r.get(labels[0]) or []
        b += r.get(labels[1]) or []
    return a, b


def one(rec: dict[str, Any]) -> dict[str, Any]:
    labels = (rec["environments"][0]["label"], rec["environments"][1]["label"])
    paired = [w for w in rec["workloads"] if w.get("rounds")]
    pp = sum(pyperf_like(*sides(w, labels)) for w in paired)
    av = sum(asv_like(*sides(w, labels)) for w in paired)
    mp = sum(w.significant for w in analyze(rec).workloads if w.ratios)
    return {"run": rec["id"], "mode": rec.get("mode"), "workloads": len(paired), "pyperf": pp, "asv": av, "mpsup": mp}


def records(paths: list[Path]) -> list[dict[str, Any]]:
    files = [f for p in paths for f in (sorted(p.rglob("*.json")) if p.is_dir() else [p])]
    out = []
    for f in files:
        doc = json.loads(f.read_text())
        if (
            isinstance(doc, dict)
            and str(doc.get("schema", "")).startswith("mpsup.run")
            and len(doc.get("environments") or []) == 2
        ):
            out.append(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--json", type=Path, default=Path("anchors.json"))
    args = p.parse_args(argv)
    rows = [one(r) for r in records(args.paths)]
    print(f"{'run':32} {'mode':9} {'n':>4} {'pyperf':>6} {'asv':>4} {'mpsup':>5}")
    for r in rows:
        print(f"{r['run'][:32]:32} {r['mode']!s:9} {r['workloads']:4d} {r['pyperf']:6d} {r['asv']:4d} {r['mpsup']:5d}")
    args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
