"""The bundled suite: layer shapes of real models, MoE, FP8, padding, roofline probes, Metal kernels.

Dimensions are the published ones of each model; where ../shared/data/model-configs has the model's
config.json, tests check these numbers against it."""

from __future__ import annotations

from dataclasses import dataclass

from mpsup.bench.workloads import ITEMSIZE, Workload


@dataclass(frozen=True)
class LinearShape:
    in_features: int
    out_features: int
    role: str  # attention, mlp, output-head, router, projection
    sources: tuple[str, ...]


@dataclass(frozen=True)
class DecoderDims:
    model: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    fused_qkv: bool = False
    fused_gate_up: bool = False


DECODERS: tuple[DecoderDims, ...] = (
    DecoderDims("Llama-3-8B", 4096, 14336, 32, 8, 128, 128256),
    DecoderDims("Llama-3-70B", 8192, 28672, 64, 8, 128, 128256),
    DecoderDims("Mistral-7B", 4096, 14336, 32, 8, 128, 32000),
    DecoderDims("Qwen2.5-7B", 3584, 18944, 28, 4, 128, 152064),
    DecoderDims("Qwen2.5-0.5B", 896, 4864, 14, 2, 64, 151936),
    DecoderDims("Gemma-2-2B", 2304, 9216, 8, 4, 256, 256000),
    DecoderDims("Phi-3-mini", 3072, 8192, 32, 32, 96, 32064, fused_qkv=True, fused_gate_up=True),
)

# Encoders and diffusion models: (in, out, role, model).
OTHER_LINEARS: tuple[tuple[int, int, str, str], ...] = (
    (384, 384, "attention", "MiniLM-L6"),
    (384, 1536, "mlp", "MiniLM-L6"),
    (1536, 384, "mlp", "MiniLM-L6"),
    (768, 768, "attention", "BERT-base"),
    (768, 3072, "mlp", "BERT-base"),
    (3072, 768, "mlp", "BERT-base"),
    (320, 320, "attention", "SD-2.1-UNet"),
    (1024, 320, "attention", "SD-2.1-UNet"),  # cross-attention k/v from the 1024-d text encoder
    (320, 2560, "mlp", "SD-2.1-UNet"),  # GEGLU: 2 x 4 x 320
    (1280, 320, "mlp", "SD-2.1-UNet"),
    (640, 640, "attention", "SD-2.1-UNet"),
    (1280, 1280, "attention", "SD-2.1-UNet"),
    (1280, 10240, "mlp", "SD-2.1-UNet"),
    (5120, 1280, "mlp", "SD-2.1-UNet"),
    (3072, 9216, "attention", "FLUX.1-dev"),  # fused qkv, 24 heads x 128
    (3072, 3072, "attention", "FLUX.1-dev"),
    (3072, 12288, "mlp", "FLUX.1-dev"),
    (12288, 3072, "mlp", "FLUX.1-dev"),
    (3072, 18432, "projection", "FLUX.1-dev"),  # adaLN modulation, 6 x hidden
    (3072, 21504, "projection", "FLUX.1-dev"),  # single block: qkv + mlp in one linear
    (15360, 3072, "projection", "FLUX.1-dev"),
    (3072, 14336, "mlp", "Wan2.2-TI2V-5B-DiT"),
    (14336, 3072, "mlp", "Wan2.2-TI2V-5B-DiT"),
    (4096, 8, "router", "Mixtral-8x7B"),
    (2048, 4096, "attention", "Qwen3-30B-A3B"),  # q: 32 heads x 128 from a 2048 hidden
    (2048, 512, "attention", "Qwen3-30B-A3B"),
    (4096, 2048, "attention", "Qwen3-30B-A3B"),
    (2048, 128, "router", "Qwen3-30B-A3B"),
    (2048, 151936, "output-head", "Qwen3-30B-A3B"),
)


@dataclass(frozen=True)
class MoeDims:
    model: str
    hidden: int
    expert_intermediate: int
    experts: int
    top_k: int


