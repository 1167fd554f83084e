"""The run journal and the stop signals, without a worker: fast, in-process."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from mpsup.bench.run import StopSignals
from mpsup.errors import UserError
from mpsup.runs import select
from mpsup.runs.journal import SUFFIX, UNREADABLE, Journal, JournalWriteError, rebuild_record, recover_journals
from mpsup.runs.store import list_record_paths, load_record, new_record, new_run_id
from tests.conftest import run_cli
from tests.journal_fixture import INTERRUPTED


def _workload(name: str, samples: list[float]) -> dict:
    return {
        "name": name,
        "kind": "linear",
        "part": "linear",
        "dtype": "fp32",
        "count": 1,
        "status": "ok",
        "envs": {
            "baseline": {"status": "ok", "calls": 1, "samples": samples, "median": sorted(samples)[len(samples) // 2]}
        },
    }


def _header(run_id: str) -> dict:
    rec = new_record("single", "cpu", [{"label": "baseline", "torch_version": "2.13.0", "python": "/x/python"}], {})
    rec["id"] = run_id
    return rec


def _journal_with(n: int) -> Journal:
    j = Journal.create(new_run_id())
    j.append("header", _header(j.run_id))
    for i in range(n):
        j.append("workload", _workload(f"w{i}", [1.0 + i, 1.1 + i, 1.2 + i]))
    return j


def test_journal_is_one_json_line_per_event_and_locked_while_open(mpsup_home: Path):
    j = _journal_with(2)
    try:
        lines = j.path.read_text().splitlines()
        assert [next(iter(json.loads(ln))) for ln in lines] == ["begin", "header", "workload", "workload"]
        assert j.path.parent == mpsup_home / "runs" and j.path.name == f"{j.run_id}{SUFFIX}"
        # A live bench holds the lock: recovery leaves its journal alone.
        assert recover_journals(pytest.fail) == []
        assert j.path.exists() and list_record_paths() == []
    finally:
        j.close()


def test_dead_run_is_recovered_once_as_a_partial_record(mpsup_home: Path):
    j = _journal_with(3)
    j.close()  # what a SIGKILL does: the lock goes, the file stays
    warnings: list[str] = []
    rows = select.stored_runs(warnings.append)
    assert len(rows) == 1 and rows[0].id == j.run_id and rows[0].partial is True and rows[0].workloads == 3
    assert any("recovered the interrupted run" in w and "3 finished workloads" in w for w in warnings)
    assert not j.path.exists()
    record = load_record(list_record_paths()[0]).to_json()
    assert record["interrupted"] is True and record["recovered"]["from"] == j.path.name
    assert record["workloads"][2]["envs"]["baseline"]["samples"] == [3.0, 3.1, 3.2]
    # Listing again finds nothing new to recover and no duplicate.
    warnings.clear()
    assert len(select.stored_runs(warnings.append)) == 1 and warnings == []


def test_a_later_visit_replaces_its_workload_in_the_recovered_record(mpsup_home: Path):
    """A second visit (fresh workers) or a leftover visit is journaled with the workload's position: a run
    killed after it is recovered with every round, not only the first visit's."""
    j = _journal_with(3)
    j.append("workload-extended", {"index": 1, "workload": _workload("w1", [2.0, 2.1, 2.2, 2.05, 2.15])})
    j.append("workload-extended", {"index": 7, "workload": _workload("w7", [9.0])})  # out of range: ignored
    j.append("workload-extended", {"index": 0, "workload": "not a workload"})  # hostile: ignored
    j.close()
    record = rebuild_record(j.path.read_bytes(), j.path)
    assert record is not None
    doc = record.to_json()
    assert [w["name"] for w in doc["workloads"]] == ["w0", "w1", "w2"]
    assert doc["workloads"][1]["envs"]["baseline"]["samples"] == [2.0, 2.1, 2.2, 2.05, 2.15]
    assert doc["workloads"][0]["envs"]["baseline"]["samples"] == [1.0, 1.1, 1.2]


def test_torn_last_line_costs_only_that_line(mpsup_home: Path):
    j = _journal_with(2)
    j.close()
    with open(j.path, "ab") as fh:
        fh.write(b'{"workload": {"name": "half-writ')
    assert recover_journals(lambda _m: None)
    record = load_record(list_record_paths()[0]).to_json()
    assert [w["name"] for w in record["workloads"]] == ["w0", "w1"] and record["recovered"]["unreadable_lines"] == 1


def test_failed_append_is_cut_back_so_later_lines_stay_readable(mpsup_home: Path, monkeypatch: pytest.MonkeyPatch):
    j = _journal_with(1)
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(JournalWriteError, match="No space left on device"):
        j.append("workload", _workload("lost", [9.0]))
    monkeypatch.setattr(os, "write", real_write)
    j.append("workload", _workload("after", [2.0]))
    j.close()
    record = rebuild_record(j.path.read_bytes(), j.path)
    assert record is not None and [w.name for w in record.workloads] == ["w0", "after"]
    assert record.extra["recovered"]["unreadable_lines"] == 0


