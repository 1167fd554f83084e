"""Random weights at the cost of their bytes (worker/weights.py) and the float64 reference a module at a time:
a model built without its large parameters' values gets exactly the values a fully built one is filled with,
the streamed reference computes exactly what a whole float64 copy computes while holding one module's weights,
a visit's phases share one model, and decode's truth continues prefill's float64 cache."""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is in the test extra")

from mpsup.worker import values, weights, whole_model  # noqa: E402
from mpsup.worker.device import Device  # noqa: E402
from mpsup.worker.truth import truth_answer  # noqa: E402
from mpsup.worker.whole_model import build_phase  # noqa: E402
from tests.tiny_models import DEEP_LLAMA, MIXTRAL, UNET, VAE  # noqa: E402

# The tiny models' line between built without values and built whole: their norms' 64 gains stay the library's.
SMALL = 100


@pytest.fixture(autouse=True)
def fresh() -> Any:
    values.TRUTH.reset()
    values.TRUTH.on = False
    whole_model.forget()
    yield
    values.TRUTH.on = False
    whole_model.forget()


def _spec(config: dict[str, Any], phase: str, dtype: str = "bf16", **extra: Any) -> dict[str, Any]:
    params = {"library": "transformers", "config": config, "causal": True, "tokens": 12, "phase": phase, **extra}
    return {"name": f"model/{phase}", "kind": "model_phase", "dtype": dtype, "params": params}


def _llama(least: int) -> torch.nn.Module:
    cfg = transformers.AutoConfig.for_model(**DEEP_LLAMA)
    with weights.parameters_without_values(least):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def test_large_parameters_are_built_without_values_and_buffers_and_small_ones_keep_theirs() -> None:
    model = _llama(least=1000)
    params = dict(model.named_parameters())
    assert params["model.layers.0.mlp.gate_proj.weight"].is_meta  # 64 x 128: over the line
    assert not params["model.layers.0.input_layernorm.weight"].is_meta  # 64: under it, the library's ones
    assert torch.equal(params["model.layers.0.input_layernorm.weight"], torch.ones(64))
    assert all(not b.is_meta for b in model.buffers())  # rotary frequencies are computed, not drawn
    assert torch.nn.Module.register_parameter.__name__ == "register_parameter"  # restored after


def test_a_model_built_without_values_gets_the_values_a_fully_built_one_is_filled_with() -> None:
    full = _llama(least=1 << 40)
    values.fill_parameters(full, torch.bfloat16)
    digest_full = values.TRUTH.hexdigest()
    values.TRUTH.reset()
    lean = _llama(least=SMALL)
    assert all(p.is_meta == (p.dim() > 1) for p in lean.parameters())
    weights.materialize(lean, torch.device("cpu"), torch.bfloat16)
    assert values.TRUTH.hexdigest() == digest_full
    lean_params = dict(lean.named_parameters())
    for name, p in full.named_parameters():
        assert torch.equal(lean_params[name], p), name


def test_every_slice_of_a_draw_is_the_draw_s_own_elements() -> None:
    draw = values.Draw(seed=1234, low=-0.5, high=0.5, dtype=torch.bfloat16)
    n = values.TILE + 5000  # past one tile: the draw repeats its rotated tile
    whole = draw.slice(0, n, torch.device("cpu"))
    for start, count in ((0, 10), (values.TILE - 3, 9), (values.TILE + 17, 100), (123_456, 77)):
        assert torch.equal(draw.slice(start, count, torch.device("cpu")), whole[start : start + count])
    wide = draw.slice(values.TILE - 3, 9, torch.device("cpu"), torch.float64)
    assert torch.equal(wide, whole[values.TILE - 3 : values.TILE + 6].double())  # rounded first, then widened
    assert torch.equal(
        values.scaled_tile(-0.5, 0.5, torch.bfloat16).values,
        values.uniform(values.TILE, values.TILE_SEED, -0.5, 0.5).to(torch.bfloat16),
    )


@pytest.mark.parametrize("config", [DEEP_LLAMA, MIXTRAL], ids=["llama", "mixtral"])
def test_the_streamed_reference_computes_what_a_whole_float64_copy_computes(
    config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tied = {**config, "tie_word_embeddings": True}
    for phase in ("prefill", "decode"):
        monkeypatch.setattr(weights, "STREAM_LEAST", 1 << 40)  # nothing streamed: every weight at once
        whole, whole_digest = truth_answer(_spec(tied, phase, cache=12), None)
        whole_model.forget()
        monkeypatch.setattr(weights, "STREAM_LEAST", SMALL)
        monkeypatch.setattr(weights, "STREAM_CHUNK_ELEMENTS", 100)  # the output head and embedding in row blocks
        streamed, streamed_digest = truth_answer(_spec(tied, phase, cache=12), None)
        whole_model.forget()
        assert streamed_digest == whole_digest
        assert streamed.logits.dtype == torch.float64
        torch.testing.assert_close(streamed.logits, whole.logits, rtol=1e-12, atol=1e-12)


def test_the_streamed_reference_holds_one_module_s_weights_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights, "STREAM_LEAST", SMALL)
    seen: list[weights.JustInTime] = []
    real = weights.JustInTime

    def keep(*args: Any, **kwargs: Any) -> weights.JustInTime:
        jit = real(*args, **kwargs)
        seen.append(jit)
        return jit

    monkeypatch.setattr(weights, "JustInTime", keep)
    truth_answer(_spec(DEEP_LLAMA, "prefill"), None)
    (jit,) = seen
    model = whole_model._KEPT[0].model
    everything = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m._parameters.values() if p is not None) for m in model.modules())
    assert largest <= jit.peak_elements <= 2 * largest < everything
    assert all(p.is_meta for p in model.parameters() if p.dim() > 1)  # nothing left behind after the forward


