"""Issue 12 validation on a CUDA machine (the H200), in one invocation that keeps to a wall-time budget:

(a) the cuBLASLt candidate: a wrapper interpreter that sets TORCH_BLAS_PREFER_CUBLASLT=1, paired
    against this interpreter, and an in-process reference that alternates
    `torch.backends.cuda.preferred_blas_library` (5 rounds of 200 back-to-back calls, CUDA events).
    A shape is a *clear* change when every reference round is beyond +-5% on the same side, *flat*
    when every round is within +-1%; the summary counts how many of each mpsup calls (and whether in
    the reference's direction), beside the method before issue 12 and the pyperf / asv decision rules;
(b) A/A runs (`--aa`) while time remains, flagged workloads per run.

    PYTHONPATH=src python benchmarks/calibrate_h200.py [--total-s 540] [--only linear] [--budget 0.5]
        [--candidate-budget 0.25] [--skip-cublaslt] [--skip-aa] [--json h200_issue12.json]

Every subprocess gets at most the time left, so the whole run ends within --total-s (plus ~10 s of
reporting). Records are kept under --work for `benchmarks/anchors_compare.py`; the JSON is rewritten
after each step, so a killed run still leaves what it finished."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from anchors_compare import anchor_calls

from mpsup.bench.policy import DEFAULT_BUDGET_S
from mpsup.report.analysis import analyze
from mpsup.stats import bootstrap_geomean_ci, classify_change, paired_ratio_ci

CLEAR = 0.05  # every reference round beyond +-5%
FLAT = 0.01  # every reference round within +-1%
METHODS = ("mpsup", "before", "pyperf", "asv")


class BenchFailed(RuntimeError):
    """One clear line for the user: what failed and where its log is."""


@dataclass
class Budget:
    """Wall-clock left to the whole invocation; every step takes what it needs from it."""

    total_s: float
    t0: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total_s - (time.monotonic() - self.t0)

    def spent(self) -> float:
        return time.monotonic() - self.t0


def newest_record(home: Path) -> dict[str, Any] | None:
    """The newest run record under an MPSUP_HOME, wherever the store keeps it."""
    found: list[tuple[float, Path]] = []
    for f in home.rglob("*.json"):
        if f.name.startswith(".") or "journal" in f.parts:
            continue
        found.append((f.stat().st_mtime, f))
    for _, f in sorted(found, reverse=True):
        try:
            doc = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and str(doc.get("schema", "")).startswith("mpsup.run") and doc.get("workloads"):
            return doc
    return None


def bench(
    home: Path, extra: list[str], args: argparse.Namespace, budget_s: float, timeout_s: float | None = None
) -> dict[str, Any]:
    """One `mpsup bench` in its own MPSUP_HOME; its record, with the wall time as `_wall_s`."""
    home.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mpsup", "bench", "--device", args.device, "--only", args.only, "--no-smoke"]
    cmd += ["--budget", str(budget_s), *extra]
    log = home / "bench.log"
    t0 = time.monotonic()
    with log.open("w") as fh:
        # Its own process group, so that a deadline ends the bench's workers too, not just the CLI.
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, "MPSUP_HOME": str(home)},
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BenchFailed(f"mpsup bench ran past {timeout_s:.0f} s (the time left); log: {log}") from None
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise BenchFailed(f"mpsup bench exited {rc}: {tail[0][:160]} (log: {log})")
    rec = newest_record(home)
    if rec is None:
        raise BenchFailed(f"mpsup bench wrote no run record under {home} (log: {log})")
    rec["_wall_s"] = time.monotonic() - t0
    return rec


def calls(rec: dict[str, Any]) -> dict[str, Any]:
    """Per-workload calls (mpsup now, the method before issue 12, pyperf, asv) and suite figures."""
    paired = [w for w in rec["workloads"] if w.get("ratios")]
    old = {w["name"]: classify_change(paired_ratio_ci(w["ratios"], seed=i)) for i, w in enumerate(paired)}
    old_suite = bootstrap_geomean_ci([w["ratios"] for w in paired]) if paired else None
    a = analyze(rec)
    new = {w.name: w.change for w in a.workloads if w.ratios}
    anchors = anchor_calls(rec)
    s = a.suite_geomean
    hw = sorted(w.speedup.rel_half_width for w in a.workloads if w.speedup and w.speedup.bounded)
    per: dict[str, dict[str, Any]] = {
        n: {
            "mpsup": new.get(n, "n/a"),
            "before": old.get(n, "n/a"),
            "pyperf": anchors.get(n, {}).get("pyperf", "n/a"),
            "asv": anchors.get(n, {}).get("asv", "n/a"),
            "rounds": len(w["ratios"]),
        }
        for n, w in ((w["name"], w) for w in paired)
    }
    return {
        "run": rec["id"],
        "wall_s": round(rec.get("_wall_s", 0.0), 1),
        "workloads": len(paired),
        "flagged": {m: sum(c[m] not in ("same", "n/a") for c in per.values()) for m in METHODS},
        "suite_before": [old_suite.estimate, old_suite.low, old_suite.high] if old_suite else None,
        "suite_after": [s.estimate, s.low, s.high] if s else None,
        "verdict": a.verdict,
        "median_half_width": hw[len(hw) // 2] if hw else None,
        "p90_half_width": hw[int(0.9 * (len(hw) - 1))] if hw else None,
        "unbounded": sum(1 for w in a.workloads if w.speedup and not w.speedup.bounded),
        "min_rounds": min((c["rounds"] for c in per.values()), default=0),
        "per_workload": per,
    }


def classify_reference(rounds: list[float], clear: float = CLEAR, flat: float = FLAT) -> str:
    """One shape's reference rounds (time default / time cuBLASLt: > 1 means the candidate is faster):
    'faster' or 'slower' when every round is beyond +-clear on that side, 'flat' when every round is
    within +-flat, else 'unclear'."""
    if not rounds:
        return "unclear"
    if all(r > 1 + clear for r in rounds):
        return "faster"
    if all(r < 1 / (1 + clear) for r in rounds):
        return "slower"
    if all(1 / (1 + flat) < r < 1 + flat for r in rounds):
        return "flat"
    return "unclear"


def score(reference: dict[str, list[float]], per_workload: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """For each method: clear changes found in the reference's direction, called the wrong way, missed;
    flat shapes flagged either way."""
    classes = {n: classify_reference(r) for n, r in reference.items() if n in per_workload}
    clear = {n: c for n, c in classes.items() if c in ("faster", "slower")}
    flat = [n for n, c in classes.items() if c == "flat"]
    out: dict[str, dict[str, int]] = {}
    for m in METHODS:
        got = {n: per_workload[n][m] for n in classes}
        out[m] = {
            "clear": len(clear),
            "found": sum(got[n] == want for n, want in clear.items()),
            "wrong_direction": sum(got[n] in ("faster", "slower") and got[n] != want for n, want in clear.items()),
            "flat": len(flat),
            "flat_flagged": sum(got[n] in ("faster", "slower") for n in flat),
        }
    return out


def reference_agreement(reference: dict[str, list[float]], estimates: dict[str, float]) -> dict[str, float | None]:
    """Suite geomean of the reference, and how far mpsup's per-workload estimates sit from it."""
    logs = [math.log(median(r)) for r in reference.values() if r]
    dev = sorted(abs(estimates[n] / median(r) - 1) for n, r in reference.items() if r and n in estimates)
    return {
        "reference_geomean": math.exp(sum(logs) / len(logs)) if logs else None,
        "mpsup_vs_reference_median": dev[len(dev) // 2] if dev else None,
        "mpsup_vs_reference_p90": dev[int(0.9 * (len(dev) - 1))] if dev else None,
    }


def reference(rec: dict[str, Any], budget: Budget, rounds: int = 5, calls_per: int = 200) -> dict[str, list[float]]:
    """Per bf16 linear shape, the per-round ratio time(default BLAS) / time(cuBLASLt); the order of the
    two libraries alternates between rounds so neither always runs on a warmer device."""
    import torch

    out: dict[str, list[float]] = {}
    try:
        for w in rec["workloads"]:
            if not w.get("ratios") or w.get("kind") != "linear" or w.get("dtype", "bf16") != "bf16":
                continue
            if budget.left() < 5:
                break
            x = torch.randn(int(w["tokens"]), int(w["in_features"]), device="cuda", dtype=torch.bfloat16)
            lin = torch.nn.Linear(
                int(w["in_features"]), int(w["out_features"]), bias=False, device="cuda", dtype=torch.bfloat16
            )
            ratios = []
            with torch.no_grad():
                for k in range(rounds):
                    t = {}
                    for lib in ("cublas", "cublaslt") if k % 2 == 0 else ("cublaslt", "cublas"):
                        torch.backends.cuda.preferred_blas_library(lib)
                        for _ in range(20):
                            lin(x)
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(calls_per):
                            lin(x)
                        end.record()
                        torch.cuda.synchronize()
                        t[lib] = start.elapsed_time(end)
                    ratios.append(t["cublas"] / t["cublaslt"])
            out[w["name"]] = ratios
            del x, lin
    finally:
        torch.backends.cuda.preferred_blas_library("default")
    return out


def cublaslt(args: argparse.Namespace, budget: Budget) -> dict[str, Any]:
    wrapper = args.work / "python-cublaslt"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nTORCH_BLAS_PREFER_CUBLASLT=1 exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    # Leave the reference a minute; it stops early itself when time runs out.
    rec = bench(
        args.work / "cublaslt", ["--candidate", str(wrapper)], args, args.candidate_budget, max(1.0, budget.left() - 60)
    )
    got = calls(rec)
    try:
        ref = reference(rec, budget)
    except (RuntimeError, ImportError, AssertionError) as exc:
        # Keep the candidate's calls; say why there is nothing to score them against.
        got["reference_error"] = f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        ref = {}
    est = {w.name: w.speedup.estimate for w in analyze(rec).workloads if w.speedup}
    classes = {n: classify_reference(r) for n, r in ref.items()}
    for n, c in classes.items():
        if n in got["per_workload"]:
            got["per_workload"][n]["reference"] = c
            got["per_workload"][n]["reference_rounds"] = ref[n]
            got["per_workload"][n]["mpsup_speedup"] = est.get(n)
    return {**got, "score": score(ref, got["per_workload"]), **reference_agreement(ref, est)}


def first_aa_estimate(cand: dict[str, Any] | None, args: argparse.Namespace) -> float:
    """Seconds the first A/A run will take, from the candidate run when there was one. On the H200 a
    4x larger budget took ~1.85x the time (fixed costs dominate small budgets): scale by its square root."""
    if not cand:
        return 0.0
    return float(cand["wall_s"]) * max(1.0, args.budget / args.candidate_budget) ** 0.5


def _fmt_suite(s: list[float] | None) -> str:
    return f"{s[0]:.3f}x ({s[1]:.3f}-{s[2]:.3f})" if s else "-"


def _pct(v: float | None) -> str:
    return f"{v:.1%}" if v is not None else "-"


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The one-screen summary: the cuBLASLt score per method, then one line per A/A run."""
    lines: list[str] = []
    c = doc.get("cublaslt")
    if c:
        ref = f"{c['reference_geomean']:.3f}x" if c.get("reference_geomean") else "none"
        lines.append(
            f"cuBLASLt: {c['workloads']} workloads, {c['wall_s']:.0f} s, {c['verdict']}, "
            f"suite {_fmt_suite(c['suite_after'])}, reference {ref}"
        )
        sc = c["score"]
        lines.append(f"  {'method':7} {'clear found':>11} {'wrong dir':>9} {'flat flagged':>12} {'flagged':>8}")
        for m in METHODS:
            x = sc[m]
            lines.append(
                f"  {m:7} {x['found']:5d} / {x['clear']:<3d} {x['wrong_direction']:9d} "
                f"{x['flat_flagged']:5d} / {x['flat']:<4d} {c['flagged'][m]:8d}"
            )
        clear = {n: x for n, x in c.get("per_workload", {}).items() if x.get("reference") in ("faster", "slower")}
        if 0 < len(clear) <= 12:
            lines.append(f"  {'clear change':24} {'ref':>6} {'mpsup':>6}  " + " ".join(f"{m:>6}" for m in METHODS))
            for n, x in sorted(clear.items()):
                est = f"{x['mpsup_speedup']:.3f}" if x.get("mpsup_speedup") else "-"
                lines.append(
                    f"  {n[:24]:24} {median(x['reference_rounds']):6.3f} {est:>6}  "
                    + " ".join(f"{x[m]:>6}" for m in METHODS)
                )
        if c.get("reference_error"):
            lines.append(f"  reference failed: {c['reference_error']}")
        lines.append(
            f"  mpsup vs reference per workload: median {_pct(c.get('mpsup_vs_reference_median'))}, "
            f"p90 {_pct(c.get('mpsup_vs_reference_p90'))}; fewest rounds {c['min_rounds']}"
        )
    elif doc.get("cublaslt_error"):
        lines.append(f"cuBLASLt: not done ({doc['cublaslt_error']})")
    aa = doc.get("aa") or []
    if aa:
        lines.append(f"A/A runs ({len(aa)}): flagged workloads per run")
        lines.append(
            f"  {'run':>3} {'wall':>5} {'n':>4} {'mpsup':>5} {'before':>6} {'pyperf':>6} {'asv':>4} "
            f"{'suite (mpsup)':>24} {'med/p90 hw':>12}"
        )
        for k, r in enumerate(aa):
            f = r["flagged"]
            lines.append(
                f"  {k:3d} {r['wall_s']:5.0f} {r['workloads']:4d} {f['mpsup']:5d} {f['before']:6d} {f['pyperf']:6d} "
                f"{f['asv']:4d} {_fmt_suite(r['suite_after']):>24} "
                f"{_pct(r['median_half_width']):>5}/{_pct(r['p90_half_width']):<6}"
            )
        for m in METHODS:
            n1 = sum(r["flagged"][m] >= 1 for r in aa)
            n2 = sum(r["flagged"][m] >= 2 for r in aa)
            lines.append(f"  {m:7} runs flagging >= 1: {n1}/{len(aa)}, >= 2: {n2}/{len(aa)}")
    if doc.get("aa_stopped"):
        lines.append(f"A/A: no further run ({doc['aa_stopped']})")
    if doc.get("aa_error"):
        lines.append(f"A/A: stopped ({doc['aa_error']})")
    lines.append(f"({doc.get('seconds', 0):.0f} s in all; records under {doc['args']['work']})")
    return lines


def _save(doc: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(doc, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", default="linear", help="the workloads of both parts (mpsup bench --only)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="the A/A runs' --budget (default: mpsup's)")
    p.add_argument("--candidate-budget", type=float, default=0.25, help="the cuBLASLt run's --budget")
    p.add_argument("--aa-runs", type=int, default=0, help="stop after this many A/A runs (0: while time remains)")
    p.add_argument("--total-s", type=float, default=540, help="wall-time budget of the whole invocation")
    p.add_argument("--skip-cublaslt", action="store_true")
    p.add_argument("--skip-aa", action="store_true")
    p.add_argument("--work", type=Path, default=Path("h200_issue12_runs"))
    p.add_argument("--json", type=Path, default=Path("h200_issue12.json"))
    args = p.parse_args(argv)
    budget = Budget(args.total_s)
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "aa": []}
    try:
        args.work.mkdir(parents=True, exist_ok=True)
        _save(doc, args.json)
    except OSError as exc:
        print(f"calibrate_h200: cannot write {args.work} or {args.json}: {exc.strerror}", file=sys.stderr)
        return 2
    if not args.skip_cublaslt:
        try:
            doc["cublaslt"] = cublaslt(args, budget)
        except BenchFailed as exc:
            doc["cublaslt_error"] = str(exc)
        print(summary_lines({**doc, "aa": []})[0], flush=True)
        _save(doc, args.json)
    k = 0
    while not args.skip_aa and (args.aa_runs == 0 or k < args.aa_runs):
        need = first_aa_estimate(doc.get("cublaslt"), args) if not doc["aa"] else doc["aa"][-1]["wall_s"]
        # A run that cannot finish in the time left would only be killed: don't start it.
        if budget.left() < max(20.0, 0.95 * need):
            doc["aa_stopped"] = f"{budget.left():.0f} s left, a run needs ~{need:.0f} s"
            break
        try:
            r = calls(bench(args.work / f"aa{k}", ["--aa"], args, args.budget, budget.left()))
        except BenchFailed as exc:
            doc["aa_error"] = str(exc)
            break
        per = r.pop("per_workload")
        r["flagged_names"] = {m: sorted(n for n, c in per.items() if c[m] not in ("same", "n/a")) for m in METHODS}
        doc["aa"].append(r)
        print(f"A/A run {k}: {r['wall_s']:.0f} s, flagged {r['flagged']}", flush=True)
        _save(doc, args.json)
        k += 1
    doc["seconds"] = budget.spent()
    _save(doc, args.json)
    print("\n".join(summary_lines(doc)))
    print(f"summary in {args.json}")
    failed = "cublaslt_error" in doc and not doc["aa"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
