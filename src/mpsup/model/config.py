"""The few config.json fields mpsup reads, checked: a wrong type is one line naming the file and key.

A config comes from a download like any other input: `"num_experts_per_tok": "two"`, `[2]`, `1e400`,
`"sample_size": "big"` or `"block_out_channels": 5` must not reach `int()` or `len()`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpsup.model.safetensors_header import ModelFormatError, shown

DEFAULT_TOP_K = 2
MAX_TOP_K = 4096
MAX_RESOLUTION = 16384  # latent pixels; activations are allocated at this size, so it is bounded
MAX_LEVELS = 64
MAX_FRAMES = 4096
# Sizes a config states, each bounded far above any real model's (Llama 3 405B: hidden 16384, FFN 53248;
# Gemma 3: a 262144 vocabulary; SDXL: 2048 cross-attention features): activations are sized from them, and a
# 0.3 MB config asking for a million channels would otherwise allocate gigabytes before anything checks it.
MAX_WIDTH = 1 << 17
MAX_VOCAB = 1 << 22
MAX_HEADS = 1 << 12
MAX_BLOCKS = 10_000
MAX_EXPERTS = 1 << 14
SIZE_FIELDS: dict[str, int] = {
    **dict.fromkeys(
        (
            "hidden_size",
            "intermediate_size",
            "moe_intermediate_size",
            "head_dim",
            "d_model",
            "d_ff",
            "d_kv",
            "n_embd",
            "in_channels",
            "out_channels",
            "latent_channels",
            "cross_attention_dim",
            "base_dim",
            "z_dim",
            "addition_time_embed_dim",
            "projection_class_embeddings_input_dim",
            "encoder_hid_dim",
            "caption_channels",
            "joint_attention_dim",
            "pooled_projection_dim",
        ),
        MAX_WIDTH,
    ),
    **dict.fromkeys(("vocab_size",), MAX_VOCAB),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_head", "num_heads"), MAX_HEADS),
    **dict.fromkeys(("num_hidden_layers", "num_layers", "n_layer", "layers_per_block", "num_res_blocks"), MAX_BLOCKS),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), MAX_EXPERTS),
}
# Head counts divide a width: 0 would fail inside the library, not here, so they start at 1.
DIVISOR_FIELDS = frozenset({"num_attention_heads", "num_key_value_heads", "n_head", "num_heads"})
# Fields that may also be a list of sizes, one per level (SD 2.x's attention_head_dim: [5, 10, 20, 20]).
LIST_SIZE_FIELDS: dict[str, int] = {
    "attention_head_dim": MAX_WIDTH,
    "num_attention_heads": MAX_HEADS,
    "block_out_channels": MAX_WIDTH,
    "dim_mult": MAX_WIDTH,
    "transformer_layers_per_block": MAX_BLOCKS,
    "layers_per_block": MAX_BLOCKS,
}


@dataclass(frozen=True)
class ModelConfig:
    top_k: int = DEFAULT_TOP_K
    tie_word_embeddings: bool = True
    sample_size: int | None = None  # None: the default resolution
    levels: int | None = None  # down/up block count; None: the default
    frames: int | None = None  # a video's frames as a user counts them; None: geometry.DEFAULT_VIDEO_FRAMES
    time_factor: int | None = None  # a video VAE's compression in time; None: Wan's (geometry.WAN_TIME_FACTOR)
    lm_head: bool | None = None  # does the model end in a language-model head? None: the config does not say
    causal: bool | None = None  # is it a causal LM, run as prefill and decode? None: the config does not say


# Architectures whose class ends in a head over the vocabulary (which a tied word embedding doubles as).
LM_HEAD_SUFFIXES = (
    "ForCausalLM",
    "LMHeadModel",
    "ForConditionalGeneration",
    "ForMaskedLM",
    "ForSeq2SeqLM",
    "WithLMHead",
    "ForPreTraining",
)
# model_type values of encoders that Transformers builds without a head unless `architectures` names one.
ENCODER_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "mpnet",
        "electra",
        "albert",
        "deberta",
        "deberta-v2",
        "camembert",
        "nomic_bert",
        "modernbert",
        "clip_text_model",
        "clip_vision_model",
        "t5encoder",
        "umt5encoder",
    }
)
MAX_ARCHITECTURES = 64
# Architectures run as prefill and decode (model/phases.py), whose head sees the last position only.
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def _bad(source: str, key: str, value: object, expected: str) -> ModelFormatError:
    return ModelFormatError(f"{source}: {key!r} must be {expected}, found {shown(value)}")


def _integer(value: object) -> int | None:
    """value as an int when it is one (2 or 2.0), else None; booleans are not integers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _positive(doc: Mapping[str, Any], key: str, source: str, maximum: int) -> int | None:
    """A positive integer at key; absent, null or 0 (how configs say "not used") give None."""
    value = doc.get(key)
    if value is None or (_integer(value) == 0):
        return None
    n = _integer(value)
    if n is None or not 0 < n <= maximum:
        raise _bad(source, key, value, f"a positive integer up to {maximum}")
    return n


