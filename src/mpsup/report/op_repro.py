"""`report --upstream` for a whole-model phase: a script that times what moved.

Where the phase's attribution names an op holding at least half of its change, the script times the top
mover(s) with the census's exact call (shapes, strides, dtypes, the non-tensor arguments), in PyTorch's own
idiom: `torch.utils.benchmark.Timer` with the device synchronised in the statement, `blocked_autorange`, and
a `Compare` table of the saved measurements of each build. Where none does, it times the phase itself with the
measured environment's transformers or diffusers, random weights from the record's config, and says why.
Either way it runs itself in several fresh processes and prints their spread: a difference smaller than one
process differs from the next is no evidence. No mpsup import; every value from the record is checked before
it becomes code (names against a strict pattern, numbers as numbers, text as a Python literal)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from mpsup.model.phases import PHASES
from mpsup.report.analysis import Analysis
from mpsup.report.attribution import OpShare, PhaseAttribution, op_classes
from mpsup.report.common import md
from mpsup.report.repro import PICK_DEVICE
from mpsup.units import fmt_interval

_OVERLOAD = re.compile(r"aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,40}")
MAX_MOVERS = 3
MAX_TENSORS = 64
MAX_DIMS = 8
MOVER_LEAST = 0.2  # besides the top one, ops with at least this share of the change are timed too


class NotCode(ValueError):
    """A record value that cannot become code (hostile or damaged)."""


@dataclass(frozen=True)
class PhaseRepro:
    what: str
    script: str
    markdown: list[str]  # the attribution table and what the script times, for the issue body


def _num(v: Any) -> str:
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int) and abs(v) < 2**63:
        return repr(v)
    if isinstance(v, float) and math.isfinite(v):
        return repr(v)
    raise NotCode(f"not a number: {v!r}"[:80])


class _Code:
    """A census call -> Python that rebuilds its tensors and calls the op."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.tensors = 0

    def tensor(self, doc: Any, ranges: list[Any]) -> str:
        if not isinstance(doc, dict):
            raise NotCode("tensor")
        shape = doc.get("shape")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            raise NotCode("shape")
        stride = doc.get("stride") or None
        if stride is not None and (not isinstance(stride, list) or len(stride) != len(shape)):
            raise NotCode("stride")
        dtype = doc.get("dtype")
        if not isinstance(dtype, str) or not _NAME.fullmatch(dtype):
            raise NotCode("dtype")
        low = high = None
        r = doc.get("range")
        if type(r) is int and 0 <= r < len(ranges) and isinstance(ranges[r], list) and len(ranges[r]) == 2:
            low, high = ranges[r]
        self.tensors += 1
        if self.tensors > MAX_TENSORS:
            raise NotCode("too many tensors")
        name = f"t{self.tensors}"
        dims = "(" + "".join(_num(int(d)) + ", " for d in shape) + ")"
        strides = "None" if stride is None else "(" + "".join(_num(int(s)) + ", " for s in stride) + ")"
        where = '"cpu"' if doc.get("cpu") else "device"
        span = "None" if low is None or high is None else f"({_num(float(low))}, {_num(float(high))})"
        self.lines.append(f"    {name} = make({dims}, {strides}, torch.{dtype}, {where}, {span})")
        return name

    def value(self, v: Any, ranges: list[Any]) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x, ranges) for x in v) + "]"
        if v is None or isinstance(v, (bool, int, float)):
            return "None" if v is None else _num(v)
        if isinstance(v, str):
            return repr(v[:200])
        if isinstance(v, dict):
            if "tensor" in v:
                return self.tensor(v["tensor"], ranges)
            if "float" in v:
                return {"inf": 'float("inf")', "-inf": 'float("-inf")'}.get(str(v["float"]), 'float("nan")')
            for key in ("dtype", "memory_format", "layout"):
                if key in v:
                    name = v[key]
                    if not isinstance(name, str) or not _NAME.fullmatch(name):
                        raise NotCode(key)
                    return f"torch.{name}"
            if "device" in v:
                return '"cpu"' if v["device"] == "cpu" else "device"
        raise NotCode("argument")

    def call(self, op_call: dict[str, Any]) -> str:
        overload = op_call.get("overload")
        if not isinstance(overload, str) or not _OVERLOAD.fullmatch(overload):
            raise NotCode("overload")
        got = op_call.get("ranges")
        ranges: list[Any] = got if isinstance(got, list) else []
        args = [self.value(a, ranges) for a in op_call.get("args") or []]
        kw = (op_call.get("kwargs") or {}).get("kwargs") or {}
        if not isinstance(kw, dict):
            raise NotCode("kwargs")
        for k, v in kw.items():
            if not isinstance(k, str) or not _NAME.fullmatch(k):
                raise NotCode("keyword")
            args.append(f"{k}={self.value(v, ranges)}")
        return f"torch.ops.{overload}({', '.join(args)})"


