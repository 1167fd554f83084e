"""The bundled suite: layer shapes of real models, MoE, FP8, padding, roofline probes, Metal kernels.

Dimensions are the published ones of each model; where ../shared/data/model-configs has the model's
config.json, tests check these numbers against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpsup.workloads import ITEMSIZE, Workload


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
            out.append(
                Workload(
                    name=f"linear/{s.in_features}x{s.out_features}/t{t}",
                    kind="linear",
                    part="linear",
                    dtype=dtype,
                    params={"tokens": t, "in_features": s.in_features, "out_features": s.out_features},
                    tags=(size_tag(s), phase, s.role),
                    source=", ".join(s.sources),
                    memory_bytes=mem,
                    role=s.role,
                )
            )
    return out


def _moe(
    m: MoeDims, t: int, proj: str, k: int, n: int, method: str, dtype: str = "bf16", routing: str = "even"
) -> Workload:
    routed = t * m.top_k
    mem = (routed * k + m.experts * n * k + routed * n) * ITEMSIZE[dtype]
    suffix = "" if (dtype, routing) == ("bf16", "even") else f"/{dtype}" if routing == "even" else f"/{routing}"
    params: dict[str, object] = {
        "tokens": t,
        "top_k": m.top_k,
        "experts": m.experts,
        "in_features": k,
        "out_features": n,
        "method": method,
    }
    if routing != "even":
        params["routing"] = routing
    tags = [method, "decode" if t == 1 else "prefill"]
    if dtype != "bf16":
        tags.append(dtype)
    if routing != "even":
        tags.append(f"{routing}-routing")
    return Workload(
        name=f"moe/{m.model}/{proj}/t{t}/{method}{suffix}",
        kind="grouped_mm",
        part="moe",
        dtype=dtype,
        params=params,
        tags=tuple(tags),
        source=m.model,
        memory_bytes=mem,
        role="experts",
    )


def moe_workloads(tokens: tuple[int, ...], device: str = "mps") -> list[Workload]:
    """Grouped matmul against a per-expert loop in bf16; then what 2.15 added on MPS: fp16 and fp32
    grouped matmul (GPU only: a CPU's fp16 matmul takes seconds), and routing skewed as real
    routers skew it, since 2.15's kernel sizes its tile from the average rows per group."""
    out = []
    for m in MOES:
        for t in tokens:
            for proj, (k, n) in (
                ("gate_up", (m.hidden, m.expert_intermediate)),
                ("down", (m.expert_intermediate, m.hidden)),
            ):
                for method in ("grouped", "loop"):
                    out.append(_moe(m, t, proj, k, n, method))
            k, n = m.hidden, m.expert_intermediate
            if t * m.top_k >= 2 * m.experts:  # fewer routed rows than that leave nothing to skew
                out.append(_moe(m, t, "gate_up", k, n, "grouped", routing="skewed"))
            if device != "cpu":
                out += [_moe(m, t, "gate_up", k, n, "grouped", dtype=dt) for dt in ("fp16", "fp32")]
    return out


def fp8_workloads(device: str) -> list[Workload]:
    """FP8 as a memory trade: every FP8 matmul has a BF16 twin of the same shape, so the table shows
    the speed paid for weights half the size (2.15's own figures: about a third less memory, at
    0.12x-0.95x the speed of BF16). Nothing here predicts a speedup."""
    numel = 1 << 24 if device != "cpu" else 1 << 20
    out = [
        Workload(
            f"fp8/cast/{d}/{numel}",
            "fp8_cast",
            "fp8",
            "bf16",
            {"numel": numel, "direction": d},
            tags=("fp8",),
            source="storage: 1 byte vs 2",
            memory_bytes=numel * 3,
        )
        for d in ("to_fp8", "to_bf16")
    ]
    # 1 token: MPS's FP8 decode kernels take 1-4 rows; CUDA's FP8 GEMMs want multiples of 16, so
    # CUDA decodes at 16. A CPU emulates FP8 matmul (a tenth of a second at 16x4096x4096): small shapes only.
    decode = 16 if device == "cuda" else 1
    cases = [(decode, 4096, 4096, "tensorwise"), (decode, 4096, 4096, "rowwise")]
    if decode != 16:
        cases.append((16, 4096, 4096, "tensorwise"))
    if device != "cpu":
        cases += [(512, 4096, 14336, "tensorwise"), (512, 4096, 14336, "rowwise")]
    seen_twins = set()
    for t, k, n, recipe in cases:
        kind = "scaled_mm" if recipe == "tensorwise" else "scaled_mm-rowwise"
        twin = f"fp8/bf16-twin/{k}x{n}/t{t}"
        saved = k * n
        out.append(
            Workload(
                f"fp8/{kind}/{k}x{n}/t{t}",
                "scaled_mm",
                "fp8",
                "fp8",
                {"tokens": t, "in_features": k, "out_features": n, "recipe": recipe},
                tags=("fp8", recipe, "memory-trade", "decode" if t < 16 else "prefill"),
                source=f"Llama-3-8B; weights {saved >> 20} MiB vs {2 * saved >> 20} MiB in bf16 (twin: {twin})",
                memory_bytes=k * n + 2 * t * (k + n),
            )
        )
        if twin not in seen_twins:
            seen_twins.add(twin)
            out.append(
                Workload(
                    twin,
                    "linear",
                    "fp8",
                    "bf16",
                    {"tokens": t, "in_features": k, "out_features": n},
                    tags=("fp8-twin", "memory-trade", "decode" if t < 16 else "prefill"),
                    source="the bf16 layer each FP8 matmul of this shape replaces",
                    memory_bytes=2 * (k * n + t * (k + n)),
                )
            )
    # An FP8 embedding table: the gather 2.15 added for float8_e4m3fn on MPS; a BF16 twin beside it.
    vocab = 128256 if device != "cpu" else 8192
    for t in (1, 512) if device != "cpu" else (1,):
        for dt in ("fp8", "bf16"):
            out.append(
                Workload(
                    f"fp8/embedding/{dt}/{vocab}x4096/t{t}",
                    "embedding",
                    "fp8",
                    dt,
                    {"tokens": t, "num_embeddings": vocab, "embedding_dim": 4096},
                    tags=("fp8" if dt == "fp8" else "fp8-twin", "memory-trade", "gather"),
                    source="Llama-3-8B token embedding" + ("" if device != "cpu" else " (vocab cut to 8192 on CPU)"),
                    memory_bytes=vocab * 4096 * 2 + 4096 * t * ITEMSIZE[dt],
                )
            )
    return out


def int8_workloads(tokens: tuple[int, ...], device: str) -> list[Workload]:
    """`torch._int_mm` (int8 x int8 -> int32): an MPS kernel from 2.15, which ComfyUI re-enabled int8
    for. Compare with the same shapes in the BF16 linear table. CUDA's kernel wants more than 16 rows."""
    out = []
    toks = sorted({max(t, 32) if device == "cuda" else t for t in tokens})
    for t in toks:
        for k, n in ((4096, 4096), (4096, 14336), (3072, 12288)):
            out.append(
                Workload(
                    f"int8/int_mm/{k}x{n}/t{t}",
                    "int_mm",
                    "int8",
                    "int8",
                    {"tokens": t, "in_features": k, "out_features": n},
                    tags=("int8", "decode" if t == 1 else "prefill"),
                    source="Llama-3-8B" if k == 4096 else "FLUX.1-dev",
                    memory_bytes=t * k + k * n + 4 * t * n,
                )
            )
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
        out.append(
            Workload(
                f"pad/wan-vae/{c}x{t}x{h}x{w}",
                "pad",
                "pad",
                "bf16",
                {"shape": shape, "pad": [1, 1, 1, 1, 2, 0]},
                tags=("pad", "wan-vae"),
                source="Wan2.2-TI2V-5B VAE decoder",
                memory_bytes=mem,
            )
        )
    return out


def conv3d_workloads(device: str) -> list[Workload]:
    """The Wan2.2 VAE decoder's causal 3x3x3 convolutions, on the activations the pads above make:
    2.15 moved conv3d on MPS to Metal (PR 188802, 1.8x-4.4x there). On a CPU one small shape at
    the real width stands in (the real ones are 0.4 TFLOP each)."""
    shapes = WAN_PAD_SHAPES if device != "cpu" else ((WAN_VAE_BASE_DIM, 2, 16, 16),)
    out = []
    for c, t, h, w in shapes:
        x = [1, c, t + 2, h + 2, w + 2]  # already padded by the causal pad: the conv itself pads nothing
        mem = 2 * (c * (t + 2) * (h + 2) * (w + 2) + c * c * 27 + c * t * h * w)
        out.append(
            Workload(
                f"conv3d/wan-vae/{c}x{t}x{h}x{w}",
                "conv",
                "conv3d",
                "bf16",
                {"input_shape": x, "weight_shape": [c, c, 3, 3, 3], "padding": 0},
                tags=("conv3d", "wan-vae"),
                source="Wan2.2-TI2V-5B VAE decoder",
                memory_bytes=mem,
            )
        )
    return out


def roofline_workloads(device: str) -> list[Workload]:
    big = device != "cpu"
    copy_bytes = (1 << 30) if big else (1 << 26)
    n = 8192 if big else 1024
    # fp16 matmul only on GPUs: a CPU without fp16 units takes seconds for one 1024^3 product.
    dtypes = ("bf16", "fp16", "fp32") if big else ("bf16", "fp32")
    return [
        Workload(
            f"roofline/copy/{copy_bytes >> 20}MiB",
            "copy",
            "roofline",
            "fp32",
            {"bytes": copy_bytes},
            tags=("bandwidth",),
            source="device-to-device copy",
            memory_bytes=2 * copy_bytes,
        ),
        *[
            Workload(
                f"roofline/matmul/{dt}/{n}",
                "matmul",
                "roofline",
                dt,
                {"n": n},
                tags=("compute",),
                source=f"square {dt} matmul",
                memory_bytes=3 * n * n * ITEMSIZE[dt],
            )
            for dt in dtypes
        ],
    ]


def metal_workloads() -> list[Workload]:
    """The roofline of this Mac from the bundled Metal kernels: read, write and copy bandwidth, FP32
    FMA throughput, FP16/BF16 simdgroup-matrix throughput ("unsupported" off MPS)."""
    from mpsup.metal import load_manifest

    def buffer_len(spec: dict[str, Any], grid: int) -> int:  # as the worker sizes them (worker/metal.py)
        return int(spec["size"]) if "size" in spec else max(1, int(grid * float(spec.get("per_thread", 1))))

    out = []
    for entry in load_manifest():
        if not entry.get("roofline"):
            continue  # reference kernels: checked in the smoke tests, not timed
        grid = int(entry["grid"])
        mem = sum(buffer_len(b, grid) * ITEMSIZE[b["dtype"]] for b in (*entry["inputs"], entry["output"]))
        out.append(
            Workload(
                f"metal/{entry['name']}",
                "metal",
                "roofline",
                entry["output"]["dtype"],
                {"kernel": entry, "grid": grid},
                tags=("metal", entry["roofline"]),
                source="bundled Metal kernel",
                memory_bytes=mem,
            )
        )
    return out


def default_tokens(device: str) -> tuple[int, int]:
    # A 512-token prefill of a 128k-vocab head is a teraflop: fine on a GPU, minutes on a CPU.
    return (1, 512) if device != "cpu" else (1, 16)


def build_suite(device: str, tokens: tuple[int, ...] | None = None) -> list[Workload]:
    toks = tokens or default_tokens(device)
    return [
        *linear_workloads(toks),
        *moe_workloads(toks, device),
        *fp8_workloads(device),
        *int8_workloads(toks, device),
        *pad_workloads(device),
        *conv3d_workloads(device),
        *roofline_workloads(device),
        *metal_workloads(),
    ]


SMOKE_FEATURES: tuple[str, ...] = (
    "fp8_cast",
    "fp8_copy",
    "fp8_cat",
    "fp8_constant_pad",
    "fp8_embedding",
    "fp8_index",
    "fp8_eq_ne",
    "fp8_eye",
    "scaled_mm_fp8",
    "scaled_mm_fp8_rowwise",
    "scaled_mm_fp8_decode",
    "grouped_mm_bf16",
    "grouped_mm_fp16",
    "grouped_mm_fp32",
    "grouped_mm_uneven",
    "constant_pad_bf16_5d",
    "constant_pad_bf16_5d_64k",
    "fp8_constant_pad_5d_64k",
    "int_mm",
    "compile_small_model",
    "metal_kernels",
)
