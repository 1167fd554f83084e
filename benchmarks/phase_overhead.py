"""Where a whole-model phase's time above a plain timing comes from: the worker's phase loop broken down per call.

    python benchmarks/phase_overhead.py --device cuda --pairs 10 --out /tmp/overhead      # Llama-3-8B-shaped, 4 layers
    python benchmarks/phase_overhead.py --device cpu --small --pairs 2 --reps 10 --out /tmp/overhead
    python benchmarks/phase_overhead.py --device cpu --config /tmp/vllama/config.json --dtype fp32 --tokens 16 --bench 0
    python benchmarks/phase_overhead.py log docs/evidence/figures/gpu_phase_overhead_2026-12-06.txt   # a printed run

"Plain" is `benchmarks/whole_model.py plain`: transformers' own model from the config, each call awaited, in a fresh
process. Each pair runs a plain process and a worker process, in alternating order (plain first in even pairs). The
worker process builds each phase through mpsup's worker (`mpsup.worker.main.Worker.setup`, what a bench run
sends) and times it, in interleaved rounds, six ways, the first five each a step closer to what bench times:

  bare     mpsup's model (its weights and inputs, its call) in plain's loop: clock, call, synchronize, clock.
           Against plain: the model's definition and the process.
  quiet    the same call inside warnings filters set and restored on each call (`_quiet`, which the worker keeps
           for untimed calls; a timed request sets them once). What a per-call wrapper of that kind costs.
  block    the worker's timer: `time_block` over the calibrated calls, each awaited, device events at its ends.
  sample   the worker's `sample` request, as the runner asks it (the switch block discarded).
  pinned   `sample` with the process pinned to one CPU, as `--affinity auto` pins CUDA workers.
  own      the worker's own built phase (what block and sample time) in plain's loop: against bare, the
           model instance (a second build of the same spec) rather than the timer.

Then `--bench N` runs of `mpsup bench --model DIR --aa --no-ops --no-numerics` give what a whole run reads (both
sides; the harness: two workers taking turns, the pipe, the gaps). Every figure is a median of per-call seconds;
the table gives each way's median over the pairs and its ratio to plain, and the step each adds.
Works on cpu and cuda; the numbers to quote are the GPU's (a launch-bound phase shows per-call costs)."""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from energy_gpu import LLAMA_8B, SMALL  # the energy runs' folder: the two scripts' figures share a model

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

WAYS = ("bare", "quiet", "block", "sample", "pinned", "own")
PHASES = ("prefill", "decode")


def _sync_fn(device: str) -> Any:
    import torch

    if device == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def _per_call(fn: Any, sync: Any, calls: int) -> float:
    """Plain's loop: the median of `calls` single calls, each clocked around call + synchronize."""
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def worker_child(folder: Path, device: str, tokens: int, dtype: str, rounds: int, calls: int) -> dict[str, Any]:
    """One worker process: each phase built by mpsup's worker, timed the five ways in `rounds` interleaved rounds."""
    import mpsup.worker.whole_model as wm
    from mpsup.model.phases import PhaseOptions, model_phases
    from mpsup.worker.build import build
    from mpsup.worker.main import Worker
    from mpsup.worker.timing import time_block

    config = json.loads((folder / "config.json").read_text())
    opts = PhaseOptions(tokens=tokens, cache=tokens, dtype=dtype)
    specs = {
        w.params["phase"]: w.spec()
        for w in model_phases("transformers-config", config, None, str(folder), opts).workloads
    }
    worker = Worker(io.StringIO())
    worker.hello({"device": device})
    sync = _sync_fn(device)
    allowed = sorted(os.sched_getaffinity(0))
    result: dict[str, Any] = {"pid": os.getpid(), "phases": {}}
    for phase in PHASES:
        spec = specs[phase]
        ready = worker.setup({"workload": spec, "target_sample_s": 0.01})
        awaited = worker.current.fn  # type: ignore[union-attr]
        n = int(ready["calls"])
        # The same phase again, built the same way from the same values, unawaited: plain's loop awaits each call.
        bare_built = build(spec, worker.device)
        quiet_fn = wm._quiet(bare_built.fn)
        got: dict[str, list[float]] = {w: [] for w in WAYS}
        for r in range(rounds):
            order = WAYS if r % 2 == 0 else WAYS[::-1]
            for way in order:
                if way == "bare":
                    got[way].append(_per_call(bare_built.fn, sync, calls))
                elif way == "own":
                    got[way].append(_per_call(awaited, sync, calls))
                elif way == "quiet":
                    got[way].append(_per_call(quiet_fn, sync, calls))
                elif way == "block":
                    blocks = [time_block(awaited, n, worker.device.synchronize).host_s / n for _ in range(calls)]
                    got[way].append(statistics.median(blocks))
                else:
                    if way == "pinned":
                        os.sched_setaffinity(0, {allowed[-1]})
                    try:
                        ans = worker.sample({"count": calls, "discard": 1})
                    finally:
                        os.sched_setaffinity(0, allowed)
                    got[way].append(statistics.median(ans["host"]))
        result["phases"][phase] = {"calls_per_block": n, **{w: statistics.median(v) for w, v in got.items()}}
        del bare_built, quiet_fn, awaited
        worker.teardown_quietly()
    return result


