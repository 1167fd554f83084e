"""`mpsup report --upstream`: a regression as PyTorch's bug template asks for it.

What regressed and by how much (paired intervals, both builds, the machine), the facts `collect_env` would
print (from the record's environments and conditions, and a bisect's probes), the bisect's answer when a
finished bisect measured this record, and a standalone repro script: plain Python, torch only, that times
the regressed workload's op with the record's shapes and dtype under whichever torch runs it.

Nothing private by default: no interpreter or model paths, no environment names as typed (they are often
paths), and a last pass that replaces the home folder and the user name wherever they still appear."""

from __future__ import annotations

import getpass
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpsup.errors import UserError
from mpsup.report.analysis import Analysis, WorkloadChange
from mpsup.report.op_repro import phase_repro
from mpsup.runs.schema import RunRecord

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "int8": "int8", "fp8": "float8_e4m3fn"}
MATMUL_OPS = ("addmm", "mm", "bmm", "linear", "matmul")
COMPARE_URL = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"


@dataclass(frozen=True)
class Repro:
    """What the script times, in words, and the Python that builds the op (`build()` returns a callable)."""

    what: str
    build: str
    device: str


@dataclass(frozen=True)
class Upstream:
    markdown: str
    script: str | None
    workload: str


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


def pick_device(name):
    if name == "mps" and not torch.backends.mps.is_available():
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device(name)


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
    return dims if all(0 <= d <= 1 << 31 for d in dims) else None


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(type(d) is int and 0 <= d <= 1 << 31 for d in v):
        return list(v)
    return None


def _pos(params: dict[str, Any], *keys: str) -> list[int] | None:
    vals = [params.get(k) for k in keys]
    out = [v for v in vals if type(v) is int and 0 < v <= 1 << 31]
    return out if len(out) == len(keys) else None


