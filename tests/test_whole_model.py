"""Whole models in the worker (issue 24): tiny configs made here, built by this environment's transformers
and diffusers, run as phases; the depth fit, the cache rolled back, the census; and bad input, one line each."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")

from mpsup.model.phases import PhaseOptions, model_phases, phase_shape  # noqa: E402
from mpsup.worker import whole_model  # noqa: E402
from mpsup.worker.core import Unsupported  # noqa: E402
from mpsup.worker.device import Device  # noqa: E402
from mpsup.worker.main import Worker  # noqa: E402
from mpsup.worker.whole_model import build_phase  # noqa: E402
from tests.tiny_models import BERT, DEEP_LLAMA, MIXTRAL, QWEN3_MOE, UNET, VAE, WAN_VAE, write_llama_folder  # noqa: E402


def spec(config: dict[str, Any], phase: str, **extra: Any) -> dict[str, Any]:
    causal = any(a.endswith("ForCausalLM") for a in config.get("architectures", []))
    params = {"library": "transformers", "config": config, "causal": causal, "tokens": 8, "phase": phase, **extra}
    return {"name": f"model/{phase}", "kind": "model_phase", "dtype": "fp32", "params": params}


def test_prefill_runs_the_model_whole_and_says_what_ran() -> None:
    built = build_phase(spec(DEEP_LLAMA, "prefill"), Device("cpu"))
    out = built.fn()
    assert out.logits.shape[:2] == (1, 1)  # generate() keeps the last position's logits only
    assert built.items_per_call == 8
    info = built.info or {}
    assert info["layers"] == 4 and info["depth"] == 4
    assert info["architecture"] == "LlamaForCausalLM"
    assert info["fallback_ops"] == []
    census = info["census"]
    assert census["calls"] > 20 and any("mm" in op or "linear" in op for op in census["ops"])
    assert all({"op", "shapes", "dtypes", "count"} <= e.keys() for e in census["entries"])


def test_decode_sees_the_same_cache_length_on_every_call() -> None:
    built = build_phase(spec(DEEP_LLAMA, "decode", cache=16), Device("cpu"))
    for _ in range(5):
        out = built.fn()
    cache = out.past_key_values
    assert cache.get_seq_length() == 16  # rolled back after each call, not 16 + 5
    assert built.items_per_call == 1 and (built.info or {})["cache"] == 16


@pytest.mark.parametrize("config", [MIXTRAL, QWEN3_MOE], ids=["mixtral", "qwen3-moe"])
def test_moe_models_run_whole(config: dict[str, Any]) -> None:
    built = build_phase(spec(config, "prefill"), Device("cpu"))
    built.fn()
    ops = (built.info or {})["census"]["ops"]
    assert sum(ops.values()) > 0


def test_an_encoder_runs_one_forward() -> None:
    built = build_phase(spec(BERT, "forward"), Device("cpu"))
    assert built.fn().last_hidden_state.shape == (1, 8, 64)


def test_a_model_that_does_not_fit_runs_a_prefix_of_its_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    device = Device("cpu")
    monkeypatch.setattr(
        whole_model, "_capacity", lambda _device: 450_000
    )  # the embeddings (131 kB) and two 148 kB blocks
    built = build_phase(spec(DEEP_LLAMA, "prefill", fit_share=1.0), device)
    info = built.info or {}
    assert 1 <= info["depth"] < info["layers"] == 4
    built.fn()


def test_depth_can_be_forced_and_even_one_block_too_many_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (build_phase(spec(DEEP_LLAMA, "prefill", depth=1), Device("cpu")).info or {})["depth"] == 1
    device = Device("cpu")
    monkeypatch.setattr(whole_model, "_capacity", lambda _device: 10_000)
    with pytest.raises(MemoryError, match="out of memory: even one block"):
        build_phase(spec(DEEP_LLAMA, "prefill", fit_share=1.0), device)


def test_an_architecture_this_transformers_does_not_know_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="does not know model_type 'no-such-arch'"):
        build_phase(spec({**DEEP_LLAMA, "model_type": "no-such-arch"}, "prefill"), Device("cpu"))


def test_missing_transformers_is_unsupported_with_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def no_transformers(name: str, *a: Any, **k: Any) -> Any:
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", no_transformers)
    with pytest.raises(Unsupported, match="transformers is not installed in this environment"):
        build_phase(spec(DEEP_LLAMA, "prefill"), Device("cpu"))


def test_the_worker_answers_setup_with_the_phase_facts() -> None:
    worker = Worker(io.StringIO())
    worker.hello({"device": "cpu"})
    ready = worker.setup({"workload": spec(DEEP_LLAMA, "decode", cache=8), "calls": 2})
    assert ready["type"] == "ready" and ready["phase"]["depth"] == 4 and ready["phase"]["cache"] == 8
    samples = worker.sample({"count": 3})
    assert len(samples["host"]) == 3 and all(s > 0 for s in samples["host"])


def test_phases_for_each_kind_of_model() -> None:
    opts = PhaseOptions(tokens=16, dtype="bf16")
    causal = model_phases("transformers", DEEP_LLAMA, None, "/m", opts)
    assert [w.name for w in causal.workloads] == ["model/prefill", "model/decode"]
    assert causal.workloads[1].params["cache"] == 16
    encoder = model_phases("transformers", BERT, None, "/m", opts)
    assert [w.params["phase"] for w in encoder.workloads] == ["forward"]
    compiled = model_phases("transformers", DEEP_LLAMA, None, "/m", PhaseOptions(tokens=16, compile_too=True))
    assert [w.name for w in compiled.workloads][-1] == "model/decode/compiled"
    gguf = model_phases("gguf", {}, None, "/m.gguf", opts)
    assert not gguf.workloads and "estimated from its layers" in gguf.notes[0]
    pipeline = model_phases(
        "diffusers",
        {},
        {"unet": {"_class_name": "UNet2DConditionModel"}, "vae": {"_class_name": "AutoencoderKL"}},
        "/p",
        opts,
    )
    assert sorted(w.params["phase"] for w in pipeline.workloads) == ["step", "vae_decode", "vae_encode"]


diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")


def diffusers_spec(config: dict[str, Any], phase: str, **extra: Any) -> dict[str, Any]:
    params = {"library": "diffusers", "config": config, "phase": phase, "resolution": [64, 64], **extra}
    return {"name": f"model/x/{phase}", "kind": "model_phase", "dtype": "fp32", "params": params}


@pytest.mark.parametrize("phase", ["vae_decode", "vae_encode"])
def test_a_vae_decodes_and_encodes_at_the_resolution(phase: str) -> None:
    built = build_phase(diffusers_spec(VAE, phase), Device("cpu"))
    out = built.fn()
    info = built.info or {}
    assert info["factor"] == 2  # two levels: one halving
    if phase == "vae_decode":
        assert out.sample.shape == (1, 3, 64, 64)
        assert info["latent"] == "1x4x32x32"


def test_a_video_vae_decodes_and_encodes_the_frames_asked_for() -> None:
    """--frames: the frames a user decodes (the release's Wan 2.2 case is a video), in the VAE's own time
    compression, probed rather than assumed; a count it cannot take is rounded down to one it can."""
    decode = build_phase(diffusers_spec(WAN_VAE, "vae_decode", frames=5), Device("cpu"))
    assert decode.fn().sample.shape == (1, 3, 5, 64, 64)
    assert (decode.info or {})["latent"] == "1x4x3x32x32" and (decode.info or {})["frames"] == 5
    encode = build_phase(diffusers_spec(WAN_VAE, "vae_encode", frames=6), Device("cpu"))
    assert (encode.info or {})["frames"] == 5 and encode.fn().latent_dist.mean.shape == (1, 4, 3, 32, 32)
    one = build_phase(diffusers_spec(WAN_VAE, "vae_decode"), Device("cpu"))
    assert (one.info or {})["latent"] == "1x4x1x32x32"  # a spec naming no frames: one image
    with pytest.raises(Unsupported, match="--frames 5: AutoencoderKL encodes images, not video"):
        build_phase(diffusers_spec(VAE, "vae_decode", frames=5), Device("cpu"))


def test_frames_reach_the_vae_phases_and_make_them_another_measurement() -> None:
    from mpsup.runs.schema import WorkloadRun

    components = {"vae": {"_class_name": "AutoencoderKLWan"}, "unet": {"_class_name": "UNet2DConditionModel"}}
    opts = PhaseOptions(tokens=8, resolution=(64, 64), frames=81)
    phases = {w.params["phase"]: w for w in model_phases("diffusers", {}, components, "/p", opts).workloads}
    assert phases["vae_decode"].params["frames"] == phases["vae_encode"].params["frames"] == 81
    assert "frames" not in phases["step"].params
    assert phase_shape(phases["vae_decode"].params).endswith("64x64 px x 81 frames")

    def run(frames: int | None) -> WorkloadRun:
        doc = {"name": "model/vae/vae_decode", "part": "phase", "dtype": "bf16", "resolution": [64, 64]}
        return WorkloadRun.from_json({**doc, **({"frames": frames} if frames else {})}, "w")

    assert run(81).identity != run(21).identity != run(None).identity
    assert run(81).identity == run(81).identity


@pytest.mark.parametrize("frames", ["0", "4097"])
def test_frames_out_of_range_is_one_line(tmp_path: Path, frames: str) -> None:
    from tests.conftest import run_cli

    res = run_cli("bench", "--model", str(tmp_path), "--frames", frames, "--list")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"mpsup: --frames {frames}: expected a whole number from 1 to 4096"
    ], res.stderr


def test_a_unet_takes_one_denoising_step() -> None:
    built = build_phase(diffusers_spec(UNET, "step", vae_factor=8), Device("cpu"))
    assert built.fn().sample.shape == (1, 4, 8, 8)


def test_an_unknown_diffusers_class_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="has no model class"):
        build_phase(diffusers_spec({**VAE, "_class_name": "NoSuchModel"}, "vae_decode"), Device("cpu"))


def test_diffusers_folder_gives_its_phases(tmp_path: Path) -> None:
    from mpsup.model.sources import open_model

    pipe = tmp_path / "pipe"
    for name, cfg in (("vae", VAE), ("unet", UNET)):
        cls = getattr(diffusers, cfg["_class_name"])
        cls.from_config({k: v for k, v in cfg.items() if k != "_class_name"}).save_pretrained(pipe / name)
    (pipe / "model_index.json").write_text(
        json.dumps(
            {
                "_class_name": "StableDiffusionPipeline",
                "vae": ["diffusers", "AutoencoderKL"],
                "unet": ["diffusers", "UNet2DConditionModel"],
            }
        )
    )
    model = open_model(pipe, tokens=(1, 16), resolution=64)
    phases = [w for w in model.workloads if w.part == "phase"]
    assert {w.name for w in phases} == {"model/unet/step", "model/vae/vae_decode", "model/vae/vae_encode"}
    assert all(w.params["resolution"] == (64, 64) or w.params["resolution"] == [64, 64] for w in phases)
    assert model.doc["whole"] is True


def test_torch_dtype_is_the_checkpoint_s(tmp_path: Path) -> None:
    from mpsup.model.sources import open_model

    folder = write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    model = open_model(folder, tokens=(1, 8))
    prefill = model.workloads[0]
    assert prefill.name == "model/prefill" and prefill.dtype == "fp32" and prefill.params["tokens"] == 8
    assert torch.get_default_dtype() == torch.float32


def aa_bench(model: str, only: str) -> Any:
    """A short A/A bench of a model as a user runs it (a fresh process), with its JSON summary on stdout."""
    from tests.conftest import run_cli

    return run_cli(
        "bench", "--model", model, "--aa", "--no-smoke", "--only", only, "--tokens", "1,8", "--budget", "0.05",
        "--visits", "2", "--json",
    )  # fmt: skip


def test_paired_bench_and_report_carry_the_phases(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    folder = write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    bench = aa_bench(str(folder), "phase,*/t1")
    assert bench.returncode == 0, bench.stderr
    phases = json.loads(bench.stdout)["model_phases"]
    assert set(phases) == {"prefill", "decode"}
    for doc in phases.values():
        assert doc["source"] == "whole-model" and doc["median_s"] > 0 and doc["tokens_per_s"] > 0
        assert {"ci_low_s", "ci_high_s", "peak_memory_bytes"} <= doc.keys()
    assert phases["decode"]["layer_coverage"] is not None
    report = run_cli("report", "--json")
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["model_speedup"]["source"] == "whole-model"
    assert set(doc["model_phases"]) == {"prefill", "decode"}
    for p in doc["model_phases"].values():
        assert {"speedup", "low", "high", "change", "baseline_s", "candidate_s"} <= p.keys()
    assert "decode" in doc["layer_coverage"] and doc["layer_coverage"]["decode"] > 0
    assert "prefill" in doc["sentence"] and "decode" in doc["sentence"]
    text = run_cli("report")
    # The phases are the verdict, so they come first, above the layer table that explains them.
    table = next(i for i, ln in enumerate(text.stdout.splitlines()) if ln.lstrip("┃ ").startswith("workload"))
    phase_lines = [i for i, ln in enumerate(text.stdout.splitlines()) if ln.startswith("Phase ")]
    assert len(phase_lines) == 2 and max(phase_lines) < table, text.stdout
    assert text.stdout.count("Phase prefill") == 1


def test_a_config_transformers_cannot_build_still_delivers_the_layers(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    folder = write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "no-such-arch"}))
    bench = aa_bench(str(folder), "phase,*/t1")
    assert "Traceback" not in bench.stderr
    summary = json.loads(bench.stdout)
    statuses = {w["name"]: w["status"] for w in summary["workloads"]}
    assert statuses["model/prefill"] == statuses["model/decode"] == "unsupported"
    assert any(s == "ok" for n, s in statuses.items() if n.startswith("model/linear"))
    report = json.loads(run_cli("report", "--json").stdout)
    assert report["model_phases"]["prefill"]["change"] == "n/a"
    assert "does not know model_type" in report["model_phases"]["prefill"]["reason"]


def test_layers_alone_are_labelled_an_estimate(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    folder = write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    bench = aa_bench(str(folder / "model.safetensors"), "*/t1")
    assert bench.returncode == 0, bench.stderr
    report = json.loads(run_cli("report", "--json").stdout)
    assert report["model_speedup"]["source"] == "layers" and report["model_phases"] == {}
    assert "estimated from its layers" in report["sentence"] and "your model's forward" not in report["sentence"]
    assert "measure it whole" in report["sentence"]


def test_phases_that_disagree_make_a_mixed_verdict_that_names_both() -> None:
    from mpsup.report.phases import PhaseChange, phase_verdict
    from mpsup.stats import Interval

    prefill = PhaseChange("prefill", "model/prefill", Interval(0.53, 0.50, 0.56, 12), "slower", 0.1, 0.19, 0.94)
    decode = PhaseChange("decode", "model/decode", Interval(1.0, 0.99, 1.01, 12), "same", 0.016, 0.016, 0.52)
    verdict, sentence = phase_verdict([prefill, decode], [], "torch B vs A")
    assert verdict == "mixed"
    assert "prefill 0.53x (95% CI 0.50-0.56x), slower" in sentence
    assert "decode 1.00x (95% CI 0.99-1.01x), no measurable change" in sentence
    assert phase_verdict([decode], [], "v")[0] == "no-change"
    assert phase_verdict([prefill], [], "v")[0] == "regression"
    assert phase_verdict([], [], "v") is None


def test_a_wide_no_change_reads_the_same_in_the_sentence_and_the_phase_line() -> None:
    """The H200 A/A: the sentence said "decode 0.98x (0.89-1.09x), too wide to tell" and the phase line
    beneath it "no measurable change" for the same interval."""
    from mpsup.report.phases import PhaseChange, phase_verdict, with_width
    from mpsup.report.render import phase_line
    from mpsup.stats import Interval

    decode = PhaseChange("decode", "model/decode", Interval(0.98, 0.89, 1.09, 12), "same", 0.024, 0.025, 0.25)
    narrow = PhaseChange("prefill", "model/prefill", Interval(1.0, 0.99, 1.01, 12), "same", 0.022, 0.022, 0.5)
    verdict, sentence = phase_verdict([decode, narrow], [], "v")
    assert verdict == "inconclusive" and "decode 0.98x (95% CI 0.89-1.09x), too wide to tell" in sentence
    wide, tight = with_width([decode, narrow])
    assert "too wide to tell" in phase_line(wide) and "no measurable change" not in phase_line(wide)
    assert "no measurable change" in phase_line(tight)


def test_a_phase_too_wide_to_tell_does_not_make_a_mixed_verdict() -> None:
    """A walkthrough's run read "Mixed ...: prefill 1.15x (1.03-1.40x), too wide to tell; decode 1.41x, faster":
    nothing disagreed. The called phase decides, and the wide one is said to be unknown."""
    from mpsup.report.phases import PhaseChange, phase_verdict
    from mpsup.stats import Interval

    prefill = PhaseChange("prefill", "model/prefill", Interval(1.15, 1.03, 1.40, 12), "same", 0.02, 0.017, 0.2)
    decode = PhaseChange("decode", "model/decode", Interval(1.41, 1.28, 1.80, 12), "faster", 0.02, 0.014, 0.5)
    verdict, sentence = phase_verdict([prefill, decode], [], "torch B vs A")
    assert verdict == "benefit", sentence
    assert sentence.startswith("Upgrade: decode faster with torch B vs A, prefill too wide to tell")


def test_two_separate_runs_phases_read_as_estimates() -> None:
    from mpsup.report.phases import PhaseChange
    from mpsup.stats import Interval

    # `report --baseline A --candidate B` of two whole-model runs raised KeyError: 'uncalled' here.
    p = PhaseChange("decode", "model/decode", Interval(1.1, 0.9, 1.3, 12), "uncalled", 0.02, 0.018, 0.5)
    assert p.text().endswith("not called (two separate runs: an estimate)")


def test_ops_that_fell_back_to_the_cpu_are_recorded() -> None:
    from mpsup.worker.whole_model import _first_call

    def forward() -> None:
        warnings.warn(
            "The operator 'aten::_upsample_bicubic2d_aa.out' is not currently supported on the MPS backend and "
            "will fall back to run on the CPU. This may have performance implications.",
            UserWarning,
            stacklevel=1,
        )

    assert _first_call(forward, lambda: None) == (["aten::_upsample_bicubic2d_aa.out"], None)


# A real C++ TORCH_WARN_ONCE that fires on a CPU (aten's Cross.cpp), standing in for MPSFallback.mm's: one
# call site, warned once per process unless warn-always is on, its flag spent even when Python ignores it.
WARN_ONCE_TEXT = re.compile(r"Using (torch\.cross) without specifying the dim arg")


def _cross_without_dim() -> None:
    torch.cross(torch.ones(3, 3), torch.ones(3, 3))


def test_torch_cross_without_dim_is_a_cpp_warn_once_spent_even_when_ignored() -> None:
    script = textwrap.dedent(
        """
        import warnings, torch
        def calls(n):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                for _ in range(n):
                    torch.cross(torch.ones(3, 3), torch.ones(3, 3))
            return sum("torch.cross" in str(w.message) for w in seen)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.cross(torch.ones(3, 3), torch.ones(3, 3))
        spent = calls(3)
        torch.set_warn_always(True)
        always = calls(3)
        print(spent, always)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["0", "3"]  # ignored once, then blind; every time under warn-always


def test_a_fallback_warned_while_the_cache_filled_still_reaches_the_decode_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every forward of the model (the KV cache's fill, then decode's first call) runs the warn-once. Ignoring
    # warnings during the fill spent its flag, and decode's listener then heard nothing.
    from torch.nn.modules.module import register_module_forward_hook

    from mpsup.worker import core

    monkeypatch.setattr(core, "FALLBACK", WARN_ONCE_TEXT)

    def hook(module: torch.nn.Module, _args: Any, _out: Any) -> None:
        if type(module).__name__ == "LlamaForCausalLM":
            _cross_without_dim()

    with warnings.catch_warnings():  # spent in this process, as an earlier workload of a worker would spend it
        warnings.simplefilter("ignore")
        _cross_without_dim()
    handle = register_module_forward_hook(hook)
    try:
        built = build_phase(spec(DEEP_LLAMA, "decode", cache=8), Device("cpu"))
    finally:
        handle.remove()
    info = built.info or {}
    assert info["fallback_ops"] == ["torch.cross"]
    assert info["setup_fallback_ops"] == ["torch.cross"]  # the cache's fill
    assert not torch.is_warn_always_enabled()  # restored


def test_a_layer_s_first_call_that_ran_on_the_cpu_says_so_in_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    from mpsup.bench.measurement import EnvMeasurement
    from mpsup.worker import core, main
    from mpsup.worker.core import Built

    monkeypatch.setattr(core, "FALLBACK", WARN_ONCE_TEXT)
    monkeypatch.setattr(main, "build", lambda spec, device: Built(_cross_without_dim))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _cross_without_dim()
    worker = Worker(io.StringIO())
    worker.hello({"device": "cpu"})
    ready = worker.setup({"workload": {"kind": "linear", "params": {}}, "calls": 1})
    assert ready["fallback_ops"] == ["torch.cross"]
    assert EnvMeasurement.ready(ready).to_json()["fallback_ops"] == ["torch.cross"]


def test_a_phase_s_cpu_ops_come_back_once_in_its_phase_info_not_as_a_layer_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_phase watches its own first call; the worker's layer watch around it must not repeat the ops."""
    from mpsup.worker import core, main
    from mpsup.worker.core import Built

    monkeypatch.setattr(core, "FALLBACK", WARN_ONCE_TEXT)
    info = {"phase": "prefill", "fallback_ops": ["torch.cross"]}
    monkeypatch.setattr(main, "build", lambda spec, device: Built(_cross_without_dim, info=info))
    worker = Worker(io.StringIO())
    worker.hello({"device": "cpu"})
    ready = worker.setup({"workload": {"kind": "model_phase", "params": {}}, "calls": 1})
    assert ready["phase"]["fallback_ops"] == ["torch.cross"]
    assert "fallback_ops" not in ready


def test_real_weights_are_loaded_when_asked(tmp_path: Path) -> None:
    folder = write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    saved = transformers.AutoModelForCausalLM.from_pretrained(folder)
    built = build_phase(spec(DEEP_LLAMA, "prefill", weights="real", path=str(folder)), Device("cpu"))
    model = built.keep[0]
    assert torch.equal(model.lm_head.weight, saved.lm_head.weight)


def test_hostile_configs_fail_their_phase_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Unsupported, match="num_hidden_layers 10000000 is beyond any real model"):
        build_phase(spec({**DEEP_LLAMA, "num_hidden_layers": 10_000_000}, "prefill"), Device("cpu"))
    with pytest.raises(MemoryError, match="out of memory: even one block"):
        build_phase(spec({**DEEP_LLAMA, "hidden_size": 2**20, "intermediate_size": 2**22}, "prefill"), Device("cpu"))
    monkeypatch.setattr(whole_model, "_capacity", lambda _device: 1000)
    with pytest.raises(MemoryError, match="its weights need"):
        build_phase(diffusers_spec(VAE, "vae_decode"), Device("cpu"))