def _label(o: OpShare) -> str:
    text = f"{o.op} {o.shapes} ({o.dtypes})"
    return re.sub(r"[^\w ,.()x-]", "", text)[:120]


def _op_builders(ops: list[OpShare]) -> str:
    out = []
    for i, o in enumerate(ops):
        code = _Code()
        stmt = code.call(o.op_call)
        out.append(f"def build_{i}(device):\n" + "\n".join(code.lines) + f"\n    return lambda: {stmt}\n")
    table = ", ".join(f"({_label(o)!r}, build_{i})" for i, o in enumerate(ops))
    return "\n\n".join(out) + f"\n\nCASES = [{table}]\n"


COMMON = '''#!/usr/bin/env python3
"""Standalone repro (torch{libs} only; written by mpsup report --upstream).

Times: {what}
Run it under each build (it runs itself in --processes fresh processes and prints their spread), then
compare the two saved measurements in one table:
    python-of-the-good-build repro.py --save good.pt
    python-of-the-bad-build  repro.py --save bad.pt
    python repro.py --compare good.pt bad.pt
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import torch
from torch.utils import benchmark

DEFAULT_DEVICE = {device!r}
WHAT = {what_literal}
NEEDS_CONFIG = {needs_config!r}


{pick_device}

def sync(device):
    # Work on the GPU is asynchronous: the timed statement ends only once it is done.
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


CONFIG_PATH = None


def load_config():
    """The model's own config.json: the issue body carries none of it (it may name private paths)."""
    if not CONFIG_PATH:
        sys.exit("this repro builds the model from its config.json: pass --config PATH")
    with open(CONFIG_PATH) as f:
        return json.load(f)


def make(shape, stride, dtype, where, span):
    """A fresh tensor of this shape, layout and dtype: random floats; integers and masks in the model's range."""
    if stride is None:
        n = 1
        for d in shape:
            n *= d
    else:
        n = 0 if 0 in shape else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
    if dtype.is_floating_point:
        flat = torch.empty(n, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    elif dtype == torch.bool:
        share = 0.5 if span is None else sum(span) / 2
        flat = torch.rand(n) < share
    else:
        low, high = (0, 0) if span is None else (int(span[0]), int(span[1]))
        flat = torch.randint(low, high + 1, (n,), dtype=dtype)
    flat = flat.to(where)
    return flat.view(shape) if stride is None else flat.as_strided(shape, stride)

'''

