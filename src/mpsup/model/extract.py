"""Tensor names and shapes -> the workloads one forward pass runs, merged with counts.

Pure: it sees only names, dtypes and shapes (from headers), never weights. Each workload's memory is priced
by `Workload` itself from its tensors, output included (workloads.priced_bytes)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mpsup.model.comfy import vae_architecture
from mpsup.model.config import ModelConfig, model_config, pipeline_resolution, pipeline_vae_factor
from mpsup.model.geometry import check_resolution
from mpsup.model.gguf import QUANTIZED as GGML_QUANTIZED
from mpsup.model.safetensors_header import MAX_NAME_CHARS, TensorInfo
from mpsup.model.sizing import component_plan, conv_frames, conv_resolution, diffusers_plan, has_3d, video_plan
from mpsup.workloads import Workload

DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32", "F8_E4M3": "fp8"}
EMBEDDING = re.compile(
    r"(embed_tokens|word_embeddings|tok_embeddings|token_embd|\bwte|embeddings?\.weight$|(^|\.)shared\.weight$)"
)
OUTPUT_HEAD = re.compile(r"(^|\.)(lm_head|output)\.weight$")
ROUTER = re.compile(r"(block_sparse_moe\.gate|mlp\.gate|\.router|ffn_gate_inp)\.weight$")
DIGITS = re.compile(r"\d+")
WORD = re.compile(r"\w+")
ATTENTION = re.compile(r"(attn|attention|q_proj|k_proj|v_proj|o_proj|qkv|to_q|to_k|to_v|to_out)")
# A feed-forward inside an attention block (Diffusers' `attentions.N.transformer_blocks.N.ff.net.0.proj`) is
# an MLP, whatever the block around it is called: checked before ATTENTION.
FEED_FORWARD = re.compile(r"(\.ff\.|\.ff_context\.|\.ffn\.|\.feed_forward\.|\.mlp\.)")
# Of the embeddings, only the word (token) embedding can double as a head; position and token-type never do.
WORD_EMBEDDING = re.compile(r"(embed_tokens|word_embeddings|tok_embeddings|(^|\.)wte|(^|\.)shared)\.weight$")
# Tensors that exist only in a model with an LM head tied to its embedding (BERT's masked-LM head keeps a bias).
HEAD_HINT = re.compile(r"(^|\.)(cls\.predictions|lm_head|generator_lm_head|vocab_projector)\.")
QUANT_HINT = re.compile(r"(qweight|qzeros|scales|absmax|quant_map|\.SCB$|weight_format)")
# llama.cpp's names for a language model's token embedding and its output head: a GGUF that has both is a
# generating LM, whose runner computes the head's logits for the last position only.
LLAMA_CPP_LM = ("token_embd.weight", "output.weight")


@dataclass
class Extraction:
    workloads: list[Workload]
    not_measured: list[dict[str, str]] = field(default_factory=list)
    linear_weight_bytes: int = 0
    linear_weight_elements: int = 0
    notes: list[str] = field(default_factory=list)  # what was assumed (a DiT's resolution and token counts), to state
    fp8_stored_bytes: int = 0  # linear weights stored as F8_E4M3, as stored (one byte each)

    @property
    def fp8_upcast_bytes(self) -> int:
        """What those weights take once upcast to bf16, as a loader that casts at load holds them."""
        return 2 * self.fp8_stored_bytes

    @property
    def fp8_weight_bytes(self) -> int:
        """The same linear weights stored as float8_e4m3fn: one byte each."""
        return self.linear_weight_elements


def _layerless(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", name)


def per_expert(name: str) -> tuple[str, int, str] | None:
    """`<prefix>.<...>experts.<id>.<proj>.weight` -> (prefix, id, proj), prefix being the text before the first
    dot. Plain splitting, linear in the name's length: a header may hold 100 MB of names, and a lazy regular
    expression over them backtracks quadratically."""
    parts = name.split(".")
    if len(parts) < 5 or parts[-1] != "weight" or len(name) > MAX_NAME_CHARS:
        return None
    group, expert, proj = parts[-4], parts[-3], parts[-2]
    if not (group.endswith("experts") and DIGITS.fullmatch(expert) and WORD.fullmatch(proj)):
        return None
    return parts[0], int(expert), proj


LinearKey = tuple[int, int, str, str, tuple[int, ...]]


@dataclass
class _Tally:
    """One pass over the tensors: each layer shape counted with the token counts it runs at, the weights' bytes,
    and what is not measured, with the reason."""

    cfg: ModelConfig
    tokens: tuple[int, ...]
    dtype: str | None
    token_rule: Callable[[str], int] | None
    tied_head: bool  # the word embedding doubles as the head (until the first one is counted)
    head_tokens: tuple[int, ...] | None  # the head's token counts where they are not `tokens`
    linear: Counter[LinearKey] = field(default_factory=Counter)
    embeddings: Counter[tuple[int, int, str, tuple[int, ...]]] = field(default_factory=Counter)
    experts: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    convs: Counter[tuple[tuple[int, ...], int, str]] = field(default_factory=Counter)
    fp8_linear: Counter[tuple[int, int, str, tuple[int, ...]]] = field(default_factory=Counter)
    not_measured: list[dict[str, str]] = field(default_factory=list)
    weight_bytes: int = 0
    weight_elements: int = 0
    fp8_bytes: int = 0

    def add(self, name: str, t: TensorInfo) -> None:
        found = self._compute_dtype(name, t)
        if found is None:
            return
        t, dt, stored_fp8 = found
        if len(t.shape) < 2 or not name.endswith("weight"):
            return  # norms, biases, buffers: no layer of their own
        if self._add_experts(name, t, dt):
            return
        if len(t.shape) == 2:
            self._add_matrix(name, t, dt, stored_fp8)
        elif len(t.shape) in (4, 5):
            self.convs[(tuple(t.shape), conv_resolution(name, self.cfg), dt)] += 1
        else:
            self.not_measured.append({"tensor": name, "reason": f"{len(t.shape)}-D weight: not a layer mpsup knows"})

    def _compute_dtype(self, name: str, t: TensorInfo) -> tuple[TensorInfo, str, bool] | None:
        """(the tensor, the dtype its layer computes in, whether it is stored as F8_E4M3), or None: not measured."""
        if t.dtype in GGML_QUANTIZED:  # a GGUF block-quantized weight: dequantized, then a bf16 matmul
            self.not_measured.append(
                {"tensor": name, "reason": f"{t.dtype} dequantization not measured; its matmul is, in bf16"}
            )
            t = TensorInfo(name, "BF16", t.shape, t.nbytes)  # nbytes: as stored
        if QUANT_HINT.search(name) or (t.dtype in ("I8", "U8", "I32", "U32", "I16") and len(t.shape) >= 2):
            self.not_measured.append({"tensor": name, "reason": f"quantized or packed ({t.dtype}): not measured"})
            return None
        if t.dtype not in DTYPES:
            if len(t.shape) >= 2:
                self.not_measured.append(
                    {"tensor": name, "reason": f"dtype {t.dtype} is not a compute dtype mpsup measures"}
                )
            return None
        dt = self.dtype or DTYPES[t.dtype]
        stored_fp8 = dt == "fp8"
        if stored_fp8 and (len(t.shape) != 2 or not EMBEDDING.search(name)):
            dt = "bf16"  # F8_E4M3 weights are upcast to bf16 for the compute, as ComfyUI and Diffusers run them
        return t, dt, stored_fp8

    def _weights(self, t: TensorInfo) -> None:
        self.weight_bytes += t.nbytes
        self.weight_elements += _numel(t.shape)

    def _add_experts(self, name: str, t: TensorInfo, dt: str) -> bool:
        """A per-expert weight (`...experts.N.proj.weight`) or a stacked 3-D one, grouped; False for others."""
        m = per_expert(name) if len(t.shape) == 2 else None
        if m:
            prefix, expert_id, proj = m
            g = self.experts.setdefault(
                (_layerless(prefix) + ".experts", proj), {"ids": set(), "shape": t.shape, "dtype": dt, "layers": set()}
            )
            g["ids"].add(expert_id)
            g["layers"].add(name.split(".experts.")[0])
        elif len(t.shape) == 3 and ("experts" in name or "_exps." in name):
            g = self.experts.setdefault(
                (_layerless(name), "stacked"),
                {"ids": set(range(t.shape[0])), "shape": t.shape[1:], "dtype": dt, "layers": set()},
            )
            g["layers"].add(name)
        else:
            return False
        self._weights(t)
        return True

    def _add_matrix(self, name: str, t: TensorInfo, dt: str, stored_fp8: bool) -> None:
        """A 2-D weight: an embedding (and the head it doubles as, tied), else a linear layer of its role."""
        out_f, in_f = t.shape
        toks = (self.token_rule(name),) if self.token_rule else self.tokens
        if EMBEDDING.search(name) and not OUTPUT_HEAD.search(name):
            self.embeddings[(out_f, in_f, dt, toks)] += 1
            if self.tied_head and WORD_EMBEDDING.search(name):
                head_dt = "bf16" if dt == "fp8" else dt
                self.linear[(in_f, out_f, "output-head", head_dt, self.head_tokens or toks)] += 1
                self.tied_head = False  # one head, however many aliases of the embedding (T5's shared + embed_tokens)
            return
        role = _role(name)
        if role == "output-head" and self.head_tokens:
            toks = self.head_tokens
        self.linear[(in_f, out_f, role, dt, toks)] += 1
        if stored_fp8:
            self.fp8_linear[(in_f, out_f, role, toks)] += 1
            self.fp8_bytes += t.nbytes
        self._weights(t)


def _role(name: str) -> str:
    """A linear weight's role, by its name: the output head, a router, a feed-forward, attention, else an MLP."""
    if OUTPUT_HEAD.search(name):
        return "output-head"
    if ROUTER.search(name):
        return "router"
    if FEED_FORWARD.search("." + name):
        return "mlp"
    return "attention" if ATTENTION.search(name) else "mlp"