def _top_k(doc: Mapping[str, Any], source: str) -> int:
    k = _positive(doc, "num_experts_per_tok", source, MAX_TOP_K)
    if k is not None:
        return k
    value = doc.get("moe_topk")
    if isinstance(value, list) and value:  # Hunyuan configs give one per layer: the largest bounds them all
        ks = [_integer(v) for v in value]
        if any(x is None or not 0 < x <= MAX_TOP_K for x in ks):
            raise _bad(source, "moe_topk", value, f"a positive integer (or a list of them) up to {MAX_TOP_K}")
        return max(x for x in ks if x is not None)
    return _positive(doc, "moe_topk", source, MAX_TOP_K) or DEFAULT_TOP_K


def _sample_size(doc: Mapping[str, Any], source: str) -> int | None:
    value = doc.get("sample_size")
    if value is None or value == 0 or value == []:
        return None
    first = value[0] if isinstance(value, list) else value  # [height, width]: the first
    n = _integer(first)
    if n is None or not 0 < n <= MAX_RESOLUTION:
        raise _bad(source, "sample_size", value, f"a positive integer (or a list of them) up to {MAX_RESOLUTION}")
    return n


def _levels(doc: Mapping[str, Any], source: str) -> int | None:
    for key in ("block_out_channels", "dim_mult"):
        value = doc.get(key)
        if value is None or value == []:
            continue
        if not isinstance(value, list) or len(value) > MAX_LEVELS or any(_integer(v) is None for v in value):
            raise _bad(source, key, value, f"a list of at most {MAX_LEVELS} integers")
        return len(value)
    return None


def _tie(doc: Mapping[str, Any], source: str) -> bool:
    if "tie_word_embeddings" not in doc:
        return True  # Transformers' default
    value = doc["tie_word_embeddings"]
    if value is None:
        return False  # what Transformers makes of an explicit null
    if not isinstance(value, bool):
        raise _bad(source, "tie_word_embeddings", value, "true or false")
    return value


def _architectures(doc: Mapping[str, Any], source: str) -> list[str]:
    archs = doc.get("architectures")
    if archs is None:
        return []
    if not isinstance(archs, list) or len(archs) > MAX_ARCHITECTURES or not all(isinstance(a, str) for a in archs):
        raise _bad(source, "architectures", archs, f"a list of at most {MAX_ARCHITECTURES} class names")
    return archs


def _causal(doc: Mapping[str, Any], source: str) -> bool | None:
    """From `architectures` (LlamaForCausalLM: yes; BertForMaskedLM: no); None where it names none."""
    archs = _architectures(doc, source)
    return any(a.endswith(CAUSAL_SUFFIXES) for a in archs) if archs else None


def _lm_head(doc: Mapping[str, Any], source: str) -> bool | None:
    """From `architectures` (BertModel: no; LlamaForCausalLM: yes), else an encoder's `model_type`."""
    archs = _architectures(doc, source)
    if archs:
        return any(a.endswith(LM_HEAD_SUFFIXES) for a in archs)
    model_type = doc.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise _bad(source, "model_type", model_type, "a string")
    return False if model_type in ENCODER_TYPES else None


def _size_fields(doc: Mapping[str, Any], source: str) -> None:
    """Every size field the worker or the estimates read, bounded: a number (or, where configs give one per
    level, a list of numbers) from 0 to its maximum. Absent and null stay as they are (the library's default)."""
    for key, value in doc.items():  # in the file's order, so the first bad field is the one named
        if value is None or (key not in SIZE_FIELDS and key not in LIST_SIZE_FIELDS):
            continue
        most = max(SIZE_FIELDS.get(key, 0), LIST_SIZE_FIELDS.get(key, 0))
        least = 1 if key in DIVISOR_FIELDS else 0
        listed = key in LIST_SIZE_FIELDS and isinstance(value, list)
        items = value if listed else [value]
        if (listed and len(items) > MAX_LEVELS) or not all(
            (n := _integer(v)) is not None and least <= n <= most for v in items
        ):
            what = f"a whole number from {least} to {most:,}" + (
                " (or a list of them)" if key in LIST_SIZE_FIELDS else ""
            )
            raise _bad(source, key, value, what)


