"""`report --upstream` for answers that got worse: the issue leads with accuracy, as PyTorch's maintainers read it
(a table of each build's error against float64), and its script computes the op the report names, with the
census's exact call, in the build under test and in float64 on the CPU, from the same values, and prints the
build's error. Run under each build, the two printed errors are the table's two columns. No mpsup import; every
record value is checked before it becomes code (report/op_repro.py's rules)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpsup.report.analysis import Analysis
from mpsup.report.numerics import OutputCall, PhaseNumerics
from mpsup.report.op_repro import NUMEL, NotCode, _Code
from mpsup.report.phases import WORSE_ANSWERS
from mpsup.report.repro import PICK_DEVICE
from mpsup.report.training import group_calls, is_training, worst

# The worker's value stream (worker/values.py), which the script repeats: its tile and the tile's seed
# (tests/test_numerics_repro_stream.py holds them to the worker's).
TILE = 1 << 22
TILE_SEED = 0x7A11E


@dataclass(frozen=True)
class AccuracyIssue:
    workload: str  # the op's workload, or the phase's where no op is named
    title: str
    lines: list[str]  # the bug's description and the errors' table
    script: str | None


def _e(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}x"


def worst_phase(analysis: Analysis) -> PhaseNumerics | None:
    """The phase whose answers got worst (broken before less accurate, then by error ratio), or None."""
    worse = [pn for pn in analysis.model_numerics.values() if pn.verdict in WORSE_ANSWERS]
    if not worse:
        return None

    def key(pn: PhaseNumerics) -> tuple[int, float]:
        m = _main(pn)
        return (pn.verdict != "broken", -(m.ratio or 0.0) if m else 0.0)

    return sorted(worse, key=key)[0]


def _main(pn: PhaseNumerics) -> OutputCall | None:
    """The output a phase's figures are read from: a training step's worst group (its verdict's), else the main."""
    if is_training(pn.phase):
        w = worst(pn)
        return w.call if w else pn.numerics.main
    return pn.numerics.main


# The grad mode a census call ran in (worker/replay.py GRAD_MODES), as the script's context: a training step's
# backward runs without a graph but outside inference mode, where a kernel may take another path.
GRAD_CONTEXTS = {"forward": "torch.enable_grad", "backward": "torch.no_grad", "optimizer": "torch.no_grad"}


SCRIPT = '''#!/usr/bin/env python3
"""Standalone accuracy repro (torch only; written by mpsup report --upstream).

Computes: {what}
in this torch on --device and in float64 on the CPU from the same values, and prints this build's error
against float64 (root mean square and largest, relative to the float64 result's RMS). A float64 result computed
by the bad build would inherit its errors, so compute it once, with the good build, and let the bad build read it:
    python-of-the-good-build repro.py --truth truth.pt     # computes float64 here and saves it
    python-of-the-bad-build  repro.py --truth truth.pt     # reads it
"""
import os
import argparse
import math

import torch

DEFAULT_DEVICE = {device!r}
WHAT = {what_literal}
# The grad mode the model ran the call in (an inference phase's; a training step's part sets its own below): a
# kernel may take another path under another.
GRAD_MODE = torch.inference_mode


{pick_device}

TILE = {tile}
TILE_SEED = {tile_seed}
UNIT = []


def hashed(n, seed):
    """Values no torch version changes: a 32-bit integer hash of (seed, index), the index taken modulo TILE."""
    x = (torch.arange(n, dtype=torch.int64) % TILE + (seed * 0x9E3779B1) % (1 << 32)) & 0xFFFFFFFF
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def offset_of(seed):
    x = (seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 32)) % TILE


def stream(n, seed, low, high):
    """Integers hashed from (seed, index), and floats: one tile of hashed unit values, rotated by the seed's
    offset and scaled into [low, high) in float64, rounded to float32."""
    if not UNIT:
        UNIT.append((hashed(TILE, TILE_SEED) >> 8).to(torch.float64) * 2.0**-24)
    unit = UNIT[0][(offset_of(seed) + torch.arange(n)) % TILE]
    x = hashed(n, seed)
    return x, (low + unit * (high - low)).to(torch.float32), ((x >> 8).to(torch.float64) * 2.0**-24).to(torch.float32)


SEED = [0]
WIDE = [False]


{numel}

def make(shape, stride, dtype, where, span):
    """A tensor of this shape, layout and dtype from the stream: floats in the range the model's op saw, integers
    and masks in theirs; in the float64 pass, the same values rounded to dtype, then widened."""
    n = numel(shape, stride)
    SEED[0] += 1
    low, high = (-1.0, 1.0) if span is None else (float(span[0]), float(span[1]))
    ints, floats, hashed_unit = stream(n, SEED[0], low, high)
    if dtype.is_floating_point:
        flat = floats.to(dtype)
        flat = flat.double() if WIDE[0] else flat
    elif dtype == torch.bool:
        flat = hashed_unit < (0.5 if span is None else sum(span) / 2)
    else:
        lo, hi = (0, 0) if span is None else (int(span[0]), int(span[1]))
        flat = (lo + ints % max(1, hi - lo + 1)).to(dtype)
    flat = flat.to("cpu" if WIDE[0] else where)
    return flat.view(shape) if stride is None else flat.as_strided(shape, stride)


{builder}


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    return next(t for t in out if isinstance(t, torch.Tensor))


def attention64(q, k, v, *rest, **kw):
    """A device's own attention kernel, by its definition in float64 (the CPU has no such kernel)."""
    if q.shape[1] != k.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scale = kw.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


def main():
    parser = argparse.ArgumentParser(description="Error against float64 of " + WHAT)
    parser.add_argument("--device", default=DEFAULT_DEVICE, help="mps, cuda or cpu (default: %(default)s)")
    parser.add_argument("--truth", help="the float64 result: computed and saved here if the file is absent, else read")
    args = parser.parse_args()
    device = pick_device(args.device)
    with GRAD_MODE():
        SEED[0], WIDE[0] = 0, False
        got = first_tensor(build(device)()).detach().to("cpu", torch.float64)
        if args.truth and os.path.exists(args.truth):
            truth = torch.load(args.truth, weights_only=True)
            source = "read from " + args.truth
        else:
            SEED[0], WIDE[0] = 0, True
            try:
                truth = first_tensor(build(torch.device("cpu"))())
            except (RuntimeError, NotImplementedError):
                SEED[0] = 0
                truth = attention64(*build_args(torch.device("cpu")))
            truth = truth.to(torch.float64)
            source = "computed by this build"
            if args.truth:
                torch.save(truth, args.truth)
                source += ", saved to " + args.truth
    finite = torch.isfinite(got) & torch.isfinite(truth)
    scale = float(truth[finite].pow(2).mean().sqrt()) or 1.0
    diff = (got - truth)[finite]
    print(f"torch {{torch.__version__}} on {{device}}: {{WHAT}} (float64 {{source}})")
    print(f"  error against float64, relative to its RMS: rms {{float(diff.pow(2).mean().sqrt()) / scale:.3e}}, "
          f"max {{float(diff.abs().max()) / scale:.3e}}, NaN/Inf where float64 has none: "
          f"{{int((~torch.isfinite(got) & torch.isfinite(truth)).sum())}}")


if __name__ == "__main__":
    main()
'''


def _builder(op_call: dict[str, Any]) -> str:
    code = _Code()
    stmt = code.call(op_call)
    args = re.sub(r"^torch\.ops\.[\w.]+\(", "", stmt)[:-1]
    body = "\n".join(code.lines)
    return (
        f"def build(device):\n{body}\n    return lambda: {stmt}\n\n\n"
        f"def build_args(device):\n{body}\n    return [{args.split(', ')[0]}, "
        f"{', '.join(args.split(', ')[1:3])}]\n"
    )


def accuracy_issue(analysis: Analysis, record: dict[str, Any], f: Any) -> AccuracyIssue | None:
    """The issue's lead and script where some phase's answers got worse; None where none did."""
    pn = worst_phase(analysis)
    if pn is None:
        return None
    good, bad = f(analysis.baseline_torch), f(analysis.candidate_torch)
    m = _main(pn)
    top = pn.top_op
    what = f"{top.op} {top.shapes} ({top.dtypes})" if top else f"the {pn.phase} phase's {m.name if m else 'answer'}"
    ratio = top.numerics.main.ratio if top and top.numerics.main else (m.ratio if m else None)
    far = f"{_ratio(ratio)} further from float64" if ratio else pn.verdict
    title = f"[{f(analysis.device.upper())}] {f(what)} is {far} in torch {bad} than {good}"
    step = " The phase is one training step (forward, loss, backward, optimizer step)." if is_training(pn.phase) else ""
    lines = [
        f"<!-- Suggested title: {title.replace('--', '- -')} -->",
        "",
        "### 🐛 Describe the bug",
        "",
        f"On {f(analysis.machine)} ({f(analysis.device)}) the {f(pn.phase)} phase's answers are {pn.verdict} with "
        f"torch {bad} than with {good}: each build's error against a float64 reference computed on the CPU from "
        "the same inputs and weights (relative root mean square error)." + step,
        "",
        "| what | error vs float64, good | error vs float64, bad | bad / good | verdict |",
        "|---|---|---|---|---|",
    ]
    if is_training(pn.phase):
        # One fine-tuning step's answers, each its own row: the loss, each parameter group's gradient and weights.
        for g in group_calls(pn):
            c = g.call
            lines.append(
                f"| {f(pn.phase, table=True)}: {f(g.label, table=True)} | {_e(c.baseline_error)} | "
                f"{_e(c.candidate_error)} | {_ratio(c.ratio)} | {c.verdict} |"
            )
    elif m is not None:
        lines.append(
            f"| {f(pn.phase, table=True)} ({f(m.name, table=True)}) | {_e(m.baseline_error)} | "
            f"{_e(m.candidate_error)} | {_ratio(m.ratio)} | {pn.verdict} |"
        )
    for op in pn.ops[:8]:
        om = op.numerics.main
        if om is None:
            continue
        label = f(f"{op.op} {op.shapes} ({op.dtypes})", table=True)
        lines.append(
            f"| {label} | {_e(om.baseline_error)} | {_e(om.candidate_error)} | {_ratio(om.ratio)} | "
            f"{op.numerics.verdict} |"
        )
    script = None
    workload = top.workload if top else next((p.workload for p in analysis.model_phases if p.phase == pn.phase), "")
    if top is not None:
        entry: dict[str, Any] = next((w for w in record.get("workloads", []) if w.get("name") == top.workload), {})
        call = entry.get("op_call") if isinstance(entry.get("op_call"), dict) else None
        if call is None and isinstance(top.op_call, Mapping):
            call = dict(top.op_call)  # a call judged alone out of its phase's group
        device = str(record.get("device")) if record.get("device") in ("mps", "cuda", "cpu") else "cpu"
        try:
            builder = _builder(call) if call else None
        except NotCode:
            builder = None
        if builder:
            label = re.sub(r"[^\w ,.()x-]", "", what)[:120]
            stage = str(call.get("stage") or "") if call else ""
            if stage in GRAD_CONTEXTS:
                builder += f"\n\nGRAD_MODE = {GRAD_CONTEXTS[stage]}  # the call ran in a training step's {stage}\n"
            script = SCRIPT.format(
                what=label,
                what_literal=repr(label),
                device=device,
                pick_device=PICK_DEVICE,
                numel=NUMEL,
                builder=builder,
                tile=TILE,
                tile_seed=TILE_SEED,
            )
    return AccuracyIssue(workload, title, lines, script)
