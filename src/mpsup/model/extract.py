"""Tensor names and shapes -> the workloads one forward pass runs, merged with counts.

Pure: it sees only names, dtypes and shapes (from headers), never weights. Each workload's memory is priced
by `Workload` itself from its tensors, output included (workloads.priced_bytes)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mpsup.model.comfy import ARCHITECTURE_KEY, vae_architecture
from mpsup.model.config import (
    MAX_LEVELS,
    UNET_CLASSES,
    VAE_CLASSES,
    ModelConfig,
    model_config,
    pipeline_resolution,
    pipeline_vae_factor,
    vae_patch,
)
from mpsup.model.geometry import (
    DEFAULT_VIDEO_FRAMES,
    VAE_FACTOR,
    WAN_TIME_FACTOR,
    check_resolution,
    geometry,
    latent_frames,
    token_rule,
)
from mpsup.model.gguf import QUANTIZED as GGML_QUANTIZED
from mpsup.model.safetensors_header import MAX_NAME_CHARS, TensorInfo
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
    dot. Plain splitting, linear in the name's length: the lazy regular expression it replaces backtracked
    quadratically (8 s for one 40 KB name; a header may hold 100 MB of names)."""
    parts = name.split(".")
    if len(parts) < 5 or parts[-1] != "weight" or len(name) > MAX_NAME_CHARS:
        return None
    group, expert, proj = parts[-4], parts[-3], parts[-2]
    if not (group.endswith("experts") and DIGITS.fullmatch(expert) and WORD.fullmatch(proj)):
        return None
    return parts[0], int(expert), proj


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
    top_k = cfg.top_k
    linear: Counter[tuple[int, int, str, str, tuple[int, ...]]] = Counter()
    embeddings: Counter[tuple[int, int, str, tuple[int, ...]]] = Counter()
    experts: dict[tuple[str, str], dict[str, Any]] = {}
    convs: Counter[tuple[tuple[int, ...], int, str]] = Counter()
    not_measured: list[dict[str, str]] = []
    weight_bytes = 0
    weight_elements = 0
    fp8_linear: Counter[tuple[int, int, str, tuple[int, ...]]] = Counter()
    fp8_bytes = 0
    has_head = any(OUTPUT_HEAD.search(n) for n in tensors)
    tied_head = cfg.tie_word_embeddings and not has_head and _lm_head(tensors, cfg)
    head_tokens = HEAD_TOKENS if generates(tensors, cfg) else None
    for name, t in tensors.items():
        if t.dtype in GGML_QUANTIZED:  # a GGUF block-quantized weight: dequantized, then a bf16 matmul
            not_measured.append(
                {"tensor": name, "reason": f"{t.dtype} dequantization not measured; its matmul is, in bf16"}
            )
            t = TensorInfo(name, "BF16", t.shape, t.nbytes)  # nbytes: as stored
        if QUANT_HINT.search(name) or (t.dtype in ("I8", "U8", "I32", "U32", "I16") and len(t.shape) >= 2):
            not_measured.append({"tensor": name, "reason": f"quantized or packed ({t.dtype}): not measured"})
            continue
        if t.dtype not in DTYPES:
            if len(t.shape) >= 2:
                not_measured.append(
                    {"tensor": name, "reason": f"dtype {t.dtype} is not a compute dtype mpsup measures"}
                )
            continue
        dt = dtype or DTYPES[t.dtype]
        stored_fp8 = dt == "fp8"
        if stored_fp8 and (len(t.shape) != 2 or not EMBEDDING.search(name)):
            dt = "bf16"  # F8_E4M3 weights are upcast to bf16 for the compute, as ComfyUI and Diffusers run them
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
            weight_elements += _numel(t.shape)
            continue
        if len(t.shape) == 3 and ("experts" in name or "_exps." in name):
            key = (_layerless(name), "stacked")
            g = experts.setdefault(
                key, {"ids": set(range(t.shape[0])), "shape": t.shape[1:], "dtype": dt, "layers": set()}
            )
            g["layers"].add(name)
            weight_bytes += t.nbytes
            weight_elements += _numel(t.shape)
            continue
        if len(t.shape) == 2:
            out_f, in_f = t.shape
            toks = (token_rule(name),) if token_rule else tokens
            if EMBEDDING.search(name) and not OUTPUT_HEAD.search(name):
                embeddings[(out_f, in_f, dt, toks)] += 1
                if tied_head and WORD_EMBEDDING.search(name):
                    linear[(in_f, out_f, "output-head", "bf16" if dt == "fp8" else dt, head_tokens or toks)] += (
                        1  # tied: the embedding doubles as the head
                    )
                    tied_head = False  # one head, however many aliases of the embedding (T5's shared + embed_tokens)
                continue
            role = (
                "output-head"
                if OUTPUT_HEAD.search(name)
                else "router"
                if ROUTER.search(name)
                else "mlp"
                if FEED_FORWARD.search("." + name)
                else "attention"
                if ATTENTION.search(name)
                else "mlp"
            )
            if role == "output-head" and head_tokens:
                toks = head_tokens
            linear[(in_f, out_f, role, dt, toks)] += 1
            if stored_fp8:
                fp8_linear[(in_f, out_f, role, toks)] += 1
                fp8_bytes += t.nbytes
            weight_bytes += t.nbytes
            weight_elements += _numel(t.shape)
            continue
        if len(t.shape) in (4, 5):
            convs[(tuple(t.shape), _resolution(name, cfg), dt)] += 1
            continue
        not_measured.append({"tensor": name, "reason": f"{len(t.shape)}-D weight: not a layer mpsup knows"})
    workloads: list[Workload] = []
    for (in_f, out_f, role, dt, toks), count in linear.items():
        for tok in toks:
            workloads.append(
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
            )
    for (vocab, dim, dt, toks), count in embeddings.items():
        for tok in toks:
            workloads.append(
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
            )
    for (_prefix, proj), g in sorted(experts.items()):
        out_f, in_f = g["shape"]
        n_exp = len(g["ids"])
        for tok in tokens:
            workloads.append(
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
    for (shape, res, dt), count in convs.items():
        out_c, in_c, *kernel = shape
        pad = kernel[-1] // 2
        frames = latent_frames(cfg.frames or DEFAULT_VIDEO_FRAMES, cfg.time_factor or WAN_TIME_FACTOR)
        size = f"{res}px/{frames}f" if len(kernel) == 3 else f"{res}px"  # another frame count: another call
        if len(kernel) == 3:
            x_shape = [1, in_c, frames, res, res]
            # Causal 3D convs (Wan-style VAEs) pad time on one side only, then convolve unpadded.
            workloads.append(
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
        workloads.append(
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
    workloads += _fp8_workloads(fp8_linear)
    heads = head_tokens and any(w.role == "output-head" for w in workloads)
    notes = [HEAD_NOTE] if heads else []
    return Extraction(
        distinct(workloads), not_measured, weight_bytes, weight_elements, notes, fp8_stored_bytes=fp8_bytes
    )


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


# Activation sizes for convolutions: the config's sample_size (latent pixels) halves at each down block and
# doubles back up, 64 latent pixels without one; a 3D convolution runs over the latent frames of a video's
# frames (the stated ones, else geometry.DEFAULT_VIDEO_FRAMES).
DEFAULT_RESOLUTION = 64
MAX_TIME_FACTOR = 64  # far above any video VAE's; a config asking more is not taken at its word
DEFAULT_LEVELS = 4


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# Original (LDM/SGM) names, as ComfyUI files keep them: a UNet's input_blocks run three to a level (two res
# blocks and a downsample), output_blocks three to a level from the lowest up; a VAE's encoder.down.N and
# decoder.up.N are both indexed by level, the decoder starting from the lowest (its conv_in and the quant convs).
LDM_LEVEL = re.compile(r"^(input_blocks|output_blocks|encoder\.down|decoder\.up)\.(\d+)\.")
LDM_LOWEST = re.compile(
    r"^(middle_block\.|decoder\.conv_in\.|decoder\.mid\.|encoder\.mid\.|quant_conv\.|post_quant_conv\.)"
)


def _ldm_level(name: str, levels: int) -> int | None:
    m = LDM_LEVEL.match(name)
    if m:
        i = int(m.group(2))
        return {"input_blocks": i // 3, "output_blocks": levels - 1 - i // 3}.get(m.group(1), i)
    return levels - 1 if LDM_LOWEST.match(name) else None


# An upsampler's convolution runs after its 2x interpolation, at the size of the level above its block:
# Diffusers' `up_blocks.N.upsamplers.0.conv`, an LDM VAE's `decoder.up.N.upsample.conv`, an LDM UNet's
# `output_blocks.N.{1,2}.conv` (the Upsample module after a res block, and an attention block where present),
# a Wan VAE decoder's `up_blocks.N.upsampler.resample.1` (its upsample, then this conv).
AFTER_UPSAMPLE = re.compile(
    r"(\.upsamplers\.\d+\.conv\.|\.upsample\.conv\.|^output_blocks\.\d+\.[12]\.conv\.|\.upsampler\.resample\.1\.)"
)


def _resolution(name: str, cfg: ModelConfig) -> int:
    base = cfg.sample_size or DEFAULT_RESOLUTION
    levels = cfg.levels or DEFAULT_LEVELS
    ldm = _ldm_level(name, levels)
    depth = max(0, min(ldm, levels - 1)) if ldm is not None else _diffusers_depth(name, levels)
    if depth is None:
        return base
    if AFTER_UPSAMPLE.search(name):
        depth = max(0, depth - 1)
    return max(4, base >> depth)


# Diffusers names: down blocks from the top level down, up blocks from the lowest up (a UNet's and a VAE
# decoder's alike), the mid block and a VAE's latent-side convolutions at the lowest level.
DIFFUSERS_LEVEL = re.compile(r"(down_blocks|downsamples|up_blocks|upsamples)\.(\d+)")
DIFFUSERS_LOWEST = re.compile(r"(mid|^encoder\.conv_out\.|^encoder\.conv_norm_out\.)")


def _diffusers_depth(name: str, levels: int) -> int | None:
    """How many levels below the top this weight runs (0: full size); None: a name at no level (the top)."""
    m = DIFFUSERS_LEVEL.search(name)
    if m:
        i = int(m.group(2))
        depth = i if m.group(1).startswith("down") else levels - 1 - i
        return max(0, min(depth, levels - 1))
    return levels - 1 if DIFFUSERS_LOWEST.search(name) else None


LDM_TEXT_TOKENS = 77  # CLIP's context length, SD1.x to SDXL
LDM_VECTOR = re.compile(r"(^time_embed\.|^label_emb\.|\.emb_layers\.)")
LDM_CONTEXT = re.compile(r"\.attn2\.(to_k|to_v)\.")


def _unet_tokens(
    latent: int, levels: int, vector: re.Pattern[str], depth_of: Callable[[str, int], int | None]
) -> Callable[[str], int]:
    """A UNet's linears: the timestep (and SDXL's added) embeddings, named by `vector`, on one vector,
    cross-attention keys/values on the prompt, the rest (projections, self-attention, feed-forward) on every
    latent pixel of their level, which `depth_of` reads from the name (LDM's names or Diffusers')."""

    def rule(name: str) -> int:
        if vector.search(name):
            return 1
        if LDM_CONTEXT.search(name):
            return LDM_TEXT_TOKENS
        side = max(1, latent >> max(0, min(depth_of(name, levels) or 0, levels - 1)))
        return side * side

    return rule


DIFFUSERS_VECTOR = re.compile(r"(^time_embedding\.|^add_embedding\.|^class_embedding\.|\.time_emb_proj\.)")


def _diffusers_plan(
    config: dict[str, Any],
    resolution: tuple[int, int],
    vae_factor: int,
    component: str,
    frames: int | None = None,
    video: bool = False,
) -> tuple[ModelConfig, Callable[[str], int], str] | None:
    """A Diffusers UNet or VAE (its own config.json) at this image size: the convolutions' sizes and the
    linears' token counts a forward at that size runs, and the statement of both; None for other classes.
    `video`: a VAE with 3D convolutions, run over `frames` (bench --frames; None: the default clip) as its
    3D convolutions see them once compressed in time."""
    cls = str(config.get("_class_name", ""))
    unet = cls in UNET_CLASSES
    if not unet and not cls.startswith(VAE_CLASSES):
        return None
    source = f"{component}/config.json"
    cfg = model_config(config, source)
    levels = cfg.levels or DEFAULT_LEVELS
    width, height = resolution
    # The UNet runs on latents (the image divided by the VAE factor), the VAE from the image itself, or
    # from its patches where it first folds pixels into channels (Wan 2.2's VAE: 2x2, 16x in all).
    size = max(4, min(width, height) // (vae_factor if unet else vae_patch(config, source)))
    if unet:
        rule = _unet_tokens(size, levels, DIFFUSERS_VECTOR, _diffusers_depth)
        what = f"latent {size}px, attention over {size * size} latent tokens at the top level"
        what += f", {LDM_TEXT_TOKENS} text tokens"
    else:
        lowest = max(1, size >> (levels - 1))
        rule = lambda _name: lowest * lowest  # noqa: E731  (a VAE's only linears: its mid-block attention)
        what = f"convolutions from {size}px, mid-block attention over {lowest * lowest} tokens"
    # Layers are sized square, at the shorter side: what a non-square image's extra pixels add is not counted.
    square = "" if width == height else f" (layers at {min(width, height)}px square)"
    note = f"{component}: {cls} at {width}x{height}{square}: {what}, {levels} levels"
    if video and not unet:
        cfg = replace(cfg, frames=frames or cfg.frames, time_factor=_time_factor(config))
        note += f", {frames_note(cfg)}"
    return replace(cfg, sample_size=size, levels=levels, tie_word_embeddings=False), rule, note


def frames_note(cfg: ModelConfig) -> str:
    """The frames a video VAE's phases decode and its 3D convolutions' latent frames, as the notes state them."""
    frames = cfg.frames or DEFAULT_VIDEO_FRAMES
    latent = latent_frames(frames, cfg.time_factor or WAN_TIME_FACTOR)
    clip = "" if cfg.frames else ", a short clip (--frames sets another)"
    return f"{frames} frames ({latent} latent){clip}"


def _video_plan(
    cfg: ModelConfig, doc: dict[str, Any] | None, arch: str | None, frames: int | None, what: str
) -> tuple[ModelConfig, str]:
    """3D convolutions outside a Diffusers pipeline (a ComfyUI VAE, a bare file): a Wan VAE's, known by its names,
    compresses 4x in time, as does any other a config gives no factor for (its 3x3x3 convolutions already run
    as a causal video VAE's)."""
    factor = _time_factor(doc or {})
    cfg = replace(cfg, frames=frames or cfg.frames, time_factor=factor)
    who = "a Wan VAE (by its tensor names)" if arch == "wan-vae" else "3D convolutions taken as a video VAE's"
    return cfg, f"{what}: {who}, {factor}x in time: {frames_note(cfg)}"


def _time_factor(config: dict[str, Any]) -> int:
    """A video VAE's compression in time, from its config, as the whole-model phase's probe finds it: a Wan
    VAE's halvings (`temperal_downsample`, which its `scale_factor_temporal` only restates), else
    scale_factor_temporal or temporal_compression_ratio (CogVideoX, LTX, HunyuanVideo), else Wan's 4."""
    halvings = config.get("temperal_downsample")
    if isinstance(halvings, list) and 0 < len(halvings) <= MAX_LEVELS and all(isinstance(h, bool) for h in halvings):
        return int(2 ** sum(halvings))
    for key in ("scale_factor_temporal", "temporal_compression_ratio"):
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_TIME_FACTOR:
            return v
    return WAN_TIME_FACTOR


def _has_3d(tensors: dict[str, TensorInfo]) -> bool:
    """Whether the weights hold a 3D convolution: a video VAE's, run over frames."""
    return any(len(t.shape) == 5 for t in tensors.values())


def video_components(tensors: dict[str, TensorInfo]) -> frozenset[str]:
    """A pipeline's components (`vae/...` tensors) whose weights hold 3D convolutions: their phases run over
    frames as their layers do."""
    return frozenset(n.split("/", 1)[0] for n, t in tensors.items() if "/" in n and len(t.shape) == 5)


def _ldm_levels(tensors: dict[str, TensorInfo], arch: str) -> int:
    """Levels of an LDM UNet (three input blocks each) or VAE (one encoder.down.N each), from the names."""
    pattern = r"^input_blocks\.(\d{1,6})\." if arch == "ldm-unet" else r"^encoder\.down\.(\d{1,6})\."
    per_level = 3 if arch == "ldm-unet" else 1
    # A block index past MAX_LEVELS levels is no level of a real UNet or VAE (a 38-digit one was echoed as the
    # level count): it is left out, as a name mpsup does not place.
    found = [i for n in tensors if (m := re.match(pattern, n)) and (i := int(m.group(1))) // per_level < MAX_LEVELS]
    if not found:
        return DEFAULT_LEVELS
    return max(found) // per_level + 1


def _component_plan(
    part: dict[str, TensorInfo],
    config: dict[str, Any],
    resolution: int | tuple[int, int] | None,
    component: str,
    frames: int | None = None,
) -> tuple[dict[str, Any] | ModelConfig, Callable[[str], int] | None, str | None]:
    """A ComfyUI component (its config synthesized with the architecture at load) -> the config extraction
    uses at this resolution, the DiT token rule, and the statement of what was assumed. `frames`: a video
    VAE's (bench --frames), counted as a Diffusers VAE's are."""
    arch = config.get(ARCHITECTURE_KEY) if isinstance(config, dict) else None
    if arch == "wan-vae" or (arch is None and not config.get("_class_name") and _has_3d(part)):
        cfg, note = _video_plan(model_config(config, component), config, arch, frames, component)
        return cfg, None, note
    if not isinstance(arch, str):
        return config, None, None
    cfg = model_config(config, component)
    g = geometry(arch, part, resolution, cfg.frames)
    if arch in ("ldm-unet", "ldm-vae"):
        levels = _ldm_levels(part, arch)
        side = min(g.width, g.height)
        size = side if arch == "ldm-vae" else side // VAE_FACTOR
        note = f"{component}: {arch} at {g.width}x{g.height}: convolutions from {size}px over {levels} levels"
        rule = _unet_tokens(size, levels, LDM_VECTOR, _ldm_level) if arch == "ldm-unet" else None
        if rule:
            note += f"; attention over {size * size} latent tokens at the top level, {LDM_TEXT_TOKENS} text tokens"
        return ModelConfig(top_k=cfg.top_k, tie_word_embeddings=False, sample_size=size, levels=levels), rule, note
    return cfg, token_rule(g), f"{component}: {g.describe()}"


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
        video = _has_3d(tensors)
        if video:
            bare, said = _video_plan(bare, config, vae_architecture(set(tensors)), frames, "the model")
        ex = extract(tensors, bare, tokens=tokens, dtype=dtype)
        ex.notes[:0] = [said] if video else []
        return ex
    total = Extraction([])
    factor = pipeline_vae_factor(components)
    image = size or pipeline_resolution(components)
    for component in sorted({n.split("/", 1)[0] for n in tensors}):
        part = {n.split("/", 1)[1]: t for n, t in tensors.items() if n.startswith(component + "/")}
        own = components.get(component, {})
        video = _has_3d(part)
        plan = _diffusers_plan(own, image, factor, component, frames, video) if isinstance(own, dict) else None
        cfg, rule, note = plan or _component_plan(part, own, resolution, component, frames)
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
