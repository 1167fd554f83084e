"""Issue 10, items 8 and 9: config.json values of the wrong type are one line naming the file and key.

Before, each of these was a traceback from int() or len() (or, for `"tie_word_embeddings": "false"`,
a silently wrong result: the string is truthy)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from mpsup.errors import UserError
from mpsup.model.config import ModelConfig, model_config
from mpsup.model.extract import extract, extract_model
from mpsup.model.load import load_model
from tests.conftest import MODEL_CONFIGS, run_cli

EXPERTS = {
    f"m.layers.0.mlp.experts.{e}.up_proj.weight": {
        "dtype": "F16",
        "shape": [8, 8],
        "data_offsets": [128 * e, 128 * e + 128],
    }
    for e in range(4)
}
CONV = {"decoder.up_blocks.1.conv.weight": {"dtype": "F16", "shape": [4, 4, 3, 3], "data_offsets": [0, 288]}}


def model_folder(root: Path, config: str | bytes, header: dict = EXPERTS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(header).encode()
    size = max(e["data_offsets"][1] for e in header.values())
    with (root / "model.safetensors").open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + size)
    (root / "config.json").write_bytes(config.encode() if isinstance(config, str) else config)
    return root


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ('{"num_experts_per_tok": "two"}', "'num_experts_per_tok' must be a positive integer up to 4096, found 'two'"),
        ('{"num_experts_per_tok": [2]}', "'num_experts_per_tok' must be .* found \\[2\\]"),
        ('{"num_experts_per_tok": 1e400}', "'num_experts_per_tok' must be .* found inf"),
        ('{"num_experts_per_tok": 2.5}', "'num_experts_per_tok' must be .* found 2.5"),
        ('{"num_experts_per_tok": -1}', "'num_experts_per_tok' must be a positive"),
        ('{"num_experts_per_tok": true}', "'num_experts_per_tok' must be .* found True"),
        ('{"num_experts_per_tok": {"a": 1}}', "found <a JSON object>"),
        ('{"num_experts_per_tok": Infinity}', "Infinity is not valid JSON"),
        ('{"num_experts_per_tok": NaN}', "NaN is not valid JSON"),
        ('{"moe_topk": "8"}', "'moe_topk' must be"),
        ('{"moe_topk": [8, "x"]}', "'moe_topk' must be"),
        ('{"sample_size": "big"}', "'sample_size' must be a positive integer .* found 'big'"),
        ('{"sample_size": [null]}', "'sample_size' must be"),
        ('{"sample_size": 1e9}', "'sample_size' must be .* up to 16384"),
        ('{"block_out_channels": 5}', "'block_out_channels' must be a list of at most 64 integers, found 5"),
        ('{"dim_mult": ["a"]}', "'dim_mult' must be a list"),
        ('{"block_out_channels": [[[[1]]]]}', "'block_out_channels' must be a list"),
        ('{"tie_word_embeddings": "false"}', "'tie_word_embeddings' must be true or false, found 'false'"),
        ('{"mpsup_frames": "4"}', "'mpsup_frames' must be"),
        ('{"num_experts_per_tok": "' + "x" * 5000 + '"}', "found 'xxxx.*\\(5,000 characters\\)"),
        ("[1, 2]", "model config must be a JSON object, found list"),
        (b'{"a": "\xff"}', "model config is not UTF-8 text"),
        ("[" * 100_000, "nested too deeply"),
        ('{"x": ' + "9" * 5000 + "}", "4300 digits"),
        ("", "not valid JSON"),
    ],
)
def test_wrong_config_values_are_one_line_naming_file_and_key(tmp_path: Path, config: str | bytes, needle: str):
    folder = model_folder(tmp_path / "m", config)
    with pytest.raises(UserError, match=needle) as exc:
        load_model(folder)
    msg = str(exc.value)
    assert msg.startswith(str(folder / "config.json") + ":") and "\n" not in msg and len(msg) < 400


def test_on_the_command_line_it_is_exit_2_without_traceback(tmp_path: Path, mpsup_home: Path):
    folder = model_folder(tmp_path / "m", '{"num_experts_per_tok": "two"}')
    res = run_cli("bench", "--model", str(folder), "--list")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "config.json: 'num_experts_per_tok' must be a positive integer" in res.stderr
    assert not (mpsup_home / "runs").exists()


def test_diffusers_component_configs_are_checked_too(tmp_path: Path):
    root = tmp_path / "pipe"
    model_folder(root / "vae", '{"block_out_channels": 5}', CONV)
    (root / "vae" / "model.safetensors").rename(root / "vae" / "diffusion_pytorch_model.safetensors")
    (root / "model_index.json").write_text(json.dumps({"_class_name": "P", "vae": ["diffusers", "AutoencoderKL"]}))
    with pytest.raises(UserError, match=r"vae/config\.json: 'block_out_channels' must be a list"):
        load_model(root)


def test_valid_values_still_mean_what_they_did(tmp_path: Path):
    def grouped_top_k(cfg: dict) -> int:
        folder = model_folder(tmp_path / f"m{len(list(tmp_path.iterdir()))}", json.dumps(cfg))
        m = load_model(folder)
        (w,) = extract(m.tensors, m.config, tokens=(1,)).workloads
        return w.params["top_k"]

    assert grouped_top_k({"num_experts_per_tok": 3}) == 3
    assert grouped_top_k({"num_experts_per_tok": 3.0}) == 3
    assert grouped_top_k({"num_experts_per_tok": None, "moe_topk": 1}) == 1
    assert grouped_top_k({"moe_topk": [1, 3, 2]}) == 3  # Hunyuan: one per layer
    assert grouped_top_k({"num_experts_per_tok": 0}) == 2  # 0 means "not set", as before
    assert grouped_top_k({}) == 2
    assert model_config({"tie_word_embeddings": None}, "c") == ModelConfig(tie_word_embeddings=False)
    conv = load_model(
        model_folder(tmp_path / "vae", json.dumps({"sample_size": [96, 64], "block_out_channels": [1, 2, 3]}), CONV)
    )
    (w,) = extract_model(conv.tensors, conv.config, tokens=(1,)).workloads
    assert w.name == "model/conv2d/4x4k3x3/48px"  # up block 1 of 3 levels: 96 >> 1


def test_the_shared_real_configs_pass(tmp_path: Path):
    if not MODEL_CONFIGS.is_dir():
        pytest.skip("../shared/data/model-configs is not present in this checkout")
    configs = sorted(MODEL_CONFIGS.glob("*.json"))
    assert configs
    for path in configs:
        model_config(json.loads(path.read_text()), str(path))  # raises on any field it would refuse


def test_a_phase_record_keeps_its_configs_names_and_digest_not_the_config():
    """Issue 39 item 9: a 15 MiB config was written whole into every phase of the record. The worker still gets
    it whole (the live workload's spec); the record keeps what names the model and the config's sha256."""
    from mpsup.model.phases import PhaseOptions, model_phases, phase_shape
    from mpsup.runs.schema import WorkloadRun
    from mpsup.workloads import config_digest

    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "_name_or_path": "/Volumes/someone_ssd/private-models/x",
        "padding": list(range(20_000)),
    }
    phases = model_phases("transformers-config", cfg, None, "/m", PhaseOptions(tokens=8))
    assert [w.name for w in phases.workloads] == ["model/prefill", "model/decode"]
    for w in phases.workloads:
        assert w.spec()["params"]["config"] == cfg
        doc = w.to_json()
        assert doc["config"] == {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
        assert doc["config_sha256"] == config_digest(cfg) == config_digest(dict(reversed(cfg.items())))
        assert len(json.dumps(doc)) < 2000 and "someone_ssd" not in json.dumps(doc)
        assert phase_shape(doc).startswith("llama ")
        assert WorkloadRun.from_json(doc, "w").identity == WorkloadRun.from_json({**doc, "config": cfg}, "w").identity


def test_a_head_count_of_zero_is_refused_in_one_line_not_a_division_by_zero_in_the_worker(tmp_path: Path) -> None:
    from mpsup.errors import UserError
    from mpsup.model.load import load_model

    folder = tmp_path / "llama"
    folder.mkdir()
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 0, "num_hidden_layers": 2}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError) as exc:
        load_model(folder)
    assert str(exc.value) == (
        f"{folder / 'config.json'}: 'num_attention_heads' must be a whole number from 1 to 4,096 (or a list of them), found 0"
    )
