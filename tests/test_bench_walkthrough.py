"""What a new user's walkthrough of `mpsup bench` found on its screen: a model estimate outside its own
interval, a paired run that never named the candidate's torch, counts that disagreed with the progress bar,
an interrupted run that read as a finished one, commands broken across lines, workloads under the smoke
tests' heading, and a model's list without its counts and roles at 80 columns."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.bench.command import BenchResult
from mpsup.bench.figures import model_forward_estimate
from mpsup.bench.listing import print_workload_list
from mpsup.bench.render import render_result
from mpsup.bench.screen import render_run
from mpsup.units import fmt_time
from mpsup.workloads import Workload
from tests.conftest import run_cli
from tests.synthetic import paired_record
from tests.tiny_models import LLAMA, write_llama_folder

RUN_ID = "20261205T073509Z-9988c4"


def _console(width: int = 80, terminal: bool = False) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, force_terminal=terminal, legacy_windows=False), buf


def _env(median: float, low: float | None = None, high: float | None = None) -> dict[str, Any]:
    low = median * 0.95 if low is None else low
    high = median * 1.05 if high is None else high
    return {"status": "ok", "median": median, "ci_low": low, "ci_high": high, "samples": [median] * 6}


def _model_record() -> dict[str, Any]:
    """A `--model` run of a causal LM: two whole-model phases, each far longer than its layers, and the layers,
    one an FP8 alternative to a layer already counted."""

    def w(name: str, kind: str, part: str, role: str, median: float, count: int = 1, tags: tuple = ()) -> dict:
        tags = tags or (role,)
        return {"name": name, "kind": kind, "part": part, "role": role, "tags": list(tags), "count": count}

    ws = [
        {**w("model/prefill", "model_phase", "phase", "phase", 0, tags=("phase", "prefill")), "_m": 3.3e-3},
        {**w("model/decode", "model_phase", "phase", "phase", 0, tags=("phase", "decode")), "_m": 2.1e-3},
        {**w("model/linear/64x64/t16", "linear", "model", "attention", 0, count=4), "_m": 40e-6},
        {**w("model/linear/64x128/t16", "linear", "model", "mlp", 0, count=4), "_m": 50e-6},
        {**w("model/linear/64x1000/t16", "linear", "model", "output-head", 0), "_m": 90e-6},
        {
            **w("model/fp8/64x128/t16", "scaled_mm", "model", "mlp", 0, count=4, tags=("fp8", "alternative")),
            "_m": 500e-6,
        },
    ]
    for doc in ws:
        doc["status"] = "ok"
        doc["envs"] = {"baseline": _env(doc.pop("_m"))}
    return {
        "schema": "mpsup.run/1",
        "id": RUN_ID,
        "mode": "single",
        "device": "cpu",
        "partial": False,
        "environments": [{"label": "baseline", "torch_version": "2.13.0+cpu", "device_name": "AMD EPYC", "threads": 2}],
        "options": {"budget_s": 0.05},
        "hygiene": {"changed": []},
        "model": {
            "path": "/tmp/llama",
            "format": "transformers",
            "linear_weight_bytes": 1 << 19,
            "fp8_weight_bytes": 1 << 17,
        },
        "workloads": ws,
        "smoke": [],
    }


LAYERS_S = 4 * 40e-6 + 4 * 50e-6 + 90e-6  # the layers one forward runs: no phase, no alternative


# 1. The layer estimate and its shares: the layers alone, and the estimate inside its interval.


def test_the_model_estimate_is_its_layers_alone_and_lies_inside_its_interval():
    rec = _model_record()
    fwd = model_forward_estimate(rec, "baseline")
    assert fwd is not None and fwd["estimate"] == pytest.approx(LAYERS_S)
    assert fwd["low"] <= fwd["estimate"] <= fwd["high"]
    console, buf = _console(200)
    render_run(rec, console)
    flat = " ".join(buf.getvalue().split())
    # It printed 5.94 ms (the phases and the FP8 alternative added in) against an interval of 0.43-0.47 ms.
    shown = f"estimated forward time {fmt_time(LAYERS_S)} (95% CI {fmt_time(fwd['low'])} - {fmt_time(fwd['high'])})"
    assert shown in flat, flat
    share_text = flat[flat.index("share by kind:") :].split("Linear weights")[0]
    assert "phase" not in share_text and "mlp 44%" in share_text, share_text

    from mpsup.bench.figures import model_role_shares

    shares = dict(model_role_shares(rec, "baseline"))
    assert set(shares) == {"attention", "mlp", "output-head"} and sum(shares.values()) == pytest.approx(1.0)
    assert shares["mlp"] == pytest.approx(4 * 50e-6 / LAYERS_S)


# 2. The paired header names both torches.


def test_a_paired_header_names_the_candidate_s_torch_and_an_a_a_says_so():
    console, buf = _console()
    render_run(paired_record(1.0, count=4, run_id=RUN_ID), console)
    assert buf.getvalue().splitlines()[0].startswith("torch 2.14.1 -> 2.15.0 on Apple M4 Max (mps)")
    aa = paired_record(1.0, count=4, run_id=RUN_ID, mode="aa")
    aa["environments"][1] = {**aa["environments"][0], "label": "baseline-2"}
    for w in aa["workloads"]:
        w["envs"]["baseline-2"] = w["envs"].pop("candidate")
    console, buf = _console()
    render_run(aa, console)
    assert buf.getvalue().splitlines()[0].startswith("torch 2.14.1 -> 2.14.1 (A/A) on Apple M4 Max")


# 3. Counts that agree with what ran (and with --list, the progress bar), and plurals.


def test_a_model_run_counts_its_phases_with_its_layers():
    console, buf = _console(200)
    render_run(_model_record(), console)
    text = buf.getvalue()
    assert "Ran 6 workloads (4 layers, 2 whole-model phases) in one environment: 6 measured." in text
    assert "The 4 of 4 measured layer workloads that take the most time" in text


def test_one_of_a_kind_is_singular():
    rec = _model_record()
    rec["model"] = None
    rec["workloads"] = rec["workloads"][2:3]
    rec["smoke"] = [{"feature": "fp8_cast", "envs": {"baseline": {"status": "pass"}}}]
    rec["environments"][0]["threads"] = 1
    console, buf = _console(200)
    render_run(rec, console)
    text = buf.getvalue()
    assert "(cpu, 1 CPU thread)" in text
    assert "Ran 1 smoke test and 1 workload in one environment: 1 measured." in text
    assert "The one measured workload" in text
    console, buf = _console(200)
    print_workload_list([Workload("linear/a", "linear", "linear", "fp32", {"n": 2})], console)
    assert buf.getvalue().startswith("1 workload ")


# 4. A stopped run says how far it got and suggests nothing next.


def _interrupted(paired: bool) -> dict[str, Any]:
    rec = paired_record(1.0, count=15, run_id=RUN_ID)
    if not paired:
        rec["mode"] = "single"
        rec["environments"] = rec["environments"][:1]
        for w in rec["workloads"]:
            w["envs"].pop("candidate")
    rec.update(partial=True, interrupted=True, signal="SIGINT")
    return rec


@pytest.mark.parametrize("paired", [False, True])
def test_an_interrupted_run_says_how_many_of_the_selected_ran_and_suggests_nothing_next(paired: bool):
    rec = _interrupted(paired)
    # It opened "Ran 15 workloads ... 15 measured." and ended with the Next steps, as a finished run does.
    console, buf = _console(200)
    render_run(rec, console)
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[1].startswith("Interrupted (SIGINT): 15 workloads ran in "), lines[1]
    assert lines[1].endswith(", 15 measured; the partial record is kept."), lines[1]
    assert "Ran 15" not in text and "Next" not in text and "Interrupted" not in "".join(lines[2:])
    # No command at all: a stopped run's figures are not the ones to compare or to extend.
    assert not [ln for ln in lines if ln.startswith("  mpsup ")], text
    # With the selection's size, which a stopped run's record cannot tell (it holds what finished).
    console, buf = _console(200)
    render_result(BenchResult(rec, Path("/runs/x.json"), 130), False, console, selected=59)
    assert buf.getvalue().splitlines()[1].startswith("Interrupted (SIGINT): 15 of 59 workloads ran in ")
    # --details has no summary line at the top: it says so at the end.
    console, buf = _console(200)
    render_run(rec, console, details=True, selected=59)
    assert "Interrupted (SIGINT): 15 of 59 workloads ran" in buf.getvalue() and "Next" not in buf.getvalue()


# 5. Commands to copy stay on one physical line, however narrow the terminal.


def _too_slow(rec: dict[str, Any]) -> None:
    rec["options"] = {"budget_s": 0.5}
    for name, call_s in (("linear/4096x128256/t16", 0.31), ("moe/Mixtral-8x7B/gate_up/t16/loop", 0.42)):
        rec["workloads"].append(
            {"name": name, "kind": "linear", "part": "linear", "count": 1, "status": "too_slow", "envs": {}}
            | {"call_s": call_s, "budget_needed_s": 3.0}
        )


@pytest.mark.parametrize("width", [40, 60, 80])
def test_commands_to_copy_are_never_broken_across_lines(width: int):
    paired = paired_record(1.0, count=4, run_id=RUN_ID)
    _too_slow(paired)
    console, buf = _console(width, terminal=True)
    render_run(paired, console)
    lines = buf.getvalue().splitlines()
    for command in (
        f"  mpsup report --run {RUN_ID} --format html -o report.html",
        f"  mpsup report --run {RUN_ID}  # the verdict",
    ):
        assert command in lines, lines
    # Options to copy inside a wrapped reason stay whole too (textwrap broke them at any space).
    for span in ("`--budget 3`", "`--only NAME`", "`mpsup bench --details`"):
        assert any(span in ln for ln in lines), (span, lines)

    single = _model_record()
    single["model"] = None
    single["workloads"] = [w for w in single["workloads"] if w["part"] != "phase"]
    console, buf = _console(width, terminal=True)
    render_run(single, console)
    lines = buf.getvalue().splitlines()
    for command in (
        "  mpsup bench --only 'roofline/*'",
        "  mpsup install-rc                   # a candidate torch beside this one",
        "  mpsup bench --candidate VERSION    # times both, same workloads",
        "  mpsup report                       # the verdict",
    ):
        assert command in lines, (command, lines)


# 6. The smoke tests' heading covers smoke tests alone.


def test_workloads_not_measured_have_their_own_lead_in():
    rec = paired_record(1.0, count=4, run_id=RUN_ID)
    rec["device"] = "cpu"
    labels = ("baseline", "candidate")
    metal = "Unsupported: Metal kernels need the mps device (this run is on cpu)"
    rec["smoke"] = [
        {"feature": "fp8_cast", "envs": {lb: {"status": "pass"} for lb in labels}},
        {"feature": "fp8_index", "envs": {lb: {"status": "unsupported", "message": "no FP8 gather"} for lb in labels}},
        {
            "feature": "metal_kernels",
            "envs": {lb: {"status": "unsupported", "message": metal, "needs_metal": True} for lb in labels},
        },
    ]
    _too_slow(rec)
    rec["workloads"].append(
        {"name": "metal/copy_f32", "kind": "metal", "part": "roofline", "count": 1, "status": "unsupported"}
        | {
            "reason": metal,
            "envs": {lb: {"status": "unsupported", "reason": metal, "needs_metal": True} for lb in labels},
        }
    )
    console, buf = _console(120)
    render_run(rec, console)
    lines = buf.getvalue().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("Smoke tests"))
    assert lines[i] == (
        "Smoke tests (device vs CPU reference): 1 of 3 pass; metal_kernels cannot run off a Mac; the rest:"
    )
    assert lines[i + 1] == "- smoke fp8_index: unsupported: no FP8 gather"
    assert lines[i + 2] == "Workloads not measured:"
    assert lines[i + 3].startswith("- linear/4096x128256/t16, moe/Mixtral-8x7B/gate_up/t16/loop: too slow")
    assert lines[i + 4].startswith("  ")  # the same reason, wrapped
    assert lines[i + 5] == "- Metal kernels, 1 workload: unsupported off a Mac"


# 7. A model's list keeps its counts and roles at 80 columns.


def _model_list() -> list[Workload]:
    cfg = {"model_type": "llama"}
    phases = [
        Workload(
            f"model/{phase}", "model_phase", "phase", "fp32", {"phase": phase, **p, "config": cfg}, ("phase", phase)
        )
        for phase, p in (("prefill", {"tokens": 16}), ("decode", {"cache": 16}))
    ]
    layers = [
        Workload(
            f"model/linear/{k}x{n}/t{t}",
            "linear",
            "model",
            "fp32",
            {"tokens": t, "in_features": k, "out_features": n},
            tags=(role,),
            count=count,
            role=role,
        )
        for k, n, role, count in ((64, 1000, "output-head", 1), (64, 128, "mlp", 4), (64, 32, "attention", 4))
        for t in (1, 16)
    ]
    return phases + layers


def test_a_model_list_at_80_columns_keeps_counts_and_roles():
    console, buf = _console(80)
    print_workload_list(_model_list(), console)
    text = buf.getvalue()
    lines = text.splitlines()
    assert all(len(ln.rstrip()) <= 80 for ln in lines), lines
    header = next(ln for ln in lines if ln.startswith("name"))
    assert header.split() == ["name", "dtype", "shape", "count", "tags"]
    assert re.search(r"^model/linear/64x128/t16 +fp32 +16x64->128 +4 +mlp *$", text, re.M), text
    assert "phase,decode" in text and "llama 16 prompt tokens" in text
    assert "Sources: run with COLUMNS=100" in text
    # Where they cannot fit beside the names, they go, as before: the names are what --only takes.
    console, buf = _console(50)
    print_workload_list(_model_list(), console)
    assert "count" not in buf.getvalue() and "Tags and sources:" in buf.getvalue()


# The walkthrough's own steps, on a tiny Transformers Llama folder.


def test_a_tiny_llama_folder_end_to_end(tmp_path: Path, mpsup_home: Path):
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    # A vocabulary large enough that the output head is one of the layers that take the time.
    folder = write_llama_folder(tmp_path / "llama", {**LLAMA, "vocab_size": 1000})
    env = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    res = run_cli("bench", "--model", str(folder), "--device", "cpu", "--budget", "0.05", "--no-smoke", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    record = json.loads(next((mpsup_home / "runs").glob("*.json")).read_text())
    fwd = model_forward_estimate(record, "baseline")
    assert fwd is not None and fwd["low"] <= fwd["estimate"] <= fwd["high"]
    flat = " ".join(res.stdout.split())
    assert f"estimated forward time {fmt_time(fwd['estimate'])} (95% CI {fmt_time(fwd['low'])} -" in flat, flat
    assert "phase" not in flat[flat.index("share by kind:") :].split("Linear weights")[0]
    phases = sum(1 for w in record["workloads"] if w["part"] == "phase")
    n = len(record["workloads"])
    assert phases == 2 and f"Ran {n} workloads ({n - 2} layers, 2 whole-model phases)" in flat, flat
    listed = run_cli("bench", "--model", str(folder), "--list", env=env)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.startswith(f"{n} workloads")
    header = next(ln for ln in listed.stdout.splitlines() if ln.startswith("name"))
    assert header.split() == ["name", "dtype", "shape", "count", "tags"]


def test_the_last_progress_frame_has_no_time_left_to_estimate():
    import io

    from rich.console import Console

    from mpsup.bench.events import BenchStarted, WorkloadDone, WorkloadStarted
    from mpsup.bench.progress_bar import bench_progress

    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system=None)
    with bench_progress(console) as on_event:
        on_event(BenchStarted(total=2, visits=1))
        for name in ("linear/a", "linear/b"):
            on_event(WorkloadStarted(name, 14.0))
            on_event(WorkloadDone(name, "ok"))
    last = [ln for ln in out.getvalue().replace("\r", "\n").splitlines() if "workloads" in ln][-1]
    assert "2/2" in last and "ETA" not in last and "linear/b" not in last and "done" in last


def test_an_end_to_end_model_shows_its_measured_forward_not_a_sum_called_layers():
    rec = paired_record(1.0, seed=1, count=1)
    rec["environments"] = rec["environments"][:1]
    rec["mode"] = "single"
    label = rec["environments"][0]["label"]
    rec["model"] = {"path": "m.pt2", "format": "pt2", "linear_weight_bytes": 0, "fp8_weight_bytes": 0}
    rec["workloads"] = [
        {"name": name, "kind": "end_to_end", "part": "model", "count": 1, "status": "ok", "tags": ["end-to-end"]}
        | {"envs": {label: {"median": med, "ci_low": med, "ci_high": med, "samples": [med]}}}
        for name, med in (("model/end-to-end", 0.010), ("model/end-to-end/compiled", 0.006))
    ]
    console, buf = _console(200)
    render_run(rec, console, details=True)
    flat = " ".join(buf.getvalue().split())
    # It read "estimated forward time 16.00 ms ... from its layers": eager and compiled added up, as layers.
    assert "forward measured end to end: model/end-to-end 10.00 ms; model/end-to-end/compiled 6.00 ms" in flat
    assert "from its layers" not in flat and "16.00 ms" not in flat


def test_a_phase_the_candidate_could_not_run_is_told_as_the_candidate_s():
    from mpsup.bench.phase_table import render_phases

    rec = paired_record(1.0, seed=1, count=1)
    rec["model"] = {"path": "llama", "format": "transformers", "linear_weight_bytes": 1, "fp8_weight_bytes": 1}
    rec["workloads"] = [
        {
            "name": "model/prefill",
            "kind": "model_phase",
            "part": "phase",
            "phase": "prefill",
            "library": "transformers",
            "tokens": 8,
            "depth": 1,
            "count": 1,
            "status": "unsupported",
            "reason": "Unsupported: transformers is not installed in this environment (/envs/b/bin/python)",
            "envs": {
                "baseline": {"status": "ok", "median": 2e-3, "ci_low": 1.9e-3, "ci_high": 2.1e-3, "items_per_call": 8}
                | {"phase": {"layers": 2, "depth": 1}},
                "candidate": {
                    "status": "unsupported",
                    "reason": "Unsupported: transformers is not installed in this environment (/envs/b/bin/python)",
                },
            },
        }
    ]
    console, buf = _console(200)
    render_phases(rec, console)
    flat = " ".join(buf.getvalue().split())
    # It read "prefill (baseline): unsupported: Unsupported: ..." with the candidate's interpreter in it.
    assert "prefill (candidate): unsupported: transformers is not installed" in flat
    assert "(baseline): unsupported" not in flat
    assert "scaled from 1 of 2 blocks (--depth)" in flat  # forced, not "the model did not fit whole"
