"""Does `mpsup report` say when the machine moved, and only then? A/A runs on a quiet device, then one A/A run
whose second half of visits shares the device with a second process.

    python benchmarks/machine_moved.py --device cpu                      # 5 quiet runs, 1 loaded (a busy loop)
    python benchmarks/machine_moved.py --device cuda --quiet 5 --loaded 1   # the load: a matmul loop on the GPU
    python benchmarks/machine_moved.py --device cpu --quiet 1 --loaded 1 --budget 0.2   # a short check

Each run is `mpsup bench --aa --only W --budget B --no-smoke --no-numerics` in this process (a fresh MPSUP_HOME),
so the load can start exactly when the run's second pass begins (the first `WorkersRestarting` event): the
loader is started then and the run waits until it says it is loading. What comes back is read as the report
reads it: host/moved.py's line and JSON, and the A/A verdict with the workload's interval. Printed as
text: per run its visits in time order (each build's visit median with its interval, the CPU pressure share of
the visit or NVML's figures), what was read and what it cost, the line (or none), the verdict, and whether the
interval still holds 1x (an A/A's ratio called right). A summary ends it: quiet runs that said something (should
be none), loaded runs that said nothing (should be none), loaded runs whose ratio was called wrong.

On a CUDA machine without nvidia-ml-py, the GPU figures are "not known" (said under `absent`) and the script
still runs: the CPU readers and the times are read as everywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mpsup.bench import command as bench_command  # noqa: E402
from mpsup.bench.events import WorkersRestarting  # noqa: E402
from mpsup.host.moved import run_conditions  # noqa: E402
from mpsup.report.analysis import analyze  # noqa: E402
from mpsup.runs.schema import RunRecord  # noqa: E402

DEFAULT_ONLY = {"cpu": "linear/4096x4096/t1", "cuda": "linear/8192x8192/t512"}

# The second process: it says "loading" once its first unit of work is done, then loops until killed.
CPU_LOAD = "import sys\nprint('loading', flush=True)\nwhile True:\n    pass\n"
CUDA_LOAD = (
    "import sys, torch\n"
    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
    "b = a @ a\n"
    "torch.cuda.synchronize()\n"
    "print('loading', flush=True)\n"
    "while True:\n"
    "    for _ in range(20):\n"
    "        b = a @ a\n"
    "    torch.cuda.synchronize()\n"
)


class Loader:
    """The second process, started once (when the run's second pass begins) and killed after the run."""

    def __init__(self, device: str, enabled: bool) -> None:
        self.device = device
        self.enabled = enabled
        self.proc: subprocess.Popen[str] | None = None
        self.started_at: float | None = None
        self.error: str | None = None

    def __call__(self, event: object) -> None:
        if not self.enabled or self.proc is not None or not isinstance(event, WorkersRestarting):
            return
        code = CUDA_LOAD if self.device == "cuda" else CPU_LOAD
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the loader works (a CUDA context takes seconds)
        if line.strip() != "loading":
            self.error = (line + (self.proc.stderr.read() if self.proc.stderr else ""))[-500:]
        self.started_at = time.perf_counter()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def one_run(args: argparse.Namespace, loaded: bool, home: Path) -> dict[str, Any]:
    os.environ["MPSUP_HOME"] = str(home)
    req = bench_command.BenchRequest(
        device=args.device, budget=args.budget, only=args.only, aa=True, smoke=False, numerics=False,
        threads=args.threads,
    )  # fmt: skip
    plan = bench_command.prepare(req)
    loader = Loader(args.device, loaded)
    t0 = time.perf_counter()
    try:
        result = bench_command.run(plan, progress=loader, warn=lambda msg: print(f"    warning: {msg}"))
    finally:
        loader.stop()
    took = time.perf_counter() - t0
    record = RunRecord.from_json(result.record, "run")
    cond = run_conditions(record)
    analysis = analyze(record)
    w = next((c for c in analysis.workloads if c.name == args.only), None)
    sp = w.speedup if w else None
    right = bool(sp and sp.low is not None and sp.high is not None and sp.low <= 1.0 <= sp.high)
    return {
        "loaded": loaded,
        "seconds": took,
        "loader_started_s": (loader.started_at - t0) if loader.started_at else None,
        "loader_error": loader.error,
        "record": result.record,
        "conditions": cond.to_json(),
        "line": cond.line,
        "verdict": analysis.verdict,
        "sentence": analysis.sentence,
        "speedup": None if sp is None else {"estimate": sp.estimate, "low": sp.low, "high": sp.high},
        "change": w.change if w else None,
        "called_right": right or (w is not None and w.change == "same"),
    }


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, int | float) else f"{x:.0%}"


