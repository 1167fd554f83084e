"""The meters against fakes built from public dumps (sources cited in tests/energy_fakes.py): IOReport rows in mixed
units and per-chip names, a row reading zero, a 2 s batch cadence, zeus-apple-silicon's API (checked against its real
1.1.0 macOS wheel, as tests/test_api_conformance.py checks torch), NVML unsupported and under MIG, RAPL with
wraparound and unreadable files. No Mac and no RAPL machine ran these: the fakes stand in for both."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mpsup.energy.apple import ZEUS_FIELDS, AppleMeter, zeus_rows
from mpsup.energy.apple_rows import classify
from mpsup.energy.nvml import nvml_index, open_nvml
from mpsup.energy.probe import calibrate
from mpsup.energy.rapl import open_rapl
from tests.energy_fakes import (
    M1_ULTRA_ROWS,
    M5_MAX_ROWS,
    FakeAppleEnergyMetrics,
    FakeAppleEnergyMonitor,
    FakeClock,
    Samples,
    StepMeter,
)

API = json.loads((Path(__file__).parent / "fixtures" / "energy" / "zeus_apple_silicon_api.json").read_text())


def test_m1_ultra_rows_count_each_die_once_in_its_own_unit() -> None:
    got = classify(M1_ULTRA_ROWS).joules
    # Both dies' CPU totals, never the clusters inside them; GPU Energy (nJ), never GPU0_0 beside it.
    assert got["cpu"] == pytest.approx((1200 + 800) / 1000)
    assert got["gpu"] == pytest.approx(4.0)
    assert got["ane"] == pytest.approx(0.030) and got["dram"] == pytest.approx(1.0)
    # Substring matching would have counted every row naming CPU, GPU or DRAM: far above the totals.
    by_substring = sum(v * {"mJ": 1e-3, "uJ": 1e-6, "nJ": 1e-9}[u] for n, (v, u) in M1_ULTRA_ROWS.items() if "CPU" in n)
    assert by_substring > got["cpu"]


def test_m5_names_and_a_row_without_a_gpu_total() -> None:
    got = classify(M5_MAX_ROWS).joules
    assert got == pytest.approx({"cpu": 3.0, "dram": 0.9, "gpu": 2.5, "ane": 0.0})
    no_total = {k: v for k, v in M1_ULTRA_ROWS.items() if k != "GPU Energy"}
    assert classify(no_total).joules["gpu"] == pytest.approx(4.0)  # the per-die row stands in only then


def test_units_from_nanojoules_to_kilojoules_and_an_unknown_one_left_out() -> None:
    rows = {"CPU Energy": (100, "J"), "GPU Energy": (100, "kJ"), "DRAM": (5_000, "uJ"), "ANE": (3, "mW")}
    got = classify(rows)
    assert got.joules == pytest.approx({"cpu": 100.0, "gpu": 100_000.0, "dram": 0.005})
    assert got.skipped == ("ANE",)


def test_the_apple_meter_reads_cumulative_joules_and_a_zero_row_stays_zero() -> None:
    # The meter reads once to learn its parts, then each read takes the next sample.
    samples = Samples([M5_MAX_ROWS, M5_MAX_ROWS, {**M5_MAX_ROWS, "GPU Energy": (3_000_000_000, "nJ")}])
    meter = AppleMeter(samples)
    assert meter.info.total_parts == ("cpu", "gpu", "dram", "ane") and meter.info.stamped == ("gpu",)
    first, second = meter.read(), meter.read()
    assert second.joules["gpu"] - first.joules["gpu"] == pytest.approx(0.5)
    assert second.joules["ane"] == first.joules["ane"] == 0.0


def test_the_fake_zeus_monitor_has_the_real_wheels_api() -> None:
    assert API["exports"] == ["AppleEnergyMonitor", "AppleEnergyMetrics"]
    for method in API["methods"]:
        assert callable(getattr(FakeAppleEnergyMonitor([]), method))
    assert {f.name for f in dataclasses.fields(FakeAppleEnergyMetrics)} == set(API["metric_fields"])
    assert set(ZEUS_FIELDS) <= set(API["metric_fields"])


def test_zeus_figures_come_through_as_rows_in_mj() -> None:
    monitor = FakeAppleEnergyMonitor(
        [FakeAppleEnergyMetrics(cpu_total_mj=1000, gpu_mj=2000), FakeAppleEnergyMetrics(cpu_total_mj=1500, gpu_mj=2600)]
    )
    meter = AppleMeter(zeus_rows(monitor))
    assert meter.info.parts == ("cpu", "gpu")  # no DRAM or ANE field on this chip: not parts
    r = meter.read()
    assert r.joules == pytest.approx({"cpu": 1.5, "gpu": 2.6})


def test_a_probe_finds_a_2_s_batch_and_a_100_ms_counter() -> None:
    clock = FakeClock()
    meter = StepMeter(clock, {"gpu": 100.0, "cpu": 10.0, "ane": 5.0}, {"gpu": 0.1, "cpu": 2.0, "ane": None})
    cal = calibrate(meter, 5.0, clock=clock, sleep=clock.sleep)
    assert cal.cadence_s["gpu"] == pytest.approx(0.1, rel=0.15)
    assert cal.cadence_s["cpu"] == pytest.approx(2.0, rel=0.05)
    assert cal.cadence_s["ane"] is None and cal.idle_w["ane"] == 0.0
    assert cal.stamped == ("gpu",)  # cpu moves in batches; ane never moved and the meter never called it stamped
    assert cal.read_s == pytest.approx(0.004)
    assert cal.idle_w["gpu"] == pytest.approx(100.0, rel=0.05)


def test_a_stamped_row_resting_at_zero_stays_stamped() -> None:
    clock = FakeClock()
    meter = StepMeter(clock, {"gpu": 0.0}, {"gpu": None})
    assert calibrate(meter, 1.0, clock=clock, sleep=clock.sleep).stamped == ("gpu",)


class _Nvml:
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, *, mig: int = 0, supported: bool = True) -> None:
        self.mig, self.supported, self.shut = mig, supported, 0
        self.mj = 1_000_000

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        self.shut += 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return SimpleNamespace(index=i)

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        return self.mig, self.mig

    def nvmlDeviceGetName(self, h: Any) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        if not self.supported:
            raise RuntimeError("Not Supported")
        self.mj += 1234
        return self.mj


def test_nvml_reads_millijoules_and_says_why_not() -> None:
    choice = open_nvml({}, _Nvml())
    assert choice.meter is not None and choice.meter.info.main == "gpu"
    a, b = choice.meter.read(), choice.meter.read()
    assert b.joules["gpu"] - a.joules["gpu"] == pytest.approx(1.234)
    mig = _Nvml(mig=1)
    got = open_nvml({}, mig)
    assert got.meter is None and "MIG" in str(got.why) and mig.shut == 1
    assert "no total-energy counter" in str(open_nvml({}, _Nvml(supported=False)).why)
    assert nvml_index({"CUDA_VISIBLE_DEVICES": "3,1"}) == 3 and nvml_index({"CUDA_VISIBLE_DEVICES": "GPU-ab12"}) is None
    assert "UUID" in str(open_nvml({"CUDA_VISIBLE_DEVICES": "MIG-x"}, _Nvml()).why)


def _zone(path: Path, name: str, uj: int, top: int) -> None:
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text(f"{top}\n")


def test_rapl_counts_packages_and_dram_not_cores_or_psys_and_survives_a_wrap(tmp_path: Path) -> None:
    pkg = tmp_path / "intel-rapl:0"
    _zone(pkg, "package-0", 262_000_000_000, 262_143_328_850)
    _zone(pkg / "intel-rapl:0:0", "core", 5_000_000, 262_143_328_850)
    _zone(pkg / "intel-rapl:0:1", "dram", 7_000_000, 65_712_999_613)
    _zone(tmp_path / "intel-rapl:1", "psys", 9_000_000, 262_143_328_850)
    choice = open_rapl(tmp_path)
    meter = choice.meter
    assert meter is not None and meter.info.total_parts == ("package", "dram") and meter.info.parts[1] == "cpu"
    first = meter.read()
    (pkg / "energy_uj").write_text("1000000\n")  # wrapped: 143,328,850 uJ to the top, then 1,000,000 more
    (pkg / "intel-rapl:0:0" / "energy_uj").write_text("6000000\n")
    second = meter.read()
    assert second.joules["package"] - first.joules["package"] == pytest.approx((143_328_850 + 1_000_000) / 1e6)
    assert second.joules["cpu"] - first.joules["cpu"] == pytest.approx(1.0)


def test_rapl_unreadable_or_absent_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "absent" in str(open_rapl(tmp_path / "nothing").why)
    _zone(tmp_path / "intel-rapl:0", "package-0", 1, 10)
    real = Path.read_text

    def root_only(self: Path, *a: Any, **kw: Any) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", root_only)
    assert "root only" in str(open_rapl(tmp_path).why)