def plain_child(folder: Path, device: str, tokens: int, dtype: str, reps: int) -> dict[str, Any]:
    out = Path(f"/tmp/phase_overhead_plain_{os.getpid()}.json")
    cmd = [sys.executable, str(HERE / "whole_model.py"), "plain", str(folder), "--device", device]
    cmd += ["--tokens", str(tokens), "--cache", str(tokens), "--reps", str(reps), "--json", str(out), "--dtype", dtype]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    doc = json.loads(out.read_text())
    out.unlink()
    return {"phases": {p: {"plain": doc["phases"][p]["median_s"]} for p in PHASES}}


def bench_run(folder: Path, device: str, tokens: int, dtype: str, home: Path, budget: float) -> dict[str, Any]:
    env = {**os.environ, "MPSUP_HOME": str(home), "PYTHONPATH": str(HERE.parent / "src")}
    cmd = [sys.executable, "-m", "mpsup", "bench", "--model", str(folder), "--aa", "--no-ops", "--no-numerics"]
    cmd += ["--no-smoke", "--device", device, "--tokens", str(tokens), "--dtype", dtype, "--budget", str(budget)]
    done = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mpsup bench failed ({done.returncode}): {done.stderr[-1500:]}")
    record = json.loads(Path(json.loads(done.stdout)["path"]).read_text())
    phases: dict[str, Any] = {}
    for w in record["workloads"]:
        p = w.get("phase")
        if w.get("part") == "phase" and p in PHASES:
            sides = [statistics.median(e["samples"]) for e in w["envs"].values() if e.get("samples")]
            phases[p] = {"bench": statistics.median(sides), "sides": sides}
    return {"phases": phases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (the figures to quote) or cpu")
    ap.add_argument("--pairs", type=int, default=10, help="alternating plain/worker process pairs (default 10)")
    ap.add_argument("--bench", type=int, default=3, help="mpsup bench --aa runs after the pairs (default 3)")
    ap.add_argument("--tokens", type=int, default=512, help="prefill length and decode cache (default 512)")
    ap.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32")
    ap.add_argument("--reps", type=int, default=30, help="plain's timed calls per phase (default 30)")
    ap.add_argument("--rounds", type=int, default=6, help="the worker process's interleaved rounds (default 6)")
    ap.add_argument("--calls", type=int, default=10, help="calls (or blocks) per way and round (default 10)")
    ap.add_argument("--budget", type=float, default=0.5, help="the bench runs' --budget (default 0.5)")
    ap.add_argument("--small", action="store_true", help="a small Llama (hidden 256, vocab 1024)")
    ap.add_argument("--config", type=Path, help="a Llama config.json of your own (over --small)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/phase_overhead"), help="work folder")
    ap.add_argument("--child", choices=("worker",), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child == "worker":
        doc = worker_child(a.folder, a.device, a.tokens, a.dtype, a.rounds, a.calls)
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    folder = a.out / "llama"
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads(a.config.read_text()) if a.config else SMALL if a.small else LLAMA_8B
    (folder / "config.json").write_text(json.dumps(config))
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {a.device} {json.dumps(config)}", flush=True)
    rows: list[dict[str, Any]] = []
    me = [sys.executable, __file__, "--device", a.device, "--tokens", str(a.tokens), "--dtype", a.dtype]
    me += ["--rounds", str(a.rounds), "--calls", str(a.calls), "--folder", str(folder), "--child", "worker"]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    for i in range(a.pairs):
        for kind in ("plain", "worker") if i % 2 == 0 else ("worker", "plain"):
            if kind == "plain":
                doc = plain_child(folder, a.device, a.tokens, a.dtype, a.reps)
            else:
                done = subprocess.run(me, env=env, capture_output=True, text=True, check=False)
                if done.returncode:
                    raise SystemExit(f"worker process failed: {done.stderr[-2000:]}")
                doc = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"pair": i, "kind": kind, **doc})
            cells = " ".join(
                f"{p} " + "/".join(f"{1e3 * v:.3f}" for k, v in doc["phases"][p].items() if k != "calls_per_block")
                for p in PHASES
            )
            print(f"pair {i} {kind}: {cells} ms", flush=True)
    for j in range(a.bench):
        doc = bench_run(folder, a.device, a.tokens, a.dtype, a.out / f"home-{j}", a.budget)
        rows.append({"pair": a.pairs + j, "kind": "bench", **doc})
        print(f"bench {j}: " + " ".join(f"{p} {1e3 * v['bench']:.3f}" for p, v in doc["phases"].items()), flush=True)
    (a.out / "phase_overhead.json").write_text(json.dumps(rows, indent=1))
    table(rows)


