"""What other stopping rules would have cost on a recorded single-environment run: its samples replayed.

    python benchmarks/replay_single.py RECORD.json [--targets 0.01,0.015,0.02] [--windows 3,2]

Two replays, each over the samples the run really took (seconds per call, in the order taken):

- target T: a workload stops at the first batch boundary (min_samples, then every `batch` samples) where
  the 95% interval of the median is within +-T, as `SamplingPolicy.should_stop` decides. Saved time:
  the samples after that point, and a second visit's setup and warmup when the stop falls inside what
  the first visit could hold (its share of the budget, less one visit's setup and warmup).
- warmup window W: over one-visit workloads (a revisited one's warmup samples are its visits' joined),
  warmup ends at the first sample where the median of the last W is within the tolerance of the W
  before, or at the recorded rule's caps. Saved time: the warmup samples after that point; bias: how
  far those samples' median sits from the timed median (they would have been timed). The row for the
  recorded window says how many recorded warmups the replay reproduces: a check on the replay itself.

A replay, not a measurement: it cannot see what the machine would have done in the saved time (a
revisit's level shift, the pool handed to others), so its figures are estimates for choosing what to
measure next, never a wall time to quote as met.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.bench.policy import SamplingPolicy
from mpsup.stats import median_ci


@dataclass
class Workload:
    name: str
    samples: list[float]  # seconds per call
    warmup: list[float]
    sample_s: float  # one sample's length
    elapsed_s: float
    visits: int

    @property
    def overhead_s(self) -> float:
        """One visit's setup, calibration, warmup and pipe: what a visit costs beyond its timed samples."""
        return max(0.0, self.elapsed_s - len(self.samples) * self.sample_s) / self.visits


def workloads(rec: dict[str, Any]) -> list[Workload]:
    label = rec["environments"][0]["label"]
    out = []
    for w in rec["workloads"]:
        env = (w.get("envs") or {}).get(label) or {}
        samples = [x for x in env.get("samples") or [] if isinstance(x, (int, float))]
        calls = env.get("calls") or 0
        if len(samples) < 6 or not calls or w.get("ratios"):
            continue
        out.append(
            Workload(
                name=w["name"],
                samples=samples,
                warmup=[x for x in env.get("warmup") or [] if isinstance(x, (int, float))],
                sample_s=median(samples) * calls,
                elapsed_s=float(w.get("elapsed_s") or 0.0),
                visits=int(w.get("visits") or 1),
            )
        )
    return out


def stop_at(samples: list[float], target: float, pol: SamplingPolicy) -> int | None:
    for n in range(pol.min_samples, len(samples) + 1, pol.batch):
        if median_ci(samples[:n]).rel_half_width <= target:
            return n
    return None


def replay_target(ws: list[Workload], target: float, pol: SamplingPolicy) -> dict[str, float]:
    stopped = 0
    saved = 0.0
    for w in ws:
        n = stop_at(w.samples, target, pol)
        if n is None:
            continue
        stopped += 1
        fits_one_visit = w.overhead_s + n * w.sample_s <= pol.first_share_s
        visits = 1 if fits_one_visit else w.visits
        saved += max(0.0, w.elapsed_s - (visits * w.overhead_s + n * w.sample_s))
    return {"target": target, "workloads": len(ws), "stopped": stopped, "saved_s": saved}


def warmup_end(warm: list[float], window: int, pol: SamplingPolicy, sample_s: float) -> int:
    cap_s = pol.warmup_share * pol.first_share_s
    for k in range(1, len(warm) + 1):
        if k * sample_s >= cap_s or k >= 50:
            return k
        if k >= 2 * window:
            last, before = median(warm[k - window : k]), median(warm[k - 2 * window : k - window])
            if abs(last - before) <= pol.warmup_tolerance * before:
                return k
    return len(warm)


def replay_window(ws: list[Workload], window: int, pol: SamplingPolicy) -> dict[str, float]:
    one = [w for w in ws if w.visits == 1 and w.warmup]
    same = 0
    saved = 0.0
    bias: list[float] = []
    for w in one:
        k = warmup_end(w.warmup, window, pol, w.sample_s)
        same += k == len(w.warmup)
        if k < len(w.warmup):
            saved += (len(w.warmup) - k) * w.sample_s
            bias.append(median(w.warmup[k:]) / median(w.samples) - 1)
    return {
        "window": window,
        "workloads": len(one),
        "reproduced": same,
        "saved_s": saved,
        "shortened": len(bias),
        "median_bias": median(bias) if bias else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--targets", default="0.01,0.015,0.02,0.03")
    ap.add_argument("--windows", default="3,2")
    args = ap.parse_args(argv)
    try:
        rec = json.loads(args.record.read_text())
    except (OSError, ValueError) as exc:
        print(f"replay_single: {args.record}: not a readable run record ({exc})", file=sys.stderr)
        return 2
    if rec.get("mode") != "single":
        print(f"replay_single: {args.record}: a {rec.get('mode')!r} run; this replays single runs", file=sys.stderr)
        return 2
    known = set(SamplingPolicy.__dataclass_fields__)
    pol = SamplingPolicy(**{k: v for k, v in (rec.get("options") or {}).get("policy", {}).items() if k in known})
    ws = workloads(rec)
    inside = sum(w.elapsed_s for w in ws)
    print(f"{args.record.name}: {len(ws)} workloads, {inside:.1f} s in them, budget {pol.budget_s} s")
    print("| target | stop within the samples taken | saved (estimate) |")
    print("|---:|---:|---:|")
    for t in (float(x) for x in args.targets.split(",")):
        r = replay_target(ws, t, pol)
        print(f"| +-{t:.1%} | {r['stopped']} of {r['workloads']} | {r['saved_s']:.1f} s |")
    print()
    print("| warmup window | one-visit workloads | recorded warmups reproduced | shortened | saved | median bias |")
    print("|---:|---:|---:|---:|---:|---:|")
    for k in (int(x) for x in args.windows.split(",")):
        r = replay_window(ws, k, pol)
        print(
            f"| {k} | {r['workloads']} | {r['reproduced']} | {r['shortened']} | {r['saved_s']:.1f} s "
            f"| {r['median_bias']:+.2%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
