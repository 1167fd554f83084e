"""A Transformers folder holding only its config.json (copied from the Hub, or written by hand): the model
runs whole from the config with random weights, and says that no layers explain it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mpsup.errors import UserError
from mpsup.model.load import checkpoint_dtype, load_model
from mpsup.model.safetensors_header import ModelFormatError
from mpsup.model.sources import WholeModel, open_model
from tests.conftest import run_cli
from tests.tiny_models import LLAMA as TINY_LLAMA

LLAMA = {**TINY_LLAMA, "dtype": "bfloat16"}  # a checkpoint dtype the config-only run takes for its own


def config_folder(tmp_path: Path, config: dict[str, object] = LLAMA) -> Path:
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_config_alone_runs_whole_in_the_checkpoint_dtype(tmp_path: Path) -> None:
    model = open_model(config_folder(tmp_path), tokens=(1, 8))
    assert [w.name for w in model.workloads] == ["model/prefill", "model/decode"]
    assert {w.dtype for w in model.workloads} == {"bf16"}  # the config's dtype, with no weights to read it from
    assert model.doc["whole"] is True and model.doc["format"] == "transformers-config"
    assert any("without weights" in n for n in model.doc["notes"])


def test_the_fingerprint_is_the_config(tmp_path: Path) -> None:
    folder = config_folder(tmp_path)
    first = load_model(folder).fingerprint
    (folder / "config.json").write_text(json.dumps(dict(reversed(list(LLAMA.items())))))  # same config, reordered
    assert load_model(folder).fingerprint == first
    (folder / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 3}))
    assert load_model(folder).fingerprint != first


@pytest.mark.parametrize(
    ("value", "expected"), [("bfloat16", "bf16"), ("torch.float16", "fp16"), ("float32", "fp32"), ("int8", None)]
)
def test_checkpoint_dtype_reads_both_keys(value: str, expected: str | None) -> None:
    assert checkpoint_dtype({"dtype": value}) == expected
    assert checkpoint_dtype({"torch_dtype": value}) == expected
    assert checkpoint_dtype({"dtype": 7}) is None


def test_a_folder_with_neither_weights_nor_a_model_type_says_what_it_lacks(tmp_path: Path) -> None:
    folder = config_folder(tmp_path, {"hidden_size": 64})
    with pytest.raises(ModelFormatError, match=r"without safetensors weights or a config\.json naming a model_type"):
        load_model(folder)


def test_real_weights_and_layers_only_are_refused_for_a_config_alone(tmp_path: Path) -> None:
    folder = config_folder(tmp_path)
    with pytest.raises(UserError, match=r"--real-weights.*no weights"):
        open_model(folder, tokens=(8,), whole=WholeModel(real_weights=True))
    with pytest.raises(UserError, match=r"runs only as a whole model.*--layers-only"):
        open_model(folder, tokens=(8,), whole=WholeModel(run=False))


def test_a_config_alone_is_measured_and_reported_by_phase(tmp_path: Path, mpsup_home: Path) -> None:
    folder = config_folder(tmp_path)
    bench = run_cli(
        "bench",
        "--model",
        str(folder),
        "--aa",
        "--no-smoke",
        "--tokens",
        "8",
        "--budget",
        "0.05",
        "--visits",
        "2",
        "--json",
    )
    assert bench.returncode == 0, bench.stderr
    assert "Traceback" not in bench.stderr
    phases = json.loads(bench.stdout)["model_phases"]
    assert set(phases) == {"prefill", "decode"} and all(p["median_s"] > 0 for p in phases.values())
    report = run_cli("report", "--json")
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["model_speedup"]["source"] == "whole-model" and set(doc["model_phases"]) == {"prefill", "decode"}
    assert doc["layer_coverage"] == {}  # no layers listed: unknown, not 0%
    assert all(p["layer_coverage"] is None for p in phases.values())


def test_a_config_alone_reads_as_whole_model_figures_without_a_layer_estimate(tmp_path: Path, mpsup_home: Path) -> None:
    folder = config_folder(tmp_path)
    res = run_cli("bench", "--model", str(folder), "--no-smoke", "--tokens", "8", "--budget", "0.05")
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    assert "no forward time estimated from its layers" in flat and "Linear weights" not in flat
    assert "2 whole-model phases" in flat


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "pytorch_model.bin.index.json", "model.gguf", "model.pt"])
def test_weights_in_another_format_are_named_not_replaced_by_random_ones(tmp_path: Path, weights: str) -> None:
    folder = config_folder(tmp_path)
    (folder / weights).write_bytes(b"not read")
    with pytest.raises(ModelFormatError, match=rf"holds {re.escape(weights)} but no safetensors weights"):
        load_model(folder)


def test_an_empty_model_type_is_no_model_type(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="naming a model_type"):
        load_model(config_folder(tmp_path, {**LLAMA, "model_type": " "}))
