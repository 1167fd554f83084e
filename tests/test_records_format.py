"""The typed run record: records written before it still load, round-trip key for key, and analyze.

tests/fixtures/records/run-v1-cpu-aa.json is a real mpsup.run/1 record, written by `mpsup bench --aa --only
'linear*' --budget 0.02 --no-smoke` on CPU before the typed record existed (trimmed to four workloads)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from mpsup.errors import UserError
from mpsup.report.analysis import analyze
from mpsup.runs.journal import Journal, rebuild_record
from mpsup.runs.schema import SCHEMA, EnvRun, Memory, RunRecord, WorkloadRun
from mpsup.runs.select import merge_single_runs
from mpsup.runs.store import load_record, save_record
from tests.synthetic import paired_record

V1 = Path(__file__).parent / "fixtures" / "records" / "run-v1-cpu-aa.json"


def _v1_doc() -> dict[str, Any]:
    return json.loads(V1.read_text())


def test_a_v1_record_loads_typed():
    rec = load_record(V1)
    assert rec.schema == "mpsup.run/1" and rec.mode == "aa" and rec.device == "cpu" and rec.partial is True
    assert rec.labels == ["baseline", "baseline-2"]
    assert rec.environments[0].torch_version == "2.13.0+cpu" and rec.environments[0].event_timing is None
    assert rec.interrupted and rec.extra["signal"] == "SIGTERM"  # keys the schema leaves untyped stay readable
    w = rec.workloads[0]
    doc_w = _v1_doc()["workloads"][0]
    assert w.name == doc_w["name"] and w.tags == tuple(doc_w["tags"]) and w.count == doc_w["count"]
    assert w.env("baseline").samples == tuple(doc_w["envs"]["baseline"]["samples"])  # raw samples as written
    assert w.env("baseline").memory == Memory(peak_rss=doc_w["envs"]["baseline"]["memory"]["peak_rss"])
    assert w.extra["rounds"] == doc_w["rounds"]


def test_a_v1_record_round_trips_exactly(tmp_path: Path):
    doc = _v1_doc()
    rec = load_record(V1)
    assert json.dumps(rec.to_json()) == json.dumps(doc)  # same keys, same order, same values
    again = load_record(save_record(rec, tmp_path))
    assert again == rec and json.dumps(again.to_json()) == json.dumps(doc)


def test_a_v1_record_analyzes_with_no_memory_figure_from_peak_rss():
    a = analyze(load_record(V1), seed=1)
    assert a.mode == "aa" and a.run_ids == [load_record(V1).id] and len(a.workloads) == 4
    assert {w.name for w in a.workloads} == {w["name"] for w in _v1_doc()["workloads"]}
    assert all(w.speedup is not None and w.units > 0 for w in a.workloads)
    # A CPU record of this age has only the process's RSS high-water mark: no workload's peak, so no figure.
    assert a.peak_memory_ratio is None and all(w.memory_ratio is None for w in a.workloads)
    assert json.loads(json.dumps(a.to_json()))["schema"] == "mpsup.report/1"


def test_unknown_keys_from_a_newer_mpsup_are_kept():
    doc = _v1_doc()
    doc["schema"] = "mpsup.run/1.4"  # a minor version only adds keys
    doc["energy"] = {"joules": 12.5}
    doc["environments"][0]["gpu_cores"] = 40
    doc["workloads"][0]["shape_hash"] = "ab12"
    doc["workloads"][0]["envs"]["baseline"]["memory"]["unified_peak"] = 123
    rec = RunRecord.from_json(copy.deepcopy(doc), "new.json")
    assert rec.extra["energy"] == {"joules": 12.5} and rec.environments[0].extra["gpu_cores"] == 40
    assert rec.to_json() == doc


def test_an_unknown_major_version_is_refused_naming_the_file():
    doc = _v1_doc()
    doc["schema"] = "mpsup.run/99"
    with pytest.raises(UserError, match=r"^future\.json: not an mpsup run record \(schema 'mpsup\.run/99'\)$"):
        RunRecord.from_json(doc, Path("future.json"))


@pytest.mark.parametrize(
    ("break_it", "where"),
    [
        (
            lambda d: d["workloads"][1]["envs"]["baseline"].update(median="fast"),
            r"workloads\[1\]\.envs\.baseline\.median",
        ),
        (lambda d: d["environments"][1].pop("label"), r"environments\[1\]\.label"),
        (lambda d: d["workloads"][0].update(count=0), r"workloads\[0\]\.count: 0 is out of range"),
        (lambda d: d["hygiene"].update(changed=[3]), r"hygiene\.changed\[0\]"),
    ],
)
def test_a_broken_field_is_one_line_naming_file_and_field(break_it: Any, where: str):
    doc = _v1_doc()
    break_it(doc)
    with pytest.raises(UserError, match=rf"^r\.json: corrupt run record \({where}"):
        RunRecord.from_json(doc, Path("r.json"))


def test_defaults_the_reader_fills_in_are_not_written_back():
    doc = _v1_doc()
    w = doc["workloads"][0]
    del w["count"], w["tags"]
    w["envs"]["baseline"].pop("memory")
    doc["hygiene"] = None
    rec = RunRecord.from_json(copy.deepcopy(doc), "r.json")
    assert rec.workloads[0].count == 1 and rec.workloads[0].tags == () and rec.hygiene.changed == ()
    assert rec.to_json() == doc


MIB = 2**20


def _memory_env(memory: dict[str, Any] | None) -> dict[str, Any]:
    return {"status": "ok", "median": 1.0, **({"memory": memory} if memory is not None else {})}


@pytest.mark.parametrize(
    ("memory", "peak"),
    [
        # In MiB: a peak under 1 MiB is allocator noise, left out of the report's memory figure.
        ({"peak_allocated": 2000 * MIB, "driver_allocated": 9000 * MIB, "peak_rss": 7000 * MIB}, 2000.0 * MIB),
        ({"workload_peak": 3000 * MIB, "peak_rss": 7000 * MIB}, 3000.0 * MIB),
        ({"peak_allocated": 0, "workload_peak": 3000 * MIB}, 3000.0 * MIB),
        ({"peak_rss": 7000 * MIB}, None),  # the process's high-water mark only grows: no workload's peak
        ({"driver_allocated": 9000 * MIB}, None),  # one reading at teardown: not a peak
        (None, None),
    ],
)
def test_the_memory_figure_is_the_workloads_own_peak_or_none(memory: dict[str, Any] | None, peak: float | None):
    env = EnvRun.from_json(_memory_env(memory), "env")
    assert env.peak == peak
    doc = paired_record(1.2, seed=3, count=2, rounds=8)
    for w in doc["workloads"]:
        for env in w["envs"].values():
            env.pop("memory")
            env.update(_memory_env(memory))
    a = analyze(RunRecord.from_json(doc, "r.json"), seed=1)
    assert a.peak_memory_ratio == (1.0 if peak else None)


def test_a_journal_rebuilds_the_same_typed_record(mpsup_home: Path):
    doc = paired_record(1.1, seed=2, count=2, rounds=4)
    j = Journal.create(doc["id"])
    j.append("header", {k: v for k, v in doc.items() if k not in ("workloads", "smoke")})
    for w in doc["workloads"]:
        j.append("workload", w)
    j.close()
    rec = rebuild_record(j.path.read_bytes(), j.path)
    assert rec is not None and rec.partial and rec.interrupted
    assert [w.to_json() for w in rec.workloads] == doc["workloads"]
    assert load_record(save_record(rec, mpsup_home / "runs")) == rec


def test_two_single_runs_pair_into_one_unpaired_record():
    doc = _v1_doc()
    rec = load_record(V1)
    base = dataclasses.replace(rec, environments=rec.environments[:1], id="a", mode="single")
    second = dataclasses.replace(rec.environments[1], label="baseline")
    cand = dataclasses.replace(
        rec,
        id="b",
        mode="single",
        environments=(second,),
        workloads=tuple(
            dataclasses.replace(w, envs={"baseline": w.envs["baseline-2"]}, ratios=()) for w in rec.workloads
        ),
    )
    merged = merge_single_runs(base, cand)
    assert merged.mode == "unpaired" and merged.id == "a+b" and merged.labels == ["baseline", "candidate"]
    first = merged.workloads[0]
    assert isinstance(first, WorkloadRun)
    assert first.envs["candidate"].samples == tuple(doc["workloads"][0]["envs"]["baseline-2"]["samples"])
    assert RunRecord.from_json(merged.to_json(), "merged.json") == merged
    assert SCHEMA == "mpsup.run/1.4"
    # The baseline run's own rounds never ride along: nothing here was measured in turns.
    assert rec.workloads[0].ratios and not any(w.ratios for w in merged.workloads)
    assert "rounds" not in merged.workloads[0].to_json()
    # A paired or A/A run is refused, in one line that says what to do with it.
    with pytest.raises(UserError, match="not a single-environment one: report it on its own"):
        merge_single_runs(rec, cand)
    with pytest.raises(UserError, match="not a single-environment one"):
        merge_single_runs(dataclasses.replace(rec, mode="single"), cand)