def test_a_phase_whose_layers_were_not_measured_has_unknown_coverage() -> None:
    from mpsup.model.coverage import coverage

    # `--tokens 8`: no 1-token layer measured, so nothing says what explains a decode step: unknown, not 0%.
    layer = {"name": "model/linear/64x64/t8", "part": "model", "tokens": 8, "count": 4, "envs": {"b": {"median": 1e-4}}}
    decode = {"phase": "decode", "library": "transformers", "tokens": 8, "envs": {"b": {"median": 1e-3}}}
    prefill = {**decode, "phase": "prefill"}
    record = {"workloads": [layer, decode, prefill]}
    assert coverage(record, decode, "b") is None
    assert coverage(record, prefill, "b") == pytest.approx(0.4)


def test_real_weights_of_a_relative_folder_are_asked_for_by_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mpsup.model.sources import WholeModel, open_model

    write_llama_folder(tmp_path / "llama", DEEP_LLAMA)
    monkeypatch.chdir(tmp_path)
    model = open_model(Path("llama"), tokens=(8,), whole=WholeModel(real_weights=True))
    # The worker runs in its own folder: "llama" there was another folder, or a Hub id tried after a long wait.
    assert {w.params["path"] for w in model.workloads if w.part == "phase"} == {str(tmp_path / "llama")}


