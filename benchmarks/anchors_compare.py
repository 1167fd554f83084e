"""The anchors on the same samples: how many workloads pyperf's `compare_to` and asv's `compare`
decision rules would flag in mpsup run records, beside mpsup's own calls.

The rules are restated from the projects' source (read, not copied), checked at
psf/pyperf ab7fd04 (2026-07-01) and airspeed-velocity/asv 7032df7 + asv_runner 01d4a25 (2026-06):

pyperf `compare_to` (pyperf/_compare.py: CompareResult._set_significant, is_significant_benchs;
pyperf/_utils.py: is_significant, tscore, pooled_sample_variance, tdist95conf_level):
- one value on each side: significant, without a test;
- otherwise Student's two-sample t-test on all values (pooled variance over n1 + n2 - 2 degrees of
  freedom, t = (mean1 - mean2) / sqrt(2 * s_p^2 / n)); significant when |t| >= the two-sided 95%
  critical value from pyperf's table (df 1-30 exact, then steps: >= 40: 2.021, >= 50: 2.009,
  >= 60: 2.000, >= 80: 1.990, >= 100: 1.984, >= 200: 1.960);
- `tscore` refuses samples of different lengths and divides by zero when both sides have zero
  variance; `is_significant_benchs` catches any exception and calls the pair *significant*;
- no practical threshold by default (`--min-speed` unset); with one, |mean ratio - 1| below it is not
  significant. The ratio shown is mean(changed) / mean(reference).

asv `compare` (asv/commands/compare.py: _is_result_better, Compare.print_table; asv/_stats.py:
is_different, mann_whitney_u; asv/commands/common_args.py: --factor default 1.1; asv_runner/statistics.py:
compute_stats, quantile_ci):
- each side's value is the median of its samples; improved when t2 < t1 / factor, worsened when
  t1 < t2 / factor (strict), factor 1.1;
- when both sides have more than one sample, a difference must also pass `is_different` (p 0.002):
  NaNs dropped; if 1 / C(m + n, min(m, n)) < 0.002 (the test can reach p < 0.002 at all), a two-sided
  Mann-Whitney U with conservative tie breaking (ties are split towards m*n//2), exact when both sides
  have <= 20 samples, else the normal approximation without tie or continuity correction;
- otherwise (tiny samples) the two sides' 99% intervals of the median must not overlap. Those come from
  `quantile_ci(samples, 0.5, 0.99)`, an order-statistic interval; where it is infinite (fewer than 8
  samples) asv extends it with a Laplace posterior, which this script replaces by the sample range (a
  narrower interval, so it may flag where asv would not). The JSON counts workloads in that branch.

    python benchmarks/anchors_compare.py RUN.json|DIR [...] [--json anchors.json]

Prints one row per two-environment record (folders are searched for .json and .json.gz): its workloads and
how many of them pyperf, asv and mpsup call changed; --json writes the same rows."""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import fmean, median
from typing import Any

from mpsup.report.analysis import analyze

# Two-sided 95% critical values of Student's t for df 1-30 (standard tables; pyperf keeps the same).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
# pyperf's coarse steps past the table: (from df, critical value), largest first.
_T95_STEPS = ((200, 1.960), (100, 1.984), (80, 1.990), (60, 2.000), (50, 2.009), (40, 2.021))


def pyperf_t_critical(df: float) -> float:
    """pyperf/_utils.py tdist95conf_level: df rounded, table to 30, then steps (31-39 keep df 30's value)."""
    d = round(df)
    for start, value in _T95_STEPS:
        if d >= start:
            return value
    return _T95[min(d, len(_T95)) - 1]


@dataclass(frozen=True)
class PyperfCall:
    significant: bool
    t: float | None  # None where pyperf gives no score (one value each, or its exception path)
    ratio: float  # mean(changed) / mean(reference): > 1 is slower
    why: str


