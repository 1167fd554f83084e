"""A training step as a phase (issue 55): `bench --model PATH --train [lora|full]`.

The options and their refusals; the workload a folder gives; the worker's step built in this process (its answers
by parameter group against a float64 truth computed from the same values, the optimizer implementation that ran,
the census by part and its replay under each part's grad mode); the report's reading of a step's answers; then
real paired CPU runs of a tiny Llama: a candidate whose backward mm computes in bfloat16 (a torch.library override
that leaves the forward's mm as it is) is less accurate, names its gradient group and the backward mm, and
`report --upstream` reproduces the ratio; the baseline against itself is identical; `bisect` takes the step to
every one of its steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.cli import with_optional_values
from mpsup.errors import UserError
from mpsup.model.training import TrainOptions, check_train, parse_optimizer
from mpsup.report.numerics import model_numerics
from mpsup.report.training import training_clause, training_json, worst
from tests.conftest import run_cli
from tests.tiny_models import BERT, UNET
from tests.tiny_models import LLAMA as TINY_LLAMA

LLAMA = {**TINY_LLAMA, "torch_dtype": "float32"}
DEEP = {**LLAMA, "num_hidden_layers": 12}


# --- options ---


def test_train_alone_is_lora_and_other_options_keep_their_values() -> None:
    assert with_optional_values(["bench", "--train"]) == ["bench", "--train", "lora"]
    assert with_optional_values(["bench", "--train", "--aa"]) == ["bench", "--train", "lora", "--aa"]
    assert with_optional_values(["bench", "--train", "full", "--aa"]) == ["bench", "--train", "full", "--aa"]


@pytest.mark.parametrize(
    "args,needle",
    [
        ((None, 2, None, None, True), "--train-batch sets the training step"),
        (("lora", None, None, None, False), "give --model PATH"),
        (("half", None, None, None, True), "expected lora (the default) or full"),
        (("lora", 0, None, None, True), "--train-batch 0"),
        (("full", None, 1, None, True), "--train-tokens 1"),
        (("lora", None, None, "adamw:turbo", True), "--optimizer 'adamw:turbo'"),
    ],
)
def test_training_options_are_refused_in_one_line(args: tuple[Any, ...], needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        check_train(*args)


def test_optimizer_names_and_implementations() -> None:
    assert parse_optimizer(None) == ("adamw", None)
    assert parse_optimizer("AdamW:fused") == ("adamw", "fused")
    assert parse_optimizer("sgd:forloop") == ("sgd", "for-loop")
    assert check_train("full", 2, 8, "adam:foreach", True) == TrainOptions("full", 2, 8, "adam", "foreach")


def test_a_bad_train_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    proc = run_cli("bench", "--model", str(tmp_path), "--train", "half", "--list")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--train 'half': expected lora (the default) or full" in proc.stderr


# --- the workload a folder gives ---


def _open(folder: Path, train: TrainOptions, **kw: Any) -> Any:
    from mpsup.model.sources import WholeModel, open_model

    return open_model(folder, tokens=(1, 16), whole=WholeModel(train=train), **kw)


def test_a_causal_lm_gets_a_train_step_with_mlx_lm_s_lora_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    model = _open(tmp_path, TrainOptions(tokens=32))
    step = next(w for w in model.workloads if w.name == "model/train_step")
    p = step.params
    assert (p["phase"], p["train"], p["batch"], p["tokens"], p["optimizer"]) == ("train_step", "lora", 4, 32, "adamw")
    assert p["lora"] == {"rank": 8, "scale": 20.0, "targets": ["q_proj", "v_proj"]}
    assert step.memory_bytes > 4 * 32 * LLAMA["vocab_size"] * 4  # at least the step's float32 logits
    assert not step.sized_by and not step.justified  # --train sized it: never skipped as an unstated size


def test_an_encoder_gets_no_train_step_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(BERT))
    model = _open(tmp_path, TrainOptions(tokens=16))
    assert not any(w.name.endswith("train_step") for w in model.workloads)
    assert any("BertModel is neither" in n for n in model.doc["notes"])


def test_a_diffusers_unet_gets_a_train_step(tmp_path: Path) -> None:
    diffusers = pytest.importorskip("diffusers")
    pipe = tmp_path / "pipe"
    diffusers.UNet2DConditionModel.from_config({k: v for k, v in UNET.items() if k != "_class_name"}).save_pretrained(
        pipe / "unet"
    )
    (pipe / "model_index.json").write_text(json.dumps({"unet": ["diffusers", "UNet2DConditionModel"]}))
    model = _open(pipe, TrainOptions("full"), resolution=64)
    step = next(w for w in model.workloads if w.name == "model/unet/train_step")
    assert step.params["train"] == "full" and step.params["batch"] == 1 and "lora" not in step.params


# --- the worker's step, in this process ---


def _spec(config: dict[str, Any] = LLAMA, **params: Any) -> dict[str, Any]:
    base = {
        "library": "transformers",
        "config": config,
        "causal": True,
        "phase": "train_step",
        "train": "lora",
        "batch": 2,
        "tokens": 8,
        "optimizer": "adamw",
        "optimizer_impl": None,
        "lr": 1e-5,
        "lora": {"rank": 8, "scale": 20.0, "targets": ["q_proj", "v_proj"]},
    }
    return {"kind": "model_phase", "dtype": "fp32", "params": {**base, **params}}


def _built_and_truth(spec: dict[str, Any]) -> tuple[Any, str, Any, str]:
    from mpsup.worker import values
    from mpsup.worker.build import build
    from mpsup.worker.device import Device
    from mpsup.worker.truth import truth_answer

    values.TRUTH.reset()
    built = build(spec, Device("cpu"))
    digest = values.TRUTH.hexdigest()
    truth, truth_digest = truth_answer(spec, None)
    return built, digest, truth, truth_digest


def _errors(built: Any, truth: Any) -> dict[str, float]:
    out = {}
    for name, t in truth.items():
        got = built.first_output[name].double()
        out[name] = float((got - t).pow(2).mean().sqrt() / t.pow(2).mean().sqrt())
    return out


@pytest.mark.parametrize("mode", ["lora", "full"])
def test_a_step_s_answers_are_the_float64_truth_s_within_float32(mode: str) -> None:
    pytest.importorskip("transformers")
    if mode == "lora":
        pytest.importorskip("peft", reason="LoRA runs through the measured environment's peft")
    built, digest, truth, truth_digest = _built_and_truth(_spec(train=mode))
    assert digest == truth_digest  # the same weights, adapters and token ids
    names = set(truth)
    groups = {"q_proj", "v_proj"} if mode == "lora" else {"q_proj", "k_proj", "v_proj", "o_proj", "mlp", "norms"}
    assert {f"grad.{g}" for g in groups} <= names and {f"weights.{g}" for g in groups} <= names and "loss" in names
    errors = _errors(built, truth)
    assert all(0 < e < 1e-4 for e in errors.values()), errors  # float32 against float64, nothing more
    info = built.info
    assert info["train"]["mode"] == mode
    assert built.items_per_call == 2 * (8 - 1)  # the tokens that carry a loss
    assert info["optimizer"]["name"] == "AdamW" and info["optimizer"]["implementation"] in ("for-loop", "foreach")
    trainable = info["train"]["trainable_parameters"]
    assert (trainable < info["train"]["parameters"] / 4) if mode == "lora" else trainable == info["train"]["parameters"]


@pytest.mark.parametrize("impl", ["foreach", "fused", "for-loop"])
def test_the_optimizer_implementation_that_ran_is_recorded(impl: str) -> None:
    pytest.importorskip("transformers")
    from mpsup.worker.build import build
    from mpsup.worker.device import Device

    built = build(_spec(train="full", optimizer_impl=impl), Device("cpu"))
    assert built.info["optimizer"]["requested"] == impl
    assert built.info["optimizer"]["implementation"] == impl


def test_lora_without_peft_names_the_package_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    from mpsup.worker.build import build
    from mpsup.worker.core import Unsupported
    from mpsup.worker.device import Device

    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now raises ImportError
    with pytest.raises(Unsupported, match=r"LoRA needs peft.*`pip install peft` there, or .*--train full"):
        build(_spec(), Device("cpu"))


def test_a_deep_model_s_groups_are_split_by_blocks_and_sampled_alike() -> None:
    import torch

    from mpsup.worker.train_groups import parameter_groups, role_of, sample

    assert role_of("model.layers.3.self_attn.q_proj.lora_A.default.weight") == "q_proj"
    assert role_of("model.layers.3.self_attn.q_norm.weight") == "norms"
    assert role_of("model.layers.3.mlp.down_proj.weight") == "mlp"
    assert role_of("transformer.h.0.mlp.c_proj.weight") == "mlp"  # GPT-2's MLP projection, not attention's
    assert role_of("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0.weight", unet=True) == "to_out"
    named = [(f"model.layers.{i}.self_attn.q_proj.weight", torch.nn.Parameter(torch.zeros(2))) for i in range(12)]
    named.append(("lm_head.weight", torch.nn.Parameter(torch.zeros(3))))
    groups = parameter_groups(named, 12)
    assert list(groups) == ["q_proj[0-2]", "q_proj[3-5]", "q_proj[6-8]", "q_proj[9-11]", "lm_head"]
    # The same elements are taken whatever the tensors' split: the stride is fixed by the total alone.
    a = torch.arange(10.0)
    assert torch.equal(sample([a[:3], a[3:]], limit=4), sample([a], limit=4))


def test_the_census_names_backward_and_optimizer_calls_and_replays_them_outside_inference_mode() -> None:
    pytest.importorskip("transformers")
    from mpsup.worker.build import build
    from mpsup.worker.device import Device
    from mpsup.worker.replay import build_op

    built = build(_spec(train="full"), Device("cpu"))
    census = built.info["census"]
    assert any(op.startswith("mm (backward)") for op in census["ops"]) and "mm" in census["ops"]
    assert any(op.endswith("(optimizer)") for op in census["ops"])
    stages = {c.get("stage") for c in census["replay"]}
    assert stages == {"forward", "backward", "optimizer"}
    backward = next(c for c in census["replay"] if c["overload"] == "aten.mm.default" and c["stage"] == "backward")
    inference = {k: v for k, v in backward.items() if k != "stage"}
    assert not any(t.is_inference() for t in build_op(backward, Device("cpu")).keep[1])
    assert all(t.is_inference() for t in build_op(inference, Device("cpu")).keep[1])


def test_a_unet_step_s_answers_match_the_truth_s_values() -> None:
    pytest.importorskip("diffusers")
    pytest.importorskip("peft", reason="LoRA runs through the measured environment's peft")
    params = {
        "library": "diffusers",
        "config": UNET,
        "component": "unet",
        "resolution": [64, 64],
        "vae_factor": 8,
        "batch": 1,
        "lora": {"rank": 4, "scale": 1.0, "targets": ["to_q", "to_k", "to_v", "to_out.0"]},
    }
    spec = _spec(**params)
    for key in ("causal", "tokens"):
        spec["params"].pop(key)
    built, digest, truth, truth_digest = _built_and_truth(spec)
    assert digest == truth_digest
    assert sorted(truth) == sorted(
        ["loss"] + [f"{k}.{g}" for k in ("grad", "weights") for g in ("to_q", "to_k", "to_v", "to_out")]
    )
    assert all(e < 1e-4 for e in _errors(built, truth).values())
    assert built.items_per_call == 1 and built.info["train"]["lora"]["targets"][-1] == "to_out.0"


# --- the report's reading ---


def _out(name: str, eb: float, ec: float, identical: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": "float32",
        "errors": {"baseline": {"rmse": eb, "max_abs": eb}, "candidate": {"rmse": ec, "max_abs": ec}},
        "between": {"rmse": abs(ec - eb), "identical": identical},
        "floor": 0.0,
    }


def test_the_worst_group_decides_and_is_named_with_its_op() -> None:
    outputs = [
        _out("loss", 1e-8, 1e-8, identical=True),
        _out("grad.q_proj", 1e-6, 1.4e-3),
        _out("grad.v_proj", 1e-6, 5e-4),
        _out("weights.q_proj", 1e-8, 3e-6),
    ]
    mm = {"status": "compared", "outputs": [_out("output", 1e-7, 9e-5)]}
    record = {
        "workloads": [
            {"name": "model/train_step", "part": "phase", "numerics": {"status": "compared", "outputs": outputs}},
            {"name": "model/op/mm/x", "kind": "op_replay", "op": "mm (backward)", "shapes": "512x64, 64x64",
             "dtypes": "float32", "op_phases": {"model/train_step": {"baseline": 4, "candidate": 4}}, "numerics": mm},
        ]
    }  # fmt: skip
    pn = model_numerics(record, {"train_step": "model/train_step"}, "baseline", "candidate")["train_step"]
    assert pn.verdict == "less accurate"
    w = worst(pn)
    assert w is not None and w.label == "q_proj gradients"
    assert training_clause(pn, "2.13.0") == (
        "less accurate: q_proj gradients are 1,400x further from float64 than in 2.13.0 "
        "(op: mm (backward) 512x64, 64x64 (float32), 900x)"
    )
    doc = training_json(pn)
    assert doc["worst"]["output"] == "grad.q_proj" and [a["what"] for a in doc["answers"]][:2] == ["loss", "grad"]


# --- real paired runs on this CPU ---

# Backward's mm through bfloat16; the forward's (grad mode on) and inference's (inference mode) stay float32 bit for
# bit: addmm with beta 0 is the gemm mm's own CPU kernel calls.
BF16_BACKWARD_MM = """import torch
_lib = torch.library.Library("aten", "IMPL")
def _mm(a, b):
    if torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return torch.addmm(a.new_zeros(()), a, b, beta=0)
    low = torch.addmm(a.new_zeros((), dtype=torch.bfloat16), a.to(torch.bfloat16), b.to(torch.bfloat16), beta=0)
    return low.to(a.dtype)
