"""How mpsup's timing engine compares with torch.utils.benchmark and triton's do_bench.

For each BF16 linear shape: the median per call from each method, the ratio of mpsup's median to the
others', each method's A/A repeatability (the same shape measured twice, |m1/m2 - 1|), and the wall
time each method spent. Usage:

    python benchmarks/compare_timers.py --device cuda [--shapes 20] [--budget 1.0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.runner import BenchOptions, EnvSpec, Runner
from mpsup.bench.suite import linear_workloads


def pick_shapes(count: int, tokens: tuple[int, ...]) -> list:
    ws = linear_workloads(tokens)
    # Spread over sizes: sort by FLOPs and take evenly spaced ones.
    ws.sort(key=lambda w: w.params["tokens"] * w.params["in_features"] * w.params["out_features"])
    step = max(1, len(ws) // count)
    return ws[::step][:count]


# torch is imported where it is used, so that --help answers without loading it.


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def make_fn(w, device: str):
    import torch
    import torch.nn.functional as F

    p = w.params
    x = torch.randn(p["tokens"], p["in_features"], dtype=torch.bfloat16, device=device)
    wt = torch.randn(p["out_features"], p["in_features"], dtype=torch.bfloat16, device=device)
    return lambda: F.linear(x, wt)


def time_adaptive(fn, device: str) -> float:
    from torch.utils import benchmark as tbench

    t = tbench.Timer(stmt="fn()", globals={"fn": fn})
    m = t.adaptive_autorange(threshold=0.01, min_run_time=0.05, max_run_time=2.0)
    return m.median


def time_do_bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cpu, cuda or mps (default cuda; do_bench runs on cuda only)")
    ap.add_argument("--shapes", type=int, default=20, help="how many linear shapes (default 20)")
    ap.add_argument("--budget", type=float, default=1.0, help="mpsup's --budget for the run (default 1.0)")
    ap.add_argument("--tokens", default="1,512", help="comma-separated token counts of the shapes (default 1,512)")
    ap.add_argument("--out", type=Path, help="write the per-shape figures as JSON here")
    args = ap.parse_args(argv)
    import torch

    tokens = tuple(int(t) for t in args.tokens.split(","))
    shapes = pick_shapes(args.shapes, tokens)
    methods = ["mpsup", "adaptive_autorange"] + (["do_bench"] if args.device == "cuda" else [])
    results = {w.name: {} for w in shapes}
    wall = dict.fromkeys(methods, 0.0)

    runner = Runner(
        [EnvSpec("baseline", Path(sys.executable))],
        # The policy a single-environment `mpsup bench` runs under.
        BenchOptions(device=args.device, policy=SamplingPolicy.for_environments(1, args.budget), smoke=False),
    )
    runner.start()
    try:
        for rep in (1, 2):
            for w in shapes:
                t0 = time.perf_counter()
                r = runner.measure(w)
                wall["mpsup"] += time.perf_counter() - t0
                env = r.envs["baseline"]
                results[w.name][f"mpsup_{rep}"] = env.summary.median if env.summary else None
                results[w.name]["mpsup_device"] = env.device_median
    finally:
        runner.close()
    for rep in (1, 2):
        for w in shapes:
            fn = make_fn(w, args.device)
            fn()
            sync(args.device)
            t0 = time.perf_counter()
            results[w.name][f"adaptive_autorange_{rep}"] = time_adaptive(fn, args.device)
            wall["adaptive_autorange"] += time.perf_counter() - t0
            if "do_bench" in methods:
                t0 = time.perf_counter()
                results[w.name][f"do_bench_{rep}"] = time_do_bench(fn)
                wall["do_bench"] += time.perf_counter() - t0
            del fn
    rows = []
    for w in shapes:
        r = results[w.name]
        row = {
            "shape": w.name,
            "mpsup_us": r["mpsup_1"] * 1e6 if r["mpsup_1"] else None,
            "mpsup_device_us": r["mpsup_device"] * 1e6 if r.get("mpsup_device") else None,
        }
        for m in methods:
            a, b = r.get(f"{m}_1"), r.get(f"{m}_2")
            row[f"{m}_aa_pct"] = abs(a / b - 1) * 100 if a and b else None
            if m != "mpsup" and a and r["mpsup_1"]:
                row[f"vs_{m}"] = r["mpsup_1"] / ((a + b) / 2)
        rows.append(row)
    doc = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "budget_s": args.budget,
        "wall_s": wall,
        "rows": rows,
    }
    header = [
        "shape",
        "mpsup_us",
        "mpsup_device_us",
        *[f"vs_{m}" for m in methods if m != "mpsup"],
        *[f"{m}_aa_pct" for m in methods],
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        cells = []
        for h in header:
            v = row.get(h)
            cells.append(
                v if isinstance(v, str) else "-" if v is None else f"{v:.3f}" if h.startswith("vs_") else f"{v:.2f}"
            )
        print("| " + " | ".join(cells) + " |")
    print()
    print("wall time (s): " + ", ".join(f"{m} {t:.1f}" for m, t in wall.items()))
    for m in methods:
        aa = [r[f"{m}_aa_pct"] for r in rows if r.get(f"{m}_aa_pct") is not None]
        print(f"{m}: A/A max {max(aa):.2f}%, median {sorted(aa)[len(aa) // 2]:.2f}%")
    for m in methods[1:]:
        big = [abs(r[f"vs_{m}"] - 1) * 100 for r in rows if r.get(f"vs_{m}") and (r["mpsup_us"] or 0) > 100]
        if big:
            print(f"mpsup vs {m} on shapes over 100 us: max |diff| {max(big):.2f}% over {len(big)} shapes")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