def extract(
    tensors: dict[str, TensorInfo],
    config: dict[str, Any] | ModelConfig | None = None,
    *,
    tokens: tuple[int, ...] = (1, 512),
    dtype: str | None = None,
    token_rule: Callable[[str], int] | None = None,
) -> Extraction:
    """token_rule, where given, names the one token count each linear weight runs over (a DiT's image or text
    stream) in place of `tokens`."""
    cfg = config if isinstance(config, ModelConfig) else model_config(config, "the model config")
    has_head = any(OUTPUT_HEAD.search(n) for n in tensors)
    tally = _Tally(
        cfg,
        tokens,
        dtype,
        token_rule,
        tied_head=cfg.tie_word_embeddings and not has_head and _lm_head(tensors, cfg),
        head_tokens=HEAD_TOKENS if generates(tensors, cfg) else None,
    )
    for name, t in tensors.items():
        tally.add(name, t)
    workloads = [
        *_linear_workloads(tally.linear),
        *_embedding_workloads(tally.embeddings),
        *_expert_workloads(tally.experts, tokens, cfg.top_k),
        *_conv_workloads(tally.convs, conv_frames(cfg)),
        *_fp8_workloads(tally.fp8_linear),
    ]
    heads = tally.head_tokens and any(w.role == "output-head" for w in workloads)
    return Extraction(
        distinct(workloads),
        tally.not_measured,
        tally.weight_bytes,
        tally.weight_elements,
        [HEAD_NOTE] if heads else [],
        fp8_stored_bytes=tally.fp8_bytes,
    )


