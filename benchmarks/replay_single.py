"""What other stopping rules would have cost on a recorded single-environment run: its samples replayed.

    python benchmarks/replay_single.py RECORD.json [--targets 0.01,0.015,0.02] [--windows 3,2]

Two replays, each over the samples the run really took (seconds per call, in the order taken), under
the run's own recorded policy (a record without one is refused: an old default would replay wrongly):

- target T: a workload stops at the first batch boundary where `SamplingPolicy.should_stop`, asked
  with a +-T target, says converged (the runner asks after each request of `batch` samples). Saved
  time: the samples after that point, and a second visit's setup and warmup when the stop falls inside
  what the first visit could hold (its share of the budget, less one visit's setup and warmup).
- warmup window W: over one-visit workloads (a revisited one's warmup samples are its visits' joined),
  warmup ends where the runner's `_warmup` would end it: the median of the last W within tolerance of
  the W before, the warmup's share of the time spent (counted from the samples' own lengths, so
  without the pipe), or `warmup_max_samples`. Saved time: the warmup samples after that point; bias:
  how far their median sits from the timed median (they would have been timed). The row for the
  recorded window says how many recorded warmups the replay ends at the same sample, and how many end
  by no rule it can see (the pipe's time, which it cannot: those count as not reproduced).

The two savings overlap (a workload that ends on its budget spends saved warmup time on samples), so
they are not to be added. Workloads whose interval ends wider than 5% are listed with how far their
first ten samples sat from their final median: level shifts no target reaches.

A replay, not a measurement: it cannot see what the machine would have done in the saved time (a
revisit's level shift, the pool handed to others), so its figures are estimates for choosing what to
measure next, never a wall time to quote as met.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from statistics import median
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.bench.policy import SamplingPolicy
from mpsup.errors import UserError
from mpsup.safe_files import DEFAULT_MAX_JSON_BYTES, read_bytes_bounded
from mpsup.stats import median_ci


class BadRecord(ValueError):
    """The record cannot be replayed; the message says why, in one line."""


@dataclass
class Workload:
    name: str
    samples: list[float]  # seconds per call, in the order taken
    warmup: list[float]
    calls: int
    elapsed_s: float
    visits: int

    @property
    def sample_s(self) -> float:
        return median(self.samples) * self.calls

    @property
    def overhead_s(self) -> float:
        """One visit's setup, calibration, warmup and pipe: what a visit costs beyond its timed samples."""
        return max(0.0, self.elapsed_s - sum(self.samples) * self.calls) / self.visits


class TargetReplay(TypedDict):
    target: float
    workloads: int
    stopped: int
    saved_s: float


class WindowReplay(TypedDict):
    window: int
    workloads: int
    reproduced: int
    unseen: int
    shortened: int
    saved_s: float
    median_bias: float


def _numbers(xs: object) -> list[float]:
    if not isinstance(xs, list):
        return []
    real = (float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool))
    return [x for x in real if math.isfinite(x) and x > 0]


def policy_of(rec: dict[str, Any]) -> SamplingPolicy:
    options = rec.get("options")
    recorded = options.get("policy") if isinstance(options, dict) else None
    if not isinstance(recorded, dict):
        raise BadRecord("no recorded sampling policy (options.policy)")
    known = {f.name for f in fields(SamplingPolicy)}
    try:
        pol = SamplingPolicy(**{k: v for k, v in recorded.items() if k in known})
        if pol.batch < 1 or pol.min_samples < 1 or pol.budget_s <= 0 or pol.warmup_window < 1:
            raise ValueError
        return pol
    except (TypeError, ValueError):
        raise BadRecord("its sampling policy (options.policy) holds values no run could have used") from None


def workloads(rec: dict[str, Any]) -> list[Workload]:
    """The single run's measured workloads; anything else in the record (failed, paired) is left out."""
    envs = rec.get("environments")
    if not isinstance(envs, list) or not envs or not isinstance(envs[0], dict):
        raise BadRecord("no environments")
    label = envs[0].get("label")
    items = rec.get("workloads")
    if not isinstance(items, list):
        raise BadRecord("no workloads list")
    out = []
    for w in items:
        if not isinstance(w, dict) or w.get("ratios"):
            continue
        env = (w.get("envs") or {}).get(label) if isinstance(w.get("envs"), dict) else None
        if not isinstance(env, dict):
            continue
        samples = _numbers(env.get("samples"))
        calls, elapsed, visits = env.get("calls"), w.get("elapsed_s"), w.get("visits", 1)
        if len(samples) < 6 or not all(isinstance(x, (int, float)) and x > 0 for x in (calls, elapsed, visits)):
            continue
        out.append(
            Workload(
                name=str(w.get("name", "?")),
                samples=samples,
                warmup=_numbers(env.get("warmup")),
                calls=int(calls),
                elapsed_s=float(elapsed),
                visits=int(visits),
            )
        )
    return out


def stop_at(samples: list[float], target: float, pol: SamplingPolicy) -> int | None:
    """Where the runner would have stopped under a +-target: it asks `should_stop` after each request of
    `batch` samples (the budget left out: the replay asks what precision alone would have done)."""
    asked = replace(pol, target_rel_ci=target, budget_s=math.inf)
    for n in range(pol.batch, len(samples) + 1, pol.batch):
        if asked.should_stop(samples[:n], 0.0, math.inf) == (True, "converged"):
            return n
    return None