MOES: tuple[MoeDims, ...] = (
    MoeDims("Mixtral-8x7B", 4096, 14336, 8, 2),
    MoeDims("Qwen3-30B-A3B", 2048, 768, 128, 8),
)

# Below this many weights a layer is "small": the class the 2.15 notes say gained most.
SMALL_LAYER_WEIGHTS = 1 << 24


def decoder_linears(d: DecoderDims) -> list[tuple[int, int, str]]:
    q = d.heads * d.head_dim
    kv = d.kv_heads * d.head_dim
    shapes = []
    if d.fused_qkv:
        shapes.append((d.hidden, q + 2 * kv, "attention"))
    else:
        shapes += [(d.hidden, q, "attention"), (d.hidden, kv, "attention")]
    shapes.append((q, d.hidden, "attention"))
    shapes.append((d.hidden, 2 * d.intermediate if d.fused_gate_up else d.intermediate, "mlp"))
    shapes.append((d.intermediate, d.hidden, "mlp"))
    shapes.append((d.hidden, d.vocab, "output-head"))
    return shapes


def linear_shapes() -> list[LinearShape]:
    """Unique (in, out) shapes, each naming every model it comes from, in first-seen order."""
    seen: dict[tuple[int, int], LinearShape] = {}
    entries = [(i, o, r, d.model) for d in DECODERS for i, o, r in decoder_linears(d)]
    entries += list(OTHER_LINEARS)
    for i, o, role, model in entries:
        key = (i, o)
        if key in seen:
            old = seen[key]
            if model not in old.sources:
                seen[key] = LinearShape(i, o, old.role, (*old.sources, model))
        else:
            seen[key] = LinearShape(i, o, role, (model,))
    return list(seen.values())


def size_tag(shape: LinearShape) -> str:
    if shape.role == "output-head":
        return "output-head"
    return "small" if shape.in_features * shape.out_features < SMALL_LAYER_WEIGHTS else "large"


def linear_workloads(tokens: tuple[int, ...], dtype: str = "bf16") -> list[Workload]:
    out = []
    es = ITEMSIZE[dtype]
    for s in linear_shapes():
        for t in tokens:
            phase = "decode" if t == 1 else "prefill"
            mem = (t * s.in_features + s.in_features * s.out_features + t * s.out_features) * es
            out.append(Workload(
                name=f"linear/{s.in_features}x{s.out_features}/t{t}",
                kind="linear", part="linear", dtype=dtype,
                params={"tokens": t, "in_features": s.in_features, "out_features": s.out_features},
                tags=(size_tag(s), phase, s.role), source=", ".join(s.sources), memory_bytes=mem, role=s.role,
            ))
    return out


def moe_workloads(tokens: tuple[int, ...]) -> list[Workload]:
    out = []
    for m in MOES:
        for t in tokens:
            for proj, (k, n) in (("gate_up", (m.hidden, m.expert_intermediate)),
                                 ("down", (m.expert_intermediate, m.hidden))):
                routed = t * m.top_k
                mem = (routed * k + m.experts * n * k + routed * n) * 2
                for method in ("grouped", "loop"):
                    out.append(Workload(
                        name=f"moe/{m.model}/{proj}/t{t}/{method}",
                        kind="grouped_mm", part="moe", dtype="bf16",
                        params={"tokens": t, "top_k": m.top_k, "experts": m.experts, "in_features": k,
                                "out_features": n, "method": method},
                        tags=(method, "decode" if t == 1 else "prefill"), source=m.model, memory_bytes=mem,
                        role="experts",
                    ))
    return out


def fp8_workloads(device: str) -> list[Workload]:
    numel = 1 << 24 if device != "cpu" else 1 << 20
    out = [
        Workload(f"fp8/cast/{d}/{numel}", "fp8_cast", "fp8", "bf16", {"numel": numel, "direction": d},
                 tags=("fp8",), source="storage: 1 byte vs 2", memory_bytes=numel * 3)
        for d in ("to_fp8", "to_bf16")
    ]
    # fp8 GEMMs want the token dimension in multiples of 16, so decode is measured at 16.
    for t, k, n in ((16, 4096, 4096), (512, 4096, 14336)):
        out.append(Workload(f"fp8/scaled_mm/{k}x{n}/t{t}", "scaled_mm", "fp8", "fp8",
                            {"tokens": t, "in_features": k, "out_features": n},
                            tags=("fp8",), source="Llama-3-8B", memory_bytes=k * n + 2 * t * (k + n)))
    return out


