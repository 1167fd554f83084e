"""A training step's trainable parameters grouped for its answers: each parameter's role by its name (the
projection, MLP, norm, embedding or head), split by ranges of blocks where the model is deep, and the elements of
each group that every build and the reference sample alike."""

from __future__ import annotations

import math
import re

import torch

from . import outputs

# From this many blocks on, each role's group is split by ranges of blocks (at most MAX_SPLITS): an error that
# grows toward the first blocks, as backward runs, shows as one range worse than the rest.
DEEP = 8
MAX_SPLITS = 4
MAX_OUTPUTS = 60  # the record's numerics keep 64 outputs a workload (runs/numerics_fields.py)
_BLOCK = re.compile(r"\.(?:layers|h|blocks|block|layer)\.(\d+)\.")


# --- what a parameter is, for its group ---

_LM_ROLES: tuple[tuple[str, frozenset[str]], ...] = (
    ("lm_head", frozenset({"lm_head", "embed_out"})),
    ("embed", frozenset({"embed_tokens", "wte", "wpe", "word_embeddings", "embed_positions", "tok_embeddings"})),
    ("mlp", frozenset({"mlp", "feed_forward", "gate_proj", "up_proj", "down_proj", "fc1", "fc2", "experts"})),
    ("q_proj", frozenset({"q_proj", "query", "wq"})),
    ("k_proj", frozenset({"k_proj", "key", "wk"})),
    ("v_proj", frozenset({"v_proj", "value", "wv"})),
    ("qkv_proj", frozenset({"qkv_proj", "c_attn", "query_key_value", "wqkv"})),
    ("o_proj", frozenset({"o_proj", "out_proj", "c_proj", "dense", "wo"})),
)
_UNET_ROLES: tuple[tuple[str, frozenset[str]], ...] = (
    ("to_q", frozenset({"to_q"})),
    ("to_k", frozenset({"to_k"})),
    ("to_v", frozenset({"to_v"})),
    ("to_out", frozenset({"to_out"})),
    ("ff", frozenset({"ff", "feed_forward"})),
    ("time_embedding", frozenset({"time_embedding", "time_proj", "add_embedding"})),
)


def role_of(name: str, unet: bool = False) -> str:
    """A parameter's role from its name: the projection, MLP, norm, embedding or head it belongs to."""
    parts = [p.lower() for p in name.split(".")]
    if any("norm" in p or p.startswith("ln_") for p in parts) and not any(p.startswith("lora_") for p in parts):
        return "norms"
    for role, keys in _UNET_ROLES if unet else _LM_ROLES:
        if keys.intersection(parts):
            return role
    if unet and any(p.startswith("conv") for p in parts):
        return "conv"
    return "other"


def block_of(name: str) -> int | None:
    m = _BLOCK.search(name)
    return int(m.group(1)) if m else None


def parameter_groups(
    named: list[tuple[str, torch.nn.Parameter]], blocks: int, unet: bool = False
) -> dict[str, list[torch.nn.Parameter]]:
    """The trainable parameters by role, in the model's order; where the model is deep, each role inside the
    blocks split by ranges of blocks ("q_proj[0-7]"), as many ranges as keep every group's two outputs (its
    gradient and its weights after the step) and the loss within MAX_OUTPUTS."""
    roles: dict[str, list[tuple[int | None, torch.nn.Parameter]]] = {}
    for name, p in named:
        roles.setdefault(role_of(name, unet), []).append((block_of(name), p))
    inside = [r for r, ps in roles.items() if any(b is not None for b, _ in ps)]
    splits = 1
    if blocks >= DEEP and inside:
        room = (MAX_OUTPUTS - 1 - 2 * (len(roles) - len(inside))) // (2 * len(inside))
        splits = max(1, min(MAX_SPLITS, room, blocks))
    span = math.ceil(blocks / splits) if blocks else 1
    out: dict[str, list[torch.nn.Parameter]] = {}
    for role, ps in roles.items():
        for b, p in ps:
            if splits == 1 or b is None:
                key = role
            else:
                lo = (b // span) * span
                key = f"{role}[{lo}-{min(blocks, lo + span) - 1}]"
            out.setdefault(key, []).append(p)
    return out


# --- the answers: sampled as every side samples them ---


def sample(tensors: list[torch.Tensor], limit: int = outputs.MAX_ELEMENTS) -> torch.Tensor:
    """Every `stride`-th element of the tensors laid end to end (the stride fixed by their total size alone, so
    every build and the reference take the same elements), on the CPU, in their common dtype."""
    total = sum(t.numel() for t in tensors)
    stride = outputs.stride_for(total, limit)
    parts: list[torch.Tensor] = []
    start = 0
    for t in tensors:
        flat = t.detach().reshape(-1)
        parts.append(flat[(-start) % stride :: stride].to("cpu"))
        start += flat.numel()
    if not parts:
        return torch.zeros(0)
    dtype = parts[0].dtype
    for p in parts[1:]:
        dtype = torch.promote_types(dtype, p.dtype)
    return torch.cat([p.to(dtype) for p in parts])
