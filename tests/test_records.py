"""Run records: atomic, never lost to a concurrent bench, tolerant loading; hygiene change flags."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mpsup.errors import UserError
from mpsup.host.hygiene import conditions_changed, noisy_conditions
from mpsup.runs.store import list_record_paths, load_record, new_record, save_record


def test_concurrent_saves_keep_every_record(tmp_path: Path):
    records = [new_record("single", "cpu", [], {}) for _ in range(16)]
    for r in records:
        r["id"] = "20261202T100000Z-same00"  # the worst case: every bench picked the same id
    threads = [threading.Thread(target=save_record, args=(r, tmp_path)) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    paths = list_record_paths(tmp_path)
    # Every record survives, each under its own id, even when the clock and the random suffix collide.
    assert len(paths) == 16
    assert len({load_record(p).id for p in paths}) == 16
    assert all(load_record(p).schema == "mpsup.run/1.4" for p in paths)
    assert not list(tmp_path.glob(".*.tmp"))


def test_distinct_ids_never_collide(tmp_path: Path):
    for _ in range(50):
        save_record(new_record("single", "cpu", [], {}), tmp_path)
    assert len(list_record_paths(tmp_path)) == 50


def test_non_finite_values_are_written_as_null(tmp_path: Path):
    rec = new_record("single", "cpu", [], {})
    rec["workloads"] = [{"name": "w", "envs": {"baseline": {"ci_low": float("-inf"), "median": float("nan")}}}]
    path = save_record(rec, tmp_path)
    doc = json.loads(path.read_text())
    assert doc["workloads"][0]["envs"]["baseline"] == {"ci_low": None, "median": None}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{", "not valid JSON"),
        ('{"schema": "mpsup.run/1", "id": 3}', "corrupt run record"),
        ('{"schema": "other"}', "not an mpsup run record"),
    ],
)
def test_bad_records_are_clear_errors(tmp_path: Path, content: str, needle: str):
    p = tmp_path / "r.json"
    p.write_text(content)
    with pytest.raises(UserError, match=needle) as exc:
        load_record(p)
    assert str(p) in str(exc.value)


def test_hygiene_changes_are_flagged():
    before = {"on_battery": False, "low_power_mode": False, "thermal_warning": False}
    after = {"on_battery": True, "low_power_mode": False, "thermal_warning": None}
    assert conditions_changed(before, after) == ["power source changed from mains to battery"]
    assert noisy_conditions(after) == ["on battery"]
