from __future__ import annotations

from pathlib import Path

import pytest

from mpsup.host import parsers
from tests import snapshots


def test_sw_vers_own_fixture():
    v = parsers.parse_sw_vers(snapshots.SW_VERS_15)
    assert (v.product_name, v.version, v.build) == ("macOS", "15.1", "24B83")


@pytest.mark.parametrize(
    ("name", "version", "build"),
    [
        ("sw_vers_m1_macos12.7.6__pytorch_issue139425.txt", "12.7.6", "21H1320"),
        ("mac_specs_sample_output_m1_air_macos14.2.1__delose_git-bash-scripts_README.txt", "14.2.1", "23C71"),
        ("sw_vers_uname_brand_m1_macos26.3_beta_25D5087f__celeste-ios_TVOS_PORT_PLAN.txt", "26.3", "25D5087f"),
    ],
)
def test_sw_vers_real(real_mac: Path, name: str, version: str, build: str):
    v = parsers.parse_sw_vers((real_mac / "sw_vers" / name).read_text())
    assert v.version == version
    assert v.build == build


def test_every_real_plist(real_mac: Path):
    files = sorted((real_mac / "plist").glob("*.plist"))
    assert files
    for f in files:
        v = parsers.parse_system_version_plist(f.read_text())
        expected_version = f.name.split("MacOSX")[1].split(".sdk")[0]
        assert v.version == expected_version, f
        assert v.build == f.stem.rsplit("_", 1)[1], f


def test_every_real_sysctl(real_mac: Path):
    files = sorted((real_mac / "sysctl").glob("sysctl_*.txt"))
    assert len(files) >= 5
    for f in files:
        values = parsers.parse_sysctl(f.read_text())
        assert values, f
        assert values.get("machdep.cpu.brand_string", "").startswith("Apple"), f
    m4 = parsers.parse_sysctl((real_mac / "sysctl" / "sysctl_hw_machdep_darwin-sequoia-m4max.txt").read_text())
    assert parsers.sysctl_int(m4, "hw.memsize") == 64 * 2**30
    assert parsers.sysctl_int(m4, "hw.optional.arm64") == 1
    assert m4["machdep.cpu.brand_string"] == "Apple M4 Max"


def test_sysctl_continuation_lines():
    values = parsers.parse_sysctl(snapshots.SYSCTL_M4)
    assert values["kern.version"].endswith("RELEASE_ARM64_T6041")
    assert values["sysctl.proc_translated"] == "0"


def test_pmset_batt_real(real_mac: Path):
    b = parsers.parse_pmset_batt(
        (real_mac / "pmset" / "pmset_g_batt_m1_ac_attached_not_charging_AlDente_issue52.txt").read_text()
    )
    assert b.source == "AC Power"
    assert b.on_battery is False
    assert b.percent == 80
    assert b.state == "AC attached; not charging"


def test_pmset_batt_on_battery():
    b = parsers.parse_pmset_batt(snapshots.PMSET_BATT_BATTERY)
    assert b.on_battery is True and b.percent == 63 and b.state == "discharging"


def test_pmset_settings_real(real_mac: Path):
    verbatim = (
        real_mac / "pmset" / "pmset_g_apple_silicon_lowpowermode0_AlDente_issue603_VERBATIM_with_user_markdown_bold.txt"
    )
    s = parsers.parse_pmset_settings(verbatim.read_text())
    assert s["lowpowermode"] == "0"
    assert parsers.low_power_mode(s) is False
    custom = real_mac / "pmset" / "pmset_g_custom_m1max_powermode_alfred_lpm_issue6_TRUNCATED.txt"
    assert parsers.low_power_mode(parsers.parse_pmset_settings(custom.read_text())) is False
    assert parsers.low_power_mode(parsers.parse_pmset_settings(" lowpowermode 1\n")) is True


def test_pmset_therm_real(real_mac: Path):
    quiet = parsers.parse_pmset_therm(
        (real_mac / "pmset" / "pmset_g_therm_m1pro_macos12.1_stats_issue749.txt").read_text()
    )
    # Apple silicon's three "No ... has been recorded" notes, printed under any load (exelban/stats#749): they say
    # nothing, so the thermal state is not known from them, never "no warning".
    assert not quiet.known and quiet.thermal_warning is None and quiet.performance_warning is None
    intel = parsers.parse_pmset_therm(
        (
            real_mac
            / "pmset"
            / "pmset_g_therm_12cpu_mac_with_cpu_power_notify_node_exporter_issue2031_probably_intel.txt"
        ).read_text()
    )
    assert intel.cpu_speed_limit == 100 and intel.known
    hot = parsers.parse_pmset_therm("Thermal warning level set to 2.\nCPU_Speed_Limit = 63\n")
    assert hot.thermal_warning and hot.cpu_speed_limit == 63


def test_system_profiler_text_real(real_mac: Path):
    sp = real_mac / "system_profiler"
    m3 = parsers.parse_system_profiler((sp / "SPDisplaysDataType_text_m3_macbookpro_smctemp_issue26.txt").read_text())
    assert (m3.chip, m3.gpu_cores, m3.metal) == ("Apple M3", 10, "Metal 3")
    air = parsers.parse_system_profiler(
        (sp / "SPHardwareDataType_text_macbookair_m1_xcode-hardware-performance_pr142.txt").read_text()
    )
    assert (air.chip, air.memory_gb, air.model) == ("Apple M1", 8.0, "MacBook Air")
    full = parsers.parse_system_profiler(
        (sp / "system_profiler_full_text_macbookair_m1_macos11.2.3_glpi.txt").read_text()
    )
    assert full.chip == "Apple M1" and full.memory_gb == 16.0
    mini = parsers.parse_system_profiler(
        (sp / "SPHardwareDataType_detailLevel_mini_m1pro_and_m2pro_cpufetch_issue183.txt").read_text()
    )
    assert mini.chip == "Apple M1 Pro"


def test_system_profiler_json_truncated_real_is_not_known(real_mac: Path):
    sp = real_mac / "system_profiler"
    truncated = parsers.parse_system_profiler(
        (sp / "SPDisplaysDataType_json_m1_macos11_kHW_AppleM1Item_stats_issue394_TRUNCATED.json.txt").read_text()
    )
    assert truncated == parsers.GpuInfo(None, None, None, None, None)
    mem = parsers.parse_system_profiler((sp / "SPMemoryDataType_json_m1_8GB_stats_issue394.json").read_text())
    assert mem.chip is None


def test_system_profiler_json_own():
    g = parsers.parse_system_profiler(snapshots.SYSTEM_PROFILER_JSON)
    assert (g.chip, g.gpu_cores, g.memory_gb, g.model) == ("Apple M4 Max", 40, 64.0, "Mac Studio")
    assert g.metal == "Metal 3"


def test_uname_real(real_mac: Path):
    text = (
        real_mac / "sw_vers" / "sw_vers_uname_brand_m1_macos26.3_beta_25D5087f__celeste-ios_TVOS_PORT_PLAN.txt"
    ).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Darwin "))
    u = parsers.parse_uname_a(line)
    assert (u.system, u.release, u.machine) == ("Darwin", "25.3.0", "arm64")
    assert parsers.parse_uname_a("") == parsers.Uname(None, None, None)
