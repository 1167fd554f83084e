"""A workload's memory is priced from every tensor the worker builds for it, output included (issue 26: a
1 MiB safetensors file with one conv weight was priced at 1 MiB and allocated 4 GiB a call)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mpsup.bench.runner import _guard
from mpsup.model.extract import extract, extract_model
from mpsup.model.load import load_model
from mpsup.model.safetensors_header import TensorInfo
from mpsup.worker.build import build
from mpsup.worker.device import Device
from mpsup.workloads import Workload, priced_bytes

GiB = 1 << 30

SMALL = [
    ("linear", "bf16", {"tokens": 3, "in_features": 16, "out_features": 24}),
    ("grouped_mm", "bf16", {"tokens": 8, "top_k": 2, "experts": 4, "in_features": 16, "out_features": 8}),
    ("fp8_cast", "bf16", {"numel": 1000, "direction": "to_bf16"}),
    ("fp8_cast", "bf16", {"numel": 1000, "direction": "to_fp8"}),
    ("int_mm", "int8", {"tokens": 32, "in_features": 32, "out_features": 32}),
    ("matmul", "fp32", {"n": 20}),
    ("copy", "fp16", {"numel": 500}),
    ("embedding", "bf16", {"tokens": 7, "num_embeddings": 100, "embedding_dim": 12}),
    ("pad", "bf16", {"shape": [1, 3, 4, 5, 6], "pad": [1, 1, 1, 1, 2, 0]}),
    ("conv", "bf16", {"weight_shape": [4096, 1, 1, 1], "input_shape": [1, 1, 16, 16], "padding": 0}),
    ("conv", "fp32", {"weight_shape": [8, 4, 3, 3], "input_shape": [1, 4, 10, 12], "padding": 1}),
    ("conv", "bf16", {"weight_shape": [6, 3, 3, 3, 3], "input_shape": [1, 3, 5, 8, 8], "padding": 0}),
]


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


@pytest.mark.parametrize(("kind", "dtype", "params"), SMALL, ids=[f"{k}-{i}" for i, (k, _d, _p) in enumerate(SMALL)])
def test_price_counts_every_tensor_the_worker_builds_and_the_output(kind: str, dtype: str, params: dict):
    built = build({"name": "w", "kind": kind, "dtype": dtype, "params": params}, Device("cpu"))
    held = {t.data_ptr(): t.numel() * t.element_size() for t in _tensors(built.keep)}
    out = built.fn()
    held.setdefault(out.data_ptr(), out.numel() * out.element_size())  # a copy's output is its kept destination
    actual = sum(held.values())
    priced = priced_bytes(kind, dtype, params)
    assert priced is not None and actual <= priced <= actual + 64, (priced, actual)
    assert Workload("w", kind, "model", dtype, params).memory_bytes == priced


def test_a_makers_larger_figure_is_kept_a_smaller_one_is_not():
    p = {"tokens": 1, "in_features": 8, "out_features": 8}
    assert Workload("w", "linear", "linear", "fp32", p, memory_bytes=1 << 40).memory_bytes == 1 << 40
    assert Workload("w", "linear", "linear", "fp32", p, memory_bytes=1).memory_bytes == (8 + 64 + 8) * 4
    # Params it cannot read (a hand-made test workload, a kind the worker sizes itself) keep the maker's figure.
    assert Workload("w", "linear", "linear", "bf16", {"tokens": 1}, memory_bytes=5).memory_bytes == 5
    assert Workload("w", "metal", "metal", "fp32", {"kernel": {}}, memory_bytes=7).memory_bytes == 7
    assert priced_bytes("conv", "bf16", {"weight_shape": [1, 1, "3"], "input_shape": [1, 1, 4]}) is None


def _bomb(path: Path) -> Path:
    """One BF16 tensor `conv.weight` of shape (2^19, 1, 1, 1): a 1 MiB file."""
    header = json.dumps(
        {"conv.weight": {"dtype": "BF16", "shape": [1 << 19, 1, 1, 1], "data_offsets": [0, 1 << 20]}}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(1 << 20))
    return path


def test_a_1_mib_conv_is_priced_with_its_4_gib_output_and_refused_where_it_does_not_fit(tmp_path: Path):
    model = load_model(_bomb(tmp_path / "bomb.safetensors"))
    (conv,) = [w for w in extract_model(model.tensors, model.config, tokens=(1,)).workloads if w.kind == "conv"]
    output = (1 << 19) * 64 * 64 * 2  # 1 x 524288 x 64 x 64 in bf16, made by every call
    assert conv.memory_bytes >= output + (1 << 20) and conv.memory_bytes < output + (2 << 20)
    # The guard runs before the worker builds anything: an 8 GB Mac (5.3 GB recommended) refuses it now.
    session = SimpleNamespace(facts={"memory_limit": int(5.3e9)})
    reason = _guard(conv, [session], 0.5)  # type: ignore[list-item]
    assert reason is not None and reason.startswith("needs 4.00 GiB")


def test_every_extracted_kind_is_priced_from_its_tensors():
    tensors = {
        "model.embed_tokens.weight": TensorInfo("model.embed_tokens.weight", "BF16", (1000, 64), 128_000),
        "model.layers.0.mlp.up_proj.weight": TensorInfo("model.layers.0.mlp.up_proj.weight", "BF16", (256, 64), 0),
        "lm_head.weight": TensorInfo("lm_head.weight", "F8_E4M3", (1000, 64), 64_000),
        "vae.conv_in.weight": TensorInfo("vae.conv_in.weight", "BF16", (128, 4, 3, 3), 0),
        "vae.up.conv.weight": TensorInfo("vae.up.conv.weight", "BF16", (16, 8, 3, 3, 3), 0),
    }
    ex = extract(tensors, None, tokens=(1, 512))
    kinds = {w.kind for w in ex.workloads}
    assert {"linear", "embedding", "conv", "pad", "scaled_mm", "fp8_cast"} <= kinds
    for w in ex.workloads:
        assert w.memory_bytes == priced_bytes(w.kind, w.dtype, w.params), w.name


def test_the_1_mib_conv_at_an_assumed_size_is_refused_by_what_its_input_justifies(tmp_path: Path):
    """Issue 39 item 4: no config and no --resolution, so its 64 px is mpsup's assumption; 4 GiB of activations
    for 1 MiB of weights is refused in one line naming the option that states the size, on any machine."""
    from mpsup.model.sources import open_model

    bomb = _bomb(tmp_path / "bomb.safetensors")
    (conv,) = open_model(bomb, tokens=(1,)).workloads
    assert conv.sized_by == "--resolution" and conv.justified == 1 << 30
    huge = SimpleNamespace(facts={"memory_limit": 1 << 50, "device": "cpu"})
    reason = _guard(conv, [huge], 0.5, "cpu")  # type: ignore[list-item]
    assert reason is not None and "\n" not in reason
    assert reason.startswith("needs 4.00 GiB at sizes no option stated, over the 1.00 GiB its input justifies")
    assert reason.endswith("(state the size with --resolution to measure it)")
    # Stated, the size is the user's: only the machine bounds it, at the CPU's float32 working size of bf16.
    (stated,) = open_model(bomb, tokens=(1,), resolution=64).workloads
    assert not stated.sized_by and stated.memory_bytes == conv.memory_bytes
    assert _guard(stated, [huge], 0.5, "cpu") is None  # type: ignore[list-item]
    box = SimpleNamespace(facts={"memory_limit": 20 * GiB, "device": "cpu"})
    why = _guard(stated, [box], 0.5, "cpu")  # type: ignore[list-item]
    assert why is not None and why.startswith("needs 14.00 GiB (bf16 working size on cpu), over 50% of the 20.0 GiB")
    # --resolution now sizes a bare file's convolutions: 16 px is a sixteenth of 64 px.
    (small,) = open_model(bomb, tokens=(1,), resolution=16).workloads
    assert small.name.endswith("/16px") and small.memory_bytes < conv.memory_bytes // 15


def test_a_paired_run_divides_the_layer_guard_between_its_environments():
    """Issue 40 item 3: both workers hold a layer's tensors at once, as both hold a whole model's."""
    w = Workload("w", "linear", "model", "bf16", {"tokens": 512, "in_features": 8192, "out_features": 128256})
    assert 2.0 * GiB < w.memory_bytes < 2.2 * GiB
    mac = {"memory_limit": int(5.3e9), "device": "mps"}  # an 8 GB Mac's recommended_max_memory
    one = [SimpleNamespace(facts=mac)]
    two = [SimpleNamespace(facts=mac), SimpleNamespace(facts=mac)]
    assert _guard(w, one, 0.5, "mps") is None  # type: ignore[arg-type]
    reason = _guard(w, two, 0.5, "mps")  # type: ignore[arg-type]
    assert reason is not None and "divided between 2 environments" in reason


@pytest.mark.parametrize(("dtype", "factor"), [("bf16", 3.5), ("fp32", 2.5)])
def test_a_cpu_convolutions_working_size_covers_what_it_really_takes(dtype: str, factor: int):
    """The guard's working size of a CPU conv (float32 copies, oneDNN's reorders) is at least its measured peak."""
    from mpsup.worker.device import _proc_status, _reset_rss_peak
    from mpsup.workloads import working_bytes

    params = {"weight_shape": [32, 32, 3, 3], "input_shape": [1, 32, 512, 512], "padding": 1}
    w = Workload("w", "conv", "model", dtype, params)
    before = _proc_status().get("VmRSS")
    if before is None or not _reset_rss_peak():
        pytest.skip("no per-process peak RSS here (/proc/self/clear_refs)")
    built = build({"name": "w", "kind": "conv", "dtype": dtype, "params": params}, Device("cpu"))
    built.fn()
    peak = _proc_status()["VmHWM"] - before
    assert working_bytes(w, "cpu") == int(factor * w.memory_bytes)
    assert peak <= working_bytes(w, "cpu"), (peak, w.memory_bytes)


VAE = {
    "_class_name": "AutoencoderKL",
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "block_out_channels": [32, 64],
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 8,
}


def _vae_pipeline(root: Path, config: dict) -> Path:
    """A Diffusers folder with one VAE: its config and a one-tensor weights file (phases read no weights)."""
    (root / "vae").mkdir(parents=True)
    (root / "vae" / "config.json").write_text(json.dumps(config))
    header = json.dumps({"encoder.conv_in.weight": {"dtype": "F32", "shape": [32, 3, 3, 3], "data_offsets": [0, 3456]}})
    raw = header.encode()
    (root / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(3456))
    index = {"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", config["_class_name"]]}
    (root / "model_index.json").write_text(json.dumps(index))
    return root


def test_vae_phases_carry_their_activations_and_4096_px_is_refused_before_anything_is_built(tmp_path: Path):
    """Issue 39 item 5: a 2 MB VAE's phases were priced at 0 bytes, and --resolution 4096 took 4 GiB and more."""
    from mpsup.model.sources import open_model

    folder = _vae_pipeline(tmp_path / "pipe", VAE)
    phases = {w.name: w for w in open_model(folder, tokens=(1,), resolution=4096).workloads if w.part == "phase"}
    decode = phases["model/vae/vae_decode"]
    # At least the decoded image and the top level's 32 channels x 4096^2 (float32): every call makes them.
    assert decode.memory_bytes > (3 + 32) * 4096 * 4096 * 4 and not decode.sized_by  # stated: the machine decides
    box = SimpleNamespace(facts={"memory_limit": 24 * GiB, "device": "cpu"})
    reason = _guard(decode, [box], 0.5, "cpu")  # type: ignore[list-item]
    assert reason is not None and reason.startswith("needs ") and "\n" not in reason
    # MPS materialises the mid-block attention over 2048^2 latent pixels; the CPU's attention does not.
    from mpsup.workloads import working_bytes

    assert decode.attention_bytes > 10**12 and working_bytes(decode, "mps") > working_bytes(decode, "cpu") > 0
    assert decode.to_json()["attention_bytes"] == decode.attention_bytes  # the record says which part it is
    small = {w.name: w for w in open_model(folder, tokens=(1,), resolution=256).workloads if w.part == "phase"}
    assert _guard(small["model/vae/vae_decode"], [box], 0.5, "cpu") is None  # type: ignore[list-item]


