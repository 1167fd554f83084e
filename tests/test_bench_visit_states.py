"""A real CPU bench reads the machine at each visit: every visit's entry (start and end readings, each build's
median with its interval, in time order), the record's readers and their cost; the warnings before a run that
starts on battery; the screen that says what was asked for and could not be read."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.bench.policy import SamplingPolicy
from mpsup.bench.run import run_bench
from mpsup.bench.runner import BenchOptions, EnvSpec
from mpsup.energy.choose import choose_meter
from mpsup.runs.store import load_record
from mpsup.workloads import Workload
from tests.conftest import run_cli


def _tiny(name: str) -> Workload:
    return Workload(name, "linear", "linear", "fp32", {"tokens": 2, "in_features": 64, "out_features": 64})


def _aa(**kw: Any) -> tuple[dict[str, Any], Path | None]:
    opts = BenchOptions(device="cpu", policy=SamplingPolicy.for_environments(2, 0.02), smoke=False)
    envs = [EnvSpec("baseline", Path(sys.executable)), EnvSpec("baseline-2", Path(sys.executable))]
    return run_bench(envs, [_tiny("w0"), _tiny("w1")], opts, mode="aa", **kw)


def test_every_visit_is_read_beside_each_build_s_median() -> None:
    record, path = _aa()
    assert path is not None
    loaded = load_record(path)  # the schema checks what it reads (runs/fields.py: check_visit_states)
    visits = [v for w in record["workloads"] for v in w["visit_states"]]
    # Two visits a workload (two pairs of worker processes), each read at its start and end.
    assert sorted(v["visit"] for v in visits) == [1, 1, 2, 2]
    times = sorted((v["t0"], v["t1"]) for v in visits)
    assert all(t0 < t1 for t0, t1 in times) and all(a[1] <= b[0] for a, b in itertools.pairwise(times))
    for v in visits:
        assert set(v["medians"]) == {"baseline", "baseline-2"}
        for m in v["medians"].values():
            assert m["median"] > 0 and m["n"] >= 1
        if sys.platform.startswith("linux"):
            assert "cpu_pressure_us" in v["start"] and "load1" in v["end"]
    # The medians are of each visit's own samples: the rounds of that visit, in that order.
    w0 = record["workloads"][0]
    for v in w0["visit_states"]:
        mine = [s for r in w0["rounds"] if r["visit"] == v["visit"] for s in r["baseline"]]
        assert v["medians"]["baseline"]["n"] == len(mine)
    state = record["machine_state"]
    assert state["read_s"]["visits"] == 4 and 0 < state["read_s"]["median"] <= state["read_s"]["max"]
    assert state["read_s"]["share_of_run"] < 0.05
    assert loaded.extra["machine_state"] == state
    assert record["hygiene"]["before"]["os_build"]


def test_a_run_on_battery_warns_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    on_battery = {"on_battery": True, "battery_percent": 41, "energy_mode": "low", "thermal_pressure": "heavy"}
    monkeypatch.setattr("mpsup.bench.run.hygiene_now", lambda state=None: dict(on_battery))
    _aa(warn=said.append)
    assert said[:3] == [
        "on battery (41%): macOS may slow the GPU to save charge; plug in the power adapter before benchmarking",
        "Low Power Mode is on: it caps the chip's clocks; turn it off (System Settings > Battery > Energy Mode)",
        "thermal pressure heavy: the Mac is already hot and will slow down; let it cool, then run again",
    ]


def test_the_screen_says_energy_asked_for_and_not_measured() -> None:
    if choose_meter("cpu").meter is not None:
        pytest.skip("this machine has a CPU energy meter (RAPL): the absent-meter line cannot show here")
    args = ["bench", "--device", "cpu", "--only", "linear/4096x1024/t1", "--budget", "0.02", "--no-smoke", "--energy"]
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("Energy not measured")]
    assert lines and "no meter for --device cpu here" in " ".join(res.stdout.split())
    doc = json.loads(run_cli(*args, "--json").stdout)
    # One JSON document on stdout: the meter's absence and what was read, with the machine-moved object.
    assert doc["energy_meter"]["name"] is None and doc["energy_meter"]["why"]
    assert doc["machine_state"]["reads"] and doc["conditions"]["visits"] >= 1
    assert set(doc["conditions"]) >= {"moved", "line", "changes", "pressures", "drift", "read_s"}