def show(i: int, run: dict[str, Any]) -> None:
    kind = "loaded" if run["loaded"] else "quiet"
    print(f"run {i} ({kind}): {run['seconds']:.1f} s", end="")
    if run["loaded"]:
        started = run["loader_started_s"]
        print(f", load from {started:.1f} s" if started is not None else ", load never started", end="")
    print()
    if run["loader_error"]:
        print(f"  the loader failed: {run['loader_error']}")
    rec = run["record"]
    h = rec.get("hygiene", {})
    print(f"  before: {json.dumps(h.get('before'), default=str)}")
    print(f"  after:  {json.dumps(h.get('after'), default=str)}")
    state = rec.get("machine_state") or {}
    print(f"  reads: {state.get('reads')}; not known here: {state.get('absent')}")
    cost = state.get("read_s") or {}
    if cost:
        print(
            f"  read cost per visit: median {cost.get('median', 0) * 1e6:.0f} us, max {cost.get('max', 0) * 1e6:.0f} "
            f"us, {cost.get('share_of_run') or 0:.4%} of the run ({cost.get('visits')} visits)"
        )
    visits = [(w["name"], v) for w in rec.get("workloads", []) for v in w.get("visit_states") or []]
    visits.sort(key=lambda x: x[1]["t0"])
    for name, v in visits:
        span = v["t1"] - v["t0"]
        meds = "  ".join(
            f"{label} {m['median'] * 1e3:.3f} ms ({(m.get('low') or 0) * 1e3:.3f}-{(m.get('high') or 0) * 1e3:.3f})"
            for label, m in v.get("medians", {}).items()
        )
        s, e = v.get("start") or {}, v.get("end") or {}
        figures = []
        if isinstance(s.get("cpu_pressure_us"), int) and isinstance(e.get("cpu_pressure_us"), int) and span > 0:
            figures.append(f"CPU pressure {(e['cpu_pressure_us'] - s['cpu_pressure_us']) / 1e6 / span:.0%}")
        for key in ("load1", "runnable", "cpu_mhz", "cpu_temp_c", "gpu_sm_mhz", "gpu_temp_c", "gpu_power_w",
                    "gpu_util", "gpu_processes", "gpu_events", "thermal_pressure"):  # fmt: skip
            if s.get(key) is not None or e.get(key) is not None:
                figures.append(f"{key} {s.get(key)} -> {e.get(key)}")
        print(f"  {v['t0']:7.1f}-{v['t1']:7.1f} s  {name} visit {v['visit']}: {meds}")
        print(f"      {'; '.join(figures) or 'no figures'}")
    c = run["conditions"]
    print(f"  pressures: {c['pressures']}; changes: {c['changes']}; drift: {c['drift']}")
    print(f"  said: {run['line'] or '(nothing)'}")
    sp = run["speedup"]
    interval = "-" if sp is None else f"{sp['estimate']:.3f}x ({sp['low']}-{sp['high']})"
    print(f"  verdict: {run['verdict']}; {args_only()}: {interval}, change {run['change']}")
    print(f"  ratio called right (interval holds 1x, or no change): {run['called_right']}")


_ONLY: list[str] = []


def args_only() -> str:
    return _ONLY[0] if _ONLY else "workload"


def _torch() -> str:
    """The torch this interpreter (and so the workers) runs, and the GPU it sees."""
    try:
        import torch

        gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
        return f"torch {torch.__version__}{gpu}"
    except Exception as exc:  # the header is information: a torch that fails here fails the runs, said there
        return f"torch not known ({type(exc).__name__})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quiet", type=int, default=5, help="quiet A/A runs")
    p.add_argument("--loaded", type=int, default=1, help="A/A runs with a second process from the second pass on")
    p.add_argument("--only", default=None, help="the workload (default: a linear sized for the device)")
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write every run's figures (records included)")
    args = p.parse_args()
    args.only = args.only or DEFAULT_ONLY[args.device]
    _ONLY.append(args.only)
    print(
        f"machine_moved: --device {args.device}, {args.quiet} quiet + {args.loaded} loaded A/A runs of {args.only} "
        f"at --budget {args.budget}; load {os.getloadavg()[0]:.2f} at the start; {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {_torch()}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="mpsup-moved-") as tmp:
        for i, loaded in enumerate([False] * args.quiet + [True] * args.loaded, start=1):
            home = Path(tmp) / f"run{i}"
            home.mkdir()
            try:
                run = one_run(args, loaded, home)
            except Exception as exc:  # one failed run is a line of the output, not the end of the others
                print(f"run {i}: failed: {type(exc).__name__}: {exc}")
                continue
            runs.append(run)
            show(i, run)
    quiet = [r for r in runs if not r["loaded"]]
    loaded = [r for r in runs if r["loaded"]]
    print("summary:")
    print(f"  quiet runs that said the machine moved: {sum(bool(r['line']) for r in quiet)} of {len(quiet)}")
    print(f"  loaded runs that said nothing: {sum(not r['line'] for r in loaded)} of {len(loaded)}")
    print(f"  runs whose A/A ratio was called wrong: {sum(not r['called_right'] for r in runs)} of {len(runs)}")
    if args.json:
        with contextlib.suppress(OSError):
            args.json.write_text(json.dumps(runs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