def replay_target(ws: list[Workload], target: float, pol: SamplingPolicy) -> TargetReplay:
    stopped = 0
    saved = 0.0
    for w in ws:
        n = stop_at(w.samples, target, pol)
        if n is None:
            continue
        stopped += 1
        timed = sum(w.samples[:n]) * w.calls
        visits = 1 if w.overhead_s + timed <= pol.first_share_s else w.visits
        saved += max(0.0, w.elapsed_s - (visits * w.overhead_s + timed))
    return {"target": target, "workloads": len(ws), "stopped": stopped, "saved_s": saved}


def warmup_end(warm: list[float], window: int, pol: SamplingPolicy, calls: int) -> int | None:
    """The sample after which the runner's `_warmup` would have ended a first visit's warmup, with a
    window of `window` samples; None when no rule it can see fires within the recorded samples."""
    cap_s = pol.warmup_share * pol.first_share_s
    asked = replace(pol, warmup_window=window, budget_s=math.inf)
    spent = 0.0
    for k in range(1, len(warm) + 1):
        spent += warm[k - 1] * calls
        if spent >= cap_s or k >= pol.warmup_max_samples or asked.warmup_settled(warm[:k], 0.0):
            return k
    return None


def replay_window(ws: list[Workload], window: int, pol: SamplingPolicy) -> WindowReplay:
    one = [w for w in ws if w.visits == 1 and w.warmup]
    same = unseen = 0
    saved = 0.0
    bias: list[float] = []
    for w in one:
        k = warmup_end(w.warmup, window, pol, w.calls)
        if k is None:
            unseen += 1
            continue
        same += k == len(w.warmup)
        if k < len(w.warmup):
            saved += sum(w.warmup[k:]) * w.calls
            bias.append(median(w.warmup[k:]) / median(w.samples) - 1)
    return {
        "window": window,
        "workloads": len(one),
        "reproduced": same,
        "unseen": unseen,
        "shortened": len(bias),
        "saved_s": saved,
        "median_bias": median(bias) if bias else 0.0,
    }


def wide(ws: list[Workload], over: float = 0.05) -> list[tuple[str, float, float]]:
    """Workloads whose interval ends wider than `over`: name, half-width, first ten samples' median over
    the final median."""
    out = []
    for w in ws:
        hw = median_ci(w.samples).rel_half_width
        if hw > over:
            out.append((w.name, hw, median(w.samples[:10]) / median(w.samples)))
    return sorted(out, key=lambda x: -x[1])


def _floats(text: str, what: str) -> list[float]:
    try:
        xs = [float(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"replay_single: {what}: a comma-separated list of numbers, not {text!r}") from None
    if not xs or not all(math.isfinite(x) and x > 0 for x in xs):
        raise SystemExit(f"replay_single: {what}: every value must be above 0")
    return xs


def load(path: Path) -> dict[str, Any]:
    # The project's bounded reader: regular files only (a FIFO would block), at most 256 MiB.
    data = read_bytes_bounded(path, "run record", DEFAULT_MAX_JSON_BYTES)
    if data[:2] == b"\x1f\x8b":  # a record kept as .json.gz
        try:
            data = zlib.decompressobj(wbits=31).decompress(data, DEFAULT_MAX_JSON_BYTES + 1)
        except zlib.error:
            raise BadRecord("not readable gzip") from None
        if len(data) > DEFAULT_MAX_JSON_BYTES:
            raise BadRecord("larger than 256 MiB uncompressed")
    try:
        rec = json.loads(data)
    except (ValueError, RecursionError):
        raise BadRecord("not JSON") from None
    if not isinstance(rec, dict):
        raise BadRecord("not a run record (a JSON object)")
    if rec.get("mode") != "single":
        raise BadRecord(f"a {rec.get('mode')!r} run; this replays single runs")
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--targets", default="0.01,0.015,0.02,0.03")
    ap.add_argument("--windows", default="3,2")
    args = ap.parse_args(argv)
    try:
        targets = _floats(args.targets, "--targets")
        windows = [int(x) for x in _floats(args.windows, "--windows") if x == int(x)]
        rec = load(args.record)
        pol = policy_of(rec)
        ws = workloads(rec)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    except BadRecord as exc:
        print(f"replay_single: {args.record}: {exc}", file=sys.stderr)
        return 2
    except UserError as exc:  # the reader's own line names the file
        print(f"replay_single: {exc}", file=sys.stderr)
        return 2
    inside = sum(w.elapsed_s for w in ws)
    print(f"{args.record.name}: {len(ws)} workloads, {inside:.1f} s in them, budget {pol.budget_s} s")
    print("| target | stop within the samples taken | saved (estimate) |")
    print("|---:|---:|---:|")
    for t in targets:
        r = replay_target(ws, t, pol)
        print(f"| +-{t:.1%} | {r['stopped']} of {r['workloads']} | {r['saved_s']:.1f} s |")
    print()
    print(
        "| warmup window | one-visit workloads | ended at the recorded sample | by no rule seen | shortened "
        "| saved | median bias |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k in windows:
        r = replay_window(ws, k, pol)
        print(
            f"| {k} | {r['workloads']} | {r['reproduced']} | {r['unseen']} | {r['shortened']} | {r['saved_s']:.1f} s "
            f"| {r['median_bias']:+.2%} |"
        )
    rows = wide(ws)
    print()
    print(f"{len(rows)} workloads end with a half-width above 5% (first ten samples' median / final median):")
    for name, hw, first in rows:
        print(f"  {name}: +-{hw:.1%}, first ten {first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
