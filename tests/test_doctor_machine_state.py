"""`doctor` on saved snapshots of each state a public report shows: pmset's energy mode (`powermode` where High
Power Mode exists, else `lowpowermode`), `pmset -g ps` on AC and on battery, the thermal pressure level as
`notifyutil` prints it, and sysctl's memory pressure. Each snapshot is written to a file and read back by
`--from-snapshot`, as a user's would be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mpsup.doctor.run import diagnose
from mpsup.host import parsers
from mpsup.host.snapshot import load_snapshot, snapshot_from_json
from tests import snapshots
from tests.conftest import run_cli

HOST = Path(__file__).parent / "fixtures" / "host"


def _findings(doc: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The doctor's findings for `doc`, saved and loaded as a snapshot file."""
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc))
    return {f.name: f for f in diagnose(load_snapshot(path)).findings}


def _with_level(doc: dict[str, Any], line: str) -> dict[str, Any]:
    """The snapshot with the thermal pressure a `notifyutil -g` line gives."""
    doc["readings"]["values"]["thermal_pressure"] = parsers.thermal_pressure_name(parsers.parse_notifyutil(line))
    return doc


def test_notifyutil_lines_give_each_level_and_nothing_else() -> None:
    lines = (HOST / "notifyutil_thermalpressurelevel.txt").read_text().splitlines()
    assert [parsers.thermal_pressure_name(parsers.parse_notifyutil(x)) for x in lines] == [
        "nominal",
        "moderate",
        "heavy",
    ]
    assert parsers.parse_notifyutil("com.apple.system.other 3") is None
    assert parsers.parse_notifyutil("notifyutil: Failed with code 1000000") is None
    assert parsers.parse_notifyutil("com.apple.system.thermalpressurelevel 99999999999999999999999") is None


@pytest.mark.parametrize(("line", "status"), [(0, "ok"), (1, "ok"), (2, "warn")])
def test_doctor_warns_at_heavy_thermal_pressure_and_says_each_level(tmp_path: Path, line: int, status: str) -> None:
    text = (HOST / "notifyutil_thermalpressurelevel.txt").read_text().splitlines()[line]
    found = _findings(_with_level(snapshots.healthy(), text), tmp_path)
    level = parsers.THERMAL_PRESSURE_LEVELS[line]
    assert found["hygiene"].status.value == status
    assert f"thermal pressure {level}" in found["hygiene"].summary
    assert f"thermal pressure {level}" in found["machine-state"].summary
    if status == "warn":
        assert found["hygiene"].fix == "let the Mac cool down and retry"


def test_pmset_powermode_gives_the_energy_mode(tmp_path: Path, real_mac: Path) -> None:
    # A 16-inch M1 Max's `pmset -g custom` (alfredapp/low-power-mode-workflow#6): `powermode 0` is Automatic.
    custom = (real_mac / "pmset" / "pmset_g_custom_m1max_powermode_alfred_lpm_issue6_TRUNCATED.txt").read_text()
    assert parsers.energy_mode(parsers.parse_pmset_settings(custom)) == "automatic"
    doc = snapshots.healthy()
    doc["commands"]["pmset -g"] = {"returncode": 0, "stdout": custom, "stderr": ""}
    assert "energy mode automatic" in _findings(doc, tmp_path)["hygiene"].summary
    # 2 is High Power Mode (alfredapp/low-power-mode-workflow#4, ronyfadel/BatteriesReleases#13): the same capture
    # with the value those reports give.
    doc["commands"]["pmset -g"]["stdout"] = custom.replace("powermode            0", "powermode            2")
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "ok" and "High Power Mode" in found.summary
    doc["commands"]["pmset -g"]["stdout"] = custom.replace("powermode            0", "powermode            1")
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "warn" and "Low Power Mode is on" in found.summary


def test_pmset_lowpowermode_gives_the_energy_mode(tmp_path: Path, real_mac: Path) -> None:
    verbatim = (
        real_mac / "pmset" / "pmset_g_apple_silicon_lowpowermode0_AlDente_issue603_VERBATIM_with_user_markdown_bold.txt"
    ).read_text()
    doc = snapshots.healthy()
    doc["commands"]["pmset -g"] = {"returncode": 0, "stdout": verbatim, "stderr": ""}
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "ok" and "energy mode automatic" in found.summary
    assert found.details["energy_mode"] == "automatic" and found.details["low_power_mode"] is False


def test_pmset_ps_on_ac_and_on_battery(tmp_path: Path, real_mac: Path) -> None:
    ac = (real_mac / "pmset" / "pmset_g_batt_m1_ac_attached_not_charging_AlDente_issue52.txt").read_text()
    battery = (HOST / "pmset_g_batt_battery_spaceship-prompt_pr640.txt").read_text()
    doc = snapshots.healthy()
    doc["commands"]["pmset -g batt"] = {"returncode": 0, "stdout": ac, "stderr": ""}
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "ok" and "on AC Power (80%)" in found.summary
    doc["commands"]["pmset -g batt"]["stdout"] = battery
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "warn" and "on battery (95%)" in found.summary
    assert found.details["power_source"] == "Battery Power" and found.details["battery_percent"] == 95


def test_sysctl_memory_pressure_critical_warns(tmp_path: Path) -> None:
    # exelban/stats#1010: a Mac under memory pressure reading level 4 (critical) from this sysctl.
    doc = snapshots.with_memory(
        snapshots.healthy(), snapshots.SWAPUSAGE_1G_USED, "kern.memorystatus_vm_pressure_level: 4\n"
    )
    found = _findings(doc, tmp_path)["hygiene"]
    assert found.status.value == "warn" and "memory pressure critical" in found.summary


def test_an_older_snapshot_without_readings_says_not_recorded(tmp_path: Path) -> None:
    doc = snapshots.healthy()
    del doc["readings"]
    found = _findings(doc, tmp_path)
    assert found["machine-state"].status.value == "unknown"
    assert found["machine-state"].summary == "not recorded in this snapshot"
    # pmset -g therm's Apple-silicon notes say nothing, and no reader says more: not known, never "no warning".
    assert "thermal state not known" in found["hygiene"].summary


def test_a_reading_of_the_wrong_shape_is_one_line_exit_2(tmp_path: Path) -> None:
    doc = snapshots.healthy()
    doc["readings"]["values"]["thermal_pressure"] = {"level": 2}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    res = run_cli("doctor", "--from-snapshot", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "readings.values.thermal_pressure: expected a number" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_energy_meter_is_the_device_in_use_s() -> None:
    # An H100 host without nvidia-ml-py: the CUDA meter's reason, never the Mac's.
    doc = snapshots.healthy()
    doc["energy_meter"] = {"name": None, "why": "nvidia-ml-py is not installed (pip install ...)", "device": "cuda"}
    found = {f.name: f for f in diagnose(snapshot_from_json(doc, Path("x"))).findings}["energy-meter"]
    assert found.summary.startswith("none (bench --device cuda)") and found.fix == "pip install 'mpsup[energy-nvidia]'"
    assert "Apple-silicon" not in found.summary


def test_a_live_doctor_reads_this_machine_s_state(tmp_path: Path) -> None:
    res = run_cli("doctor", "--json", "--save-snapshot", str(tmp_path / "s.json"))
    doc = json.loads(res.stdout)
    state = next(f for f in doc["findings"] if f["name"] == "machine-state")
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["readings"]["device"] in ("cpu", "cuda", "mps")
    assert state["details"]["values"] == saved["readings"]["values"]
    assert saved["energy_meter"]["device"] == saved["readings"]["device"]
