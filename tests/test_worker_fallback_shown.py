"""What a run shows of ops that ran on the CPU: a smoke test's `fallback` status (never `pass`) in the table and
the not-passing lines, a layer's `fallback_ops` in its own lines, and the report's change between builds."""

from __future__ import annotations

import io

from rich.console import Console

from mpsup.bench.screen import render_run
from mpsup.report.analysis import _smoke_changes
from mpsup.runs.schema import RunRecord
from tests.synthetic import paired_record


def _record() -> dict:
    smoke = [
        {
            "feature": "int_mm",
            "envs": {
                "baseline": {"status": "fallback", "message": "ran on the CPU (no MPS kernel): aten::_int_mm"},
                "candidate": {"status": "pass", "message": ""},
            },
        }
    ]
    rec = paired_record(1.0, count=2, smoke=smoke)
    rec["workloads"][0]["envs"]["baseline"]["fallback_ops"] = ["aten::_int_mm"]
    return rec


def _text(details: bool) -> str:
    out = io.StringIO()
    render_run(_record(), Console(file=out, width=160, color_system=None), details=details)
    return out.getvalue()


def test_a_fallback_is_shown_never_as_a_pass() -> None:
    main, details = _text(False), _text(True)
    name = _record()["workloads"][0]["name"]
    for text in (main, details):
        assert "Timed partly on the CPU" in text and f"{name} (baseline): aten::_int_mm" in text
    assert "fallback: ran on the CPU (no MPS kernel): aten::_int_mm" in details  # the smoke table's cell
    assert "0 of 1 pass" in main and "int_mm (baseline): fallback: ran on the CPU" in main  # said why


def test_the_report_says_an_op_moved_onto_the_device() -> None:
    record = RunRecord.from_json(_record(), "x")
    (change,) = _smoke_changes(record, "baseline", "candidate")
    assert change["change"] == "now on the device"


def test_a_phase_s_cpu_ops_are_not_listed_as_a_layer_timed_partly_on_the_cpu() -> None:
    """A record written with the ops both in the phase's info and the environment's own list: the phase table
    says them; the layers' lines do not list the phase again."""
    from mpsup.bench.run_view import RunView
    from mpsup.bench.screen import _on_the_cpu

    rec = _record()
    layer = rec["workloads"][0]
    phase = {**layer, "name": "model/prefill", "kind": "model_phase"}
    rec["workloads"].append(phase)
    out = io.StringIO()
    _on_the_cpu(RunView(RunRecord.from_json(rec, "x"), rec), Console(file=out, width=160, color_system=None))
    assert f"{layer['name']} (baseline): aten::_int_mm" in out.getvalue()
    assert "model/prefill" not in out.getvalue()
