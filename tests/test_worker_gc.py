"""What the compile smoke test imports (dynamo, functorch, sympy) stays alive for the worker's life: the
worker freezes it, so that each later collection does not walk it again (the main job's slowdown after
the smoke tests)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, io, json
from mpsup.worker.main import Worker
w = Worker(io.StringIO())
w.hello({"device": "cpu"})
before = len(gc.get_objects())
answer = w.smoke({"feature": "compile_small_model"})
after_smoke = len(gc.get_objects())
w.setup({"workload": %s, "target_sample_s": 0.001})
w.teardown({})
after_workload = len(gc.get_objects())
print(json.dumps({"status": answer["status"], "before": before, "after_smoke": after_smoke,
                  "after_workload": after_workload}))
"""


def test_the_compile_smoke_test_leaves_nothing_for_later_collections_to_walk():
    from mpsup.bench.suite import linear_workloads

    spec = linear_workloads((1,), "fp32")[0].spec()
    out = subprocess.run(
        [sys.executable, "-c", PROBE % repr(spec)], capture_output=True, text=True, timeout=300, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "pass", got
    # Unfrozen, the compile's imports leave ~160k tracked objects here; frozen, only what was made since.
    assert got["after_smoke"] < 5_000, got
    assert got["after_workload"] < 5_000, got