# Wan2.2-TI2V-5B VAE decoder: base_dim 160 and dim_mult (1, 2, 4, 4) in its config give widths of
# 640, 320 and 160 channels; each causal 3x3x3 conv is preceded by a constant pad of
# (1, 1, 1, 1, 2, 0). A 28-tile decode called that pad 8,764 times.
WAN_VAE_BASE_DIM = 160
WAN_VAE_DIM_MULT = (1, 2, 4, 4)
WAN_PAD_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    (WAN_VAE_BASE_DIM * 4, 4, 32, 32),
    (WAN_VAE_BASE_DIM * 4, 4, 64, 64),
    (WAN_VAE_BASE_DIM * 2, 4, 128, 128),
    (WAN_VAE_BASE_DIM * 1, 4, 256, 256),
)


def pad_workloads(device: str) -> list[Workload]:
    out = []
    shapes = WAN_PAD_SHAPES if device != "cpu" else WAN_PAD_SHAPES[:2]
    for c, t, h, w in shapes:
        shape = [1, c, t, h, w]
        mem = 2 * (c * t * h * w + c * (t + 2) * (h + 2) * (w + 2))
        out.append(Workload(f"pad/wan-vae/{c}x{t}x{h}x{w}", "pad", "pad", "bf16",
                            {"shape": shape, "pad": [1, 1, 1, 1, 2, 0]},
                            tags=("pad", "wan-vae"), source="Wan2.2-TI2V-5B VAE decoder", memory_bytes=mem))
    return out


def roofline_workloads(device: str) -> list[Workload]:
    big = device != "cpu"
    copy_bytes = (1 << 30) if big else (1 << 26)
    n = 8192 if big else 1024
    return [
        Workload(f"roofline/copy/{copy_bytes >> 20}MiB", "copy", "roofline", "fp32", {"bytes": copy_bytes},
                 tags=("bandwidth",), source="device-to-device copy", memory_bytes=2 * copy_bytes),
        Workload(f"roofline/matmul/bf16/{n}", "matmul", "roofline", "bf16", {"n": n},
                 tags=("compute",), source="square bf16 matmul", memory_bytes=3 * n * n * 2),
    ]


def metal_workloads() -> list[Workload]:
    from mpsup.metal import load_manifest

    out = []
    for entry in load_manifest():
        if entry["name"] in ("copy_f32", "fma_chain"):
            grid = int(entry["grid"])
            out.append(Workload(f"metal/{entry['name']}", "metal", "roofline", entry["output"]["dtype"],
                                {"kernel": entry, "grid": grid}, tags=("metal",), source="bundled Metal kernel",
                                memory_bytes=grid * 8))
    return out


def default_tokens(device: str) -> tuple[int, int]:
    # A 512-token prefill of a 128k-vocab head is a teraflop: fine on a GPU, minutes on a CPU.
    return (1, 512) if device != "cpu" else (1, 16)


def build_suite(device: str, tokens: tuple[int, ...] | None = None) -> list[Workload]:
    toks = tokens or default_tokens(device)
    return [
        *linear_workloads(toks),
        *moe_workloads(toks),
        *fp8_workloads(device),
        *pad_workloads(device),
        *roofline_workloads(device),
        *metal_workloads(),
    ]


SMOKE_FEATURES: tuple[str, ...] = (
    "fp8_cast", "fp8_copy", "fp8_cat", "fp8_constant_pad", "scaled_mm_fp8",
    "grouped_mm_bf16", "grouped_mm_fp16", "grouped_mm_fp32", "constant_pad_bf16_5d", "int_mm", "metal_kernels",
)