MAIN = """

def measure(device, seconds, label):
    results = []
    with torch.inference_mode():
        for case, build in CASES:
            torch.manual_seed(0)
            fn = build(device)
            fn()
            sync(device)
            timer = benchmark.Timer(
                stmt="fn(); sync(device)",
                globals={"fn": fn, "sync": sync, "device": device},
                label=WHAT[:80],
                sub_label=case,
                description=label,
                # The model's own thread count (the Timer's default is one thread).
                num_threads=torch.get_num_threads(),
            )
            results.append(timer.blocked_autorange(min_run_time=seconds))
    return results


def main():
    parser = argparse.ArgumentParser(description="Times " + WHAT)
    parser.add_argument("--device", default=DEFAULT_DEVICE, help="mps, cuda or cpu (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=1.0, help="Timer run time per case (default: %(default)s)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes (default: %(default)s)")
    parser.add_argument("--save", help="write this build's measurements here (torch.save), for --compare")
    parser.add_argument("--label", help="this build's column in the Compare table (default: the --save name)")
    parser.add_argument("--compare", nargs="+", help="saved measurements of each build: one Compare table")
    parser.add_argument("--config", help="the model's config.json (a phase is built from it, random weights)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if NEEDS_CONFIG and not args.config:
        parser.error("this repro builds the model from its config.json: pass --config PATH")
    global CONFIG_PATH
    CONFIG_PATH = args.config
    if args.compare:
        loaded = [m for path in args.compare for m in torch.load(path, weights_only=False)]
        benchmark.Compare(loaded).print()
        return
    device = pick_device(args.device)
    label = args.label or (os.path.splitext(os.path.basename(args.save))[0] if args.save else "")
    label = label or "torch " + torch.__version__
    if args.child:
        print(json.dumps([m.median for m in measure(device, args.seconds, label)]))
        return
    rev = (getattr(torch.version, "git_version", None) or "unknown")[:12]
    print("torch %s (git %s) on %s, %d threads" % (torch.__version__, rev, device, torch.get_num_threads()))
    print("times " + WHAT)
    runs = []
    for _ in range(max(1, args.processes)):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--device", args.device]
        cmd += ["--config", args.config] if args.config else []
        out = subprocess.run(cmd + ["--seconds", str(args.seconds)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = measure(device, args.seconds, label)
    benchmark.Compare(results).print()
    for i, (case, _) in enumerate(CASES):
        medians = sorted(r[i] for r in runs)
        mid = statistics.median(medians)
        print(
            "%s: median %.4f ms per call over %d fresh processes; they spread %.4f-%.4f ms (+-%.1f%%)"
            % (case, mid * 1e3, len(medians), medians[0] * 1e3, medians[-1] * 1e3,
               50.0 * (medians[-1] - medians[0]) / mid)
        )
    if args.save:
        torch.save(results, args.save)


if __name__ == "__main__":
    main()
"""


def _phase_builder(w: dict[str, Any]) -> tuple[str, str] | None:
    """The phase itself as the measured environment's library builds it from the record's config, or None."""
    config = w.get("config")
    if not isinstance(config, dict):
        return None
    phase = w.get("phase")
    if w.get("library") == "transformers" and phase in ("prefill", "decode", "forward"):
        tokens = w.get("tokens")
        cache = w.get("cache") or tokens
        if type(tokens) is not int or type(cache) is not int or not (0 < tokens <= 1 << 20 and 0 < cache <= 1 << 20):
            return None
        auto = "AutoModelForCausalLM" if w.get("causal") else "AutoModel"
        body = [
            "    import transformers",
            "    config = transformers.AutoConfig.for_model(**load_config())",
            f"    model = transformers.{auto}.from_config(config).to(device).eval()  # random weights",
            "    vocab = config.vocab_size",
        ]
        if phase == "decode":
            body += [
                f"    kv = model(input_ids=torch.randint(0, vocab, (1, {cache}), device=device), use_cache=True)"
                ".past_key_values",
                "    one = torch.randint(0, vocab, (1, 1), device=device)",
                "    def step():",
                "        model(input_ids=one, past_key_values=kv, use_cache=True)",
                "        kv.crop(-1)  # every call sees the same cache length",
                "    return step",
            ]
            what = f"one decode step on a {cache}-token cache"
        else:
            body += [
                f"    ids = torch.randint(0, vocab, (1, {tokens}), device=device)",
                "    return lambda: model(input_ids=ids)",
            ]
            what = f"a {tokens}-token {phase}"
        return what, "def build_0(device):\n" + "\n".join(body) + "\n"
    if w.get("library") == "diffusers" and phase in ("vae_decode", "vae_encode"):
        latent = str(next((e.get("phase") or {}).get("latent") for e in (w.get("envs") or {}).values()) or "")
        resolution = w.get("resolution")
        dims = [int(d) for d in latent.split("x") if d.isdigit()] if re.fullmatch(r"[0-9x]{1,60}", latent) else []
        cls = config.get("_class_name")
        if not dims or not isinstance(cls, str) or not _NAME.fullmatch(cls) or not isinstance(resolution, list):
            return None
        body = [
            "    import diffusers",
            f"    vae = diffusers.{cls}.from_config(load_config()).to(device).eval()  # random weights",
        ]
        if phase == "vae_decode":
            body += [f"    z = torch.randn({tuple(dims)!r}, device=device)", "    return lambda: vae.decode(z)"]
        else:
            return None
        return f"{cls} decode of a {latent} latent", "def build_0(device):\n" + "\n".join(body) + "\n"
    return None


