#!/usr/bin/env python3
"""Standalone repro (torch only; written by mpsup report --upstream).

Times: torch.nn.functional.linear, input 16x4096, weight 4096x4096, bfloat16, no bias (linear/4096x4096/t16)
Run it under each build and compare the medians:
    python-of-the-good-build repro.py
    python-of-the-bad-build  repro.py
"""
import argparse
import statistics
import time

import torch

DEFAULT_DEVICE = 'cpu'
WHAT = 'torch.nn.functional.linear, input 16x4096, weight 4096x4096, bfloat16, no bias (linear/4096x4096/t16)'


def pick_device(name):
    if name == "mps" and not torch.backends.mps.is_available():
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device(name)


def sync(device):
    # Work on the GPU is asynchronous: read the clock only once it is done.
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


def build(device):
    torch.manual_seed(0)
    x = torch.randn(16, 4096, device=device).to(torch.bfloat16)
    w = torch.randn(4096, 4096, device=device).to(torch.bfloat16)
    return lambda: torch.nn.functional.linear(x, w)


def main():
    parser = argparse.ArgumentParser(description="Times " + WHAT)
    parser.add_argument("--device", default=DEFAULT_DEVICE, help="mps, cuda or cpu (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=30, help="timed samples (default: %(default)s)")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="length of one sample (default: %(default)s)")
    args = parser.parse_args()
    device = pick_device(args.device)
    with torch.inference_mode():
        fn = build(device)
        # Warm up (kernel selection, caches), then size a sample: enough back-to-back calls for sample-ms.
        for _ in range(3):
            fn()
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        one = max(time.perf_counter() - t0, 1e-7)
        calls = max(1, min(10000, int(args.sample_ms / 1000.0 / one)))
        times = []
        for _ in range(max(1, args.samples)):
            sync(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync(device)
            times.append((time.perf_counter() - t0) / calls)
    times.sort()
    med = statistics.median(times)
    q1, q3 = times[len(times) // 4], times[(3 * len(times)) // 4]
    rev = (getattr(torch.version, "git_version", None) or "unknown")[:12]
    print("torch %s (git %s) on %s, %d threads" % (torch.__version__, rev, device, torch.get_num_threads()))
    print("times " + WHAT)
    print(
        "median %.4f ms per call; interquartile range %.4f-%.4f ms (+-%.1f%%); min %.4f ms; %d samples of %d calls"
        % (med * 1e3, q1 * 1e3, q3 * 1e3, 50.0 * (q3 - q1) / med, times[0] * 1e3, len(times), calls)
    )


if __name__ == "__main__":
    main()
