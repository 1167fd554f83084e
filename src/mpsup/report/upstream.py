"""`mpsup report --upstream`: a regression as PyTorch's bug template asks for it.

What regressed and by how much (paired intervals, both builds, the machine), the facts `collect_env` would
print (from the record's environments and conditions, and a bisect's probes), the bisect's answer when a
finished bisect measured this record, and a standalone repro script: plain Python, torch only, that times
the regressed workload's op with the record's shapes and dtype under whichever torch runs it.

Every piece of record text in the body (names, device, versions, ids, a bisect's facts) goes through one
helper, `_Fields`: without --with-paths it replaces the home folder and the user name, then `console.md_code`
makes it inert Markdown. Nothing private by default: no interpreter or model paths, no config identity, no
environment names as typed (they are often paths). The repro script holds no record text at all (numbers,
validated dtypes, op and phase names from fixed lists), so it is never rewritten."""

from __future__ import annotations

import getpass
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from mpsup.console import md_code, md_comment, md_fence, one_line
from mpsup.errors import UserError
from mpsup.model.phases import PHASES
from mpsup.report.analysis import Analysis, WorkloadChange
from mpsup.report.op_repro import phase_repro
from mpsup.runs.schema import MAX_CENSUS_DIM, MAX_CENSUS_ELEMENTS, RunRecord

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
    return dims if all(0 <= d <= MAX_CENSUS_DIM for d in dims) else None


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(type(d) is int and 0 <= d <= MAX_CENSUS_DIM for d in v):
        return list(v) if math.prod(v) <= MAX_CENSUS_ELEMENTS else None
    return None


def _pos(params: dict[str, Any], *keys: str) -> list[int] | None:
    vals = [params.get(k) for k in keys]
    out = [v for v in vals if type(v) is int and 0 < v <= MAX_CENSUS_DIM]
    return out if len(out) == len(keys) else None


def _torch_dtype(name: str) -> str:
    """A torch dtype attribute name, never anything else: the script is code, the record is input."""
    name = DTYPES.get(name, name)
    return name if re.fullmatch(r"(b?float(16|32|64)|float8_e4m3fn|float8_e5m2|u?int(8|16|32|64))", name) else "float32"


