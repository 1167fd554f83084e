"""Issue 15 items 7 and 8: each build's own macOS floor for MPS, and the causes torch names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mpsup.doctor import wheels
from mpsup.doctor.checks import Status
from mpsup.doctor.run import diagnose
from mpsup.host.facts import _version_tuple
from mpsup.host.snapshot import snapshot_from_json
from tests import snapshots


def _findings(doc: dict[str, Any]) -> dict[str, Any]:
    return {f.name: f for f in diagnose(snapshot_from_json(doc, Path("snap.json"))).findings}


@pytest.mark.parametrize(
    ("torch_version", "floor"),
    [
        ("2.15.0", (15, 0)),
        ("2.14.1", (14, 0)),
        ("2.9.0", (14, 0)),
        ("2.10.0.dev20251008", (14, 0)),
        ("2.8.0", (13, 0)),
        ("2.6.0", (13, 0)),
        ("2.5.1", (12, 3)),
        ("1.13.0.dev20220525", (12, 3)),
        ("", None),
    ],
)
def test_mps_floor_per_build(torch_version: str, floor: tuple[int, int] | None):
    assert wheels.mps_macos_floor(_version_tuple(torch_version)) == floor


def test_wheel_floor_and_last_release_with_mps():
    assert wheels.wheel_macos_floor((2, 15, 0)) == (14, 0)
    assert wheels.wheel_macos_floor((2, 11, 0)) == (11, 0)
    assert wheels.last_torch_with_mps_on((14, 5)) == (2, 14)
    assert wheels.last_torch_with_mps_on((13, 7, 4)) == (2, 8)
    assert wheels.last_torch_with_mps_on((15, 1)) is None


def test_macos13_with_torch28_works_today_but_not_for_the_upgrade():
    s = snapshots.with_macos(snapshots.healthy(), "13.7.4", "22H420")
    s["interpreter"]["torch"]["version"] = "2.8.0"
    f = _findings(s)
    assert f["torch-mps"].status is Status.OK
    assert f["torch-mps"].details["mps_macos_floor"] == "13.0"
    assert f["macos-version"].status is Status.FAIL
    assert "torch 2.15 needs macOS 15.0" in f["macos-version"].summary
    assert "does not install here" in f["macos-version"].summary  # 2.12+ wheels are macosx_14_0


def test_torch28_unavailable_on_macos13_is_not_blamed_on_macos():
    f = _findings(snapshots.mps_unavailable(snapshots.with_macos(snapshots.healthy(), "13.7.4", "22H420"), "2.8.0"))
    assert f["torch-mps"].status is Status.FAIL
    assert "unknown cause" in f["torch-mps"].summary
    assert "update macOS" not in (f["torch-mps"].fix or "")


def test_torch215_on_macos14_says_the_wheel_installs_where_mps_cannot_run():
    f = _findings(snapshots.macos14())
    summary = f["torch-mps"].summary
    assert f["torch-mps"].status is Status.FAIL
    assert (
        "torch 2.15's MPS needs macOS 15.0; this Mac runs 14.5; its wheel is tagged for macOS 14.0 and later, so pip installs it here anyway"
        in summary
    )
    assert "torch<2.15" in f["torch-mps"].fix and "update macOS to 15.0" in f["torch-mps"].fix
    assert "although its wheel installs on macOS 14.0" in f["macos-version"].summary


def test_torch214_on_macos14_today_ready_upgrade_not():
    s = snapshots.with_macos(snapshots.healthy(), "14.5", "23F79")
    s["interpreter"]["torch"]["version"] = "2.14.0"
    f = _findings(s)
    assert f["torch-mps"].status is Status.OK
    assert f["macos-version"].status is Status.FAIL


@pytest.mark.parametrize(
    "reason",
    [
        snapshots.REASON_NO_METAL_GPU_215,
        "MPS backend is unavailable: no supported Metal GPU was found",
        "... virtual machine, sandbox or container",
    ],
)
def test_no_metal_gpu_cause_is_recognised(reason: str):
    f = _findings(snapshots.mps_unavailable(snapshots.healthy(), "2.15.0", reason))
    assert f["torch-mps"].status is Status.FAIL
    assert "unknown cause" not in f["torch-mps"].summary
    assert "virtual machine, sandbox or container" in f["torch-mps"].summary
    assert "outside any virtual machine, sandbox or container" in f["torch-mps"].fix


def test_floor_message_on_a_macos_that_meets_it_points_at_the_missing_gpu():
    # 2.9-2.14 print "supported on macOS 14.0+" on macOS 15 and 26 when the process has no Metal device.
    f = _findings(snapshots.mps_unavailable(snapshots.healthy(), "2.13.0", snapshots.REASON_FLOOR_214))
    assert "sees no Metal GPU" in f["torch-mps"].summary
    assert "outside any virtual machine" in f["torch-mps"].fix


def test_2_15_floor_message_on_macos14_is_the_floor():
    s = snapshots.mps_unavailable(
        snapshots.with_macos(snapshots.healthy(), "14.5", "23F79"), "2.15.0", snapshots.REASON_FLOOR_215
    )
    assert "torch 2.15's MPS needs macOS 15.0; this Mac runs 14.5" in _findings(s)["torch-mps"].summary


def test_unknown_cause_quotes_what_torch_said():
    f = _findings(snapshots.mps_unavailable(snapshots.healthy(), "2.15.0", "Metal device lost"))
    assert "unknown cause; torch says: Metal device lost" in f["torch-mps"].summary
    assert "torch.ones(1, device='mps')" in f["torch-mps"].fix


def test_real_issue_164943_macos13_with_a_2_10_nightly(real_mac: Path):
    """M2 Max on macOS 13.7.4 with 2.10.0.dev20251008: torch's message said 13.0+, the build needs 14.0."""
    env = (real_mac / "collect_env" / "pytorch_issue_164943_macos13.7.4_arm64_m2max_mps_unavailable.txt").read_text()
    context = (real_mac / "collect_env" / "pytorch_issue_164943_error_context.txt").read_text()
    said = next(ln for ln in context.splitlines() if ln.startswith("RuntimeError: ")).removeprefix("RuntimeError: ")
    assert "13.0+" in said
    f = _findings(snapshots.from_collect_env(env, mps_built=True, mps_available=False, reason=said))
    assert f["apple-silicon"].status is Status.OK and f["python-arch"].status is Status.OK
    assert f["torch-mps"].status is Status.FAIL
    assert "torch 2.10's MPS needs macOS 14.0; this Mac runs 13.7.4" in f["torch-mps"].summary
    assert "torch<2.9" in f["torch-mps"].fix


def test_real_issue_78343_macos12_2_before_mps_existed(real_mac: Path):
    env = (real_mac / "collect_env" / "pytorch_issue_78343_macos12.2.1_arm64_mps_built_not_available.txt").read_text()
    repl = (real_mac / "collect_env" / "pytorch_issue_78343_repl_context.txt").read_text()
    built = "built? True" in repl
    available = "available? True" in repl
    f = _findings(snapshots.from_collect_env(env, mps_built=built, mps_available=available))
    assert f["apple-silicon"].status is Status.OK  # this report names no CPU; its arm64 Python proves Apple silicon
    assert f["torch-mps"].status is Status.FAIL
    assert "needs macOS 12.3; this Mac runs 12.2.1" in f["torch-mps"].summary
    assert f["torch-mps"].fix == "update macOS to 12.3 or later"
    assert f["python"].status is Status.FAIL  # Python 3.9