def test_a_visit_s_phases_share_one_model_and_its_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    real = whole_model._hf_model
    monkeypatch.setattr(whole_model, "_hf_model", lambda *a, **k: built.append(1) or real(*a, **k))
    values.TRUTH.reset()
    build_phase(_spec(DEEP_LLAMA, "prefill"), Device("cpu"))
    values.TRUTH.reset()
    build_phase(_spec(DEEP_LLAMA, "decode", cache=12), Device("cpu"))
    shared = values.TRUTH.hexdigest()
    assert len(built) == 1  # decode took prefill's model
    whole_model.forget()
    values.TRUTH.reset()
    build_phase(_spec(DEEP_LLAMA, "decode", cache=12), Device("cpu"))
    assert len(built) == 2 and values.TRUTH.hexdigest() == shared  # built afresh: the same digest
    build_phase({"kind": "model_phase", **_spec({**DEEP_LLAMA, "hidden_size": 32}, "prefill")}, Device("cpu"))
    assert len(built) == 3  # another model: the kept one goes first


def test_decode_s_truth_continues_prefill_s_float64_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    continued: list[bool] = []
    real = whole_model._HfCall._prefill_cache

    def spy(self: Any, cache: int) -> Any:
        got = real(self, cache)
        continued.append(got is not None)
        return got

    monkeypatch.setattr(whole_model._HfCall, "_prefill_cache", spy)
    truth_answer(_spec(DEEP_LLAMA, "prefill"), None)
    after_prefill, digest = truth_answer(_spec(DEEP_LLAMA, "decode", cache=8), None)
    whole_model.forget()
    afresh, fresh_digest = truth_answer(_spec(DEEP_LLAMA, "decode", cache=8), None)
    assert continued == [True, False] and digest == fresh_digest
    torch.testing.assert_close(after_prefill.logits, afresh.logits, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config,phase", [(UNET, "step"), (VAE, "vae_decode")], ids=["unet", "vae"])
def test_a_diffusers_model_streams_too(config: dict[str, Any], phase: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("diffusers", reason="diffusers is in the test extra")
    params = {"library": "diffusers", "config": config, "component": "x", "resolution": [64, 64], "phase": phase}
    spec = {"name": f"model/x/{phase}", "kind": "model_phase", "dtype": "fp32", "params": params}
    monkeypatch.setattr(weights, "STREAM_LEAST", 1 << 40)
    whole, whole_digest = truth_answer(spec, None)
    whole_model.forget()
    monkeypatch.setattr(weights, "STREAM_LEAST", SMALL)
    streamed, streamed_digest = truth_answer(spec, None)
    assert streamed_digest == whole_digest
    torch.testing.assert_close(streamed.sample, whole.sample, rtol=1e-12, atol=1e-12)


def test_a_model_whose_one_module_would_not_fit_is_said_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights, "STREAM_LEAST", SMALL)
    monkeypatch.setattr(whole_model, "REFERENCE_MEMORY_SHARE", 1e-9)
    with pytest.raises(MemoryError, match=r"largest module alone needs .* in float64, over"):
        truth_answer(_spec(DEEP_LLAMA, "prefill"), None)


def test_a_phase_that_takes_the_kept_model_counts_its_bytes_in_its_memory() -> None:
    import io

    from mpsup.worker.main import Worker

    worker = Worker(io.StringIO())
    worker.hello({"device": "cpu"})
    if worker.device._rss_at_setup is None:
        worker.device.reset_peak()
        if worker.device._rss_at_setup is None:
            pytest.skip("this kernel keeps no per-workload resident peak (Linux's clear_refs)")
    wide = {**DEEP_LLAMA, "hidden_size": 256, "intermediate_size": 1024, "vocab_size": 8192}
    for phase in ("prefill", "decode"):
        spec = _spec(wide, phase, dtype="fp32", cache=12)
        assert worker.setup({"workload": spec, "calls": 1})["type"] == "ready"
        memory = worker.teardown({})["memory"]
    model = whole_model._KEPT[0].model
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # Decode built nothing (prefill's model was kept): its peak still holds the model it ran.
    assert memory["workload_peak"] >= weights_bytes