def _linear_workloads(linear: Counter[LinearKey]) -> list[Workload]:
    return [
        Workload(
            f"model/linear/{in_f}x{out_f}/t{tok}",
            "linear",
            "model",
            dt,
            {"tokens": tok, "in_features": in_f, "out_features": out_f},
            tags=(role,),
            count=count,
            role=role,
        )
        for (in_f, out_f, role, dt, toks), count in linear.items()
        for tok in toks
    ]


def _embedding_workloads(embeddings: Counter[tuple[int, int, str, tuple[int, ...]]]) -> list[Workload]:
    return [
        Workload(
            f"model/embedding/{vocab}x{dim}/t{tok}",
            "embedding",
            "model",
            dt,
            {"tokens": tok, "num_embeddings": vocab, "embedding_dim": dim},
            tags=("embedding",),
            count=count,
            role="embedding",
        )
        for (vocab, dim, dt, toks), count in embeddings.items()
        for tok in toks
    ]


def _expert_workloads(
    experts: dict[tuple[str, str], dict[str, Any]], tokens: tuple[int, ...], top_k: int
) -> list[Workload]:
    out: list[Workload] = []
    for (_prefix, proj), g in sorted(experts.items()):
        out_f, in_f = g["shape"]
        n_exp = len(g["ids"])
        for tok in tokens:
            out.append(
                Workload(
                    f"model/experts/{proj}/{n_exp}x{in_f}x{out_f}/t{tok}",
                    "grouped_mm",
                    "model",
                    g["dtype"],
                    {
                        "tokens": tok,
                        "top_k": min(top_k, n_exp),
                        "experts": n_exp,
                        "in_features": in_f,
                        "out_features": out_f,
                        "method": "grouped",
                    },
                    tags=("experts",),
                    count=len(g["layers"]),
                    role="experts",
                )
            )
    return out