def _dims(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def _fits(*shapes: list[int]) -> bool:
    """Every tensor the repro makes (operands and result) within what a storage size can count."""
    return all(math.prod(s) <= MAX_CENSUS_ELEMENTS for s in shapes)


def workload_repro(w: dict[str, Any], device: str) -> Repro | None:
    """A suite or model-layer workload, rebuilt from its params as the worker builds it (worker/ops.py).
    What it says it times is made of numbers and names from fixed lists: the workload's own name is the
    record's text, which the body shows and the script never holds."""
    kind, dtype = str(w.get("kind")), _torch_dtype(str(w.get("dtype", "fp32")))
    if kind == "linear" and (dims := _pos(w, "tokens", "in_features", "out_features")):
        t, k, n = dims
        if _fits([t, k], [n, k], [t, n]):
            return Repro(
                f"torch.nn.functional.linear, input {t}x{k}, weight {n}x{k}, {dtype}, no bias",
                f"    x = torch.randn({t}, {k}, device=device).to(torch.{dtype})\n"
                f"    w = torch.randn({n}, {k}, device=device).to(torch.{dtype})\n"
                "    return lambda: torch.nn.functional.linear(x, w)",
                device,
            )
    if kind == "matmul" and (dims := _pos(w, "n")):
        (n,) = dims
        if _fits([n, n]):
            return Repro(
                f"torch.mm of two {n}x{n} {dtype} matrices",
                f"    a = torch.randn({n}, {n}, device=device).to(torch.{dtype})\n"
                f"    b = torch.randn({n}, {n}, device=device).to(torch.{dtype})\n"
                "    return lambda: torch.mm(a, b)",
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
            f"    x = torch.randn({shape}, device=device).to(torch.{dtype})\n"
            f"    return lambda: torch.nn.functional.pad(x, {pad})",
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


def _result(a: list[int], b: list[int]) -> list[int]:
    return [*a[:-1], b[-1]]


def _census_matmuls(census: dict[str, Any]) -> tuple[list[tuple[float, str, list[int], list[int], str, int]], int]:
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
    found, _ = _census_matmuls(census)
    if not found:
        return None
    _, op, a, b, dtype, count = max(found, key=lambda f: f[0])
    dtype = _torch_dtype(dtype)
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


def _phase_census(w: dict[str, Any]) -> dict[str, Any] | None:
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
        census = _phase_census(w)
        return census_repro(str(w.get("phase")), census, device) if census is not None else None
    return workload_repro(w, device)


def script_text(repro: Repro) -> str:
    # WHAT goes in as a Python literal (repr); the docstring copy loses what could end it early.
    doc_what = re.sub(r'["\\]', "'", repro.what).replace("\n", " ")
    return SCRIPT.format(what=doc_what, device=repro.device, build=repro.build).replace(
        f"WHAT = {doc_what!r}", f"WHAT = {repro.what!r}"
    )


# --- the issue body ---------------------------------------------------------------------------------------

# A git revision reaches the compare URL and the text as it is: hex only, else it is left out.
_REVISION = re.compile(r"[0-9a-f]{7,40}")
# Workload parameters shown where there is no script. Text values are kept only under these keys (a config's
# class names); numbers and flags everywhere. Without --with-paths no path, file name, Hub id or other
# identity of the user's copy of the model is shown: a key that names one is left out whatever its value.
_TEXT_KEYS = frozenset(
    {"name", "kind", "part", "dtype", "phase", "library", "component", "weights", "role", "status", "reason"}
)
_CONFIG_TEXT_KEYS = frozenset({"_class_name", "model_type", "architectures", "torch_dtype", "hidden_act", "act_fn"})
_IDENTITY_KEY = re.compile(r"path|dir|file|url|repo|name_or|commit|^source$|^config_name$", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
# An absolute path inside free text (a reason: "cannot open /Volumes/ssd/models/x: ..."), as its own word.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:~|[A-Za-z]:)?[/\\][^\s'\"),;:]+")
_FREE_TEXT_KEYS = frozenset({"reason", "status"})


def _config_text(key: str, value: Any) -> bool:
    """A config's text shown: class and type names (`_class_name`, `down_block_types`), identifiers only."""
    if key not in _CONFIG_TEXT_KEYS and not key.endswith(("_type", "_types")):
        return False
    items = value if isinstance(value, list) else [value]
    return all(not isinstance(x, str) or _IDENTIFIER.fullmatch(x) for x in items)


def revision(v: Any) -> str | None:
    """A git revision as hex, else None: it becomes part of a URL and of the text."""
    return v.lower() if isinstance(v, str) and _REVISION.fullmatch(v.lower()) else None


def _user_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): nothing to hide
        return ""


def scrub(text: str, home: str | None = None, user: str | None = None) -> str:
    """The home folder and the user name, wherever they appear in record text, become ~ and <user>: in any
    case (a Mac's disk ignores it), URL-encoded (`%2FUsers%2F...`, decoded first) and beside digits or
    punctuation (`<user>_ssd`, `<user>2`). A name inside a longer run of letters is left, since matching
    there would rewrite words and op names ("ann" in "channels")."""
    home = str(Path.home()) if home is None else home
    user = _user_name() if user is None else user
    for _ in range(3):  # %252F is %2F encoded once more
        if "%" not in text:
            break
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    if len(home.rstrip("/")) > 1:
        text = re.sub(re.escape(home.rstrip("/")), "~", text, flags=re.IGNORECASE)
    if len(user) >= 3:
        text = re.sub(rf"(?<![^\W\d_]){re.escape(user)}(?![^\W\d_])", "<user>", text, flags=re.IGNORECASE)
    return text


@dataclass(frozen=True)
class _Fields:
    """The one way record text enters the body: scrubbed unless --with-paths, then inert Markdown."""

    keep_paths: bool

    def plain(self, v: Any, limit: int = 200) -> str:
        """For inside a fenced block, where nothing is live: one line, scrubbed."""
        text = one_line(v, limit)
        return text if self.keep_paths else one_line(scrub(text), limit)

    def __call__(self, v: Any, *, table: bool = False, limit: int = 200) -> str:
        return md_code(self.plain(v, limit), table=table, limit=limit)

    def params(self, w: dict[str, Any]) -> dict[str, Any]:
        """A workload's parameters for the body: everything with --with-paths; else numbers and flags, class
        names, and no key that names a path or the model's identity (a config's `_name_or_path`)."""
        params = {k: v for k, v in w.items() if k not in ("envs", "rounds", "ratios", "source", "tags")}
        if self.keep_paths:
            return params
        out: dict[str, Any] = {}
        for k, v in params.items():
            if k == "config" and isinstance(v, dict):
                # A config's private keys (`_name_or_path`, `_commit_hash`) are its copy's identity.
                shown = {ck: cv for ck, cv in v.items() if ck == "_class_name" or not ck.startswith("_")}
                out[k] = {
                    ck: kept
                    for ck, cv in shown.items()
                    if not _IDENTITY_KEY.search(ck) and (kept := self._value(cv, _config_text(ck, cv))) is not None
                }
            elif not _IDENTITY_KEY.search(k) and (kept := self._value(v, k in _TEXT_KEYS)) is not None:
                out[k] = _ABSOLUTE_PATH.sub("<path>", kept) if k in _FREE_TEXT_KEYS and isinstance(kept, str) else kept
        return out

    def _value(self, v: Any, text_ok: bool) -> Any:
        """A number or flag as it is; text only where `text_ok` (scrubbed); a list if all of it is kept."""
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, str):
            return scrub(v) if text_ok else None
        if isinstance(v, list) and len(v) <= 64:
            kept = [self._value(x, text_ok) for x in v]
            return kept if all(x is not None or y is None for x, y in zip(kept, v, strict=True)) else None
        return None


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


def _bisect_section(doc: dict[str, Any], f: _Fields) -> list[str]:
    names = [str(e) for e in doc.get("environments", [])]
    n = len(names)
    facts = doc.get("facts") if isinstance(doc.get("facts"), dict) else {}
    assert isinstance(facts, dict)

    def fact(i: int, key: str) -> Any:
        got = facts.get(str(i))
        return got.get(key) if isinstance(got, dict) else None

    def label(i: int) -> str:
        typed = f" {f(names[i])}" if f.keep_paths else ""
        torch, rev = fact(i, "torch"), revision(fact(i, "git_version"))
        return f"build {i + 1} of {n}{typed}: torch {f(torch) if torch else '?'} (git {rev or '?'})"

    res = doc.get("result") if isinstance(doc.get("result"), dict) else {}
    assert isinstance(res, dict)
    steps = [s for s in doc.get("steps", []) if isinstance(s, dict)]
    lines = ["#### Bisect", ""]
    status, lg, fb = res.get("status"), res.get("last_good"), res.get("first_bad")
    known = isinstance(lg, int) and isinstance(fb, int) and 0 <= lg < n and 0 <= fb < n
    if status == "found" and known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines += [f"- first bad: {label(fb)}", f"- last good: {label(lg)}"]
        g, b = revision(fact(lg, "git_version")), revision(fact(fb, "git_version"))
        if g and b and g != b:
            lines.append(f"- changes between them: {COMPARE_URL.format(good=g, bad=b)}")
        elif g and b:
            lines.append("- both report the same git revision: the change is outside torch's source")
    elif known:
        assert isinstance(lg, int) and isinstance(fb, int)
        lines.append(
            f"- not settled ({f(status)}): the first bad build is after {label(lg)} and at or before {label(fb)}"
        )
    minutes = float(doc.get("elapsed_s") or 0.0) / 60.0
    lines += [
        f"- {len(steps)} paired runs over {n} builds in {minutes:.1f} min; each step measures build 1 (good) "
        "against one other, interleaved",
        "",
        "| step | build | speedup (good/this) | 95% CI | call | step is |",
        "|---|---|---|---|---|---|",
    ]
    for k, s in enumerate(steps, 1):
        figures = s.get("figures")
        for fig in figures if isinstance(figures, list) else []:
            if not isinstance(fig, dict):
                continue
            lo, hi, sp = fig.get("low"), fig.get("high"), fig.get("speedup")
            ci = f"{lo:.3f}-{hi:.3f}x" if _finite(lo) and _finite(hi) else "n/a"
            raw = s.get("index")
            idx = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 10**6 else -1
            lines.append(
                f"| {k} | {idx + 1 if idx >= 0 else '?'} | {_x(sp if _finite(sp) else None)} | {ci} | "
                f"{f(fig.get('change'), table=True)} | {f(s.get('verdict'), table=True)} |"
            )
    return [*lines, ""]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e300


def _versions(record: dict[str, Any], bisect: dict[str, Any] | None, f: _Fields) -> list[str]:
    """What collect_env would print, one line each, for inside a fenced block (where nothing is live)."""
    envs = [e for e in record.get("environments") or [] if isinstance(e, dict)]
    hyg = record.get("hygiene") if isinstance(record.get("hygiene"), dict) else {}
    assert isinstance(hyg, dict)
    py = None
    if bisect and isinstance(bisect.get("facts"), dict):
        py = next((g.get("python") for g in bisect["facts"].values() if isinstance(g, dict) and g.get("python")), None)
    revs: dict[str, Any] = {}
    if bisect and isinstance(bisect.get("facts"), dict):
        # The bisect probed both builds of each step: build 1 is the baseline, the step's build the candidate.
        step = next(
            (s for s in bisect.get("steps", []) if isinstance(s, dict) and s.get("run_id") == record.get("id")), {}
        )
        for role, key in (("good", "0"), ("bad", str(step.get("index")))):
            got = bisect["facts"].get(key)
            revs[role] = revision(got.get("git_version")) if isinstance(got, dict) else None
    py = py or next((e["python_version"] for e in envs if isinstance(e.get("python_version"), str)), None)
    lines = []
    for e in envs:
        role = {"baseline": "good", "candidate": "bad"}.get(str(e.get("label")), f.plain(e.get("label"), 40))
        rev = f" (git {revs[role]})" if revs.get(role) else ""
        lines.append(f"PyTorch version ({role}): {f.plain(e.get('torch_version'))}{rev}")
    first = envs[0] if envs else {}
    lines += [
        f"OS: {f.plain(first.get('platform') or 'not recorded')}",
        f"Python version: {f.plain(py or 'not recorded')}",
        f"Device: {f.plain(record.get('device'))} ({f.plain(first.get('device_name') or 'unknown')})",
        f"Machine: {f.plain(first.get('machine') or 'not recorded')}",
        f"CPU threads in the measuring processes: {f.plain(first.get('threads') or 'not recorded')}",
    ]
    if _finite(first.get("memory_limit")):
        lines.append(f"Memory the device may use: {first['memory_limit'] / 2**30:.1f} GiB")
    for when in ("before", "after"):
        h = hyg.get(when)
        if isinstance(h, dict) and h:
            shown = ", ".join(f"{k}={v}" for k, v in h.items() if v is not None) or "nothing recorded"
            lines.append(f"Conditions {when} the run: {f.plain(shown, 1000)}")
    return lines


def build_upstream(
    analysis: Analysis,
    record: RunRecord,
    bisect: dict[str, Any] | None = None,
    keep_paths: bool = False,
) -> Upstream:
    """The issue body and the repro script for the record's worst regression (its slowest workload, or the
    one the bisect followed)."""
    f = _Fields(keep_paths)
    rec = record.to_json()
    slower = sorted(
        (c for c in analysis.workloads if c.change == "slower" and c.speedup),
        key=lambda c: c.speedup.estimate if c.speedup else 1.0,
    )
    if not slower:
        raise UserError(
            f"run {record.id}: no workload was called slower ({analysis.verdict}); --upstream reports a regression"
        )
    listed = (bisect or {}).get("targets")
    targets = [str(t) for t in listed] if isinstance(listed, list) else []
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
    good, bad = f(analysis.baseline_torch), f(analysis.candidate_torch)
    slowdown = 1.0 / main.speedup.estimate if main.speedup.estimate > 0 else math.inf
    # Two environments of one version (a setting, a library, a build flag differs): "slower in torch 2.11
    # than 2.11" reads as a typo, so the builds are named as what they are.
    if analysis.baseline_torch == analysis.candidate_torch:
        builds = f"in one torch {bad} environment than another"
        takes = f"in the bad environment as in the good one, both torch {bad},"
    else:
        builds = f"in torch {bad} than {good}"
        takes = f"with torch {bad} as with torch {good}"
    device = f(analysis.device)
    title = f"[{f(analysis.device.upper())}] {f(main.name)} {slowdown:.2f}x slower {builds}"
    lines = [
        f"<!-- Suggested title: {md_comment(title)} -->",
        "",
        "### 🐛 Describe the bug",
        "",
        f"{f(main.name)} takes {slowdown:.2f}x as long {takes} on {f(analysis.machine)} ({device}): speedup "
        f"{_x(main.speedup.estimate)} (good time / bad time), 95% CI {_ci(main)}.",
        "",
        "| workload | time, good build | time, bad build (good / speedup) | speedup | 95% CI | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for c in slower[:10]:
        lines.append(
            # Derived, as the report's column: the bad build's own median could read faster beside "slower".
            f"| {f(c.name, table=True)} | {_t(c.baseline_s)} | {_t(c.candidate_s)} | "
            f"{_x(c.speedup.estimate if c.speedup else None)} | {_ci(c)} | {len(c.ratios)} |"
        )
    if len(slower) > 10:
        lines.append(f"| ... {len(slower) - 10} more | | | | | |")
    lines += [
        "",
        f"Measured with mpsup (run {f(record.id)}): {analysis.method}. Each build ran in its own worker "
        "processes, interleaved round by round.",
        "",
    ]
    if bisect:
        lines += _bisect_section(bisect, f)
    lines += [*(phased.markdown if phased else []), "#### Repro", ""]
    w: dict[str, Any] = next((w for w in rec.get("workloads", []) if w.get("name") == main.name), {})
    census = _phase_census(w) if w.get("part") == "phase" else None
    oversized = _census_matmuls(census)[1] if census is not None else 0
    left_out = (
        f" ({oversized} matmul(s) of its census left out: an operand or the result has more than "
        f"2^{MAX_CENSUS_ELEMENTS.bit_length() - 1} elements, which no storage holds)"
        if oversized
        else ""
    )
    if script and repro:
        lines += [
            f"For {f(main.name)}, it times {repro.what}{left_out}. Run it with each build's interpreter"
            + ("; pass your model's config.json with --config" if "load_config()" in script else "")
            + "; it prints the median time per call and its spread.",
            "",
            *md_fence(script.rstrip("\n"), "python"),
            "",
        ]
    else:
        lines += [
            f"No standalone script for a {f(w.get('kind'))} workload{left_out}; what the record holds of it:",
            "",
            *md_fence(json.dumps(f.params(w), indent=1, default=str)[:4000], "json"),
            "",
        ]
    lines += ["### Versions", "", *md_fence("\n".join(_versions(rec, bisect, f))), ""]
    return Upstream(markdown="\n".join(lines), script=script, workload=main.name)
