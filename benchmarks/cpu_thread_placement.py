"""Where do a CPU worker's intra-op threads run while it is timed? A probe for issue 28.

    python benchmarks/cpu_thread_placement.py --runs 3 --out docs/figures/cpu_aa_thread_placement.txt
    python benchmarks/cpu_thread_placement.py --summarize /tmp/probe/*.jsonl --out ...

Runs `mpsup bench --aa --device cpu --only ... --budget 0.05 --no-smoke` in this process with the runner's
sampling wrapped: around every turn (one request: a discarded block and the round's samples) it reads
each worker thread's on-CPU and run-queue time (/proc/PID/task/TID/schedstat, ns) and the CPU it last ran
on (/proc/PID/task/TID/stat), before and after. A turn is *packed* when the worker's two busiest threads
(the calling thread and its OpenMP helper) ended the turn on the same CPU where they began it, *split*
when they ran on different CPUs. Turns whose second thread did under a fifth of the first's work (a layer
torch does not parallelize) are left out.

It alternates `--affinity none` (the scheduler places the threads, mpsup before issue 28) and `--affinity
auto` (each thread bound to one CPU, alike in both workers) run by run, so both see the same load, and
prints per setting: packed and split turns; per visit of a layer (one pair of worker processes), whether
the two workers were both packed, both split, or one of each; and the time per call by state.
Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

ONLY = "linear/896x896/t1,linear/384x1536/t1,linear/3072x768/t1,linear/640x640/t1"
SETTINGS = ("none", "auto")


def _threads(pid: int) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                run, wait, _ = map(int, fh.read().split())
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                cpu = int(fh.read().rsplit(")", 1)[1].split()[36])
        except (OSError, ValueError, IndexError):
            continue
        out[tid] = (run, wait, cpu)
    return out


def probe_run(only: str, affinity: str, log: Path) -> None:
    """One A/A run in this process, every turn logged to `log` (JSON lines)."""
    from mpsup.bench import runner
    from mpsup.bench.command import BenchRequest, prepare, run

    state: dict[str, Any] = {"workload": None}
    real_sample, real_setup = runner.Runner._sample, runner.Runner._setup

    with log.open("w") as out:

        def sample(self: Any, s: Any, r: Any, count: int, *, warmup: bool, discard: int = 0) -> list[float]:
            pid = s.worker.proc.pid
            before = _threads(pid)
            host: list[float] = real_sample(self, s, r, count, warmup=warmup, discard=discard)
            after = _threads(pid)
            moved = {
                t: (after[t][0] - before[t][0], after[t][1] - before[t][1], before[t][2], after[t][2])
                for t in after
                if t in before
            }
            doc = {"w": state["workload"], "visit": self.restarts + 1, "env": s.env.label, "warmup": warmup}
            out.write(json.dumps({**doc, "host": host, "threads": moved}) + "\n")
            return host

        def setup(self: Any, s: Any, w: Any, calls: Any, share_s: Any = None) -> Any:
            state["workload"] = w.name
            return real_setup(self, s, w, calls, share_s)

        runner.Runner._sample = sample  # type: ignore[method-assign]
        runner.Runner._setup = setup  # type: ignore[method-assign]
        try:
            with tempfile.TemporaryDirectory(prefix="placement-") as home:
                os.environ["MPSUP_HOME"] = home
                req = BenchRequest(device="cpu", budget=0.05, only=only, aa=True, smoke=False, affinity=affinity)
                run(prepare(req), lambda _e, _i: None, lambda _m: None)
        finally:
            runner.Runner._sample, runner.Runner._setup = real_sample, real_setup  # type: ignore[method-assign]


def summarize(logs: list[Path]) -> str:
    turns: Counter[tuple[str, str]] = Counter()
    visits: Counter[tuple[str, str]] = Counter()
    times: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for log in logs:
        setting = log.name.split("-")[0]
        per_visit: dict[tuple[str, int, str], list[bool]] = defaultdict(list)
        for line in log.read_text().splitlines():
            d = json.loads(line)
            if d["warmup"]:
                continue
            top = sorted(d["threads"].values(), key=lambda v: -v[0])[:2]
            if len(top) < 2 or top[1][0] < 0.2 * top[0][0]:
                continue
            packed = top[0][2] == top[1][2] and top[0][3] == top[1][3]
            turns[(setting, "packed" if packed else "split")] += 1
            times[(setting, d["w"], "packed" if packed else "split")].extend(d["host"])
            per_visit[(d["w"], d["visit"], d["env"])].append(packed)
        for (w, v, env), states in per_visit.items():
            if env != "baseline" or (w, v, "baseline-2") not in per_visit:
                continue
            a = sum(states) > len(states) / 2
            b = sum(per_visit[(w, v, "baseline-2")]) > len(per_visit[(w, v, "baseline-2")]) / 2
            visits[(setting, "both packed" if a and b else "both split" if not (a or b) else "one of each")] += 1
    lines = ["# Thread placement of CPU workers while timed (benchmarks/cpu_thread_placement.py)", ""]
    for setting in SETTINGS:
        p, s = turns[(setting, "packed")], turns[(setting, "split")]
        if not p + s:
            continue
        pairs = {k: visits[(setting, k)] for k in ("both packed", "both split", "one of each")}
        lines.append(f"--affinity {setting}: {p} packed and {s} split turns of {p + s}; visits (worker pairs): {pairs}")
        for w in sorted({k[1] for k in times if k[0] == setting}):
            parts = []
            for state in ("packed", "split"):
                xs = times.get((setting, w, state))
                if xs:
                    parts.append(f"{state} {statistics.median(xs) * 1e6:.0f} us (n={len(xs)})")
            lines.append(f"    {w:<22} " + ", ".join(parts))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per setting, alternated")
    ap.add_argument("--only", default=ONLY)
    ap.add_argument("--logs", type=Path, help="folder for the per-turn logs (default: a temp folder)")
    ap.add_argument("--summarize", type=Path, nargs="+", help="summarize these logs; run nothing")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.summarize:
        logs = list(args.summarize)
    else:
        folder = args.logs or Path(tempfile.mkdtemp(prefix="placement-logs-"))
        folder.mkdir(parents=True, exist_ok=True)
        logs = []
        for i in range(args.runs):
            for setting in SETTINGS:
                log = folder / f"{setting}-{i:02d}.jsonl"
                probe_run(args.only, setting, log)
                logs.append(log)
                print(f"{log} (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
    text = summarize(logs)
    text += f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
