"""Tensor names and shapes -> the workloads one forward pass runs, merged with counts.

Pure: it sees only names, dtypes and shapes (from headers), never weights."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mpsup.bench.workloads import ITEMSIZE, Workload
from mpsup.model.config import ModelConfig, model_config
from mpsup.model.safetensors_header import ITEMSIZE as ITEMSIZE_ST
from mpsup.model.safetensors_header import MAX_NAME_CHARS, TensorInfo

DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32", "F8_E4M3": "fp8"}
EMBEDDING = re.compile(r"(embed_tokens|word_embeddings|tok_embeddings|\bwte|embeddings?\.weight$)")
OUTPUT_HEAD = re.compile(r"(^|\.)(lm_head|output)\.weight$")
ROUTER = re.compile(r"(block_sparse_moe\.gate|mlp\.gate|\.router)\.weight$")
DIGITS = re.compile(r"\d+")
WORD = re.compile(r"\w+")
ATTENTION = re.compile(r"(attn|attention|q_proj|k_proj|v_proj|o_proj|qkv|to_q|to_k|to_v|to_out)")
QUANT_HINT = re.compile(r"(qweight|qzeros|scales|absmax|quant_map|\.SCB$|weight_format)")


@dataclass
class Extraction:
    workloads: list[Workload]
    not_measured: list[dict[str, str]] = field(default_factory=list)
    linear_weight_bytes: int = 0
    linear_weight_elements: int = 0

    @property
    def fp8_weight_bytes(self) -> int:
        """The same linear weights stored as float8_e4m3fn: one byte each."""
        return self.linear_weight_elements


def _layerless(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", name)


def per_expert(name: str) -> tuple[str, int, str] | None:
    """`<prefix>.<...>experts.<id>.<proj>.weight` -> (prefix, id, proj), prefix being the text before the first
    dot. Plain splitting, linear in the name's length: the lazy regular expression it replaces backtracked
    quadratically (8 s for one 40 KB name; a header may hold 100 MB of names)."""
    parts = name.split(".")
    if len(parts) < 5 or parts[-1] != "weight" or len(name) > MAX_NAME_CHARS:
        return None
    group, expert, proj = parts[-4], parts[-3], parts[-2]
    if not (group.endswith("experts") and DIGITS.fullmatch(expert) and WORD.fullmatch(proj)):
        return None
    return parts[0], int(expert), proj


def extract(tensors: dict[str, TensorInfo], config: dict[str, Any] | ModelConfig | None = None, *,
            tokens: tuple[int, ...] = (1, 512), dtype: str | None = None) -> Extraction:
    cfg = config if isinstance(config, ModelConfig) else model_config(config, "the model config")
    top_k = cfg.top_k
    linear: Counter[tuple[int, int, str, str]] = Counter()
    embeddings: Counter[tuple[int, int, str]] = Counter()
    experts: dict[tuple[str, str], dict[str, Any]] = {}
    convs: Counter[tuple[tuple[int, ...], int, str]] = Counter()
    not_measured: list[dict[str, str]] = []
    weight_bytes = 0
    weight_elements = 0
    has_head = any(OUTPUT_HEAD.search(n) for n in tensors)
    for name, t in tensors.items():
        if QUANT_HINT.search(name) or (t.dtype in ("I8", "U8", "I32", "U32", "I16") and len(t.shape) >= 2):
            not_measured.append({"tensor": name, "reason": f"quantized or packed ({t.dtype}): not measured"})
            continue
        if t.dtype not in DTYPES:
            if len(t.shape) >= 2:
                not_measured.append({"tensor": name, "reason": f"dtype {t.dtype} is not a compute dtype mpsup measures"})
            continue
        dt = dtype or DTYPES[t.dtype]
        if len(t.shape) < 2 or not name.endswith("weight"):
            continue  # norms, biases, buffers: no layer of their own
        m = per_expert(name) if len(t.shape) == 2 else None
        if m:
            prefix, expert_id, proj = m
            key = (_layerless(prefix) + ".experts", proj)
            g = experts.setdefault(key, {"ids": set(), "shape": t.shape, "dtype": dt, "layers": set()})
            g["ids"].add(expert_id)
            g["layers"].add(name.split(".experts.")[0])
            weight_bytes += t.nbytes
            weight_elements += t.nbytes // ITEMSIZE_ST[t.dtype]
            continue
        if len(t.shape) == 3 and "experts" in name:
            key = (_layerless(name), "stacked")
            g = experts.setdefault(key, {"ids": set(range(t.shape[0])), "shape": t.shape[1:], "dtype": dt, "layers": set()})
            g["layers"].add(name)
            weight_bytes += t.nbytes
            weight_elements += t.nbytes // ITEMSIZE_ST[t.dtype]
            continue
        if len(t.shape) == 2:
            out_f, in_f = t.shape
            if EMBEDDING.search(name) and not OUTPUT_HEAD.search(name):
                embeddings[(out_f, in_f, dt)] += 1
                if not has_head and cfg.tie_word_embeddings:
                    linear[(in_f, out_f, "output-head", dt)] += 1  # tied: the embedding doubles as the head
                continue
            role = ("output-head" if OUTPUT_HEAD.search(name) else "router" if ROUTER.search(name)
                    else "attention" if ATTENTION.search(name) else "mlp")
            linear[(in_f, out_f, role, dt)] += 1
            weight_bytes += t.nbytes
            weight_elements += t.nbytes // ITEMSIZE_ST[t.dtype]
            continue
        if len(t.shape) in (4, 5):
            convs[(tuple(t.shape), _resolution(name, cfg), dt)] += 1
            continue
        not_measured.append({"tensor": name, "reason": f"{len(t.shape)}-D weight: not a layer mpsup knows"})
    workloads: list[Workload] = []
    for (in_f, out_f, role, dt), count in linear.items():
        for tok in tokens:
            workloads.append(Workload(
                f"model/linear/{in_f}x{out_f}/t{tok}", "linear", "model", dt,
                {"tokens": tok, "in_features": in_f, "out_features": out_f}, tags=(role,), count=count, role=role,
                memory_bytes=(tok * in_f + in_f * out_f + tok * out_f) * ITEMSIZE[dt]))
    for (vocab, dim, dt), count in embeddings.items():
        for tok in tokens:
            workloads.append(Workload(
                f"model/embedding/{vocab}x{dim}/t{tok}", "embedding", "model", dt,
                {"tokens": tok, "num_embeddings": vocab, "embedding_dim": dim}, tags=("embedding",), count=count,
                role="embedding", memory_bytes=vocab * dim * ITEMSIZE[dt]))
    for (_prefix, proj), g in sorted(experts.items()):
        out_f, in_f = g["shape"]
        n_exp = len(g["ids"])
        for tok in tokens:
            workloads.append(Workload(
                f"model/experts/{proj}/{n_exp}x{in_f}x{out_f}/t{tok}", "grouped_mm", "model", g["dtype"],
                {"tokens": tok, "top_k": min(top_k, n_exp), "experts": n_exp, "in_features": in_f,
                 "out_features": out_f, "method": "grouped"},
                tags=("experts",), count=len(g["layers"]), role="experts",
                memory_bytes=n_exp * in_f * out_f * ITEMSIZE[g["dtype"]]))
    for (shape, res, dt), count in convs.items():
        out_c, in_c, *kernel = shape
        pad = kernel[-1] // 2
        if len(kernel) == 3:
            frames = cfg.frames or DEFAULT_FRAMES
            x_shape = [1, in_c, frames, res, res]
            # Causal 3D convs (Wan-style VAEs) pad time on one side only, then convolve unpadded.
            workloads.append(Workload(
                f"model/pad3d/{in_c}x{frames}x{res}x{res}", "pad", "model", dt,
                {"shape": x_shape, "pad": [pad, pad, pad, pad, 2 * pad, 0]}, tags=("pad", "causal-conv"),
                count=count, role="pad", memory_bytes=2 * _numel(x_shape) * ITEMSIZE[dt]))
            x_shape = [1, in_c, frames + 2 * pad, res + 2 * pad, res + 2 * pad]
            conv_pad = 0
        else:
            x_shape = [1, in_c, res, res]
            conv_pad = pad
        workloads.append(Workload(
            f"model/conv{len(kernel)}d/{in_c}x{out_c}k{'x'.join(map(str, kernel))}/{res}px", "conv", "model", dt,
            {"weight_shape": list(shape), "input_shape": x_shape, "padding": conv_pad},
            tags=("conv",), count=count, role="conv",
            memory_bytes=(_numel(x_shape) * 2 + _numel(shape)) * ITEMSIZE[dt]))
    return Extraction(workloads, not_measured, weight_bytes, weight_elements)


# Activation sizes for convolutions: the config's sample_size (latent pixels) halves at each
# down block and doubles back up; without a config, 64 latent pixels and 4 latent frames.
DEFAULT_RESOLUTION = 64
DEFAULT_FRAMES = 4
DEFAULT_LEVELS = 4


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _resolution(name: str, cfg: ModelConfig) -> int:
    base = cfg.sample_size or DEFAULT_RESOLUTION
    levels = cfg.levels or DEFAULT_LEVELS
    m = re.search(r"(down_blocks|downsamples|up_blocks|upsamples)\.(\d+)", name)
    if m:
        i = int(m.group(2))
        depth = i if m.group(1).startswith("down") else levels - 1 - i
        return max(4, base >> max(0, min(depth, levels - 1)))
    if "mid" in name:
        return max(4, base >> (levels - 1))
    return base


def extract_model(tensors: dict[str, TensorInfo], config: dict[str, Any] | None, *, tokens: tuple[int, ...],
                  dtype: str | None = None, components: dict[str, dict[str, Any]] | None = None) -> Extraction:
    """Like `extract`, but a Diffusers pipeline's components (given: their configs by name) are extracted
    one by one and their workloads named and tagged by component, so each is reported apart."""
    if components is None:
        return extract(tensors, config, tokens=tokens, dtype=dtype)
    total = Extraction([])
    for component in sorted({n.split("/", 1)[0] for n in tensors}):
        part = {n.split("/", 1)[1]: t for n, t in tensors.items() if n.startswith(component + "/")}
        ex = extract(part, components.get(component, {}), tokens=tokens, dtype=dtype)
        for w in ex.workloads:
            total.workloads.append(Workload(
                w.name.replace("model/", f"model/{component}/", 1), w.kind, w.part, w.dtype, w.params,
                (*w.tags, component), w.source or component, w.memory_bytes, w.count, w.role))
        total.not_measured += [{**n, "tensor": f"{component}/{n['tensor']}"} for n in ex.not_measured]
        total.linear_weight_bytes += ex.linear_weight_bytes
        total.linear_weight_elements += ex.linear_weight_elements
    return total
