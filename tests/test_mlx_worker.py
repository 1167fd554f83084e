"""The MLX worker run for real, in an MLX environment: MPSUP_TEST_MLX_PYTHON names its interpreter, else the one CI
makes (.venv-mlx/bin/python in the checkout). Without one, every test here skips and says why. Tiny 2-block configs
and short prompts: MLX's Linux CPU backend is slow at prefill."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.workerproc import WorkerProcess, mlx_pin_env
from tests.conftest import run_cli
from tests.tiny_models import LLAMA as SIDE_LLAMA

ROOT = Path(__file__).resolve().parent.parent


def _mlx_python() -> Path | None:
    named = os.environ.get("MPSUP_TEST_MLX_PYTHON")
    for candidate in ([Path(named)] if named else []) + [ROOT / ".venv-mlx" / "bin" / "python"]:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            probe = subprocess.run(
                [str(candidate), "-c", "import mlx.core, mlx_lm"], capture_output=True, timeout=120, check=False
            )
            if probe.returncode == 0:
                return candidate
    return None


MLX_PYTHON = _mlx_python()
pytestmark = pytest.mark.skipif(
    MLX_PYTHON is None,
    reason="no MLX environment: set MPSUP_TEST_MLX_PYTHON to a python with mlx and mlx-lm (CI makes .venv-mlx)",
)

# The MLX-side tests' tiny Llama, with the two fields mlx_lm needs in full where transformers has defaults.
LLAMA = {**SIDE_LLAMA, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}


def _spec(phase: str, config: dict[str, Any] = LLAMA, **params: Any) -> dict[str, Any]:
    return {
        "kind": "model_phase",
        "dtype": "fp32",
        "params": {"library": "transformers", "config": config, "causal": True, "tokens": 8, "phase": phase, **params},
    }


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerProcess]:
    assert MLX_PYTHON is not None
    w = WorkerProcess(MLX_PYTHON, stack="mlx")
    hello = w.request({"op": "hello", "device": "cpu"})
    assert hello["available"] and hello["stack"] == "mlx" and hello["mlx_version"] and hello["torch_version"] is None
    yield w
    w.close()


def test_prefill_and_decode_by_the_torch_workers_definitions(worker: WorkerProcess) -> None:
    for phase, items in (("prefill", 8), ("decode", 1)):
        ready = worker.request({"op": "setup", "workload": _spec(phase, cache=8), "target_sample_s": 0.005})
        assert ready["type"] == "ready", ready
        assert ready["items_per_call"] == items
        info = ready["phase"]
        assert info["depth"] == info["layers"] == 2 and info["weights"] == "random"
        if phase == "prefill":
            assert info["logits_kept"] == 1  # the head on the last position only
        else:
            assert info["cache"] == 8
        samples = worker.request({"op": "sample", "count": 3, "discard": 1})
        assert len(samples["host"]) == 3 and all(x > 0 for x in samples["host"]) and len(samples["discarded"]) == 1
        done = worker.request({"op": "teardown"})
        assert done["memory"]["peak_allocated"] > 0


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_a_training_step_as_mlx_lm_s_lora_trainer_takes_it(worker: WorkerProcess, mode: str) -> None:
    train = {"train": mode, "batch": 2, "optimizer": "adamw", "lr": 1e-5}
    lora = {"lora": {"rank": 8, "scale": 20.0, "targets": ["q_proj", "v_proj"]}} if mode == "lora" else {}
    ready = worker.request({"op": "setup", "workload": _spec("train_step", **train, **lora), "target_sample_s": 0.005})
    assert ready["type"] == "ready", ready
    assert ready["items_per_call"] == 2 * (8 - 1)  # the tokens that carry a loss
    info = ready["phase"]
    assert info["train"]["mode"] == mode and info["optimizer"]["name"] == "AdamW" and info["compiled"] is True
    trainable, total = info["train"]["trainable_parameters"], info["train"]["parameters"]
    # LoRA: rank 8 on q_proj (64 -> 64) and v_proj (64 -> 32) of both blocks; full: every parameter.
    assert trainable == (2 * 8 * (64 + 64 + 64 + 32) if mode == "lora" else total)
    samples = worker.request({"op": "sample", "count": 3})
    assert len(samples["host"]) == 3 and all(x > 0 for x in samples["host"])
    assert worker.request({"op": "teardown"})["memory"]["peak_allocated"] > 0


def test_decode_rolls_the_cache_back_every_call(worker: WorkerProcess) -> None:
    # A cache that grew by one token a call would make later calls slower and, past 512, overflow the positions:
    # 600 calls on a 500-token cache stay within max_position_embeddings only if each call is rolled back.
    ready = worker.request({"op": "setup", "workload": _spec("decode", cache=500), "calls": 200})
    assert ready["type"] == "ready", ready
    ans = worker.request({"op": "sample", "count": 3})
    assert ans["type"] == "samples", ans
    worker.request({"op": "teardown"})


def test_an_architecture_mlx_lm_lacks_is_unsupported_in_one_line(worker: WorkerProcess) -> None:
    ans = worker.request({"op": "setup", "workload": _spec("prefill", {**LLAMA, "model_type": "nosuchmodel"})})
    assert ans["type"] == "error" and ans["status"] == "unsupported"
    assert ans["message"].startswith("mlx_lm ") and ans["message"].endswith("has no model type 'nosuchmodel'")


def test_a_config_mlx_lm_cannot_build_is_unsupported_in_one_line(worker: WorkerProcess) -> None:
    # transformers defaults rms_norm_eps; mlx_lm's Llama requires it in the config.
    config = {k: v for k, v in LLAMA.items() if k != "rms_norm_eps"}
    ans = worker.request({"op": "setup", "workload": _spec("prefill", config)})
    assert ans["status"] == "unsupported", ans
    assert (
        "cannot build model type 'llama' from this config.json" in ans["message"] and "rms_norm_eps" in ans["message"]
    )
    assert "\n" not in ans["message"]


def test_a_diffusers_phase_and_a_layer_are_unsupported(worker: WorkerProcess) -> None:
    vae = {"kind": "model_phase", "dtype": "fp32", "params": {"library": "diffusers", "phase": "vae_decode"}}
    ans = worker.request({"op": "setup", "workload": vae})
    assert ans["status"] == "unsupported" and "MLX has no equivalent here" in ans["message"]
    ans = worker.request({"op": "setup", "workload": {"kind": "linear", "dtype": "fp32", "params": {}}})
    assert ans["status"] == "unsupported"


def test_four_bit_weights_take_less_memory_and_say_so(worker: WorkerProcess) -> None:
    sizes = {}
    for bits in (4, None):  # a hello sets the worker's bits for the setups after it
        worker.request({"op": "hello", "device": "cpu", "mlx_bits": bits})
        ready = worker.request({"op": "setup", "workload": _spec("decode", cache=8), "calls": 1})
        assert ready["type"] == "ready", ready
        assert ready["phase"].get("quantized") == ({"bits": 4, "group_size": 64, "mode": "affine"} if bits else None)
        sizes[bits] = ready["phase"]["weights_bytes"]
        worker.request({"op": "teardown"})
    assert sizes[4] < sizes[None] / 2


@pytest.mark.slow
def test_a_paired_torch_against_mlx_run_and_its_sentence(tmp_path: Path, mpsup_home: Path) -> None:
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    proc = run_cli(
        "bench", "--model", str(folder), "--candidate", f"mlx:{MLX_PYTHON}", "--budget", "0.05", "--tokens", "8",
        "--visits", "2", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = next((mpsup_home / "runs").glob("*.json"))
    doc = json.loads(path.read_text())
    assert [e["stack"] for e in doc["environments"]] == ["torch", "mlx"]
    assert doc["schema"] == "mpsup.run/1.4" and not doc["smoke"]
    assert [w["name"] for w in doc["workloads"]] == ["model/prefill", "model/decode"]
    assert all(w["status"] == "ok" for w in doc["workloads"]), [w.get("reason") for w in doc["workloads"]]
    rep = run_cli("report", "--run", doc["id"], "--json")
    assert rep.returncode in (0, 1, 3), rep.stderr
    out = json.loads(rep.stdout)
    sentence = out["sentence"] if "sentence" in out else out["analyses"][0]["sentence"]
    assert sentence.startswith("On this machine, MLX ") and "as fast as torch " in sentence


def test_install_rc_mlx_verification_builds_a_tiny_model() -> None:
    from mpsup.envs.mlx_env import verify

    assert MLX_PYTHON is not None
    facts = verify(MLX_PYTHON)
    assert facts["mlx_version"] and facts["mlx_lm_version"] and isinstance(facts["metal"], bool)


def test_real_weights_are_read_from_a_transformers_folder(worker: WorkerProcess, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")
    hf = {k: v for k, v in LLAMA.items() if k not in ("architectures", "torch_dtype")}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**hf))
    model.save_pretrained(tmp_path / "llama")
    spec = _spec("prefill", LLAMA, weights="real", path=str(tmp_path / "llama"))
    ready = worker.request({"op": "setup", "workload": spec, "calls": 1})
    assert ready["type"] == "ready", ready
    assert ready["phase"]["weights"] == "real" and ready["phase"]["logits_kept"] == 1
    worker.request({"op": "teardown"})
    # A folder without the weights is an error of that load, never random weights in their place.
    (tmp_path / "llama" / "model.safetensors").unlink()
    assert worker.request({"op": "setup", "workload": spec, "calls": 1})["type"] == "error"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_the_mlx_worker_runs_whole_on_the_cpu_it_is_pinned_to() -> None:
    assert MLX_PYTHON is not None
    last = max(os.sched_getaffinity(0))
    w = WorkerProcess(MLX_PYTHON, stack="mlx", env=mlx_pin_env(None, (last, 0)))
    try:
        hello = w.request({"op": "hello", "device": "cpu"})
        assert hello["cpus"] == [last]
        # Every thread of it, mlx's own included, since they start after the pin.
        tasks = Path(f"/proc/{w.proc.pid}/task")
        for task in tasks.iterdir():
            status = (task / "status").read_text()
            allowed = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
            assert allowed.split()[-1] == str(last), (task.name, allowed)
    finally:
        w.close()


def test_a_slow_mlx_start_is_named_as_importing_mlx(worker: WorkerProcess) -> None:
    assert worker._waiting_for({"op": "hello"}).endswith(" to start (importing mlx)")
