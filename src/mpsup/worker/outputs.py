"""What a call returned, kept for the numerics comparison: the tensors that carry its answer, widened to float64
(integers to int64) on the CPU, sampled where large, in a file the float64 reference reads.

Every side samples the same elements (an even stride fixed by the output's size alone), so a build's sample,
the other build's and the truth's line up element by element. Widening is exact (bf16, fp16, float32 and FP8
values are all float64 values), so two builds' samples are equal exactly where their outputs were."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

MAX_ELEMENTS = 1 << 20  # per output: 8 MiB of float64 each side

# The output a model's answer is read from, in order of preference.
_ANSWERS = ("logits", "sample", "last_hidden_state", "pred_original_sample")


class NamedAnswers(dict[str, torch.Tensor]):
    """Answers under their own names, each already sampled: a training step's loss, each parameter group's
    gradient and weights after the step."""


def answer_tensors(out: Any) -> list[tuple[str, torch.Tensor]]:
    """The named tensors that carry a call's answer: a model's logits, image or hidden states; a VAE encoder's
    latent (its distribution's mean); an op's output, or each output of a multi-output op (an in-place op
    returns the tensor it rewrote); a training step's named answers as they are. Nothing where the call returns
    no tensor."""
    if isinstance(out, NamedAnswers):
        return list(out.items())
    if isinstance(out, torch.Tensor):
        return [("output", out)]
    if isinstance(out, dict):  # calls replayed together: each call's answer under its own prefix
        return [(f"{key}.{name}", t) for key, value in out.items() for name, t in answer_tensors(value)]
    for name in _ANSWERS:
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return [(name, value)]
    dist = getattr(out, "latent_dist", None)
    mean = getattr(dist, "mean", None)
    if isinstance(mean, torch.Tensor):
        return [("latent", mean)]
    if isinstance(out, (tuple, list)):
        return [(f"output{i}", v) for i, v in enumerate(out) if isinstance(v, torch.Tensor)]
    return []


def stride_for(numel: int, max_elements: int = MAX_ELEMENTS) -> int:
    return max(1, math.ceil(numel / max(1, max_elements)))


def kept(t: torch.Tensor, max_elements: int = MAX_ELEMENTS) -> torch.Tensor:
    """The compared elements of one output, on the CPU: float64 for floats, int64 for integers and booleans."""
    flat = t.detach().reshape(-1)[:: stride_for(t.numel(), max_elements)]
    if t.dtype.is_floating_point:
        return flat.to("cpu").to(torch.float64)
    if t.dtype.is_complex:
        return torch.view_as_real(flat.to("cpu").to(torch.complex128)).reshape(-1)
    return flat.to("cpu").to(torch.int64)


def describe(name: str, t: torch.Tensor) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(t.shape),
        "dtype": str(t.dtype).removeprefix("torch."),
        "float": bool(t.dtype.is_floating_point or t.dtype.is_complex),
    }


LANGUAGE = ("logits_rows", "greedy")  # a language model's extra answers, compared between builds only


def save(
    out: Any, path: Path, max_elements: int = MAX_ELEMENTS, extra: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The call's answer tensors to `path` (atomically: a reader never sees half a file), with a language model's
    extra answers whole (rows of logits, greedy tokens); the descriptions of the call's own."""
    tensors = answer_tensors(out)
    doc = {name: kept(t, max_elements) for name, t in tensors}
    for name, t in (extra or {}).items():
        if name in LANGUAGE and isinstance(t, torch.Tensor):
            doc[name] = t.detach().to("cpu").to(torch.float64 if t.dtype.is_floating_point else torch.int64)
    tmp = path.with_name(path.name + ".part")
    torch.save(doc, tmp)
    os.replace(tmp, path)
    return [describe(name, t) for name, t in tensors]


def load(path: Path) -> dict[str, torch.Tensor]:
    """A saved answer: plain tensors only (weights_only where this torch has it)."""
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a torch before weights_only
        doc = torch.load(path, map_location="cpu")
    if not isinstance(doc, dict) or not all(isinstance(v, torch.Tensor) for v in doc.values()):
        raise ValueError(f"{path.name} does not hold saved outputs")
    return {str(k): v for k, v in doc.items()}
