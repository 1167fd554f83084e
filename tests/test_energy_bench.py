"""Energy paired with time in a real `mpsup bench` on this CPU: a fake meter injected into mpsup's own process
(tests/fixtures/energy_hook), read around every worker turn; and a run with no meter, which says so in one line
and changes nothing else. The fake's sources are cited in tests/energy_fakes.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mpsup.report.energy import turn_energy
from mpsup.runs.store import list_record_paths, load_record
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "tests" / "fixtures" / "energy_hook"
BENCH = (
    "bench",
    "--device",
    "cpu",
    "--aa",
    "--only",
    "small",
    "--tokens",
    "1",
    "--threads",
    "1",
    "--no-smoke",
    "--energy",
)


def _fake_env() -> dict[str, str]:
    path = os.pathsep.join([str(HOOK), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "MPSUP_TEST_FAKE_METER": "1"}


def test_a_fake_meter_is_read_around_every_turn_and_paired_by_round(mpsup_home: Path) -> None:
    res = run_cli(*BENCH, "--budget", "0.3", "--json", env=_fake_env())
    assert res.returncode == 0, res.stderr[-2000:]
    doc = load_record(list_record_paths()[0]).to_json()
    meter = doc["energy_meter"]
    assert doc["schema"] == "mpsup.run/1.4"
    assert meter["name"] == "fake-worker-cpu"
    # Probed while idle: the "cpu" part moves in 1.5 s batches, so only the GPU part's turns mean something.
    assert meter["stamped"] == ["gpu"]
    assert 15.0 < meter["idle_w"]["gpu"] < 30.0  # 20 W plus whatever the idle workers spent
    assert meter["read_count"] > 0 and meter["read_total_s"] < 0.10 * sum(w["elapsed_s"] for w in doc["workloads"])
    read = [w for w in doc["workloads"] if any(e.get("energy") for e in w["envs"].values())]
    assert read, "no workload was read"
    for w in read:
        sampled = {k: [t for t in e.get("energy", []) if not t["warmup"]] for k, e in w["envs"].items()}
        # At most one read turn per environment per round, numbered by its round: energy pairs with time round
        # by round (a turn too short to read within a tenth of its time leaves its round out).
        for turns in sampled.values():
            numbers = [t["round"] for t in turns]
            assert numbers == sorted(set(numbers)) and all(0 <= n < len(w["rounds"]) for n in numbers)
        for label, turns in sampled.items():
            # Every call of the turn counts, the discarded block's too: whole samples of the calibrated calls.
            calls = w["envs"][label]["calls"]
            assert all(t["calls"] >= calls and t["calls"] % calls == 0 for t in turns)
            # A turn's joules: 20 W of its seconds and 30 W of the worker's CPU time, which a turn cannot exceed.
            for t in turns:
                assert 20.0 * t["s"] - 1e-6 <= t["j"]["gpu"] <= 50.0 * t["s"] + 30.0 * 0.02
    rep = run_cli("report", "--json")
    assert rep.returncode == 0, rep.stderr
    out = json.loads(rep.stdout)
    # No whole-model phase, so no energy windows: a record that pairs energy by windows gives its turns no figure
    # (tests/test_energy_windows.py shows why); the turns' own figure is still there for a reader that asks.
    assert all(out["energy"][w["name"]] is None for w in read)
    record = load_record(list_record_paths()[0])
    figs = [f for w in record.workloads if (f := turn_energy(doc["energy_meter"], w, "baseline", "baseline-2"))]
    assert figs and all(f["meter"] == "fake-worker-cpu" for f in figs)
    # The batched part: the run's total where a batch landed in the workload's turns, else it read zero.
    assert all(f["parts"]["cpu"].get("batched") or f["parts"]["cpu"].get("read_zero") for f in figs)
    assert all(f["parts"]["gpu"]["baseline_j"] > 0 and f["parts"]["dram"] is None for f in figs)
    text = run_cli("report").stdout
    assert "no energy meter" not in text


def test_without_energy_no_meter_is_read_and_the_record_has_no_energy_meter(mpsup_home: Path) -> None:
    res = run_cli(*BENCH[:-1], "--budget", "0.05", "--json", env=_fake_env())
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(list_record_paths()[0].read_text())
    assert "energy_meter" not in doc and doc["options"]["energy"] is False
    assert not any("energy" in e for w in doc["workloads"] for e in w["envs"].values())


def test_a_run_without_a_meter_says_so_in_one_line_and_nothing_else_changes(mpsup_home: Path) -> None:
    res = run_cli(*BENCH, "--budget", "0.05", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    path = list_record_paths()[0]
    doc = json.loads(path.read_text())
    assert doc["energy_meter"]["name"] is None and "RAPL" in doc["energy_meter"]["why"]
    assert not any("energy" in e for w in doc["workloads"] for e in w["envs"].values())
    with_line = run_cli("report", "--run", doc["id"]).stdout.splitlines()
    # The same record without the key, as a bench before energy wrote it: the report differs by the one line.
    del doc["energy_meter"]
    path.write_text(json.dumps(doc))
    without = run_cli("report", "--run", doc["id"]).stdout.splitlines()
    extra = [line for line in with_line if line not in without]
    assert len(with_line) == len(without) + 1
    assert len(extra) == 1 and extra[0].startswith("no energy meter on this machine (") and "RAPL" in extra[0]