def _conv_workloads(convs: Counter[tuple[tuple[int, ...], int, str]], frames: int) -> list[Workload]:
    """Each convolution at its level's size; a 3D one over `frames` latent frames, after its causal pad."""
    out: list[Workload] = []
    for (shape, res, dt), count in convs.items():
        out_c, in_c, *kernel = shape
        pad = kernel[-1] // 2
        size = f"{res}px/{frames}f" if len(kernel) == 3 else f"{res}px"  # another frame count: another call
        if len(kernel) == 3:
            x_shape = [1, in_c, frames, res, res]
            # Causal 3D convs (Wan-style VAEs) pad time on one side only, then convolve unpadded.
            out.append(
                Workload(
                    f"model/pad3d/{in_c}x{frames}x{res}x{res}",
                    "pad",
                    "model",
                    dt,
                    {"shape": x_shape, "pad": [pad, pad, pad, pad, 2 * pad, 0]},
                    tags=("pad", "causal-conv"),
                    count=count,
                    role="pad",
                )
            )
            x_shape = [1, in_c, frames + 2 * pad, res + 2 * pad, res + 2 * pad]
            conv_pad = 0
        else:
            x_shape = [1, in_c, res, res]
            conv_pad = pad
        out.append(
            Workload(
                f"model/conv{len(kernel)}d/{in_c}x{out_c}k{'x'.join(map(str, kernel))}/{size}",
                "conv",
                "model",
                dt,
                {"weight_shape": list(shape), "input_shape": x_shape, "padding": conv_pad},
                tags=("conv",),
                count=count,
                role="conv",
            )
        )
    return out


def distinct(workloads: list[Workload]) -> list[Workload]:
    """One workload per name, as `--only`, the records and the A/A floors take them. The same call twice (one
    shape at one token count from two token rules) is one workload with the counts added; two calls under one
    name (BERT's attention projections and its pooler are both 64x64; two dtypes) are told apart by role, then
    dtype, then a number. Names that never collided stay as they were."""
    merged: dict[tuple[Any, ...], Workload] = {}
    for w in workloads:
        key = (w.name, w.kind, w.dtype, w.role, repr(sorted(w.params.items())))
        prev = merged.get(key)
        merged[key] = w if prev is None else replace(prev, count=prev.count + w.count)
    out = list(merged.values())
    for tell in (lambda w: w.role or w.kind, lambda w: w.dtype):
        clash = Counter(w.name for w in out)
        out = [replace(w, name=f"{w.name}/{tell(w)}") if clash[w.name] > 1 else w for w in out]
    seen: Counter[str] = Counter()
    for i, w in enumerate(out):
        seen[w.name] += 1
        if seen[w.name] > 1:
            out[i] = replace(w, name=f"{w.name}/{seen[w.name]}")
    return out


def _fp8_workloads(fp8_linear: Counter[tuple[int, int, str, tuple[int, ...]]]) -> list[Workload]:
    """An F8_E4M3 linear runs one of two ways: its weight upcast to bf16 every call, then a bf16 matmul
    (the bf16 linear above, plus the cast here), or an FP8 matmul through scaled_mm where the device and
    torch have one (the worker reports it unsupported elsewhere). Each states the memory its path needs."""
    out: list[Workload] = []
    casts: Counter[tuple[int, int]] = Counter()
    for (in_f, out_f, role, toks), count in fp8_linear.items():
        casts[(in_f, out_f)] += count
        for tok in toks:
            out.append(
                Workload(
                    f"model/scaled_mm/{in_f}x{out_f}/t{tok}",
                    "scaled_mm",
                    "model",
                    "fp8",
                    {"tokens": tok, "in_features": in_f, "out_features": out_f, "recipe": "tensorwise"},
                    tags=("fp8", "tensorwise", "alternative", role),
                    count=count,
                    role=role,
                    source="the FP8 path of the F8_E4M3 weight, in place of its upcast + bf16 linear of this shape",
                )
            )
    for (in_f, out_f), count in casts.items():
        out.append(
            Workload(
                f"model/fp8-upcast/{in_f}x{out_f}",
                "fp8_cast",
                "model",
                "bf16",
                {"numel": in_f * out_f, "direction": "to_bf16"},
                tags=("fp8", "upcast"),
                count=count,
                role="fp8-upcast",
                source="the cast to bf16 each call of an F8_E4M3 weight pays on the upcast path",
            )
        )
    return out


