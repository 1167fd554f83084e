"""`report --upstream` for a whole-model phase: a script that times what moved.

Where the phase's attribution names an op holding at least half of its change, the script times the top
mover(s) with the census's exact call (shapes, strides, dtypes, the non-tensor arguments), in PyTorch's own
idiom: `torch.utils.benchmark.Timer` with the device synchronised in the statement, `blocked_autorange`, and
a `Compare` table of the saved measurements of each build. Where none does, or the change is spread over the op
kinds alike (attribution.spread_of: one kernel would be the wrong lead), it times the phase itself with the
measured environment's transformers or diffusers, random weights from the model's config.json given when it
runs, and says why; where the record cannot rebuild the phase, the top op's calls.
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
from mpsup.report.repro import PICK_DEVICE, torch_dtype
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


# make()'s element count, pasted into this module's script and numerics_repro's: each script stands alone.
NUMEL = '''def numel(shape, stride):
    """How many elements a tensor of this shape spans in storage: all of them, or as far as its strides reach."""
    if stride is None:
        n = 1
        for d in shape:
            n *= d
        return n
    return 0 if 0 in shape else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
'''


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


{numel}

def make(shape, stride, dtype, where, span):
    """A fresh tensor of this shape, layout and dtype: random floats; integers and masks in the model's range."""
    n = numel(shape, stride)
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


# A count from the record that becomes code: a positive int no larger than this, else no script.
_MAX_COUNT = 1 << 20
TEXT_TOKENS = 77  # the prompt embedding's length a UNet step sees, as the measuring worker makes it


def _count(v: Any) -> int | None:
    return v if type(v) is int and 0 < v <= _MAX_COUNT else None


def _phase_info(w: dict[str, Any], key: str) -> Any:
    """What the measuring worker said of the phase it built (a latent's shape, the VAE's factor), from either side."""
    for env in (w.get("envs") or {}).values():
        info = env.get("phase") if isinstance(env, dict) else None
        if isinstance(info, dict) and info.get(key) is not None:
            return info[key]
    return None


def _dims(text: Any) -> list[int] | None:
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,7}(x[0-9]{1,7}){1,5}", text):
        return None
    dims = [int(d) for d in text.split("x")]
    return dims if all(_count(d) for d in dims) else None


def _phase_builder(w: dict[str, Any]) -> tuple[str, str] | None:
    """The phase itself as the measured environment's library builds it from the model's config.json (read when
    the script runs), in the phase's dtype, as the measuring worker calls it; or None."""
    config = w.get("config")
    if not isinstance(config, dict):
        return None
    dtype = torch_dtype(str(w.get("dtype") or "fp32"))
    phase = w.get("phase")
    if w.get("library") == "transformers" and phase in ("prefill", "decode", "forward"):
        return _transformers_builder(w, str(phase), dtype)
    cls = config.get("_class_name")
    if w.get("library") != "diffusers" or not isinstance(cls, str) or not _NAME.fullmatch(cls):
        return None
    head = [
        "    import diffusers",
        f"    model = diffusers.{cls}.from_config(load_config()).to(device=device, dtype=torch.{dtype}).eval()"
        "  # random weights",
        f"    def rand(*shape):\n        return torch.randn(shape).to(device=device, dtype=torch.{dtype})",
    ]
    if phase == "step":
        latent = _dims(_phase_info(w, "latent"))
        cross = config.get("cross_attention_dim")
        context = cross if _count(cross) else 768  # what the worker takes where the config gives none or a list
        if latent is None:
            return None
        body = [*head, f"    sample = rand{tuple(latent)!r}", f"    context = rand(1, {TEXT_TOKENS}, {context})"]
        extra = ""
        if config.get("addition_embed_type") == "text_time":  # SDXL: pooled text and size conditioning
            time_dim = _count(config.get("addition_time_embed_dim")) or 256
            pooled = (_count(config.get("projection_class_embeddings_input_dim")) or 2816) - 6 * time_dim
            if pooled <= 0:
                return None
            body.append(f'    cond = {{"text_embeds": rand(1, {pooled}), "time_ids": rand(1, 6)}}')
            extra = ", added_cond_kwargs=cond"
        body += [
            "    timestep = torch.tensor([500], device=device)",
            f"    return lambda: model(sample, timestep, encoder_hidden_states=context{extra})",
        ]
        what = f"{cls} denoising step on a {'x'.join(map(str, latent))} latent ({dtype})"
    elif phase == "vae_decode":
        latent = _dims(_phase_info(w, "latent"))
        if latent is None:
            return None
        body = [*head, f"    z = rand{tuple(latent)!r}", "    return lambda: model.decode(z)"]
        what = f"{cls} decode of a {'x'.join(map(str, latent))} latent ({dtype})"
    elif phase == "vae_encode":
        image = _encode_image(w, config)
        if image is None:
            return None
        body = [*head, f"    image = rand{tuple(image)!r}", "    return lambda: model.encode(image)"]
        what = f"{cls} encode of a {'x'.join(map(str, image))} image ({dtype})"
    else:
        return None
    return what, "def build_0(device):\n" + "\n".join(body) + "\n"


