"""The main job's slowdown after the smoke tests (issue 25): what one garbage collection costs a worker
before the smoke tests, after them, and after the worker freezes what they left alive.

    python benchmarks/gc_after_smoke.py [--device cuda] [--features compile_small_model,...]

Runs the smoke features in this process the way a worker does (mpsup.worker.smoke.run_feature), then
times gc.collect() (median of 5) and counts the tracked objects at each point. Expected duration: the
smoke features' own time (a torch.compile with inductor: ~10-30 s on a GPU)."""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from mpsup.bench.suite import SMOKE_FEATURES
from mpsup.metal import load_manifest
from mpsup.worker.device import Device
from mpsup.worker.main import collect_and_freeze
from mpsup.worker.smoke import run_feature


def collection_ms() -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--features", default=",".join(SMOKE_FEATURES))
    args = ap.parse_args()
    device = Device(args.device)
    device.synchronize()
    gc.freeze()  # as the worker does once torch and the device runtime are loaded (its hello)
    print(f"after hello's freeze: {collection_ms():7.2f} ms a collection, {len(gc.get_objects()):>7} tracked")
    kernels = load_manifest()
    start = time.perf_counter()
    for name in args.features.split(","):
        status = run_feature(name, device, kernels)["status"]
        print(f"  smoke {name}: {status}")
    took = time.perf_counter() - start
    print(f"smoke tests took {took:.1f} s")
    print(f"after the smoke tests: {collection_ms():7.2f} ms a collection, {len(gc.get_objects()):>7} tracked")
    collect_and_freeze()  # what the worker does after each smoke test and workload teardown
    print(f"after collect+freeze: {collection_ms():7.2f} ms a collection, {len(gc.get_objects()):>7} tracked")


if __name__ == "__main__":
    main()