def test_a_phase_one_side_did_not_run_shows_the_other_side_s_time_alone() -> None:
    from mpsup.report.phases import PhaseChange
    from mpsup.report.render import phase_line

    p = PhaseChange("prefill", "model/prefill", None, "n/a", 2.26e-3, None, None, reason="no transformers there")
    line = phase_line(p)
    assert "baseline 2.26 ms per call" in line and "->" not in line


def test_the_terminal_table_holds_the_layers_and_the_phase_lines_the_phases() -> None:
    import io

    from rich.console import Console

    from mpsup.report.analysis import analyze
    from mpsup.report.render import render_terminal
    from tests.synthetic import paired_record

    rec = paired_record(1.0, seed=2, count=6)
    for w, phase in zip(rec["workloads"][:2], ("prefill", "decode"), strict=True):
        w.update(part="phase", kind="model_phase", phase=phase, library="transformers", tokens=8)
    rec["model"] = {"path": "llama", "format": "transformers", "fingerprint": "f"}
    buf = io.StringIO()
    render_terminal(analyze(rec), Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    # They were rows too, at "share 0.0%", or counted under the cut among "no measurable change".
    assert text.count("Phase prefill") == 1 and text.count("Phase decode") == 1
    assert rec["workloads"][0]["name"] not in text.replace("Phase prefill", "")


def test_markdown_html_and_json_put_the_phases_first_as_the_whole_model() -> None:
    from mpsup.report.analysis import analyze
    from mpsup.report.render import render_html, render_markdown
    from tests.synthetic import paired_record

    rec = paired_record(1.0, seed=2, count=6)
    names = {}
    for w, phase in zip(rec["workloads"][-2:], ("prefill", "decode"), strict=True):
        w.update(part="phase", kind="model_phase", phase=phase, library="transformers", tokens=8)
        names[phase] = w["name"]
    rec["model"] = {"path": "llama", "format": "transformers", "fingerprint": "f"}
    a = analyze(rec)
    # They sorted last, as rows at "share 0.0%" of the layers whose whole they are.
    assert {w.name for w in a.workloads[:2]} == set(names.values())
    md_rows = [line for line in render_markdown(a).splitlines() if line.startswith("| ")][1:]
    assert [r.split(" | ")[2] for r in md_rows[:2]] == ["whole", "whole"]
    assert all(r.split(" | ")[2].endswith("%") for r in md_rows[2:])
    page = render_html(a)
    assert page.count("<td>whole</td>") == 2 and "<td>0.0%</td>" not in page
    doc = a.to_json()
    assert [w["share"] for w in doc["workloads"][:2]] == [None, None]
    # model_speedup has one shape, phases or layers: the phases' single figure is null, not absent
    layers_only = analyze(paired_record(1.0, seed=2, count=6) | {"model": rec["model"]}).to_json()
    assert set(doc["model_speedup"]) == set(layers_only["model_speedup"])
    assert doc["model_speedup"]["estimate"] is None and layers_only["model_speedup"]["estimate"] is not None


def test_layers_adding_up_to_more_than_the_phase_are_said_as_that() -> None:
    """On this VM the layers timed alone added up to 112% and 124% of a prefill: "explain 124% of it" read as
    a bug. Now the line says what it is, and bench's phase table carries a note."""
    import io

    from rich.console import Console

    from mpsup.bench.phase_table import render_phases
    from mpsup.model.coverage import OVER_WHOLE_NOTE
    from mpsup.report.phases import PhaseChange
    from mpsup.report.render import phase_line
    from mpsup.stats import Interval

    over = PhaseChange("prefill", "model/prefill", Interval(0.65, 0.62, 0.69, 12), "slower", 0.127, 0.197, 1.24)
    assert "add up to 124% of it (more than the whole)" in phase_line(over) and "explain" not in phase_line(over)
    under = PhaseChange("decode", "model/decode", Interval(1.0, 0.97, 1.02, 12), "same", 0.024, 0.024, 0.46)
    assert "the layer workloads explain 46% of it" in phase_line(under)
    record = {
        "environments": [{"label": "baseline"}],
        "workloads": [
            {
                "name": "model/prefill",
                "part": "phase",
                "phase": "prefill",
                "library": "transformers",
                "tokens": 8,
                "envs": {"baseline": {"median": 0.01, "status": "ok"}},
            },
            {
                "name": "model/linear/8x8/t8",
                "part": "model",
                "tokens": 8,
                "count": 3,
                "envs": {"baseline": {"median": 0.005, "status": "ok"}},
            },
        ],
    }
    buf = io.StringIO()
    render_phases(record, Console(file=buf, width=200, color_system=None))
    assert "150%" in buf.getvalue() and OVER_WHOLE_NOTE in buf.getvalue()


def test_a_phase_awaits_each_call_before_the_next_and_a_layer_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # A decode loop needs each token before the next step: a phase's timed call ends with the device synchronised.
    worker = Worker(io.StringIO())
    worker.hello({"device": "cpu"})
    waits: list[int] = []
    monkeypatch.setattr(worker.device, "synchronize", lambda: waits.append(1))
    worker.setup({"workload": spec(DEEP_LLAMA, "decode", cache=8), "calls": 2})
    assert worker.current is not None
    before = len(waits)
    worker.current.fn()
    assert len(waits) - before == 1
    linear = {"kind": "linear", "dtype": "fp32", "params": {"tokens": 1, "in_features": 8, "out_features": 8}}
    worker.setup({"workload": linear, "calls": 2})
    assert worker.current is not None
    before = len(waits)
    worker.current.fn()
    assert len(waits) == before