# A generating LM's head runs on the last position only, in prefill (generate() keeps that position's logits)
# and in decode (one token): model/phases.py's prefill and decode run it so.
HEAD_TOKENS = (1,)
HEAD_NOTE = "output head over 1 token: prefill keeps the last position's logits, decode has one"


def generates(tensors: dict[str, TensorInfo], cfg: ModelConfig) -> bool:
    """Whether the model is a causal LM run as prefill and decode: its config's `architectures` say so, and
    without one, llama.cpp's names for an LM's embedding and head (a GGUF's) do."""
    if cfg.causal is not None:
        return cfg.causal
    return all(n in tensors for n in LLAMA_CPP_LM)


def _lm_head(tensors: dict[str, TensorInfo], cfg: ModelConfig) -> bool:
    """Whether the model ends in an LM head: the config says so when it can; without one, a bare BERT-style
    `word_embeddings` with no masked-LM tensors is an encoder, and decoder-style names are taken as LMs."""
    if cfg.lm_head is not None:
        return cfg.lm_head
    if any(HEAD_HINT.search(n) for n in tensors):
        return True
    return not any(n.endswith("word_embeddings.weight") for n in tensors)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def extract_model(
    tensors: dict[str, TensorInfo],
    config: dict[str, Any] | None,
    *,
    tokens: tuple[int, ...],
    dtype: str | None = None,
    components: dict[str, dict[str, Any]] | None = None,
    resolution: int | tuple[int, int] | None = None,
    frames: int | None = None,
) -> Extraction:
    """Like `extract`, but a Diffusers pipeline's or ComfyUI file's components (given: their configs by name)
    are extracted one by one and their workloads named and tagged by component, so each is reported apart.
    resolution (pixels, a side or (width, height)) sizes a diffusion model's activations; None: the
    architecture's usual size, stated in the result's notes. frames: a Diffusers video VAE's (bench --frames)."""
    size = check_resolution(resolution)
    if components is None:
        # A bare checkpoint's convolutions run at --resolution and --frames where stated, else the defaults.
        bare = model_config(config, "the model config")
        if size:
            bare = replace(bare, sample_size=min(size))
        video = has_3d(tensors)
        if video:
            bare, said = video_plan(bare, config, vae_architecture(set(tensors)), frames, "the model")
        ex = extract(tensors, bare, tokens=tokens, dtype=dtype)
        ex.notes[:0] = [said] if video else []
        return ex
    total = Extraction([])
    factor = pipeline_vae_factor(components)
    image = size or pipeline_resolution(components)
    for component in sorted({n.split("/", 1)[0] for n in tensors}):
        part = {n.split("/", 1)[1]: t for n, t in tensors.items() if n.startswith(component + "/")}
        own = components.get(component, {})
        video = has_3d(part)
        plan = diffusers_plan(own, image, factor, component, frames, video) if isinstance(own, dict) else None
        cfg, rule, note = plan or component_plan(part, own, resolution, component, frames)
        if note:
            total.notes.append(note)
        ex = extract(part, cfg, tokens=tokens, dtype=dtype, token_rule=rule)
        for w in ex.workloads:
            total.workloads.append(
                Workload(
                    w.name.replace("model/", f"model/{component}/", 1),
                    w.kind,
                    w.part,
                    w.dtype,
                    w.params,
                    (*w.tags, component),
                    w.source or component,
                    w.memory_bytes,
                    w.count,
                    w.role,
                )
            )
        total.notes += [f"{component}: {n}" for n in ex.notes]
        total.not_measured += [{**n, "tensor": f"{component}/{n['tensor']}"} for n in ex.not_measured]
        total.linear_weight_bytes += ex.linear_weight_bytes
        total.linear_weight_elements += ex.linear_weight_elements
        total.fp8_stored_bytes += ex.fp8_stored_bytes
    return total