def _torch_dtype(name: str) -> str:
    """A torch dtype attribute name, never anything else: the script is code, the record is input."""
    name = DTYPES.get(name, name)
    return name if re.fullmatch(r"(b?float(16|32|64)|float8_e4m3fn|float8_e5m2|u?int(8|16|32|64))", name) else "float32"


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def workload_repro(w: dict[str, Any], device: str) -> Repro | None:
    """A suite or model-layer workload, rebuilt from its params as the worker builds it (worker/ops.py)."""
    kind, dtype = str(w.get("kind")), _torch_dtype(str(w.get("dtype", "fp32")))
    name = str(w.get("name"))
    if kind == "linear" and (dims := _pos(w, "tokens", "in_features", "out_features")):
        t, k, n = dims
        return Repro(
            f"torch.nn.functional.linear, input {t}x{k}, weight {n}x{k}, {dtype}, no bias ({name})",
            f"    x = torch.randn({t}, {k}, device=device).to(torch.{dtype})\n"
            f"    w = torch.randn({n}, {k}, device=device).to(torch.{dtype})\n"
            "    return lambda: torch.nn.functional.linear(x, w)",
            device,
        )
    if kind == "matmul" and (dims := _pos(w, "n")):
        (n,) = dims
        return Repro(
            f"torch.mm of two {n}x{n} {dtype} matrices ({name})",
            f"    a = torch.randn({n}, {n}, device=device).to(torch.{dtype})\n"
            f"    b = torch.randn({n}, {n}, device=device).to(torch.{dtype})\n"
            "    return lambda: torch.mm(a, b)",
            device,
        )
    if kind == "int_mm" and (dims := _pos(w, "tokens", "in_features", "out_features")):
        m, k, n = dims
        return Repro(
            f"torch._int_mm, int8 {m}x{k} @ {k}x{n} ({name})",
            f"    a = torch.randint(-8, 8, ({m}, {k}), device=device, dtype=torch.int8)\n"
            f"    b = torch.randint(-8, 8, ({k}, {n}), device=device, dtype=torch.int8)\n"
            "    return lambda: torch._int_mm(a, b)",
            device,
        )
    if kind == "pad" and (shape := _int_list(w.get("shape"))) and (pad := _int_list(w.get("pad"))):
        return Repro(
            f"torch.nn.functional.pad of a {_dims(shape)} {dtype} tensor by {pad} ({name})",
            f"    x = torch.randn({shape}, device=device).to(torch.{dtype})\n"
            f"    return lambda: torch.nn.functional.pad(x, {pad})",
            device,
        )
    if kind == "conv" and (ws := _int_list(w.get("weight_shape"))) and (xs := _int_list(w.get("input_shape"))):
        nd = len(ws) - 2
        padding = w.get("padding") if type(w.get("padding")) is int else 0
        stride = w.get("stride") if type(w.get("stride")) is int else 1
        if nd in (1, 2, 3) and len(xs) == len(ws):
            return Repro(
                f"torch.nn.functional.conv{nd}d, input {_dims(xs)}, weight {_dims(ws)}, {dtype}, "
                f"padding {padding}, stride {stride} ({name})",
                f"    x = torch.randn({xs}, device=device).to(torch.{dtype})\n"
                f"    w = torch.randn({ws}, device=device).to(torch.{dtype})\n"
                f"    return lambda: torch.nn.functional.conv{nd}d(x, w, padding={padding}, stride={stride})",
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


def census_repro(phase: str, census: dict[str, Any], device: str) -> Repro | None:
    """A whole-model phase: its largest matmul by the census (calls x flops; the census holds no times),
    timed as the linear layer it comes from (weight stored out x in, as nn.Linear holds it)."""
    best: tuple[float, str, list[int], list[int], str, int] | None = None
    for e in census.get("entries") or []:
        if not isinstance(e, dict) or e.get("op") not in MATMUL_OPS:
            continue
        shapes = [s for s in (_shape(t) for t in str(e.get("shapes", "")).split()) if s is not None]
        got = _entry_matmul(str(e["op"]), shapes)
        count = e["count"] if type(e.get("count")) is int and e["count"] > 0 else 1
        if got and (best is None or got[0] * count > best[0]):
            dtype = str(e.get("dtypes") or "float32").split()[0]
            best = (got[0] * count, str(e["op"]), got[1], got[2], dtype, count)
    if best is None:
        return None
    _, op, a, b, dtype, count = best
    dtype = _torch_dtype(dtype)
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


def repro_for(record: dict[str, Any], name: str) -> Repro | None:
    w = next((w for w in record.get("workloads", []) if w.get("name") == name), None)
    if w is None:
        return None
    device = str(record.get("device") or "cpu")
    device = device if device in ("mps", "cuda", "cpu") else "cpu"
    if w.get("part") == "phase":
        for env in (w.get("envs") or {}).values():
            census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
            if isinstance(census, dict):
                phase = str(w.get("phase") or name.split("/", 1)[-1])
                return census_repro(phase, census, device)
        return None
    return workload_repro(w, device)


def script_text(repro: Repro) -> str:
    # WHAT goes in as a Python literal (repr); the docstring copy loses what could end it early.
    doc_what = re.sub(r'["\\]', "'", repro.what).replace("\n", " ")
    return SCRIPT.format(what=doc_what, device=repro.device, build=repro.build).replace(
        f"WHAT = {doc_what!r}", f"WHAT = {repro.what!r}"
    )


# --- the issue body ---------------------------------------------------------------------------------------


def _x(v: float | None) -> str:
    return f"{v:.3f}x" if v is not None and math.isfinite(v) else "n/a"


def _t(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def _ci(c: WorkloadChange) -> str:
    sp = c.speedup
    if sp is None or not sp.bounded:
        return "n/a"
    return f"{sp.low:.3f}-{sp.high:.3f}x"


def bisect_for(run_id: str, journals: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest finished bisect that measured this record as one of its steps."""
    for doc in journals:
        if any(isinstance(s, dict) and s.get("run_id") == run_id for s in doc.get("steps", [])):
            return doc
    return None


def _bisect_section(doc: dict[str, Any], keep_paths: bool) -> list[str]:
    names = [str(e) for e in doc.get("environments", [])]
    n = len(names)
    facts = doc.get("facts") if isinstance(doc.get("facts"), dict) else {}
    assert isinstance(facts, dict)

    def fact(i: int, key: str) -> Any:
        f = facts.get(str(i))
        return f.get(key) if isinstance(f, dict) else None

    def label(i: int) -> str:
        typed = f" `{names[i]}`" if keep_paths else ""
        return f"build {i + 1} of {n}{typed}: torch {fact(i, 'torch') or '?'} (git {fact(i, 'git_version') or '?'})"

    res = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    assert isinstance(res, dict)
    steps = [s for s in doc.get("steps", []) if isinstance(s, dict)]
    lines = ["#### Bisect", ""]
    status, lg, fb = res.get("status"), res.get("last_good"), res.get("first_bad")
    known = isinstance(lg, int) and isinstance(fb, int) and 0 <= lg < n and 0 <= fb < n
    if status == "found" and known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines += [f"- first bad: {label(fb)}", f"- last good: {label(lg)}"]
        g, b = fact(lg, "git_version"), fact(fb, "git_version")
        if g and b and g != b:
            lines.append(f"- changes between them: {COMPARE_URL.format(good=g, bad=b)}")
        elif g and b:
            lines.append("- both report the same git revision: the change is outside torch's source")
    elif known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines.append(f"- not settled ({status}): the first bad build is after {label(lg)} and at or before {label(fb)}")
    minutes = float(doc.get("elapsed_s") or 0.0) / 60.0
    lines += [
        f"- {len(steps)} paired runs over {n} builds in {minutes:.1f} min; each step measures build 1 (good) "
        "against one other, interleaved",
        "",
        "| step | build | speedup (good/this) | 95% CI | call | step is |",
        "|---|---|---|---|---|---|",
    ]
    for k, s in enumerate(steps, 1):
        for f in s.get("figures", []):
            if not isinstance(f, dict):
                continue
            lo, hi, sp = f.get("low"), f.get("high"), f.get("speedup")
            ci = f"{lo:.3f}-{hi:.3f}x" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "n/a"
            raw = s.get("index")
            idx = raw if isinstance(raw, int) else -1
            lines.append(
                f"| {k} | {idx + 1} | {_x(sp if isinstance(sp, (int, float)) else None)} | {ci} | "
                f"{_md(f.get('change'))} | {_md(s.get('verdict'))} |"
            )
    return [*lines, ""]


def _md(v: Any, limit: int = 200) -> str:
    """Record text in a table cell or a line: no pipes, backquotes or newlines to break it; bounded."""
    return re.sub(r"[|\r\n`]", " ", str(v))[:limit]


def _versions(record: dict[str, Any], bisect: dict[str, Any] | None) -> list[str]:
    envs = [e for e in record.get("environments") or [] if isinstance(e, dict)]
    hyg = record.get("hygiene") if isinstance(record.get("hygiene"), dict) else {}
    assert isinstance(hyg, dict)
    py = None
    if bisect and isinstance(bisect.get("facts"), dict):
        py = next((f.get("python") for f in bisect["facts"].values() if isinstance(f, dict) and f.get("python")), None)
    revs: dict[str, Any] = {}
    if bisect and isinstance(bisect.get("facts"), dict):
        # The bisect probed both builds of each step: build 1 is the baseline, the step's build the candidate.
        step = next(
            (s for s in bisect.get("steps", []) if isinstance(s, dict) and s.get("run_id") == record.get("id")), {}
        )
        for role, key in (("good", "0"), ("bad", str(step.get("index")))):
            f = bisect["facts"].get(key)
            revs[role] = f.get("git_version") if isinstance(f, dict) else None
    py = py or next((e["python_version"] for e in envs if isinstance(e.get("python_version"), str)), None)
    lines = []
    for e in envs:
        role = {"baseline": "good", "candidate": "bad"}.get(str(e.get("label")), str(e.get("label")))
        rev = f" (git {revs[role]})" if revs.get(role) else ""
        lines.append(f"PyTorch version ({role}): {e.get('torch_version')}{rev}")
    first = envs[0] if envs else {}
    lines += [
        f"OS: {first.get('platform') or 'not recorded'}",
        f"Python version: {py or 'not recorded'}",
        f"Device: {record.get('device')} ({first.get('device_name') or 'unknown'})",
        f"Machine: {first.get('machine') or 'not recorded'}",
        f"CPU threads in the measuring processes: {first.get('threads') or 'not recorded'}",
    ]
    if isinstance(first.get("memory_limit"), (int, float)):
        lines.append(f"Memory the device may use: {first['memory_limit'] / 2**30:.1f} GiB")
    for when in ("before", "after"):
        h = hyg.get(when)
        if isinstance(h, dict) and h:
            shown = ", ".join(f"{k}={v}" for k, v in h.items() if v is not None) or "nothing recorded"
            lines.append(f"Conditions {when} the run: {shown}")
    return [_md(line) for line in lines]


def _scrub(text: str) -> str:
    """The home folder and the user name, wherever they still appear, become ~ and <user>."""
    home = str(Path.home())
    if len(home) > 1:
        text = text.replace(home, "~")
    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container): nothing to hide
        user = ""
    if len(user) >= 3:
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(user)}(?![A-Za-z0-9_])", "<user>", text)
    return text


def build_upstream(
    analysis: Analysis,
    record: RunRecord,
    bisect: dict[str, Any] | None = None,
    keep_paths: bool = False,
) -> Upstream:
    """The issue body and the repro script for the record's worst regression (its slowest workload, or the
    one the bisect followed)."""
    rec = record.to_json()
    slower = sorted(
        (c for c in analysis.workloads if c.change == "slower" and c.speedup),
        key=lambda c: c.speedup.estimate if c.speedup else 1.0,
    )
    if not slower:
        raise UserError(
            f"run {record.id}: no workload was called slower ({analysis.verdict}); --upstream reports a regression"
        )
    targets = [str(t) for t in (bisect or {}).get("targets", [])]
    # An op replayed from a phase speaks through its phase's attribution: the phase or a layer leads where one slowed.
    main = next((c for c in slower if c.name in targets), next((c for c in slower if c.part != "op"), slower[0]))
    assert main.speedup is not None
    repro = repro_for(rec, main.name)
    script = script_text(repro) if repro else None
    # A whole-model phase: the ops that moved it, or the phase itself (report/op_repro.py).
    device = str(rec.get("device")) if rec.get("device") in ("mps", "cuda", "cpu") else "cpu"
    phased = phase_repro(analysis, rec, main.name, device)
    if phased is not None:
        repro, script = Repro(phased.what, "", device), phased.script
    good, bad = analysis.baseline_torch, analysis.candidate_torch
    slowdown = 1.0 / main.speedup.estimate if main.speedup.estimate > 0 else math.inf
    # Two environments of one version (a setting, a library, a build flag differs): "slower in torch 2.11
    # than 2.11" reads as a typo, so the builds are named as what they are.
    if good == bad:
        builds = f"in one torch {bad} environment than another"
        takes = f"in the bad environment as in the good one, both torch {_md(bad)},"
    else:
        builds = f"in torch {bad} than {good}"
        takes = f"with torch {_md(bad)} as with torch {_md(good)}"
    title = f"[{analysis.device.upper()}] {main.name} {slowdown:.2f}x slower {builds}"
    lines = [
        f"<!-- Suggested title: {_md(title)} -->",
        "",
        "### 🐛 Describe the bug",
        "",
        f"`{_md(main.name)}` takes {slowdown:.2f}x as long {takes} on "
        f"{_md(analysis.machine)} ({analysis.device}): speedup {_x(main.speedup.estimate)} (good time / bad time), "
        f"95% CI {_ci(main)}.",
        "",
        "| workload | time, good build | time, bad build (good / speedup) | speedup | 95% CI | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for c in slower[:10]:
        lines.append(
            # Derived, as the report's column: the bad build's own median could read faster beside "slower".
            f"| `{_md(c.name)}` | {_t(c.baseline_s)} | {_t(c.candidate_s)} | "
            f"{_x(c.speedup.estimate if c.speedup else None)} | {_ci(c)} | {len(c.ratios)} |"
        )
    if len(slower) > 10:
        lines.append(f"| ... {len(slower) - 10} more | | | | | |")
    lines += [
        "",
        f"Measured with mpsup (run {_md(record.id)}): {analysis.method}. Each build ran in its own worker "
        "processes, interleaved round by round.",
        "",
    ]
    if bisect:
        lines += _bisect_section(bisect, keep_paths)
    lines += [*(phased.markdown if phased else []), "#### Repro", ""]
    if script and repro:
        lines += [
            f"Times {_md(repro.what, 2000)}. Run it with each build's interpreter; it prints the median time per call "
            "and its spread.",
            "",
            "```python",
            script.rstrip("\n"),
            "```",
            "",
        ]
    else:
        w: dict[str, Any] = next((w for w in rec.get("workloads", []) if w.get("name") == main.name), {})
        params = {k: v for k, v in w.items() if k not in ("envs", "rounds", "ratios", "source", "tags")}
        lines += [
            f"No standalone script for a `{_md(w.get('kind'))}` workload; what the record holds of it:",
            "",
            "```json",
            json.dumps(params, indent=1, default=str)[:4000].replace("```", "'''"),
            "```",
            "",
        ]
    lines += ["### Versions", "", "```", *_versions(rec, bisect), "```", ""]
    text = "\n".join(lines)
    if not keep_paths:
        text = _scrub(text)
        script = _scrub(script) if script else None
    return Upstream(markdown=text, script=script, workload=main.name)
