"""The float64 truth and each build's distance from it, computed in the reference worker: a CPU worker of the
baseline's interpreter (or --reference), never the build under test, whose errors a truth it computed would
inherit even in float64.

The reference builds the workload as the builds did, with `values.TRUTH.on`: the same values in the same order,
rounded to the builds' dtype, then widened to float64; a model in float64. It runs the call once, samples its
answer as the builds sampled theirs (outputs.py), and compares every saved answer of every build and visit."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from . import outputs, values
from .build import build
from .definitions import define_missing_kernels
from .device import Device


def _truth_spec(spec: dict[str, Any], depth: int | None) -> dict[str, Any]:
    """The workload as the reference builds it: a whole model at the builds' depth, never compiled."""
    if spec.get("kind") != "model_phase":
        return spec
    params = {**spec.get("params", {}), "compile": False, "depth": depth or spec.get("params", {}).get("depth")}
    return {**spec, "params": params}


def truth_answer(spec: dict[str, Any], depth: int | None) -> tuple[Any, str]:
    """The workload's answer in float64 on the CPU, and the digest of the values it computed on."""
    define_missing_kernels()
    values.TRUTH.reset()
    values.TRUTH.on = True
    # A training step's truth is its gradients: autograd on, no inference mode (worker/training.py).
    training = (spec.get("params") or {}).get("phase") == "train_step"
    try:
        with contextlib.nullcontext() if training else torch.inference_mode():
            built = build(_truth_spec(spec, depth), Device("cpu"))
            out = built.first_output if built.has_first_output else built.fn()
    finally:
        values.TRUTH.on = False
    return out, values.TRUTH.hexdigest()


def _rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt()) if x.numel() else 0.0


def _float_errors(side: torch.Tensor, truth: torch.Tensor, scale: float) -> dict[str, Any]:
    finite = torch.isfinite(side) & torch.isfinite(truth)
    diff = (side - truth)[finite]
    return {
        "rmse": _rms(diff) / scale,
        "max_abs": float(diff.abs().max()) / scale if diff.numel() else 0.0,
        # Non-finite where the truth is finite: the build made them.
        "nonfinite": int((~torch.isfinite(side) & torch.isfinite(truth)).sum()),
    }


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where the other has NaN (widening is exact, so this is the builds' own equality)."""
    if a.shape != b.shape:
        return False
    both_nan = torch.isnan(a) & torch.isnan(b)
    return bool(((a == b) | both_nan).all())


def _between(a: torch.Tensor, b: torch.Tensor, scale: float, is_float: bool) -> dict[str, Any]:
    if not is_float:
        return {"match": float((a == b).double().mean()) if a.numel() else 1.0, "identical": bool(torch.equal(a, b))}
    finite = torch.isfinite(a) & torch.isfinite(b)
    diff = (a - b)[finite]
    return {
        "rmse": _rms(diff) / scale,
        "max_abs": float(diff.abs().max()) / scale if diff.numel() else 0.0,
        "identical": _same_bits(a, b),
    }


def _scale(truth: torch.Tensor) -> float:
    """The truth's size, what every error is relative to: its RMS over finite values (else its largest, else 1)."""
    finite = truth[torch.isfinite(truth)]
    rms = _rms(finite)
    if rms > 0:
        return rms
    top = float(finite.abs().max()) if finite.numel() else 0.0
    return top if top > 0 else 1.0


def compare_output(truth: torch.Tensor, sides: dict[str, list[torch.Tensor]]) -> dict[str, Any]:
    """One output: each side's first visit against the truth, the two sides against each other, and each side's
    visits against each other (the run's own floor: what the same build gives twice)."""
    is_float = truth.dtype.is_floating_point
    scale = _scale(truth) if is_float else 1.0
    doc: dict[str, Any] = {"elements": int(truth.numel()), "scale": scale if is_float else None}
    if is_float:
        doc["truth_nonfinite"] = int((~torch.isfinite(truth)).sum())
    errors: dict[str, Any] = {}
    floors: list[float] = []
    for label, visits in sides.items():
        first = visits[0]
        if first.shape != truth.shape:
            errors[label] = {"mismatch": f"{first.numel()} elements against the truth's {truth.numel()}"}
            continue
        if is_float:
            errors[label] = _float_errors(first, truth, scale)
        else:
            errors[label] = {"match": float((first == truth).double().mean()) if truth.numel() else 1.0}
        for later in visits[1:]:
            if later.shape == first.shape:
                again = _between(first, later, scale, is_float)
                floors.append(again["rmse"] if is_float else 1.0 - again["match"])
    doc["errors"] = errors
    labels = [label for label in sides if "mismatch" not in errors.get(label, {})]
    if len(labels) == 2:
        doc["between"] = _between(sides[labels[0]][0], sides[labels[1]][0], scale, is_float)
    doc["floor"] = max(floors) if floors else None
    return doc


def compare(req: dict[str, Any]) -> dict[str, Any]:
    """The reference's answer to a `truth` request: every output of every side against float64."""
    max_elements = int(req.get("max_elements") or outputs.MAX_ELEMENTS)
    out, digest = truth_answer(req["workload"], req.get("depth"))
    truth = {name: outputs.kept(t, max_elements) for name, t in outputs.answer_tensors(out)}
    del out
    sides: dict[str, dict[str, list[torch.Tensor]]] = {}
    for label, paths in (req.get("outputs") or {}).items():
        for path in paths:
            for name, t in outputs.load(Path(path)).items():
                sides.setdefault(name, {}).setdefault(str(label), []).append(t)
    docs = []
    for name, t in truth.items():
        if name not in sides:
            continue  # an output the builds did not return (an attention kernel's bookkeeping)
        docs.append({"name": name, **compare_output(t, sides[name])})
    answer: dict[str, Any] = {"type": "truth", "digest": digest, "outputs": docs}
    language = compare_language(sides)
    if language is not None:
        answer["language"] = language
    return answer


def compare_language(sides: dict[str, dict[str, list[torch.Tensor]]]) -> dict[str, Any] | None:
    """Two builds of a language model against each other: top-1 agreement and mean KL(baseline || candidate) in
    float64 over the prompt's positions (llama.cpp's `--kl-divergence` figures), and the first of the greedy
    tokens where the builds' continuations part (None: they agree on every one)."""
    rows, greedy = sides.get("logits_rows", {}), sides.get("greedy", {})
    if len(rows) != 2 or len(greedy) != 2:
        return None
    (a, b), (ga, gb) = (v[0] for v in rows.values()), (v[0] for v in greedy.values())
    if a.shape != b.shape or not a.numel():
        return None
    pa, log_pa, log_pb = torch.softmax(a, -1), torch.log_softmax(a, -1), torch.log_softmax(b, -1)
    kl = (pa * (log_pa - log_pb)).sum(-1)
    finite = torch.isfinite(kl)
    n = min(ga.numel(), gb.numel())
    differ = (ga[:n] != gb[:n]).nonzero()
    return {
        "positions": int(a.shape[0]),
        "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).double().mean()),
        "kl_mean": float(kl[finite].mean()) if bool(finite.any()) else None,
        "kl_nonfinite": int((~finite).sum()),  # positions whose KL is NaN or Inf: said, never averaged away
        "greedy_tokens": n,
        "greedy_diverges_at": int(differ[0, 0]) if differ.numel() else None,
    }