def pyperf_compare(ref: list[float], changed: list[float], min_speed: float | None = None) -> PyperfCall:
    """pyperf `compare_to` on one benchmark: pyperf/_compare.py CompareResult._set_significant."""
    ratio = fmean(changed) / fmean(ref)
    if len(ref) == 1 and len(changed) == 1:
        sig, t, why = True, None, "one value each"
    elif len(ref) != len(changed):
        # tscore raises "different number of values"; is_significant_benchs turns that into True.
        sig, t, why = True, None, "unequal lengths (pyperf's exception path)"
    else:
        n = len(ref)
        m1, m2 = fmean(ref), fmean(changed)
        ss = math.fsum((x - m1) ** 2 for x in ref) + math.fsum((x - m2) ** 2 for x in changed)
        err = ss / (2 * n - 2) / n
        if err == 0:
            sig, t, why = True, None, "zero variance (pyperf's exception path)"
        else:
            t = (m1 - m2) / math.sqrt(2 * err)
            sig, why = abs(t) >= pyperf_t_critical(2 * n - 2), "t-test"
    if sig and min_speed is not None and (max(ratio, 1 / ratio) - 1) * 100 < min_speed:
        sig, why = False, "below --min-speed"
    return PyperfCall(sig, t, ratio, why)


def pyperf_like(a: list[float], b: list[float]) -> bool:
    """pyperf's call on baseline samples a and candidate samples b (default options)."""
    return bool(a and b) and pyperf_compare(a, b).significant


@cache
def _mwu_orderings(m: int, n: int, u: int) -> int:
    # Orderings of m x's and n y's with exactly u (x > y) pairs: last element is a y (adds nothing)
    # or an x (beats all n y's).
    if u < 0:
        return 0
    if m == 0 or n == 0:
        return 1 if u == 0 else 0
    return _mwu_orderings(m, n - 1, u) + _mwu_orderings(m - 1, n, u - n)


def _mwu_cdf(m: int, n: int, u: int) -> float:
    return sum(_mwu_orderings(m, n, k) for k in range(u + 1)) / math.comb(m + n, m)


def asv_mann_whitney_u(x: list[float], y: list[float]) -> tuple[int, float]:
    """asv/_stats.py mann_whitney_u(method='auto'): (U, two-sided p)."""
    from bisect import bisect_left, bisect_right

    m, n = len(x), len(y)
    ys = sorted(y)
    u = ties = 0
    for v in x:
        lo, hi = bisect_left(ys, v), bisect_right(ys, v)
        u += lo
        ties += hi - lo
    half = m * n // 2
    # Conservative tie breaking: the ties are given to whichever side makes U least extreme.
    if u <= half <= u + ties:
        ties = half - u
    ux1 = min(u, m * n - u)
    ux2 = min(u + ties, m * n - (u + ties))
    if ux1 >= ux2:
        ux = ux1
    else:
        u, ux = u + ties, ux2
    if max(m, n) <= 20:
        p = _mwu_cdf(m, n, ux) + 1.0 - _mwu_cdf(m, n, max(half, m * n - ux - 1))
    else:
        z = (ux - m * n / 2) / math.sqrt(m * n * (m + n + 1) / 12)
        p = math.erfc(-z / math.sqrt(2))  # 2 * Phi(z), as asv computes it
    return u, p


def asv_ci_99(samples: list[float]) -> tuple[float, float]:
    """asv_runner/statistics.py quantile_ci(samples, 0.5, 0.99): order-statistic 99% interval of the
    median; infinite ends replaced by the sample's min / max (asv: a Laplace posterior, wider)."""
    y = sorted(samples)
    n = len(y)
    lo, hi = -math.inf, math.inf
    cdf = 0.0
    for k, v in enumerate(y):
        cdf += math.comb(n, k) * 0.5**n
        if cdf <= 0.005:
            lo = v
        if cdf >= 0.995:
            hi = v
            break
    return (y[0] if math.isinf(lo) else lo), (y[-1] if math.isinf(hi) else hi)


def asv_is_different(a: list[float], b: list[float], p_threshold: float = 0.002) -> tuple[bool, str]:
    """asv/_stats.py is_different with raw samples: (different, which branch decided)."""
    a = [x for x in a if not math.isnan(x)]
    b = [x for x in b if not math.isnan(x)]
    if 1 / math.comb(len(a) + len(b), min(len(a), len(b))) < p_threshold:
        return asv_mann_whitney_u(a, b)[1] < p_threshold, "mann-whitney"
    ca, cb = asv_ci_99(a), asv_ci_99(b)
    return not (ca[1] >= cb[0] and ca[0] <= cb[1]), "ci-overlap"


@dataclass(frozen=True)
class AsvCall:
    change: str  # faster, slower, same: candidate vs baseline
    ratio: float  # median(candidate) / median(baseline), asv's printed ratio
    branch: str  # mann-whitney, ci-overlap, or factor-only (a side with one sample)


