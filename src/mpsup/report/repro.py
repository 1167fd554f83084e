"""The standalone repro script of `report --upstream`: plain Python, torch only, that times the regressed
workload's op (or a phase's largest matmuls) with the record's shapes and dtype under whichever torch runs it.
It holds no record text (numbers, validated dtypes, op and phase names from fixed lists)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from mpsup.model.phases import PHASES
from mpsup.runs.schema import MAX_CENSUS_DIM, MAX_CENSUS_ELEMENTS

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "int8": "int8", "fp8": "float8_e4m3fn"}
MATMUL_OPS = ("addmm", "mm", "bmm", "linear", "matmul")


@dataclass(frozen=True)
class Repro:
    """What the script times, in words, and the Python that builds the op (`build()` returns a callable)."""

    what: str
    build: str
    device: str


# Both repro scripts' way to a device: the one asked for, else the CPU where this machine has no such device.
PICK_DEVICE = """def pick_device(name):
    if name == "mps" and not torch.backends.mps.is_available():
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device(name)
"""


# --- the repro script -------------------------------------------------------------------------------------

SCRIPT = '''#!/usr/bin/env python3
"""Standalone repro (torch only; written by mpsup report --upstream).

Times: {what}
Run it under each build and compare the medians:
    python-of-the-good-build repro.py
    python-of-the-bad-build  repro.py
"""
import argparse
import os
import statistics
import time

import torch

DEFAULT_DEVICE = {device!r}
WHAT = {what!r}


{pick_device}

def pin_to_one_cpu():
    # A launch-bound GPU op runs at the host's pace: on a Linux host two processes of one build issued at
    # levels 20-40% apart for their whole life, more than many regressions. One CPU, the last (the first
    # takes most interrupts), as the measuring tool pinned its own. (macOS has no such call.)
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {{cpu}})
    return cpu


def sync(device):
    # Work on the GPU is asynchronous: read the clock only once it is done.
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


def build(device):
    torch.manual_seed(0)
{build}


def main():
    parser = argparse.ArgumentParser(description="Times " + WHAT)
    parser.add_argument("--device", default=DEFAULT_DEVICE, help="mps, cuda or cpu (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=30, help="timed samples (default: %(default)s)")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="length of one sample (default: %(default)s)")
    parser.add_argument("--no-pin", action="store_true", help="cuda: leave the process on every CPU")
    args = parser.parse_args()
    # Before the device starts its threads, which inherit the CPU this process is on.
    pinned = pin_to_one_cpu() if args.device == "cuda" and not args.no_pin else None
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
    where = "" if pinned is None else ", pinned to CPU %d" % pinned
    print("torch %s (git %s) on %s, %d threads%s" % (torch.__version__, rev, device, torch.get_num_threads(), where))
    print("times " + WHAT)
    print(
        "median %.4f ms per call; interquartile range %.4f-%.4f ms (+-%.1f%%); min %.4f ms; %d samples of %d calls"
        % (med * 1e3, q1 * 1e3, q3 * 1e3, 50.0 * (q3 - q1) / med, times[0] * 1e3, len(times), calls)
    )


if __name__ == "__main__":
    main()
'''


def _shape(text: str) -> list[int] | None:
    if text == "scalar":
        return []
    try:
        dims = [int(d) for d in text.split("x")]
    except ValueError:
        return None
    return dims if all(0 <= d <= MAX_CENSUS_DIM for d in dims) else None


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(type(d) is int and 0 <= d <= MAX_CENSUS_DIM for d in v):
        return list(v) if math.prod(v) <= MAX_CENSUS_ELEMENTS else None
    return None


def _pos(params: dict[str, Any], *keys: str) -> list[int] | None:
    vals = [params.get(k) for k in keys]
    out = [v for v in vals if type(v) is int and 0 < v <= MAX_CENSUS_DIM]
    return out if len(out) == len(keys) else None


def torch_dtype(name: str) -> str:
    """A torch dtype attribute name, never anything else: the script is code, the record is input."""
    name = DTYPES.get(name, name)
    return name if re.fullmatch(r"(b?float(16|32|64)|float8_e4m3fn|float8_e5m2|u?int(8|16|32|64))", name) else "float32"


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def _fits(*shapes: list[int]) -> bool:
    """Every tensor the repro makes (operands and result) within what a storage size can count."""
    return all(math.prod(s) <= MAX_CENSUS_ELEMENTS for s in shapes)


def _randn(name: str, shape: list[int], dtype: str) -> str:
    """The script's line that makes operand `name`: random values of `shape` in `dtype` on the chosen device."""
    return f"    {name} = torch.randn({', '.join(map(str, shape))}, device=device).to(torch.{dtype})\n"


