"""Why do two worker processes of the same torch disagree on short GPU layers? A probe.

    python benchmarks/process_placement.py --device cuda [--processes 6] [--json out.json]

On the H200, paired A/A runs showed launch-bound linears (15-30 us a call) running ~16 us in one worker
and ~23 us in the other *of the same torch*, on CUDA events too, persistently for the life of the
process. Candidate causes: where the process's CPU thread runs (a launch-bound call is host-bound:
core, its hyperthread sibling, its NUMA distance to the GPU) or where its tensors lie in GPU memory.

This starts fresh processes, one at a time, and in each times the same layers (median of 7 blocks of
back-to-back calls, CUDA events) under four conditions:

- free:      the process is not pinned (what mpsup's workers did);
- same-core: every process is pinned to one CPU (the last one it may use);
- per-core:  one process pinned to each CPU in turn;
- placement: one free process re-creates its inputs 8 times behind a random-size spacer allocation
             (GPU memory placement changes, the CPU does not).

Per condition it prints the spread of the per-process medians (max/min - 1 and the coefficient of
variation). If pinning both environments to one core collapses the spread, mpsup should pin its
workers; if re-placing tensors spreads the time within one process, placement is the cause instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPES = [  # (tokens, in, out): two launch-bound layers with the largest A/A disagreement, and a long one
    (1, 4096, 2048),
    (512, 4864, 896),
    (512, 4096, 14336),
]
CHILD = "--child"


def child(device: str, replace: int, calls: int) -> dict[str, object]:
    import torch
    import torch.nn.functional as F

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out: dict[str, object] = {"cpu": os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None}
    out["cpu"] = sorted(out["cpu"]) if out["cpu"] is not None else None
    keep = []
    results: dict[str, list[float]] = {}
    for t, k, n in SHAPES:
        name = f"{k}x{n}/t{t}"
        per_place: list[float] = []
        for _ in range(max(1, replace)):
            if replace:
                # A spacer of random size moves the next allocations to other addresses.
                keep.append(torch.empty(int.from_bytes(os.urandom(3)) * 64, dtype=torch.uint8, device=dev))
            x = torch.randn(t, k, dtype=torch.bfloat16, device=dev)
            w = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
            keep.extend([x, w])
            for _ in range(min(20, calls)):
                F.linear(x, w)
            sync()
            blocks = []
            for _ in range(7):
                if dev.type == "cuda":
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    sync()
                    a.record()
                    for _ in range(calls):
                        F.linear(x, w)
                    b.record()
                    sync()
                    blocks.append(a.elapsed_time(b) / 1000 / calls)
                else:
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        F.linear(x, w)
                    blocks.append((time.perf_counter() - t0) / calls)
            per_place.append(statistics.median(blocks))
            # Host time to issue one call (no sync): how launch-bound the layer is.
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                F.linear(x, w)
            issue = (time.perf_counter() - t0) / calls
            sync()
            results.setdefault(name + " issue", []).append(issue)
        results[name] = per_place
    out["results"] = results
    return out


def pair_child(device: str, calls: int) -> None:
    """A long-lived child: builds every shape once, then times one block per shape for each line "go"
    on stdin (after one discarded block: the other process had the device), answering a JSON line."""
    import torch
    import torch.nn.functional as F

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    built = []
    for t, k, n in SHAPES:
        x = torch.randn(t, k, dtype=torch.bfloat16, device=dev)
        w = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        built.append((x, w))
        for _ in range(min(20, calls)):
            F.linear(x, w)
    sync()
    print("ready", flush=True)
    for _line in sys.stdin:
        times = []
        for x, w in built:
            for timed in (False, True):
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    F.linear(x, w)
                sync()
                if timed:
                    times.append((time.perf_counter() - t0) / calls)
        print(json.dumps(times), flush=True)


def start_pair_child(device: str, cpus: list[int] | None, calls: int, no_aslr: bool) -> subprocess.Popen[str]:
    def pre() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if no_aslr:
            import ctypes

            ctypes.CDLL(None).personality(0x0040000)  # ADDR_NO_RANDOMIZE, as `setarch -R` sets it

    cmd = [sys.executable, __file__, CHILD, "--pair", "--device", device, "--calls", str(calls)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=pre)
    return proc


def run_pair(
    device: str, cpus: tuple[list[int] | None, list[int] | None], calls: int, rounds: int, no_aslr: bool
) -> list[float]:
    """Median per shape of the per-round time ratio A/B of two live processes taking turns (A B, B A, ...)."""
    a = start_pair_child(device, cpus[0], calls, no_aslr)
    b = start_pair_child(device, cpus[1], calls, no_aslr)
    try:
        for p in (a, b):
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"

        def ask(p: subprocess.Popen[str]) -> list[float]:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("go\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())

        ratios: list[list[float]] = [[] for _ in SHAPES]
        for r in range(rounds):
            if r % 2:
                tb, ta = ask(b), ask(a)
            else:
                ta, tb = ask(a), ask(b)
            for i in range(len(SHAPES)):
                ratios[i].append(ta[i] / tb[i])
        return [statistics.median(rs) for rs in ratios]
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def pairs(args: argparse.Namespace, cpus: list[int]) -> dict[str, list[list[float]]]:
    """Pairs of live processes taking turns, as mpsup's two workers do: how far apart are two processes of
    the same torch, unpinned, both pinned to one CPU, pinned to two CPUs, and with address-space
    randomization off?"""
    conditions: dict[str, tuple[tuple[list[int] | None, list[int] | None], bool]] = {
        "free": ((None, None), False),
        "same-core": (([cpus[-1]], [cpus[-1]]), False),
        "two-cores": (([cpus[-1]], [cpus[0]]), False),  # the same CPU on a one-CPU machine
        "no-aslr": ((None, None), True),
        "same-core+no-aslr": (([cpus[-1]], [cpus[-1]]), True),
    }
    names = [f"{k}x{n}/t{t}" for t, k, n in SHAPES]
    out: dict[str, list[list[float]]] = {}
    for cond, (pin, no_aslr) in conditions.items():
        meds = [run_pair(args.device, pin, args.calls, args.rounds, no_aslr) for _ in range(args.pairs)]
        out[cond] = meds
        print(f"\npairs, {cond} ({args.pairs} pairs x {args.rounds} rounds): A/B per pair")
        for i, name in enumerate(names):
            values = [m[i] for m in meds]
            dev = statistics.median(abs(v - 1) for v in values)
            print(
                f"  {name:18s} median |A/B-1| {dev:6.1%}  max {max(abs(v - 1) for v in values):6.1%}  "
                + " ".join(f"{v:.3f}" for v in values)
            )
    return out


def run_child(device: str, cpus: list[int] | None, calls: int, replace: int = 0) -> dict[str, object]:
    cmd = [sys.executable, __file__, CHILD, "--device", device, "--replace", str(replace), "--calls", str(calls)]
    pre = None
    if cpus is not None:

        def pre() -> None:  # runs in the child before exec: the interpreter starts pinned
            os.sched_setaffinity(0, cpus)

    done = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pre, timeout=300)
    if done.returncode:
        raise SystemExit(f"child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    cv = statistics.pstdev(values) / statistics.mean(values)
    return f"{lo * 1e6:7.1f}-{hi * 1e6:7.1f} us  max/min-1 {hi / lo - 1:6.1%}  cv {cv:5.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(CHILD, action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--replace", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--pair", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pairs", type=int, default=0, help="pairs of live processes per condition (0: skip)")
    ap.add_argument("--rounds", type=int, default=16, help="turns per pair")
    ap.add_argument("--skip-single", action="store_true", help="only the pairs")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--calls", type=int, default=200, help="calls per timed block (a CPU check: 1)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.child and args.pair:
        pair_child(args.device, args.calls)
        return
    if args.child:
        print(json.dumps(child(args.device, args.replace, args.calls)))
        return
    cpus = sorted(os.sched_getaffinity(0))
    print(f"CPUs this process may use: {cpus}")
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        print(f"  {node.name}: cpus {(node / 'cpulist').read_text().strip()}")
    paired = pairs(args, cpus) if args.pairs else {}
    if args.skip_single:
        if args.json:
            args.json.write_text(json.dumps({"cpus": cpus, "pairs": paired}, indent=1))
        return
    conditions: dict[str, list[dict[str, object]]] = {}
    t0 = time.time()
    conditions["free"] = [run_child(args.device, None, args.calls) for _ in range(args.processes)]
    conditions["same-core"] = [run_child(args.device, [cpus[-1]], args.calls) for _ in range(args.processes)]
    conditions["per-core"] = [run_child(args.device, [c], args.calls) for c in cpus]
    conditions["placement"] = [run_child(args.device, None, args.calls, replace=8)]
    print(f"{sum(len(v) for v in conditions.values())} processes in {time.time() - t0:.0f} s")
    names = list(conditions["free"][0]["results"])  # type: ignore[arg-type]
    summary: dict[str, dict[str, list[float]]] = {}
    for cond, runs in conditions.items():
        print(f"\n{cond}:")
        summary[cond] = {}
        for name in names:
            if cond == "placement":
                values = runs[0]["results"][name]  # type: ignore[index]
            else:
                values = [statistics.median(r["results"][name]) for r in runs]  # type: ignore[index]
            summary[cond][name] = values
            print(f"  {name:24s} {spread(values)}")
        if cond == "per-core":
            for r in runs:
                first = next(n for n in names if not n.endswith(" issue"))
                print(f"    cpu {r['cpu']}: {first} {statistics.median(r['results'][first]) * 1e6:.1f} us")  # type: ignore[index]
    if args.json:
        args.json.write_text(
            json.dumps({"cpus": cpus, "pairs": paired, "conditions": conditions, "summary": summary}, indent=1)
        )


if __name__ == "__main__":
    main()