def _transformers_builder(w: dict[str, Any], phase: str, dtype: str) -> tuple[str, str] | None:
    tokens = _count(w.get("tokens"))
    cache = _count(w.get("cache") or tokens)
    if tokens is None or cache is None:
        return None
    auto = "AutoModelForCausalLM" if w.get("causal") else "AutoModel"
    body = [
        "    import transformers",
        "    config = transformers.AutoConfig.for_model(**load_config())",
        f"    model = transformers.{auto}.from_config(config).to(device=device, dtype=torch.{dtype}).eval()"
        "  # random weights",
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
        what = f"one decode step on a {cache}-token cache ({dtype})"
    else:
        body += [
            f"    ids = torch.randint(0, vocab, (1, {tokens}), device=device)",
            "    return lambda: model(input_ids=ids)",
        ]
        what = f"a {tokens}-token {phase} ({dtype})"
    return what, "def build_0(device):\n" + "\n".join(body) + "\n"


def _encode_image(w: dict[str, Any], config: dict[str, Any]) -> list[int] | None:
    """The image a VAE's encode took: the latent's size times the VAE's factor (a video's frames as the worker
    counted them), the config's input channels (a patchified VAE's before patchifying)."""
    latent, factor = _dims(_phase_info(w, "latent")), _count(_phase_info(w, "factor"))
    if latent is None or factor is None or len(latent) not in (4, 5):
        return None
    channels = _count(config.get("in_channels")) or 3
    patch = _count(config.get("patch_size"))
    if patch and patch > 1 and channels % (patch * patch) == 0:
        channels //= patch * patch
    frames = [_count(_phase_info(w, "frames")) or 1] if len(latent) == 5 else []
    image = [1, channels, *frames, latent[-2] * factor, latent[-1] * factor]
    return image if all(_count(d) for d in image) else None


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
    """The repro for a regressed whole-model phase: its top mover(s) where one op carries half of the change; the
    phase itself where none does, or where the change is spread over the op kinds alike; the top op's calls where
    the phase cannot be rebuilt. None for what is no phase, a compiled one, or a record that allows nothing."""
    w = next((x for x in record.get("workloads", []) if x.get("name") == workload), None)
    # A compiled phase runs kernels the eager ops and the eager phase do not: neither would repro it.
    if w is None or w.get("part") != "phase" or w.get("compile"):
        return None
    attr = next((a for a in analysis.attribution.values() if a.workload == workload), None)
    table = _table(attr) if attr is not None else []
    classes = op_classes(attr) if attr is not None else []
    spread = attr.spread if attr is not None else None
    if attr is not None and attr.top_explains_half and spread is None:
        movers = _movers(attr)
        if (ops := _ops_repro(movers, attr.phase, device, table)) is not None:
            return ops
    phase = _phase_builder(w)
    if phase is None:
        # Nothing rebuilds the phase from its config: its top op, as the model calls it, is still a repro.
        return _ops_repro(_movers(attr), attr.phase, device, table) if attr is not None and classes else None
    said, builder = phase
    share = _pct(classes[0].share_of_change) if classes else "n/a"
    if spread is not None:
        band = f"({spread.low:.2f}-{spread.high:.2f}x)"
        why = (
            f"the change is spread over {spread.op_kinds} op kinds alike {band}, something {spread.sharers}, "
            "not one kernel"
            if spread.alike
            else f"the change is spread over {spread.op_kinds} op kinds, none apart {band}, more likely something "
            f"{spread.sharers} than one kernel"
        )
    elif attr is not None:
        why = f"no op explains half of the change (the largest share is {share})"
    else:
        why = "the run replayed no ops (--no-ops)"
    what = (
        f"the whole {w.get('phase')} phase ({said}, random weights from the model's config.json, "
        f"given with --config): {why}"
    )
    lib = str(w.get("library"))
    script = _fill(what, device, f" and {lib}", builder + f"\n\nCASES = [({str(w.get('phase'))!r}, build_0)]\n")
    return PhaseRepro(what, script, table)


def _movers(attr: PhaseAttribution) -> list[OpShare]:
    """The top op's calls (a kernel change moves all its shapes), then other ops' largest with a fifth or more."""
    classes = op_classes(attr)
    if not classes:
        return []
    others = [c.calls[0] for c in classes[1:] if (c.share_of_change or 0) >= MOVER_LEAST]
    return [*classes[0].calls, *others][:MAX_MOVERS]


def _ops_repro(movers: list[OpShare], phase: str, device: str, table: list[str]) -> PhaseRepro | None:
    """A script timing these census calls, or None where none can become code."""
    if not movers:
        return None
    try:
        builders = _op_builders(movers)
    except (NotCode, TypeError, ValueError):
        return None
    names = "; ".join(_label(o) for o in movers)
    # A name from the fixed list: `what` goes into the script and the body's sentence as it is.
    named = phase if phase in PHASES else "phase's"
    what = f"the op(s) that carry the {named} change, as the model calls them: {names}"
    return PhaseRepro(what, _fill(what, device, "", builders), table)


def _fill(what: str, device: str, libs: str, builders: str) -> str:
    doc_what = re.sub(r'["\\]', "'", what).replace("\n", " ")
    head = COMMON.format(
        libs=libs,
        what=doc_what,
        device=device,
        what_literal=repr(what),
        needs_config="load_config()" in builders,
        pick_device=PICK_DEVICE,
        numel=NUMEL,
    )
    return head + "\n" + builders + MAIN
