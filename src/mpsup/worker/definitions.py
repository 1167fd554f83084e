"""Kernels the float64 reference computes by their definition: a device's own attention kernels (the CPU has
none of them, and none takes float64) and `torch._grouped_mm` (whose kernels take no float64). Imports nothing
of the worker's: the op replay reaches for it while it builds the reference's calls."""

from __future__ import annotations

import math
from typing import Any

import torch

# Attention kernels of one device only: the reference computes what they compute, in float64, by the definition.
_ATTENTION = {
    # name: positions of (attn_mask, dropout_p, is_causal) in its arguments after q, k, v; None: the kernel has none
    "aten._scaled_dot_product_flash_attention.default": (None, 3, 4),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": ("attn_mask", 3, 4),
    "aten._scaled_dot_product_efficient_attention.default": (3, 5, 6),
    "aten._scaled_dot_product_cudnn_attention.default": (3, 5, 6),
    "aten._scaled_dot_product_attention_math_for_mps.default": (3, 4, 5),
    "aten._scaled_dot_product_attention_math.default": (3, 4, 5),
    "aten._scaled_dot_product_fused_attention_overrideable.default": (3, 4, 5),
}


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, causal: bool, scale: Any) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v in the inputs' dtype, key/value heads repeated for grouped queries."""
    if k.dim() == 4 and q.shape[1] != k.shape[1] and q.shape[1] % k.shape[1] == 0:
        reps = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(reps, dim=1), v.repeat_interleave(reps, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        n, m = scores.shape[-2], scores.shape[-1]
        keep = torch.ones(n, m, dtype=torch.bool).tril()  # top-left aligned, as torch's is_causal is
        scores = scores.masked_fill(~keep, float("-inf"))
    if isinstance(mask, torch.Tensor):
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.to(scores)
    return torch.softmax(scores, dim=-1) @ v


def reference_op(name: str, op: Any) -> Any:
    """The op as the reference runs it: itself, or for a device's own attention kernel, attention by its
    definition (the first output only: the others are the kernel's bookkeeping)."""
    spec = _ATTENTION.get(name)
    if spec is None:
        return op
    mask_at, _dropout_at, causal_at = spec

    def attention(*args: Any, **kwargs: Any) -> tuple[torch.Tensor]:
        q, k, v = args[:3]
        if isinstance(mask_at, int):
            mask = args[mask_at] if len(args) > mask_at else kwargs.get("attn_mask", kwargs.get("attn_bias"))
        else:
            mask = kwargs.get(mask_at) if mask_at else None
        causal = bool(args[causal_at]) if len(args) > causal_at else bool(kwargs.get("is_causal", False))
        return (_attention(q, k, v, mask, causal, kwargs.get("scale")),)

    return attention


def _grouped_mm(
    mat_a: torch.Tensor, mat_b: torch.Tensor, offs: Any = None, bias: Any = None, out_dtype: Any = None
) -> Any:
    """torch._grouped_mm by its definition (its kernels take no float64): each group's rows times its matrix."""
    if mat_a.dim() == 3 and mat_b.dim() == 3:
        out = torch.bmm(mat_a, mat_b)
    elif mat_a.dim() == 2 and mat_b.dim() == 3 and offs is not None:
        out = mat_a.new_zeros(mat_a.shape[0], mat_b.shape[-1])
        start = 0
        for g, end in enumerate(int(e) for e in offs.tolist()):
            out[start:end] = mat_a[start:end] @ mat_b[g]
            start = end
    elif mat_a.dim() == 2 and mat_b.dim() == 2 and offs is not None:
        parts, start = [], 0
        for end in (int(e) for e in offs.tolist()):
            parts.append(mat_a[:, start:end] @ mat_b[start:end])
            start = end
        out = torch.stack(parts)
    else:
        raise NotImplementedError(f"grouped_mm of {mat_a.dim()}-D by {mat_b.dim()}-D has no float64 definition here")
    return out if bias is None else out + bias


_DEFINITIONS: list[Any] = []  # the float64 kernels registered in this process (the reference only)


def define_missing_kernels() -> None:
    """Kernels the CPU lacks in float64, registered by their definition: this process computes only truths."""
    if _DEFINITIONS or not hasattr(torch.ops.aten, "_grouped_mm"):
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_grouped_mm", _grouped_mm, "CPU")
    _DEFINITIONS.append(lib)
