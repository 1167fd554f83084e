"""What one visit's build of a whole-model phase costs, with whichever mpsup is on the path (a checkout's `src`
through PYTHONPATH): the phase built and run once as a visit's setup does it (`worker.whole_model.build_phase`:
the model, its weights, the first call, the op census), then, where asked, the float64 reference's answer to
the same phase (`worker.truth.truth_answer`), with that process's peak resident memory.

    python benchmarks/build_cost.py DIR --device cuda --phase prefill --tokens 512 [--truth] [--repeat 2]

Against the page cache: `--page-cache` also times reading the folder's weight file into fresh tensors on the
device (the floor the issue sets: a build should cost no more than that). Prints one JSON document."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _spec(folder: Path, phase: str, tokens: int, dtype: str) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text())
    params = {
        "library": "transformers",
        "config": config,
        "causal": True,
        "tokens": tokens,
        "cache": tokens,
        "phase": phase,
        "weights": "random",
        "path": None,
        "depth": None,
        "fit_share": 0.35,
        "compile": False,
    }
    return {"name": f"model/{phase}", "kind": "model_phase", "dtype": dtype, "params": params}


def page_cache_read(folder: Path, device: str) -> float:
    """Seconds to read the folder's safetensors bytes into fresh tensors on the device (a second read: cached)."""
    files = sorted(folder.glob("*.safetensors"))
    for path in files:  # once to warm the page cache
        with open(path, "rb") as fh:
            while fh.read(1 << 26):
                pass
    t0 = time.perf_counter()
    for path in files:
        data = torch.from_file(str(path), size=path.stat().st_size, dtype=torch.uint8)
        data.to(device)
    _sync(device)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--phase", default="prefill")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--truth", action="store_true")
    ap.add_argument("--page-cache", action="store_true")
    args = ap.parse_args()
    import mpsup
    from mpsup.worker.device import Device
    from mpsup.worker.whole_model import build_phase

    spec = _spec(args.dir, args.phase, args.tokens, args.dtype)
    out: dict[str, Any] = {"mpsup": str(Path(mpsup.__file__).parent), "device": args.device, "builds_s": []}
    for _ in range(args.repeat):
        forget = getattr(sys.modules["mpsup.worker.whole_model"], "forget", None)
        if forget is not None:
            forget()  # a new process's build, not the kept model's reuse
        t0 = time.perf_counter()
        built = build_phase(spec, Device(args.device))
        _sync(args.device)
        out["builds_s"].append(round(time.perf_counter() - t0, 2))
        out["depth"] = (built.info or {}).get("depth")
        del built
        if forget is not None:
            forget()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.page_cache:
        out["page_cache_read_s"] = round(page_cache_read(args.dir, args.device), 2)
    if args.truth:
        from mpsup.worker.truth import truth_answer

        t0 = time.perf_counter()
        truth_answer(spec, out.get("depth"))
        out["truth_s"] = round(time.perf_counter() - t0, 2)
    out["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