def test_journal_whose_record_was_saved_is_just_removed(mpsup_home: Path):
    from mpsup.runs.store import save_record

    j = _journal_with(1)
    j.close()
    rec = rebuild_record(j.path.read_bytes(), j.path)
    assert rec is not None
    save_record(rec)  # the bench saved its record, then died before removing the journal
    recover_journals(pytest.fail)
    assert not j.path.exists() and len(list_record_paths()) == 1


def test_journal_of_a_run_that_measured_nothing_is_removed(mpsup_home: Path):
    j = Journal.create(new_run_id())
    j.close()
    assert recover_journals(pytest.fail) == []
    assert not j.path.exists() and list_record_paths() == []


def test_unreadable_journal_is_set_aside_with_one_warning(mpsup_home: Path):
    runs = mpsup_home / "runs"
    runs.mkdir(parents=True)
    bad = runs / f"20260101T000000Z-abcdef{SUFFIX}"
    bad.write_text('{"header": {"schema": "mpsup.run/1", "id": 5}}\n')
    warnings: list[str] = []
    recover_journals(warnings.append)
    assert len(warnings) == 1 and "corrupt run record" in warnings[0]
    assert not bad.exists() and (runs / (bad.name + UNREADABLE)).exists()
    recover_journals(pytest.fail)  # set aside: no warning on every listing


def test_a_fifo_named_like_a_journal_does_not_hang(mpsup_home: Path):
    runs = mpsup_home / "runs"
    runs.mkdir(parents=True)
    os.mkfifo(runs / f"20260101T000000Z-ffffff{SUFFIX}")
    warnings: list[str] = []
    assert recover_journals(warnings.append) == []
    assert warnings and "not a regular file" in warnings[0]


def test_unwritable_runs_folder_is_refused_before_anything(mpsup_home: Path):
    mpsup_home.mkdir(parents=True)
    (mpsup_home / "runs").write_text("a file where the runs folder should be")
    with pytest.raises(UserError, match="cannot write run records there"):
        Journal.create(new_run_id())


def test_journal_made_for_nothing_leaves_no_folder(mpsup_home: Path):
    j = Journal.create(new_run_id())
    j.discard_unused()
    assert not mpsup_home.exists()


def test_stop_signals_first_raises_later_ones_are_ignored():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stops:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        # The run is stopping now: a second signal (a second Ctrl-C, a SIGHUP) must not cut the save short.
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):
            pass
        assert stops.received == [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    assert signal.getsignal(signal.SIGTERM) == before


def test_stop_signal_waits_for_the_end_of_a_critical_section():
    done = []
    with StopSignals() as stops:
        with pytest.raises(KeyboardInterrupt), stops.critical():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):
                pass
            done.append("appended to the record and the journal")
        assert done and stops.first == signal.SIGHUP


# --- damage to the journal of a real interrupted run (issue 26): tests/journal_fixture.py made it by SIGKILLing
# `mpsup bench --device cpu --only 'linear/*/t1' --budget 0.05 --no-smoke` after 12 journaled workloads.


def _real_journal(mpsup_home: Path, damage) -> tuple[Path, bytes]:  # type: ignore[no-untyped-def]
    """The real interrupted run's journal, damaged by `damage(lines)`, in this test's runs folder."""
    lines = INTERRUPTED.read_bytes().split(b"\n")
    assert [ln[:10] for ln in lines[:3]] == [b'{"begin":{', b'{"header":', b'{"workload']
    damage(lines)
    runs = mpsup_home / "runs"
    runs.mkdir(parents=True)
    path = runs / INTERRUPTED.name.replace("interrupted-linear-t1", "20261204T211327Z-238837")
    path.write_bytes(b"\n".join(lines))
    return path, path.read_bytes()


def _flip_in_header(lines: list[bytes]) -> None:
    header = bytearray(lines[1])
    header[header.index(b'"mode"')] = ord("#")  # one byte: the line is no longer JSON
    lines[1] = bytes(header)


def _nest_in_header(depth: int):  # type: ignore[no-untyped-def]
    def damage(lines: list[bytes]) -> None:
        lines[1] = lines[1][:-2] + b',"x":' + b"[" * depth + b"]" * depth + b"}}"

    return damage


