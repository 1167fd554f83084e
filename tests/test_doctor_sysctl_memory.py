"""sysctl facts that survive one unknown key, and the memory conditions a bench records before and after: swap in
use and memory pressure. Through snapshot replay (tests/snapshots.py; the fixtures are hand-written, in the format
of public captures, since shared/data/real-mac holds none of these commands)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpsup.host import parsers
from mpsup.host.facts import facts_from_snapshot
from mpsup.host.hygiene import conditions_changed, hygiene_from, noisy_conditions
from mpsup.host.snapshot import COMMANDS, SYSCTL, SYSCTL_TRANSLATED, snapshot_from_json
from tests import snapshots
from tests.conftest import run_cli


def _facts(doc: dict) -> object:
    return facts_from_snapshot(snapshot_from_json(doc, Path("x")))


def test_an_intel_mac_s_unknown_proc_translated_loses_no_other_sysctl_fact() -> None:
    s = snapshots.split_sysctl(snapshots.healthy(), snapshots.SYSCTL_INTEL, snapshots.UNKNOWN_OID)
    f = _facts(s)
    assert f.cpu_brand and f.cpu_brand.startswith("Intel")  # type: ignore[attr-defined]
    assert f.memory_bytes == 16 * 2**30  # type: ignore[attr-defined]
    assert f.arm64_hardware is False and f.mpsup_translated is None  # type: ignore[attr-defined]


def test_the_two_sysctl_queries_are_run_apart() -> None:
    assert "sysctl.proc_translated" not in COMMANDS[SYSCTL][0]
    assert COMMANDS[SYSCTL_TRANSLATED][0] == ["sysctl", "sysctl.proc_translated"]


def test_an_older_snapshot_s_failed_combined_query_still_gives_what_it_printed() -> None:
    s = snapshots.healthy()
    s["commands"][snapshots.SYSCTL_KEY] = {
        "returncode": 1,
        "stdout": snapshots.SYSCTL_INTEL,
        "stderr": "sysctl: unknown oid 'sysctl.proc_translated'\n",
    }
    assert _facts(s).memory_bytes == 16 * 2**30  # type: ignore[attr-defined]


def test_the_split_capture_of_an_apple_silicon_mac_reads_as_before() -> None:
    main = snapshots.SYSCTL_M4.replace("sysctl.proc_translated: 0\n", "")
    split = _facts(snapshots.split_sysctl(snapshots.healthy(), main, snapshots._ok("sysctl.proc_translated: 1\n")))
    assert split.arm64_hardware is True and split.mpsup_translated is True  # type: ignore[attr-defined]
    assert split.memory_bytes == _facts(snapshots.healthy()).memory_bytes  # type: ignore[attr-defined]


def test_swap_and_memory_pressure_are_parsed() -> None:
    swap = parsers.parse_swapusage(snapshots.SWAPUSAGE_1G_USED)
    assert swap == parsers.Swap(total_bytes=2048 << 20, used_bytes=int(1024.25 * 2**20))
    assert parsers.parse_swapusage(snapshots.SWAPUSAGE_NONE) == parsers.Swap(0, 0)
    assert parsers.parse_swapusage("vm.swapusage: total = 2.00G  used = 512.00M  free = 1.50G") == parsers.Swap(
        2 << 30, 512 << 20
    )
    assert parsers.parse_swapusage("vm.swapusage: nonsense") is None
    assert parsers.parse_swapusage("") is None
    assert parsers.memory_pressure(snapshots.PRESSURE_NORMAL) == "normal"
    assert parsers.memory_pressure(snapshots.PRESSURE_WARN) == "warn"
    assert parsers.memory_pressure("kern.memorystatus_vm_pressure_level: 4") == "critical"
    assert parsers.memory_pressure("kern.memorystatus_vm_pressure_level: 7") == "level 7"
    assert parsers.memory_pressure("kern.memorystatus_vm_pressure_level: x") is None


def test_hygiene_records_swap_and_pressure_and_says_when_the_run_swapped() -> None:
    before_doc = snapshots.with_memory(snapshots.healthy(), snapshots.SWAPUSAGE_NONE, snapshots.PRESSURE_NORMAL)
    after_doc = snapshots.with_memory(snapshots.healthy(), snapshots.SWAPUSAGE_1G_USED, snapshots.PRESSURE_WARN)
    before = hygiene_from(snapshot_from_json(before_doc, Path("b")).output)
    after = hygiene_from(snapshot_from_json(after_doc, Path("a")).output)
    assert before["swap_used_bytes"] == 0 and before["memory_pressure"] == "normal"
    assert after["swap_used_bytes"] == int(1024.25 * 2**20) and after["swap_total_bytes"] == 2048 << 20
    assert noisy_conditions(before) == [] and noisy_conditions(after) == ["memory pressure warn"]
    changed = conditions_changed(before, after)
    assert "memory pressure changed from normal to warn" in changed
    assert any(c.startswith("swap use grew by 1.0 GiB") for c in changed)


def test_hygiene_without_the_memory_commands_says_not_known() -> None:
    h = hygiene_from(snapshot_from_json(snapshots.healthy(), Path("x")).output)
    assert h["swap_used_bytes"] is None and h["memory_pressure"] is None
    assert h["on_battery"] is False


def test_the_doctor_warns_of_memory_pressure_and_says_the_swap_in_use() -> None:
    from mpsup.doctor.checks import Status
    from mpsup.doctor.run import diagnose

    calm = snapshots.with_memory(snapshots.healthy(), snapshots.SWAPUSAGE_1G_USED, snapshots.PRESSURE_NORMAL)
    f = {x.name: x for x in diagnose(snapshot_from_json(calm, Path("x"))).findings}["hygiene"]
    assert f.status is Status.OK and "memory pressure normal" in f.summary and "1.0 GiB swap in use" in f.summary
    tight = snapshots.with_memory(snapshots.healthy(), snapshots.SWAPUSAGE_1G_USED, snapshots.PRESSURE_WARN)
    f = {x.name: x for x in diagnose(snapshot_from_json(tight, Path("x"))).findings}["hygiene"]
    assert f.status is Status.WARN and "memory pressure warn" in f.summary


HUGE = "9" * 400
OVER_INT_LIMIT = "9" * 5000


def test_numbers_too_long_to_be_facts_read_as_unknown() -> None:
    assert parsers.parse_swapusage(f"vm.swapusage: total = {HUGE}.00M  used = 1.00M  free = 0.00M") is None
    assert parsers.parse_swapusage(f"vm.swapusage: total = 2.00M  used = 1.{HUGE}M  free = 0.00M") == parsers.Swap(
        2 << 20, int(1.999999 * 2**20)
    )
    assert parsers.memory_pressure(f"kern.memorystatus_vm_pressure_level: {OVER_INT_LIMIT}") is None
    assert parsers.sysctl_int({"hw.memsize": HUGE}, "hw.memsize") is None
    assert parsers.sysctl_int({"x": "-3"}, "x") == -3
    assert parsers.parse_pmset_therm(f"CPU_Speed_Limit = {OVER_INT_LIMIT}").cpu_speed_limit is None
    gpu = parsers.parse_system_profiler_text(
        f"Chipset Model: x\n  Type: GPU\n  Total Number of Cores: {OVER_INT_LIMIT}"
    )
    assert gpu.gpu_cores is None
    assert parsers._memory_gb("1.2.3 GB") is None and parsers._memory_gb(f"{HUGE} GB") is None
    assert parsers._memory_gb("16 GB") == 16.0


@pytest.mark.parametrize(
    "swap, pressure",
    [
        (f"vm.swapusage: total = {HUGE}.00M  used = 1.00M  free = 0.00M", "kern.memorystatus_vm_pressure_level: 1"),
        (snapshots.SWAPUSAGE_NONE, f"kern.memorystatus_vm_pressure_level: {OVER_INT_LIMIT}"),
    ],
)
def test_doctor_from_a_snapshot_with_endless_numbers_ends_without_a_traceback(
    tmp_path: Path, swap: str, pressure: str
) -> None:
    doc = snapshots.with_memory(snapshots.healthy(), swap, pressure)
    doc["commands"]["sw_vers"] = snapshots._ok(f"ProductName: macOS\nProductVersion: 15.{OVER_INT_LIMIT}\n")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    res = run_cli("doctor", "--from-snapshot", str(path), "--json")
    assert "Traceback" not in res.stderr and "Error" not in res.stderr, res.stderr[-2000:]
    assert res.returncode in (0, 1)
    assert json.loads(res.stdout)["findings"]
