"""How OpenMP's wait policy moves small CPU ops: a plain loop in one process, and two worker processes taking
turns as mpsup's paired engine does, under each policy given.

Each policy is a set of environment variables (`OMP_WAIT_POLICY=PASSIVE`, `GOMP_SPINCOUNT=10000`, none at all:
torch's default), applied with the threads bound one per CPU as mpsup binds a CPU worker's (OMP_PROC_BIND=close,
OMP_PLACES one CPU each, the last CPU first). The plain loop times a one-token bf16 linear 896x896, decode's
attention and a softmax, median of 15 blocks; the turn-taking pair times blocks of the linear, each worker in
its turn, ABBA, and prints each worker's median per call. What mpsup sets is in bench/workerproc.py.

    python benchmarks/omp_wait.py --help
    python benchmarks/omp_wait.py                                  # PASSIVE, GOMP_SPINCOUNT=10000, default
    python benchmarks/omp_wait.py --policy OMP_WAIT_POLICY=PASSIVE --policy "" --rounds 100 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

POLICIES = ["OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=10000", ""]


def plain() -> None:
    import torch

    x = torch.randn(1, 896, dtype=torch.bfloat16)
    w = torch.randn(896, 896, dtype=torch.bfloat16)
    q, k = torch.randn(1, 8, 1, 32), torch.randn(1, 8, 257, 32)

    def median_us(fn: object, calls: int = 200) -> float:
        for _ in range(calls):
            fn()  # type: ignore[operator]
        blocks = []
        for _ in range(15):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()  # type: ignore[operator]
            blocks.append((time.perf_counter() - t0) / calls)
        return statistics.median(blocks) * 1e6

    linear = median_us(lambda: torch.nn.functional.linear(x, w))
    sdpa = median_us(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k))
    softmax = median_us(lambda: torch.softmax(k, -1))
    print(
        f"plain loop: linear 1x896 @ 896x896 bf16 {linear:.1f} us, sdpa 1x8x1x32 {sdpa:.1f} us, "
        f"softmax {softmax:.1f} us"
    )


def worker() -> None:
    import torch

    x = torch.randn(1, 896, dtype=torch.bfloat16)
    w = torch.randn(896, 896, dtype=torch.bfloat16)
    for _ in range(300):
        torch.nn.functional.linear(x, w)
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        t0 = time.perf_counter()
        for _ in range(n):
            torch.nn.functional.linear(x, w)
        print((time.perf_counter() - t0) / n, flush=True)


def pair(env: dict[str, str], rounds: int, calls: int) -> str:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None
        p.stdout.readline()
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            proc = procs[i]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{calls}\n")
            proc.stdin.flush()
            times[i].append(float(proc.stdout.readline()))
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    return " ".join(f"worker {i + 1} {statistics.median(t) * 1e6:.1f} us" for i, t in enumerate(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", help='VAR=VALUE (repeatable; "" for none): default three')
    ap.add_argument("--rounds", type=int, default=200, help="turns per worker in the pair (default 200)")
    ap.add_argument("--calls", type=int, default=150, help="calls per turn (default 150)")
    ap.add_argument("--repeat", type=int, default=1, help="times through the policies (default 1)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.worker:
        return worker()
    if opts.plain:
        return plain()
    get = getattr(os, "sched_getaffinity", None)
    cpus = sorted(get(0)) if get else []
    places = ",".join(f"{{{c}}}" for c in reversed(cpus)) if len(cpus) > 1 else ""
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else "?"
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load}")
    for rep in range(opts.repeat):
        for policy in opts.policy or POLICIES:
            env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
            if places:
                env.update(OMP_PROC_BIND="close", OMP_PLACES=places, OMP_NUM_THREADS=str(len(cpus)))
            if policy:
                name, _, value = policy.partition("=")
                env[name] = value
            out = subprocess.run([sys.executable, __file__, "--plain"], env=env, capture_output=True, text=True)
            taking_turns = pair(env, opts.rounds, opts.calls)
            print(f"[{rep + 1}] {policy or 'default'}: {out.stdout.strip()}; two workers taking turns: {taking_turns}")


if __name__ == "__main__":
    main()
