"""The MLX side of a paired run, without MLX: the worker file's imports, `mlx:PYTHON` parsing, the one-line
refusals, and the report's sentence from a record with an MLX environment (tests/test_mlx_worker.py runs the
worker for real where an MLX environment is found)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.workerproc import MLX_BOOT, MLX_WORKER
from mpsup.envs.resolve import resolve_side
from mpsup.errors import UserError
from mpsup.report.analysis import analyze, matching_aa
from mpsup.runs.schema import RunRecord
from tests.conftest import run_cli
from tests.tiny_models import LLAMA, VAE

STDLIB = set(sys.stdlib_module_names)


def test_the_mlx_worker_imports_only_the_stdlib_mlx_and_mlx_lm() -> None:
    files = list(MLX_WORKER.parent.glob("*.py"))
    assert MLX_WORKER in files
    for src in files:
        for node in ast.walk(ast.parse(src.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in STDLIB | {"mlx", "mlx_lm"}, f"{src.name} imports {name}"
    # Loaded by file location under a private name: nothing is put on sys.path, so mpsup stays invisible.
    assert "spec_from_file_location('mpsup_mlx_worker', sys.argv[1])" in MLX_BOOT
    assert "sys.path" not in MLX_BOOT


def test_mlx_prefix_names_the_stack(tmp_path: Path, mpsup_home: Path) -> None:
    py = Path(sys.executable)
    assert resolve_side(f"mlx:{py}", "--candidate") == (py, "mlx")
    assert resolve_side(str(py), "--candidate") == (py, "torch")
    with pytest.raises(UserError, match=r"--candidate mlx:: expected mlx:PYTHON"):
        resolve_side("mlx:", "--candidate")
    with pytest.raises(UserError, match="neither an interpreter"):
        resolve_side(f"mlx:{tmp_path / 'nope'}", "--candidate")


def _folder(tmp_path: Path, config: dict[str, Any] | None = LLAMA) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _one_line(proc: Any, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr
    assert any(needle in ln for ln in lines), proc.stderr


def test_mlx_bits_without_an_mlx_side_is_refused(tmp_path: Path, mpsup_home: Path) -> None:
    proc = run_cli("bench", "--model", str(_folder(tmp_path)), "--mlx-bits", "4", "--list")
    _one_line(proc, "--mlx-bits 4: neither side is MLX")


def test_mlx_bits_other_than_4_or_8_is_refused(tmp_path: Path, mpsup_home: Path) -> None:
    proc = run_cli(
        "bench", "--model", str(_folder(tmp_path)), "--candidate", f"mlx:{sys.executable}", "--mlx-bits", "3", "--list"
    )
    _one_line(proc, "--mlx-bits 3: expected 4 or 8")


def test_an_mlx_side_needs_a_model(mpsup_home: Path) -> None:
    proc = run_cli("bench", "--candidate", f"mlx:{sys.executable}", "--list")
    _one_line(proc, "an MLX side runs your model whole: give --model PATH")


def test_a_folder_without_config_json_is_refused_for_mlx(tmp_path: Path, mpsup_home: Path) -> None:
    from tests.test_model_cli import tiny_llama, write_safetensors

    folder = _folder(tmp_path, None)
    write_safetensors(folder / "model.safetensors", tiny_llama())
    proc = run_cli("bench", "--model", str(folder), "--candidate", f"mlx:{sys.executable}", "--list")
    _one_line(proc, "no config.json with a model_type beside the weights, so MLX cannot build it")


def test_a_diffusers_folder_is_refused_for_mlx(tmp_path: Path, mpsup_home: Path) -> None:
    diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")
    pipe = tmp_path / "pipe"
    diffusers.AutoencoderKL.from_config(VAE).save_pretrained(pipe / "vae")
    (pipe / "model_index.json").write_text(
        json.dumps({"_class_name": "StableDiffusionPipeline", "vae": ["diffusers", "AutoencoderKL"]})
    )
    proc = run_cli("bench", "--model", str(pipe), "--candidate", f"mlx:{sys.executable}", "--list")
    _one_line(proc, "a Diffusers pipeline; MLX has no equivalent here")


def test_an_interpreter_without_mlx_is_one_line(tmp_path: Path, mpsup_home: Path) -> None:
    # This test environment has torch and no mlx: the MLX worker's boot says so before loading the worker.
    proc = run_cli(
        "bench", "--model", str(_folder(tmp_path)), "--candidate", f"mlx:{sys.executable}", "--budget", "0.05"
    )
    _one_line(proc, "mlx and mlx-lm cannot be imported there")
    assert not list((mpsup_home / "runs").glob("*.json")) if (mpsup_home / "runs").exists() else True


# --- the report, from a record with an MLX side ---


def _phase(name: str, label_a: str, a: float, label_b: str, b: float, rounds: int = 12) -> dict[str, Any]:
    ratios = [a / b * (1 + 0.001 * ((i % 3) - 1)) for i in range(rounds)]
    return {
        "name": f"model/{name}",
        "kind": "model_phase",
        "part": "phase",
        "dtype": "fp32",
        "phase": name,
        "library": "transformers",
        "tokens": 16,
        "tags": ["phase", name],
        "status": "ok",
        "count": 1,
        "ratios": ratios,
        "envs": {
            label_a: {"status": "ok", "median": a, "samples": [a] * rounds, "memory": {"workload_peak": 2**30}},
            label_b: {"status": "ok", "median": b, "samples": [b] * rounds, "memory": {"peak_allocated": 2**29}},
        },
    }


def _record(mlx_candidate: bool = True, mode: str = "paired", device: str = "cpu") -> dict[str, Any]:
    torch_env = {"label": "baseline", "torch_version": "2.13.0", "device_name": "CPU", "stack": "torch"}
    mlx_env = {
        "label": "candidate",
        "torch_version": None,
        "device_name": "CPU",
        "stack": "mlx",
        "mlx_version": "0.32.4",
        "mlx_lm_version": "0.32.2",
    }
    if not mlx_candidate:
        torch_env["label"], mlx_env["label"] = "candidate", "baseline"
    envs = [torch_env, mlx_env] if mlx_candidate else [mlx_env, torch_env]
    a, b = envs[0]["label"], envs[1]["label"]
    # prefill: the baseline takes 10 ms, the candidate 12 ms; decode: 4 ms against 2 ms.
    return {
        "schema": "mpsup.run/1.1",
        "id": "r1",
        "created_at": "2026-12-06T00:00:00Z",
        "mode": mode,
        "device": device,
        "environments": envs,
        "options": {},
        "hygiene": {},
        "model": None,
        "workloads": [_phase("prefill", a, 0.010, b, 0.012), _phase("decode", a, 0.004, b, 0.002)],
        "smoke": [],
    }


def test_the_sentence_speaks_from_mlx_when_mlx_is_the_candidate() -> None:
    an = analyze(_record())
    assert an.sentence.startswith("On this machine, MLX 0.32.4 runs your model's prefill 0.83x as fast as torch 2.13.0")
    assert "decode 2.00x (95% CI" in an.sentence and "faster" in an.sentence and "slower" in an.sentence
    # Peaks: MLX's (the candidate's allocator peak) first.
    assert an.sentence.endswith("peak memory 512.0 MiB vs 1.0 GiB.")
    assert an.to_json()["stacks"] == {"baseline": "torch 2.13.0", "candidate": "MLX 0.32.4"}
    assert an.candidate_torch == "MLX 0.32.4"


def test_the_sentence_is_inverted_when_mlx_is_the_baseline() -> None:
    an = analyze(_record(mlx_candidate=False))
    # The baseline (MLX) takes 10 ms for prefill against torch's 12 ms: MLX is 1.20x as fast.
    assert "MLX 0.32.4 runs your model's prefill 1.20x as fast as torch 2.13.0" in an.sentence
    assert "decode 0.50x (95% CI" in an.sentence
    assert an.sentence.endswith("peak memory 1.0 GiB vs 512.0 MiB.")


def test_this_mac_only_on_mps() -> None:
    assert analyze(_record(device="mps")).sentence.startswith("On this Mac, MLX 0.32.4")


def test_quantised_mlx_is_labelled() -> None:
    doc = _record()
    doc["environments"][1]["mlx_bits"] = 4
    assert "The MLX side ran 4-bit weights (group size 64)" in analyze(doc).sentence
    assert "different numerics and different memory" in analyze(doc).sentence


def test_every_surface_carries_the_mlx_sentence() -> None:
    from mpsup.report.render import esc, md, render_html, render_markdown

    an = analyze(_record())
    assert md(an.sentence) in render_markdown(an)
    assert esc(an.sentence) in render_html(an)
    assert an.to_json()["sentence"] == an.sentence


def test_an_mlx_aa_is_the_floor_of_a_torch_against_mlx_run() -> None:
    rec = RunRecord.from_json(_record(), "r")
    aa_doc = _record(mode="aa")
    aa_doc["id"] = "aa-mlx"
    aa_doc["environments"] = [
        {**aa_doc["environments"][1], "label": "baseline"},
        {**aa_doc["environments"][1], "label": "baseline-2"},
    ]
    for w in aa_doc["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"], "baseline-2": w["envs"]["candidate"]}
    torch_aa = _record(mode="aa")
    torch_aa["id"] = "aa-torch"
    torch_aa["environments"] = [
        {**torch_aa["environments"][0], "label": "baseline"},
        {**torch_aa["environments"][0], "label": "baseline-2"},
    ]
    for w in torch_aa["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"], "baseline-2": w["envs"]["candidate"]}
    mlx_aa, t_aa = RunRecord.from_json(aa_doc, "a"), RunRecord.from_json(torch_aa, "t")
    assert matching_aa(rec, [mlx_aa, t_aa]) == mlx_aa  # MLX's own A/A, stored earlier, is preferred
    assert matching_aa(rec, [t_aa]) == t_aa
    # An MLX A/A says so in its own words, not "torch None".
    sentence = analyze(mlx_aa).sentence
    assert sentence.startswith("A/A run (MLX 0.32.4 against itself, the noise floor)")
    assert "None" not in sentence


# --- install-rc --mlx: the parts that need no index ---


def test_mlx_packages_follow_the_platform() -> None:
    from mpsup.envs.mlx_env import packages

    assert packages("darwin") == ["mlx", "mlx-lm"]
    assert packages("linux") == ["mlx[cpu]", "mlx-lm"]


def test_a_recorded_mlx_environment_is_found_by_name(mpsup_home: Path) -> None:
    folder = mpsup_home / "envs" / "mlx"
    folder.mkdir(parents=True)
    record = {"name": "mlx", "python": sys.executable, "stack": "mlx", "mlx_version": "0.32.4", "schema": 1}
    (folder / "mpsup-env.json").write_text(json.dumps(record))
    assert resolve_side("mlx", "--candidate") == (Path(sys.executable), "mlx")
    listed = run_cli("install-rc", "--list")
    assert listed.returncode == 0 and "(MLX 0.32.4)" in listed.stdout


def test_install_mlx_never_replaces_an_existing_folder(mpsup_home: Path) -> None:
    from mpsup.envs.mlx_env import install_mlx

    (mpsup_home / "envs" / "mlx").mkdir(parents=True)
    with pytest.raises(UserError, match=r"exists already: `mpsup install-rc --remove mlx` first"):
        install_mlx(Path(sys.executable))


def test_verify_says_in_one_line_when_mlx_cannot_run() -> None:
    from mpsup.envs.mlx_env import verify
    from mpsup.errors import OperationFailed

    with pytest.raises(OperationFailed, match="mlx_lm could not build and run a tiny model") as info:
        verify(Path(sys.executable))  # this environment has no mlx
    assert "\n" not in str(info.value)


def test_install_rc_mlx_refuses_torch_options_and_shows_a_dry_run(mpsup_home: Path) -> None:
    proc = run_cli("install-rc", "--mlx", "--version", "2.13.0")
    _one_line(proc, "--mlx makes an MLX environment: --version and --with choose torch")
    dry = run_cli("install-rc", "--mlx", "--dry-run")
    assert dry.returncode == 0 and "Would make a venv from" in dry.stdout and "mlx-lm" in dry.stdout
    assert not (mpsup_home / "envs").exists()


# --- doctor: MLX in the target Python ---


@pytest.mark.parametrize(
    ("mlx", "macos", "status", "words"),
    [
        (None, True, "ok", "MLX is not installed in this Python"),
        ({"version": "0.32.4", "mlx_lm": True, "metal": True}, True, "ok", "MLX 0.32.4 imports and sees the GPU"),
        ({"version": "0.32.4", "mlx_lm": True, "metal": False}, True, "warn", "sees no GPU (Metal)"),
        ({"version": "0.32.4", "mlx_lm": False, "metal": False}, False, "ok", "without mlx-lm"),
        ({"error": "ImportError: libmlx.so"}, True, "warn", "does not import (ImportError: libmlx.so)"),
    ],
)
def test_doctor_says_whether_mlx_imports_and_sees_metal(
    mlx: dict[str, Any] | None, macos: bool, status: str, words: str
) -> None:
    from mpsup.doctor.run import diagnose
    from mpsup.host.snapshot import snapshot_from_json
    from tests import snapshots

    s = snapshots.healthy()
    s["interpreter"]["mlx"] = mlx
    if not macos:  # what a Linux machine's capture holds: no macOS commands, a Linux Python
        s["commands"] = {}
        s["interpreter"]["platform"] = "linux"
    found = {f.name: f for f in diagnose(snapshot_from_json(s, Path("snap.json"))).findings}["mlx"]
    assert found.status.value == status and words in found.summary, found.summary


def test_a_run_names_its_mlx_side_in_lists() -> None:
    rec = RunRecord.from_json(_record(), "r")
    assert "torch 2.13.0 vs MLX 0.32.4" in rec.describe()
    assert [e.stack for e in rec.environments] == ["torch", "mlx"]
    assert RunRecord.from_json(rec.to_json(), "again") == rec  # the stack survives a round trip


def test_an_mlx_worker_is_pinned_where_the_workers_are_or_where_torch_calls_from() -> None:
    from mpsup.bench.workerproc import mlx_pin_env

    assert mlx_pin_env((3,), (1, 0)) == {"MPSUP_MLX_CPUS": "3"}  # --affinity 3: every worker there
    assert mlx_pin_env(None, (1, 0)) == {"MPSUP_MLX_CPUS": "1"}  # CPU auto: the torch calling thread's CPU
    # Not pinned: still set, empty, so that a value in the user's shell cannot pin it behind their back.
    assert mlx_pin_env(None, None) == {"MPSUP_MLX_CPUS": ""}


@pytest.mark.parametrize("mlx_candidate", [True, False])
def test_the_bench_header_gives_torch_its_threads_and_mlx_none(mlx_candidate: bool) -> None:
    """An MLX worker records no torch thread count: the header names each stack and gives the count to torch."""
    from rich.console import Console

    from mpsup.bench.screen import render_run

    doc = _record(mlx_candidate)
    for env in doc["environments"]:
        env["threads"] = None if env["stack"] == "mlx" else 2
    console = Console(width=120, record=True, color_system=None)
    render_run(doc, console)
    header = console.export_text().splitlines()[0]
    sides = "torch 2.13.0 -> MLX 0.32.4" if mlx_candidate else "MLX 0.32.4 -> torch 2.13.0"
    assert header.startswith(f"{sides} on CPU (cpu, torch on 2 CPU threads) · run r1")
    assert "None" not in header
