"""Run records under hostile input: every bad file is one UserError naming it, never a traceback or a hang.

Each hostile record is a valid one (tests.synthetic) with one thing broken, built here in code.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.errors import UserError
from mpsup.report.analysis import analyze
from mpsup.report.command import ReportRequest, run_report
from mpsup.report.render import render_html, render_markdown, render_terminal
from mpsup.runs import schema as schema_mod
from mpsup.runs import select
from mpsup.runs import store as store_mod
from mpsup.runs.schema import RunRecord
from mpsup.runs.select import merge_single_runs
from mpsup.runs.store import load_record, new_record, save_record
from tests.conftest import run_cli
from tests.synthetic import paired_record

SMOKE = [
    {"feature": "grouped_mm_bf16", "envs": {"baseline": {"status": "unsupported"}, "candidate": {"status": "pass"}}}
]


def _valid(run_id: str = "20261202T100000Z-good00", count: int = 3) -> dict[str, Any]:
    return paired_record(1.2, seed=5, count=count, rounds=8, run_id=run_id, smoke=copy.deepcopy(SMOKE))


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


# --- item 8: one guarded reader for every record -------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"schema": "mpsup.run/1", "id": "\xff\xfe"}', "not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"schema": "mpsup.run/1", "id": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"schema": "mpsup.run/1", "id": NaN}', "not valid JSON"),
    ],
)
def test_parser_failures_are_one_line_naming_the_file(tmp_path: Path, content: bytes, needle: str):
    p = tmp_path / "r.json"
    p.write_bytes(content)
    with pytest.raises(UserError, match=needle) as exc:
        load_record(p)
    assert str(exc.value).startswith(f"{p}: ")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_record_is_refused_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "20261202T100000Z-fifo00.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        load_record(fifo)  # before: blocked forever waiting for a writer


def test_an_oversized_record_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(store_mod, "MAX_RECORD_BYTES", 1 << 20)
    p = save_record(_valid(), tmp_path)
    with p.open("ab") as fh:
        fh.truncate(2 << 20)  # sparse: no 2 MiB written
    with pytest.raises(UserError, match="larger than 1 MiB"):
        load_record(p)


# --- item 11: the whole record is validated on load ----------------------------------------------


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(rec: dict[str, Any]) -> None:
        node = rec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return apply


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(rec: dict[str, Any]) -> None:
        node = rec
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return apply


HOSTILE = {
    # the five shapes named in the issue, then their neighbours
    "environment without label": (_drop(("environments", 0, "label")), "environments[0].label"),
    "envs as a list": (_set(("workloads", 0, "envs"), []), "workloads[0].envs"),
    "count as text": (_set(("workloads", 0, "count"), "3"), "workloads[0].count"),
    "samples as text": (
        _set(("workloads", 1, "envs", "baseline", "samples"), ["a", "b"]),
        "workloads[1].envs.baseline.samples[0]",
    ),
    "smoke entry without envs": (_drop(("smoke", 0, "envs")), "smoke[0].envs"),
    "environment not an object": (_set(("environments", 1), 7), "environments[1]"),
    "ratios as text": (_set(("workloads", 0, "ratios"), ["1.1"]), "workloads[0].ratios[0]"),
    "a ratio too large for a float": (_set(("workloads", 0, "ratios", 0), 10**400), "workloads[0].ratios[0]"),
    "median as a boolean": (
        _set(("workloads", 0, "envs", "candidate", "median"), True),
        "workloads[0].envs.candidate.median",
    ),
    "negative sample": (
        _set(("workloads", 2, "envs", "baseline", "samples", 0), -1.0),
        "workloads[2].envs.baseline.samples[0]",
    ),
    "count of zero": (_set(("workloads", 0, "count"), 0), "workloads[0].count"),
    "memory as a list": (
        _set(("workloads", 0, "envs", "baseline", "memory"), [1]),
        "workloads[0].envs.baseline.memory",
    ),
    "tags as text": (_set(("workloads", 0, "tags"), "small"), "workloads[0].tags"),
    "status as a number": (_set(("workloads", 0, "status"), 3), "workloads[0].status"),
    "hygiene changes as objects": (_set(("hygiene", "changed"), [{}]), "hygiene.changed[0]"),
    "hygiene as a list": (_set(("hygiene",), []), "hygiene"),
    "model as text": (_set(("model",), "llama"), "model"),
    "torch version as a list": (_set(("environments", 0, "torch_version"), ["2.15"]), "environments[0].torch_version"),
    "smoke status as an object": (
        _set(("smoke", 0, "envs", "baseline", "status"), {}),
        "smoke[0].envs.baseline.status",
    ),
    "too many workloads": (_set(("workloads",), [{"name": "w"}] * (schema_mod.MAX_WORKLOADS + 1)), "workloads"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_wrong_types_deeper_are_one_line_naming_file_and_field(tmp_path: Path, case: str):
    mutate, where = HOSTILE[case]
    rec = _valid()
    mutate(rec)
    p = _write(tmp_path / "r.json", rec)
    with pytest.raises(UserError) as exc:
        load_record(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: corrupt run record (") and where in msg and "\n" not in msg


def _single(run_id: str) -> dict[str, Any]:
    rec = _valid(run_id)
    rec["mode"] = "single"
    rec["environments"] = rec["environments"][:1]
    for w in rec["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"]}
        w.pop("ratios")
    return rec


def test_todays_records_are_accepted(tmp_path: Path):
    """What bench writes now: crashed and skipped workloads, nulls from non-finite figures, a model, no smoke."""
    rec = _valid()
    rec["workloads"][0]["envs"]["candidate"] = {"status": "crash", "reason": "worker died", "stderr": "..."}
    rec["workloads"][0]["status"] = "crash"
    rec["workloads"][1] = {
        "name": "linear/huge",
        "kind": "linear",
        "count": 2,
        "tags": [],
        "envs": {},
        "status": "skipped",
        "reason": "needs 90 GiB",
    }
    rec["workloads"][2]["envs"]["baseline"].update(median=None, ci_low=None, ci_high=None)
    rec["workloads"][2]["ratios"][0] = None
    rec["model"] = {"path": "/m/llama", "format": "safetensors", "fingerprint": "abcd", "not_measured": []}
    rec |= {"interrupted": True, "partial": True, "crashes": {"baseline": 0, "candidate": 1}}
    for doc in (rec, _single("20261202T100000Z-single"), new_record("single", "cpu", [], {})):
        assert load_record(save_record(copy.deepcopy(doc), tmp_path)).id
    analysis = analyze(load_record(_write(tmp_path / "x.json", rec)))
    assert analysis.workloads and render_html(analysis) and render_markdown(analysis)


def _report(req: ReportRequest) -> tuple[str, list[str]]:
    err = Console(file=io.StringIO(), width=400)
    out = Console(file=io.StringIO(), width=200)
    run_report(req, out, err)
    warnings = err.file.getvalue().splitlines()  # type: ignore[attr-defined]
    return out.file.getvalue(), warnings  # type: ignore[attr-defined]


def test_a_bad_record_among_many_is_skipped_with_a_warning(mpsup_home: Path):
    runs = mpsup_home / "runs"
    save_record(_valid("20261202T100000Z-good00"), runs)
    bad = _valid("20261202T110000Z-bad000")
    HOSTILE["envs as a list"][0](bad)
    bad_path = save_record(bad, runs)
    # newest first: the bad run is the newer one, and the report falls back to the good one
    out, warnings = _report(ReportRequest())
    assert "run 20261202T100000Z-good00" in out
    assert any(str(bad_path) in w and "workloads[0].envs" in w for w in warnings)
    out, warnings = _report(ReportRequest(list_runs=True))
    assert "20261202T100000Z-good00" in out and "bad000" not in out and any(str(bad_path) in w for w in warnings)
    out, warnings = _report(ReportRequest(paths=[runs]))
    assert "Upgrade:" in out and any(str(bad_path) in w for w in warnings)
    # the one asked for is the error
    for req in (ReportRequest(run="20261202T110000Z-bad000"), ReportRequest(paths=[bad_path])):
        with pytest.raises(UserError, match="corrupt run record"):
            _report(req)


def test_cli_exit_codes_for_a_bad_record(mpsup_home: Path):
    bad = _valid("20261202T110000Z-bad000")
    HOSTILE["samples as text"][0](bad)
    for w in bad["workloads"]:
        w.pop("ratios")  # unpaired, so the text samples would be used
    path = save_record(bad, mpsup_home / "runs")
    res = run_cli("report", "--run", "20261202T110000Z-bad000")
    assert (
        res.returncode == 2 and "Traceback" not in res.stderr and str(path) in res.stderr
    )  # before: TypeError traceback
    res = run_cli("report", "--list", "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == [] and str(path) in res.stderr


def test_merging_a_run_without_environments_is_refused():
    empty = new_record("single", "mps", [], {})
    with pytest.raises(UserError, match="records no environment"):
        merge_single_runs(
            RunRecord.from_json(empty, "empty.json"), RunRecord.from_json(_single("20261202T100000Z-single"), "s.json")
        )


# --- fuzz: whatever passes validation, the report takes without a traceback ----------------------

VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    10**400,
    1e308,
    1e-320,
    "",
    "[/x] <script>|`*_",
    [],
    {},
    [1],
    ["a"],
    [None],
    {"status": 1},
    [[[]]],
]


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc[:3]) if isinstance(doc, list) else []
    for k, v in items:
        out += _nodes(v, (*path, k))
    return out


def _mutant(doc: dict[str, Any], rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice([p for p in _nodes(doc) if p])
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(VALUES))
    return doc


def test_fuzzed_records_never_raise_anything_but_user_error():
    rng = random.Random(10)
    paired, single = _valid(count=2), _single("20261202T100000Z-single")
    paired["model"] = {"path": "m", "fingerprint": "ab"}
    accepted = 0
    for _ in range(400):
        doc = _mutant(rng.choice([paired, single]), rng)
        try:
            rec = RunRecord.from_json(doc, Path("fuzz.json"))
        except UserError:
            continue
        accepted += 1
        try:
            if len(rec.environments) >= 2:
                a = analyze(rec, seed=1)
                render_terminal(a, Console(file=io.StringIO(), width=120))
                render_markdown(a)
                render_html(a)
            else:
                # An unpaired analysis takes seconds: merged only.
                merge_single_runs(rec, dataclasses.replace(rec, id="other"))
        except UserError:
            pass
    assert accepted > 40  # the mutations must leave enough records valid to exercise the report


def test_list_and_report_share_the_validation(mpsup_home: Path):
    """stored_runs reads only validated fields: a record it lists can be reported."""
    save_record(_valid(), mpsup_home / "runs")
    rows = select.stored_runs(lambda _msg: None)
    assert [r.id for r in rows] == ["20261202T100000Z-good00"]
    assert rows[0].torch == ["2.14.1", "2.15.0"]


def test_a_journal_whose_id_climbs_out_is_recovered_inside_the_runs_folder(mpsup_home: Path):
    """The id names the saved file: `../../escaped` from a hostile journal must not write beside MPSUP_HOME."""
    from mpsup.runs.journal import Journal

    j = Journal.create("20261203T100000Z-abcdef")
    header = _valid()
    header["id"] = "../../escaped"
    j.append("header", header)
    j.append("workload", header["workloads"][0])
    j.close()
    warnings: list[str] = []
    select.stored_runs(warnings.append)
    saved = list((mpsup_home / "runs").glob("*.json"))
    assert len(saved) == 1 and saved[0].parent == mpsup_home / "runs"
    assert not (mpsup_home.parent / "escaped.json").exists() and not (mpsup_home / "escaped.json").exists()
    assert store_mod.SAFE_ID.fullmatch(load_record(saved[0]).id)


def test_extreme_ratios_with_two_visits_give_a_report_not_an_overflow(tmp_path: Path):
    doc = paired_record(1.0, count=16, rounds=12)
    for w in doc["workloads"]:
        w["ratios"] = [1e30] * 6 + [1e-250] * 6
        w["rounds"] = [{"first": "baseline", "visit": 1}] * 6 + [{"first": "candidate", "visit": 2}] * 6
    path = tmp_path / "extreme.json"
    path.write_text(json.dumps(doc))
    res = run_cli("report", str(path), "--json")
    assert res.returncode == 0, res.stderr[-800:]
    assert "Traceback" not in res.stderr and json.loads(res.stdout)["workloads"]
    # A stored A/A run with such ratios, as the floor of a good one, must not break it either.
    aa = {**copy.deepcopy(doc), "mode": "aa"}
    analyze(_valid(count=3), aa_reference={**aa, "id": "20261202T100000Z-aa0000"})


def test_more_values_than_a_record_may_hold_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(schema_mod, "MAX_VALUES", 50)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_valid(count=3)))
    with pytest.raises(UserError, match=r"big\.json.*samples and ratios in all"):
        load_record(path)


@pytest.mark.parametrize("field", ["device", "torch_version", "workload_name"])
def test_text_too_long_for_any_record_is_one_line_not_a_report_that_never_ends(tmp_path: Path, field: str) -> None:
    """A terminal wraps one unbroken line in time that grows with its square: 100,000 characters never finished."""
    doc = _valid()
    long = "x" * 100_000
    if field == "device":
        doc["device"] = long
    elif field == "torch_version":
        doc["environments"][0]["torch_version"] = long
    else:
        doc["workloads"][0]["name"] = long
    path = _write(tmp_path / "long.json", doc)
    with pytest.raises(UserError) as exc:
        store_mod.load_record(path)
    assert "100,000 characters" in str(exc.value) and "\n" not in str(exc.value)
    doc_ok = _valid()
    doc_ok["device"] = "y" * 8_000  # long, but within what a record holds
    store_mod.load_record(_write(tmp_path / "ok.json", doc_ok))