def model_config(doc: Mapping[str, Any] | None, source: str) -> ModelConfig:
    """The fields of a config.json (already parsed) that extraction uses, each checked, and every size field
    bounded (SIZE_FIELDS)."""
    if doc is None:
        return ModelConfig()
    if not isinstance(doc, Mapping):
        raise ModelFormatError(f"{source}: a model config must be a JSON object, found {shown(doc)}")
    cfg = ModelConfig(
        top_k=_top_k(doc, source),
        tie_word_embeddings=_tie(doc, source),
        sample_size=_sample_size(doc, source),
        levels=_levels(doc, source),
        frames=_positive(doc, "mpsup_frames", source, MAX_FRAMES),
        lm_head=_lm_head(doc, source),
        causal=_causal(doc, source),
    )
    _size_fields(doc, source)  # after the typed fields, whose own wording names what each must be
    return cfg


DEFAULT_VAE_FACTOR = 8  # a latent-diffusion UNet's, where its pipeline holds no VAE to say
DEFAULT_PIPELINE_SIDE = 512  # SD1.x's image size: a pipeline whose configs give none
MIN_SIDE, SIDE_STEP, MAX_SIDE = 16, 16, 16384  # what --resolution accepts
# A size read from a downloaded config is a default, not a request: past this side it is capped (a
# sample_size of 2048 would otherwise set a 16384x16384 VAE decode running); --resolution goes further.
MAX_DEFAULT_SIDE = 2048
MAX_PATCH = 16
VAE_CLASSES = ("Autoencoder", "VQModel")
UNET_CLASSES = ("UNet2DConditionModel", "UNet2DModel")
LATENT_UNETS = ("UNet2DConditionModel",)


def _vae(components: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    return next(
        (
            (name, c)
            for name, c in sorted(components.items())
            if isinstance(c, Mapping) and str(c.get("_class_name", "")).startswith(VAE_CLASSES)
        ),
        None,
    )


def vae_patch(doc: Mapping[str, Any], source: str) -> int:
    """Pixels a VAE folds into channels per side before its first convolution (Wan 2.2's: 2); 1 for most."""
    return _positive(doc, "patch_size", source, MAX_PATCH) or 1


def pipeline_vae_factor(components: Mapping[str, Any]) -> int:
    """How much a Diffusers pipeline's VAE shrinks each side: 2 per level below its first. Without a VAE, a
    conditional UNet still runs on latents (8x, as every latent-diffusion VAE); a UNet2DModel runs on pixels."""
    found = _vae(components)
    if found is None:
        latent = any(isinstance(c, Mapping) and c.get("_class_name") in LATENT_UNETS for c in components.values())
        return DEFAULT_VAE_FACTOR if latent else 1
    levels = _levels(found[1], f"{found[0]}/config.json")
    return 2 ** (levels - 1) if levels else DEFAULT_VAE_FACTOR


def pipeline_resolution(components: Mapping[str, Any]) -> tuple[int, int]:
    """The image size (pixels) a Diffusers pipeline is made for when the user names none: its UNet's latent
    sample_size times the VAE factor, else its VAE's own sample_size, else SD1.x's 512, capped at
    MAX_DEFAULT_SIDE; the layers and the whole-model phases both use it, so the two describe one run."""
    side = None
    for name, c in sorted(components.items()):
        if isinstance(c, Mapping) and c.get("_class_name") in UNET_CLASSES:
            latent = _sample_size(c, f"{name}/config.json")
            if latent:
                side = latent * pipeline_vae_factor(components)
                break
    if side is None and (found := _vae(components)) is not None:
        side = _sample_size(found[1], f"{found[0]}/config.json")
    side = max(MIN_SIDE, min(MAX_DEFAULT_SIDE, (side or DEFAULT_PIPELINE_SIDE) // SIDE_STEP * SIDE_STEP))
    return side, side