def test_a_unet_config_with_a_million_channels_is_refused_in_one_line(tmp_path: Path):
    from mpsup.errors import UserError

    unet = {"_class_name": "UNet2DConditionModel", "in_channels": 10**6, "cross_attention_dim": 10**6}
    folder = _vae_pipeline(tmp_path / "pipe", {**unet, "_class_name": "AutoencoderKL"})
    with pytest.raises(UserError) as exc:
        load_model(folder)
    assert str(exc.value) == (
        f"{folder / 'vae' / 'config.json'}: 'in_channels' must be a whole number from 0 to 131,072, found 1000000"
    )


def test_the_vae_estimate_covers_what_a_decode_really_takes_on_the_cpu():
    """The phase estimate against the worker's own build and call, peak RSS from the kernel's high-water mark."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")
    from mpsup.model.phases import vae_activation_bytes
    from mpsup.worker.device import _proc_status, _reset_rss_peak
    from mpsup.worker.whole_model import build_phase
    from mpsup.workloads import working_bytes

    assert diffusers.AutoencoderKL is not None  # imported before the peak is reset: its modules are not the call's
    # What diffusers imports only when it first builds a model (peft's integration, where peft is installed) is
    # not the call's either: a small build first loads it.
    build_phase(
        {
            "name": "v",
            "kind": "model_phase",
            "dtype": "fp32",
            "params": {"library": "diffusers", "config": VAE, "phase": "vae_decode", "resolution": [16, 16]},
        },
        Device("cpu"),
    ).fn()
    params = {"library": "diffusers", "config": VAE, "phase": "vae_decode", "resolution": [256, 256]}
    before = _proc_status().get("VmRSS")
    if before is None or not _reset_rss_peak():
        pytest.skip("no per-process peak RSS here (/proc/self/clear_refs)")
    built = build_phase({"name": "v", "kind": "model_phase", "dtype": "fp32", "params": params}, Device("cpu"))
    built.fn()
    peak = _proc_status()["VmHWM"] - before
    estimate = vae_activation_bytes(VAE, 256, 256, None, 4, "vae_decode")
    w = Workload(
        "v", "model_phase", "phase", "fp32", params, memory_bytes=estimate.bytes, attention_bytes=estimate.attention
    )
    assert peak <= working_bytes(w, "cpu"), (peak, working_bytes(w, "cpu"))


def test_the_wan_vae_estimate_is_not_below_its_measured_decode():
    """docs/reference/models.md: the Wan 2.2 VAE's decode at 832x480, 81 frames, bf16 peaked at 5.90 GiB (allocator, CUDA),
    its weights included; the activation estimate alone must not fall far below that, nor be a wild multiple."""
    from mpsup.model.phases import vae_activation_bytes
    from tests.conftest import MODEL_CONFIGS

    path = MODEL_CONFIGS / "wan2.2-ti2v-5b-vae__AutoencoderKLWan_z48__nvidia_Cosmos3-Edge__vae_config.json"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    cfg = json.loads(path.read_text())
    estimate = vae_activation_bytes(cfg, 832, 480, 81, 2, "vae_decode")
    assert 5.0 * GiB <= estimate.bytes <= 4 * 5.9 * GiB
    one = vae_activation_bytes(cfg, 832, 480, None, 2, "vae_decode")
    assert one.bytes < estimate.bytes / 3  # one image, not 81 frames