def workload_repro(w: dict[str, Any], device: str) -> Repro | None:
    """A suite or model-layer workload, rebuilt from its params as the worker builds it (worker/ops.py).
    What it says it times is made of numbers and names from fixed lists: the workload's own name is the
    record's text, which the body shows and the script never holds."""
    kind, dtype = str(w.get("kind")), torch_dtype(str(w.get("dtype", "fp32")))
    if kind == "linear" and (dims := _pos(w, "tokens", "in_features", "out_features")):
        t, k, n = dims
        if _fits([t, k], [n, k], [t, n]):
            return Repro(
                f"torch.nn.functional.linear, input {t}x{k}, weight {n}x{k}, {dtype}, no bias",
                _randn("x", [t, k], dtype)
                + _randn("w", [n, k], dtype)
                + "    return lambda: torch.nn.functional.linear(x, w)",
                device,
            )
    if kind == "matmul" and (dims := _pos(w, "n")):
        (n,) = dims
        if _fits([n, n]):
            return Repro(
                f"torch.mm of two {n}x{n} {dtype} matrices",
                _randn("a", [n, n], dtype) + _randn("b", [n, n], dtype) + "    return lambda: torch.mm(a, b)",
                device,
            )
    if kind == "int_mm" and (dims := _pos(w, "tokens", "in_features", "out_features")):
        m, k, n = dims
        if _fits([m, k], [k, n], [m, n]):
            return Repro(
                f"torch._int_mm, int8 {m}x{k} @ {k}x{n}",
                f"    a = torch.randint(-8, 8, ({m}, {k}), device=device, dtype=torch.int8)\n"
                f"    b = torch.randint(-8, 8, ({k}, {n}), device=device, dtype=torch.int8)\n"
                "    return lambda: torch._int_mm(a, b)",
                device,
            )
    if kind == "pad" and (shape := _int_list(w.get("shape"))) and (pad := _int_list(w.get("pad"))):
        return Repro(
            f"torch.nn.functional.pad of a {_dims(shape)} {dtype} tensor by {pad}",
            _randn("x", shape, dtype) + f"    return lambda: torch.nn.functional.pad(x, {pad})",
            device,
        )
    if kind == "conv" and (ws := _int_list(w.get("weight_shape"))) and (xs := _int_list(w.get("input_shape"))):
        nd = len(ws) - 2
        raw_padding, raw_stride = w.get("padding"), w.get("stride")
        padding: int = raw_padding if type(raw_padding) is int and 0 <= raw_padding <= MAX_CENSUS_DIM else 0
        stride: int = raw_stride if type(raw_stride) is int and 1 <= raw_stride <= MAX_CENSUS_DIM else 1
        # The result too: a huge weight over a small input can make an output no storage holds.
        spatial = [(x + 2 * padding - k) // stride + 1 for x, k in zip(xs[2:], ws[2:], strict=False)]
        if nd in (1, 2, 3) and len(xs) == len(ws) and _fits([xs[0], ws[0], *(max(0, d) for d in spatial)]):
            return Repro(
                f"torch.nn.functional.conv{nd}d, input {_dims(xs)}, weight {_dims(ws)}, {dtype}, "
                f"padding {padding}, stride {stride}",
                _randn("x", xs, dtype)
                + _randn("w", ws, dtype)
                + f"    return lambda: torch.nn.functional.conv{nd}d(x, w, padding={padding}, stride={stride})",
                device,
            )
    return None


def _entry_matmul(op: str, shapes: list[list[int]]) -> tuple[float, list[int], list[int]] | None:
    """The matmul an entry of the census ran: its flops per call and its operands (a: m x k, b: k x n)."""
    mats = [s for s in shapes if len(s) >= 2]
    if op in ("mm", "addmm", "matmul") and len(mats) >= 2:
        a, b = mats[-2], mats[-1]
        if len(b) == 2 and a[-1] == b[0]:
            m = math.prod(a[:-1])
            return 2.0 * m * a[-1] * b[1], [m, a[-1]], [b[0], b[1]]
    if op == "bmm" and len(mats) >= 2 and len(mats[0]) == 3 and len(mats[1]) == 3:
        a, b = mats[0], mats[1]
        if a[0] == b[0] and a[2] == b[1]:
            return 2.0 * a[0] * a[1] * a[2] * b[2], a, b
    if op == "linear" and len(mats) >= 2 and len(mats[1]) == 2:
        x, w = mats[0], mats[1]
        if x[-1] == w[1]:
            m = math.prod(x[:-1])
            return 2.0 * m * w[0] * w[1], [m, w[1]], [w[1], w[0]]
    return None


def _result(a: list[int], b: list[int]) -> list[int]:
    return [*a[:-1], b[-1]]


def census_matmuls(census: dict[str, Any]) -> tuple[list[tuple[float, str, list[int], list[int], str, int]], int]:
    """The census's matmuls a repro can make, and how many it cannot (an operand or the result larger than a
    storage size can count: the script would fail with "Storage size calculation overflowed")."""
    found, oversized = [], 0
    entries = census.get("entries")
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or e.get("op") not in MATMUL_OPS:
            continue
        shapes = [s for s in (_shape(t) for t in str(e.get("shapes", "")).split()) if s is not None]
        got = _entry_matmul(str(e["op"]), shapes)
        if got is None:
            continue
        if not _fits(got[1], got[2], _result(got[1], got[2])):
            oversized += 1
            continue
        count = e["count"] if type(e.get("count")) is int and e["count"] > 0 else 1
        dtype = str(e.get("dtypes") or "float32").split()[0]
        found.append((got[0] * count, str(e["op"]), got[1], got[2], dtype, count))
    return found, oversized


def census_repro(phase: str, census: dict[str, Any], device: str) -> Repro | None:
    """A whole-model phase: its largest matmul by the census (calls x flops; the census holds no times),
    timed as the linear layer it comes from (weight stored out x in, as nn.Linear holds it)."""
    found, _ = census_matmuls(census)
    if not found:
        return None
    _, op, a, b, dtype, count = max(found, key=lambda f: f[0])
    dtype = torch_dtype(dtype)
    phase = phase if phase in PHASES else "model"  # a name from the fixed list: the script holds no record text
    seen = f"aten.{op} {_dims(a)} @ {_dims(b)}, {dtype}, {count} call(s) per {phase}"
    what = f"the {phase} phase's largest matmul by its op census ({seen}); one op of the phase, not the phase"
    if op == "bmm":
        return Repro(
            f"torch.bmm {_dims(a)} @ {_dims(b)}: {what}",
            f"    a = torch.randn({a}, device=device).to(torch.{dtype})\n"
            f"    b = torch.randn({b}, device=device).to(torch.{dtype})\n"
            "    return lambda: torch.bmm(a, b)",
            device,
        )
    m, k = a
    n = b[1]
    return Repro(
        f"torch.nn.functional.linear, input {m}x{k}, weight {n}x{k}: {what}",
        f"    x = torch.randn({m}, {k}, device=device).to(torch.{dtype})\n"
        f"    w = torch.randn({n}, {k}, device=device).to(torch.{dtype})\n"
        "    return lambda: torch.nn.functional.linear(x, w)",
        device,
    )


def phase_census(w: dict[str, Any]) -> dict[str, Any] | None:
    for env in (w.get("envs") or {}).values():
        census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
        if isinstance(census, dict):
            return census
    return None


def repro_for(record: dict[str, Any], name: str) -> Repro | None:
    w = next((w for w in record.get("workloads", []) if w.get("name") == name), None)
    if w is None:
        return None
    device = str(record.get("device") or "cpu")
    device = device if device in ("mps", "cuda", "cpu") else "cpu"
    if w.get("part") == "phase":
        census = phase_census(w)
        return census_repro(str(w.get("phase")), census, device) if census is not None else None
    return workload_repro(w, device)


def script_text(repro: Repro) -> str:
    # WHAT goes in as a Python literal (repr); the docstring copy loses what could end it early.
    doc_what = re.sub(r'["\\]', "'", repro.what).replace("\n", " ")
    return SCRIPT.format(what=doc_what, device=repro.device, build=repro.build, pick_device=PICK_DEVICE).replace(
        f"WHAT = {doc_what!r}", f"WHAT = {repro.what!r}"
    )