@pytest.mark.parametrize(
    "damage",
    [
        _flip_in_header,
        lambda lines: lines.__setitem__(1, b'{"header":' + b"[" * 980 + b"]" * 980 + b"}"),
        _nest_in_header(900),  # was a RecursionError on every later bench and report
        lambda lines: lines.__setitem__(1, b'{"header": [1, 2]}'),
    ],
    ids=["byte-flipped", "header-nested-980", "value-nested-900", "header-not-an-object"],
)
def test_damaged_header_keeps_the_journal_and_says_so(mpsup_home: Path, damage):  # type: ignore[no-untyped-def]
    journal, damaged = _real_journal(mpsup_home, damage)
    warnings: list[str] = []
    assert select.stored_runs(warnings.append) == []
    aside = journal.with_name(journal.name + UNREADABLE)
    assert aside.read_bytes() == damaged, "the 12 finished workloads must stay on disk"
    assert not journal.exists() and list_record_paths() == []
    assert len(warnings) == 1 and str(journal) in warnings[0] and "header" in warnings[0], warnings
    assert "12 finished workloads" in warnings[0] and "nothing was deleted" in warnings[0]
    assert select.stored_runs(pytest.fail) == []  # set aside once, not a warning on every listing


def test_damaged_header_from_the_command_line_is_one_warning_every_time(mpsup_home: Path):
    _real_journal(mpsup_home, _nest_in_header(900))
    for _ in range(2):  # the journal once stopped every later command with the same RecursionError
        res = run_cli("report", "--list")
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(list((mpsup_home / "runs").glob(f"*{SUFFIX}{UNREADABLE}"))) == 1


def _recovered(warnings: list[str]) -> dict:
    rows = select.stored_runs(warnings.append)
    assert len(rows) == 1 and not list(list_record_paths()[0].parent.glob(f"*{SUFFIX}*"))
    return load_record(list_record_paths()[0]).to_json()


@pytest.mark.parametrize(
    ("damage", "kept"),
    [
        (lambda lines: lines.insert(5, b'{"workload": 5}'), 12),  # once set the whole journal aside
        (lambda lines: lines.insert(3, b'{"smoke": [1]}'), 12),
        (lambda lines: lines.__setitem__(6, lines[6].replace(b'"samples":[', b'"samples":[[', 1)), 11),
        (lambda lines: lines.__setitem__(7, lines[7][:40] + b"\xff" + lines[7][41:]), 11),
        (lambda lines: lines.insert(4, b'{"workload": ' + b"[" * 500 + b"]" * 500 + b"}"), 12),
        (lambda lines: lines.insert(4, b'{"workload-extended": {"index": 0, "workload": {"name": 5}}}'), 12),
    ],
    ids=["a-number", "bad-smoke", "bad-samples", "bad-byte", "nested-500", "bad-later-visit"],
)
def test_one_bad_line_costs_that_line_only(mpsup_home: Path, damage, kept: int):  # type: ignore[no-untyped-def]
    names = [json.loads(ln)["workload"]["name"] for ln in INTERRUPTED.read_bytes().splitlines()[2:]]
    _real_journal(mpsup_home, damage)
    warnings: list[str] = []
    record = _recovered(warnings)
    got = [w["name"] for w in record["workloads"]]
    assert len(got) == kept and set(got) <= set(names) and got == [n for n in names if n in got]
    assert all(w["envs"]["baseline"]["samples"] for w in record["workloads"])
    assert record["partial"] is True and record["recovered"]["unreadable_lines"] == 1
    assert len(warnings) == 1 and "1 line of the journal could not be read and was dropped" in warnings[0], warnings


def test_undamaged_real_journal_recovers_every_workload(mpsup_home: Path):
    _real_journal(mpsup_home, lambda _lines: None)
    record = _recovered([])
    assert len(record["workloads"]) == 12 and record["recovered"]["unreadable_lines"] == 0


def test_a_damaged_end_line_costs_only_the_end(mpsup_home: Path):
    j = _journal_with(2)
    j.append("end", {"partial": "not a boolean", "finished_at": "x"})
    j.close()
    record = _recovered([])
    assert [w["name"] for w in record["workloads"]] == ["w0", "w1"] and record["partial"] is True
    assert record["recovered"]["unreadable_lines"] == 1


def test_a_record_by_the_same_id_with_fewer_workloads_does_not_delete_the_journal(mpsup_home: Path):
    from mpsup.runs.store import save_record

    j = _journal_with(3)
    j.close()
    rec = rebuild_record(j.path.read_bytes(), j.path)
    assert rec is not None
    doc = rec.to_json()
    doc["workloads"] = doc["workloads"][:1]  # another run's record under this id (a damaged id, say)
    save_record(doc)
    recover_journals(lambda _m: None)
    assert not j.path.exists()
    counts = sorted(len(load_record(p).workloads) for p in list_record_paths())
    assert counts == [1, 3]


def test_a_torn_header_with_nothing_after_it_is_removed(mpsup_home: Path):
    j = Journal.create(new_run_id())
    j.close()
    with open(j.path, "ab") as fh:
        fh.write(b'{"header": {"schema": "mpsup.ru')  # killed while writing the header: nothing measured
    assert recover_journals(pytest.fail) == []
    assert not j.path.exists() and not list(j.path.parent.glob("*"))