def table(rows: list[dict[str, Any]]) -> None:
    for p in PHASES:
        by_way: dict[str, list[float]] = {}
        for r in rows:
            for k, v in (r["phases"].get(p) or {}).items():
                if isinstance(v, float):
                    by_way.setdefault(k, []).append(v)
        plain = statistics.median(by_way["plain"]) if by_way.get("plain") else None
        print(f"{p}: median per call over processes (ms), ratio to plain, step from the way before")
        prev = plain
        for way in ("plain", *WAYS, "bench"):
            v = by_way.get(way)
            if not v:
                continue
            m = statistics.median(v)
            vs = f"{m / plain:.4f}x" if plain else "-"
            step = f"{100 * (m / prev - 1):+.2f}%" if prev else "-"
            print(f"  {way:7} {1e3 * m:9.4f} ({1e3 * min(v):.4f}-{1e3 * max(v):.4f}, n {len(v):2}) {vs:>9} {step:>8}")
            prev = m
        # Each way against bare inside one worker process: what the process-to-process spread cannot reach.
        inside = [r["phases"][p] for r in rows if r["kind"] == "worker" and r["phases"].get(p, {}).get("bare")]
        if inside:
            print(f"  within each worker process, over its bare (median, range over {len(inside)} processes):")
            for way in WAYS[1:]:
                got = [ph[way] / ph["bare"] for ph in inside if ph.get(way)]
                if got:
                    mid = statistics.median(got)
                    print(f"    {way:7} {mid:.4f}x ({min(got):.3f}-{max(got):.3f}) {100 * (mid - 1):+.2f}%")


def rows_from_log(text: str) -> list[dict[str, Any]]:
    """The rows of a run's printed pair lines ("pair 3 worker: prefill a/b/... decode ... ms"), where its
    phase_overhead.json stayed on the machine that ran it."""
    rows = []
    for line in text.splitlines():
        head, _, cells = line.partition(": ")
        words = head.split()
        if len(words) != 3 or words[0] != "pair" or words[2] not in ("plain", "worker"):
            continue
        ways = ["plain"] if words[2] == "plain" else list(WAYS)
        parts = cells.removesuffix(" ms").split()
        phases = {
            # A log of five worker values (no "own") maps onto the first five ways, which keep their order.
            name: dict(zip(ways, (float(v) / 1e3 for v in values.split("/")), strict=False))
            for name, values in zip(parts[::2], parts[1::2], strict=True)
        }
        rows.append({"pair": int(words[1]), "kind": words[2], "phases": phases})
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        table(json.loads(Path(sys.argv[2]).read_text()))
    elif len(sys.argv) == 3 and sys.argv[1] == "log":
        table(rows_from_log(Path(sys.argv[2]).read_text()))
    else:
        main()