def _table(attr: PhaseAttribution, rows: int = 8) -> list[str]:
    def t(s: float | None) -> str:
        if s is None:
            return "n/a"
        return f"{s * 1e3:+.3f} ms" if abs(s) >= 1e-3 else f"{s * 1e6:+.1f} us"

    lines = [
        f"Where the {md(attr.phase)} change went (each op timed alone in both builds, count x time per call): the ops "
        f"cover {_pct(attr.coverage_baseline)} of the phase in the good build and {_pct(attr.coverage_candidate)} "
        f"in the bad one, and explain {_pct(attr.explained_change)} of its change.",
        "",
        "| op | shapes | dtypes | calls | speedup (95% CI) | change a call | share of change |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in attr.ops[:rows]:
        sp = o.speedup
        speed = "n/a" if sp is None else fmt_interval(sp.estimate, sp.low, sp.high)
        calls = (
            ""
            if o.together
            else f"{o.count_baseline}"
            if o.count_baseline == o.count_candidate
            else f"{o.count_baseline} -> {o.count_candidate}"
        )
        lines.append(
            f"| {md(o.op)} | {md(o.shapes)} | {md(o.dtypes)} | {calls} | {speed} | {t(o.change_s)} "
            f"| {_pct(o.share_of_change)} |"
        )
    lines.append(f"| unexplained (launch gaps, fusion, sync, ops not replayed) | | | | | {t(attr.unexplained_s)} | |")
    return [*lines, ""]


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None and math.isfinite(x) else "n/a"


def phase_repro(analysis: Analysis, record: dict[str, Any], workload: str, device: str) -> PhaseRepro | None:
    """The repro for a regressed whole-model phase, or None (not a phase, or nothing usable in the record)."""
    w = next((x for x in record.get("workloads", []) if x.get("name") == workload), None)
    # A compiled phase runs kernels the eager ops and the eager phase do not: neither would repro it.
    if w is None or w.get("part") != "phase" or w.get("compile"):
        return None
    attr = next((a for a in analysis.attribution.values() if a.workload == workload), None)
    table = _table(attr) if attr is not None else []
    movers: list[OpShare] = []
    if attr is not None and attr.top_explains_half:
        # The top op's calls (a kernel change moves all its shapes), then other ops' largest with a fifth or more.
        classes = op_classes(attr)
        others = [c.calls[0] for c in classes[1:] if (c.share_of_change or 0) >= MOVER_LEAST]
        movers = [*classes[0].calls, *others][:MAX_MOVERS]
    if movers:
        try:
            builders = _op_builders(movers)
        except (NotCode, TypeError, ValueError):
            builders = ""
        if builders:
            names = "; ".join(_label(o) for o in movers)
            # A name from the fixed list: `what` goes into the script and the body's sentence as it is.
            named = attr.phase if attr is not None and attr.phase in PHASES else "phase's"
            what = f"the op(s) that carry the {named} change, as the model calls them: {names}"
            script = _fill(what, device, "", builders)
            return PhaseRepro(what, script, table)
    phase = _phase_builder(w)
    if phase is None:
        return None
    said, builder = phase
    top = op_classes(attr)[:1] if attr is not None else []
    share = _pct(top[0].share_of_change) if top else "n/a"
    why = (
        f"no op explains half of the change (the largest share is {share})"
        if attr is not None
        else "the run replayed no ops (--no-ops)"
    )
    what = (
        f"the whole {w.get('phase')} phase ({said}, random weights from the model's config.json, "
        f"given with --config): {why}"
    )
    lib = str(w.get("library"))
    script = _fill(what, device, f" and {lib}", builder + f"\n\nCASES = [({str(w.get('phase'))!r}, build_0)]\n")
    return PhaseRepro(what, script, table)


def _fill(what: str, device: str, libs: str, builders: str) -> str:
    doc_what = re.sub(r'["\\]', "'", what).replace("\n", " ")
    head = COMMON.format(
        libs=libs,
        what=doc_what,
        device=device,
        what_literal=repr(what),
        needs_config="load_config()" in builders,
        pick_device=PICK_DEVICE,
    )
    return head + "\n" + builders + MAIN