def asv_compare(base: list[float], cand: list[float], factor: float = 1.1) -> AsvCall:
    """asv `compare` on one benchmark: asv/commands/compare.py Compare.print_table and _is_result_better."""
    t1, t2 = median(base), median(cand)
    if len(base) != 1 and len(cand) != 1:
        different, branch = asv_is_different(cand, base)
    else:
        different, branch = True, "factor-only"
    if different and t2 < t1 / factor:
        return AsvCall("faster", t2 / t1, branch)
    if different and t1 < t2 / factor:
        return AsvCall("slower", t2 / t1, branch)
    return AsvCall("same", t2 / t1, branch)


def asv_like(a: list[float], b: list[float], factor: float = 1.1) -> bool:
    """asv's call on baseline samples a and candidate samples b: flagged improved or worsened."""
    return bool(a and b) and asv_compare(a, b, factor).change != "same"


def sides(w: dict[str, Any], labels: tuple[str, str]) -> tuple[list[float], list[float]]:
    """The two sides' raw samples: the paired rounds when present, else each environment's samples."""
    a: list[float] = []
    b: list[float] = []
    for r in w.get("rounds") or []:
        a += r.get(labels[0]) or []
        b += r.get(labels[1]) or []
    if not a and not b:
        envs = w.get("envs") or {}
        a = list((envs.get(labels[0]) or {}).get("samples") or [])
        b = list((envs.get(labels[1]) or {}).get("samples") or [])
    return [float(x) for x in a], [float(x) for x in b]


def anchor_calls(rec: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per paired workload, each anchor's call: faster, slower or same (candidate vs baseline)."""
    labels = (rec["environments"][0]["label"], rec["environments"][1]["label"])
    out: dict[str, dict[str, str]] = {}
    for w in rec["workloads"]:
        a, b = sides(w, labels)
        if not w.get("ratios") or not a or not b:
            continue
        pp, av = pyperf_compare(a, b), asv_compare(a, b)
        out[w["name"]] = {
            "pyperf": ("slower" if pp.ratio > 1 else "faster") if pp.significant else "same",
            "pyperf_why": pp.why,
            "asv": av.change,
            "asv_branch": av.branch,
        }
    return out


def one(rec: dict[str, Any]) -> dict[str, Any]:
    calls = anchor_calls(rec)
    mp = sum(w.significant for w in analyze(rec).workloads if w.ratios and w.name in calls)
    return {
        "run": rec["id"],
        "mode": rec.get("mode"),
        "workloads": len(calls),
        "pyperf": sum(c["pyperf"] != "same" for c in calls.values()),
        "asv": sum(c["asv"] != "same" for c in calls.values()),
        "mpsup": mp,
        "pyperf_exception_path": sum("exception" in c["pyperf_why"] for c in calls.values()),
        "asv_ci_branch": sum(c["asv_branch"] == "ci-overlap" for c in calls.values()),
    }


def records(paths: list[Path]) -> list[dict[str, Any]]:
    files = [f for p in paths for f in (sorted([*p.rglob("*.json"), *p.rglob("*.json.gz")]) if p.is_dir() else [p])]
    out = []
    for f in files:
        try:
            raw = f.read_bytes()
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)  # .json or .json.gz
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as exc:
            raise SystemExit(f"anchors_compare: {f}: not a readable JSON file ({exc.__class__.__name__})") from None
        if (
            isinstance(doc, dict)
            and str(doc.get("schema", "")).startswith("mpsup.run")
            and len(doc.get("environments") or []) == 2
        ):
            out.append(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", type=Path, help="paired run records (.json or .json.gz) or folders of them")
    p.add_argument("--json", type=Path, default=Path("anchors.json"), help="write the rows here (default anchors.json)")
    args = p.parse_args(argv)
    try:
        recs = records(args.paths)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    rows = [one(r) for r in recs]
    print(f"{'run':32} {'mode':9} {'n':>4} {'pyperf':>6} {'asv':>4} {'mpsup':>5}  (pyperf exc. path, asv CI branch)")
    for r in rows:
        print(
            f"{r['run'][:32]:32} {r['mode']!s:9} {r['workloads']:4d} {r['pyperf']:6d} {r['asv']:4d} {r['mpsup']:5d}"
            f"  ({r['pyperf_exception_path']}, {r['asv_ci_branch']})"
        )
    args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
