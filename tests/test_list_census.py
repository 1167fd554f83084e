"""`bench --list --model`: each whole-model phase's op census, taken on the meta device by one worker in the
baseline environment, before anything is measured. Tiny configs made here, the CLI run as a user runs it."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")

from tests.conftest import run_cli  # noqa: E402
from tests.tiny_models import BERT, LLAMA, UNET, VAE, write_llama_folder  # noqa: E402

LINEAR_FAMILY = ("mm", "addmm", "bmm", "linear", "matmul")


def listed(folder: Path, *extra: str) -> list[dict[str, Any]]:
    res = run_cli("bench", "--list", "--json", "--device", "cpu", "--model", str(folder), "--tokens", "1,8", *extra)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    items = json.loads(res.stdout)
    assert isinstance(items, list)
    return items


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def assert_counted(entry: dict[str, Any]) -> dict[str, Any]:
    assert entry["census_device"] == "meta" and "census_reason" not in entry, entry.get("census_reason")
    census = entry["census"]
    assert census["calls"] > 0 and census["calls"] == sum(census["ops"].values())
    assert all({"op", "shapes", "dtypes", "count"} <= e.keys() for e in census["entries"])
    return census


def test_a_llama_folder_lists_prefill_and_decode_with_their_ops(tmp_path: Path) -> None:
    items = by_name(listed(write_llama_folder(tmp_path / "llama", LLAMA)))
    for phase in ("model/prefill", "model/decode"):
        census = assert_counted(items[phase])
        assert any(op in LINEAR_FAMILY for op in census["ops"]), census["ops"]
        assert any("attention" in op for op in census["ops"]), census["ops"]
    # Every block, whatever fits: two layers of four q/k/v/o, three MLP projections, and the head.
    assert items["model/prefill"]["census"]["ops"].get("linear", 0) >= 2 * 7 + 1
    # The layer workloads are not phases: no census keys, the list's shape as before.
    layers = [i for n, i in items.items() if not n.endswith(("/prefill", "/decode"))]
    assert layers and not any(k.startswith("census") for i in layers for k in i)


def test_the_human_list_has_one_census_line_per_phase(tmp_path: Path) -> None:
    folder = write_llama_folder(tmp_path / "llama", LLAMA)
    res = run_cli("bench", "--list", "--device", "cpu", "--model", str(folder), "--tokens", "1,8")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = [ln for ln in res.stdout.splitlines() if "aten calls" in ln]
    assert [ln.split(":")[0] for ln in lines] == ["model/prefill", "model/decode"], res.stdout
    assert all(ln.endswith("on the meta device") and "linear" in ln for ln in lines), lines
    assert "op census of 2 phase(s) on the meta device" in res.stderr


def test_an_encoder_s_forward_has_a_census(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    transformers.AutoModel.from_config(transformers.AutoConfig.for_model(**BERT)).save_pretrained(folder)
    census = assert_counted(by_name(listed(folder))["model/forward"])
    assert any(op in LINEAR_FAMILY for op in census["ops"]) and "layer_norm" in census["ops"], census["ops"]


def test_a_model_type_transformers_does_not_know_has_a_reason_and_the_list_stands(tmp_path: Path) -> None:
    folder = write_llama_folder(tmp_path / "llama", LLAMA)
    config = json.loads((folder / "config.json").read_text())
    hostile = "no-such-arch[/bold][red]\x1b]0;x"  # markup and a terminal escape: the config is not ours
    (folder / "config.json").write_text(json.dumps({**config, "model_type": hostile}))
    items = by_name(listed(folder))
    for phase in ("model/prefill", "model/decode"):
        entry = items[phase]
        assert entry["census"] is None and entry["census_device"] == "meta"
        assert "does not know model_type" in entry["census_reason"]
    assert any(n.startswith("model/linear/") for n in items)  # the layers are still listed
    res = run_cli("bench", "--list", "--device", "cpu", "--model", str(folder), "--tokens", "1", env={"COLUMNS": "400"})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "model/prefill: no op census (transformers" in res.stdout
    assert "no-such-arch[/bold][red]\\x1b]0;x" in res.stdout and "\x1b]0;" not in res.stdout


def test_a_diffusers_pipeline_counts_its_step_and_its_vae(tmp_path: Path) -> None:
    diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")
    pipe = tmp_path / "pipe"
    for name, cfg in (("vae", VAE), ("unet", UNET)):
        cls = getattr(diffusers, cfg["_class_name"])
        cls.from_config({k: v for k, v in cfg.items() if k != "_class_name"}).save_pretrained(pipe / name)
    index = {"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]}
    (pipe / "model_index.json").write_text(json.dumps({**index, "unet": ["diffusers", "UNet2DConditionModel"]}))
    items = by_name(listed(pipe, "--resolution", "64"))
    assert "conv2d" in assert_counted(items["model/unet/step"])["ops"]
    for phase in ("vae_decode", "vae_encode"):
        census = assert_counted(items[f"model/vae/{phase}"])
        assert "conv2d" in census["ops"] and "group_norm" in census["ops"], census["ops"]


def test_a_pt2_export_gets_no_worker_and_no_census(tmp_path: Path) -> None:
    pt2 = tmp_path / "m.pt2"
    with zipfile.ZipFile(pt2, "w") as z:
        z.writestr("archive_format", "pt2")
    res = run_cli("bench", "--list", "--json", "--model", str(pt2))
    assert res.returncode == 0, res.stderr[-2000:]
    assert not any(k.startswith("census") for i in json.loads(res.stdout) for k in i)
    assert "op census" not in res.stderr