_lib.impl("mm", _mm, "CPU")
"""


def _candidate(tmp_path: Path, name: str, hook: str | None) -> Path:
    body = ""
    if hook is not None:
        folder = tmp_path / f"{name}-hook"
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(hook)
        body = f'export PYTHONPATH="{folder}"\n'
    python = tmp_path / name
    python.write_text(f'#!/bin/sh\n{body}exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def _llama(tmp_path: Path) -> Path:
    folder = tmp_path / "llama"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return folder


TRAIN_ARGS = ("--train-batch", "2", "--train-tokens", "16", "--only", "model/train_step")
RUN_ARGS = ("--budget", "0.05", "--no-smoke", "--visits", "2", "--json")


@pytest.mark.slow
def test_a_build_whose_backward_mm_is_bf16_has_less_accurate_gradients_and_names_the_backward_mm(
    tmp_path: Path, mpsup_home: Path
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft", reason="LoRA runs through the measured environment's peft")
    candidate = _candidate(tmp_path, "bf16-backward-python", BF16_BACKWARD_MM)
    bench = run_cli("bench", "--model", str(_llama(tmp_path)), "--train", *TRAIN_ARGS, "--candidate", str(candidate),
                    *RUN_ARGS)  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-2000:]
    report = run_cli("report", "--json", "--fail-on-regression")
    doc = json.loads(report.stdout)
    assert report.returncode == 1 and doc["verdict"] == "regression"
    step = doc["model_numerics"]["train_step"]
    assert step["verdict"] == "less accurate", step
    worst_answer = step["training"]["worst"]
    assert worst_answer["what"] == "grad" and worst_answer["group"] in ("q_proj", "v_proj")
    assert worst_answer["error_ratio"] > 100
    assert step["training"]["answers"][0] == {
        **step["training"]["answers"][0],
        "output": "loss",
        "verdict": "identical",
    }
    assert step["top_op"]["op"] == "mm (backward)" and step["top_op"]["verdict"] == "less accurate"
    forward = [o for o in step["ops"] if o["op"] == "mm"]
    assert forward and all(o["verdict"] == "identical" for o in forward)  # the forward's mm is untouched
    assert f"less accurate: {worst_answer['group']} gradients are" in doc["sentence"]
    # --upstream's script computes the backward mm under the grad mode backward runs in; run under each build, the
    # two printed errors have the report's ratio.
    script = tmp_path / "repro.py"
    assert run_cli("report", "--upstream", "-o", str(script)).returncode == 0
    assert "GRAD_MODE = torch.no_grad" in script.read_text()
    truth = tmp_path / "truth.pt"
    errors = []
    for python in (sys.executable, str(candidate)):
        out = subprocess.run([python, str(script), "--truth", str(truth)], capture_output=True, text=True, check=True)
        errors.append(float(out.stdout.split("rms ")[1].split(",")[0]))
    assert errors[1] / errors[0] == pytest.approx(step["top_op"]["error_ratio"], rel=0.01)


@pytest.mark.slow
def test_the_baseline_against_itself_trains_to_identical_answers(tmp_path: Path, mpsup_home: Path) -> None:
    pytest.importorskip("transformers")
    bench = run_cli("bench", "--model", str(_llama(tmp_path)), "--train", "full", *TRAIN_ARGS, "--aa", "--no-ops",
                    *RUN_ARGS)  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-2000:]
    figures = json.loads(bench.stdout)["model_phases"]["train_step"]
    assert figures["tokens_per_s"] > 0 and figures["peak_memory_bytes"] > 0
    doc = json.loads(run_cli("report", "--json").stdout)
    step = doc["model_numerics"]["train_step"]
    assert step["verdict"] == "identical" and step["training"]["worst"] is None
    assert {a["verdict"] for a in step["training"]["answers"]} == {"identical"}
    assert "identical loss, gradients and weights after one step" in doc["sentence"]


def test_bisect_takes_the_training_step_to_every_step_and_journals_it_only_when_asked(tmp_path: Path) -> None:
    from dataclasses import replace

    from mpsup.bisect.command import _prepare_plan
    from mpsup.bisect.request import BisectRequest, journal_args, request_from_journal

    python = Path(sys.executable)
    req = BisectRequest(
        environments=(str(python), str(python)),
        model=_llama(tmp_path),
        device="cpu",
        only="model/train_step",
        numerics=True,
        train="full",
        train_batch=2,
        train_tokens=16,
        optimizer="adamw:foreach",
    )
    plan = _prepare_plan(req, python)
    (step,) = plan.workloads
    assert step.name == "model/train_step"
    assert (step.params["train"], step.params["batch"], step.params["tokens"]) == ("full", 2, 16)
    assert step.params["optimizer_impl"] == "foreach"
    args = journal_args(req, [python, python], "cpu")
    assert (args["train"], args["train_batch"], args["optimizer"]) == ("full", 2, "adamw:foreach")
    again = request_from_journal({"args": args, "environments": [str(python)] * 2}, tmp_path / "j.json")
    assert (again.train, again.train_tokens) == ("full", 16)
    # A bisect without --train journals no train key: its journal key is the one it had before they existed.
    plain = journal_args(replace(req, train=None, train_batch=None, train_tokens=None, optimizer=None), [python], "cpu")
    assert not {"train", "train_batch", "train_tokens", "optimizer"} & set(plain)


def test_the_lora_reference_streamed_a_block_at_a_time_gives_the_whole_models_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Streamed: the frozen weights drawn a module at a time, each block run again in the backward. Its float64
    # answers must be the whole float64 model's, to float64's rounding: a weight buffer reused while autograd
    # still held it, or a block recomputed on other values, would move them far more.
    pytest.importorskip("transformers")
    pytest.importorskip("peft", reason="LoRA runs through the measured environment's peft")
    from mpsup.worker import training, weights
    from mpsup.worker.truth import truth_answer

    # Wide enough that every projection, the embedding and the head are streamed (weights.STREAM_LEAST).
    config = {**LLAMA, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "num_hidden_layers": 3}  # fmt: skip
    spec = _spec(config, tokens=12)
    streams: list[Any] = []
    opened = weights.JustInTime.__init__

    def watched(self: Any, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        streams.append(self)

    monkeypatch.setattr(weights.JustInTime, "__init__", watched)
    streamed, streamed_digest = truth_answer(spec, None)
    (stream,) = streams
    assert stream.arena is None  # nothing reused: autograd may hold what was lent
    # at most a block's weights and the head at once, never the model's
    model_elements = 3 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 2 * 512 * 256
    assert 0 < stream.peak_elements < model_elements / 2
    monkeypatch.setattr(training, "STREAM_LORA_REFERENCE", False)
    whole, whole_digest = truth_answer(spec, None)
    assert len(streams) == 1  # the whole model's reference streams nothing
    assert streamed_digest == whole_digest and set(streamed) == set(whole)
    for name, t in whole.items():
        scale = float(t.pow(2).mean().sqrt())
        assert scale > 0, name
        assert float((streamed[name] - t).abs().max()) / scale < 1e-10, name
