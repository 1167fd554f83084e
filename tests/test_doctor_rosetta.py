"""Issue 15 item 9: Rosetta 2 is judged for the target Python, read inside it, not for mpsup's process."""

from __future__ import annotations

import ast
import ctypes
import errno
import importlib.util
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

from mpsup.doctor.checks import Status
from mpsup.doctor.run import diagnose
from mpsup.host.snapshot import snapshot_from_json
from mpsup.probe import PROBE_SCRIPT
from tests import snapshots
from tests.conftest import run_cli


def _probe_module() -> Any:
    spec = importlib.util.spec_from_file_location("interpreter_probe_under_test", PROBE_SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _findings(doc: dict[str, Any]) -> dict[str, Any]:
    return {f.name: f for f in diagnose(snapshot_from_json(doc, Path("snap.json"))).findings}


# sysctlbyname(name, oldp, oldlenp, newp, newlen) as a real C function pointer, so the probe's
# ctypes call (byref arguments, the size in and out) runs exactly as it would against libSystem.
_SYSCTLBYNAME = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t
)


class _FakeLibSystem:
    def __init__(self, value: int | None = None, error: int | None = None) -> None:
        self.names: list[bytes] = []

        def sysctlbyname(name: bytes, oldp: int, oldlenp: int, newp: int | None, newlen: int) -> int:
            self.names.append(name)
            if error is not None:
                ctypes.set_errno(error)
                return -1
            assert ctypes.c_size_t.from_address(oldlenp).value == ctypes.sizeof(ctypes.c_int)
            ctypes.c_int.from_address(oldp).value = value or 0
            return 0

        self._keep = sysctlbyname
        self.sysctlbyname = _SYSCTLBYNAME(sysctlbyname)


@pytest.mark.parametrize(
    ("lib", "expected"),
    [
        (_FakeLibSystem(1), True),
        (_FakeLibSystem(0), False),
        (_FakeLibSystem(error=errno.ENOENT), False),  # an Intel Mac: no such sysctl, nothing is translated
        (_FakeLibSystem(error=errno.EPERM), None),
    ],
)
def test_probe_reads_proc_translated_of_its_own_process(lib: _FakeLibSystem, expected: bool | None):
    probe = _probe_module()
    assert probe._proc_translated("darwin", lambda: lib) is expected
    assert lib.names == [b"sysctl.proc_translated"]


def test_probe_reads_nothing_off_darwin_or_without_libsystem():
    probe = _probe_module()
    lib = _FakeLibSystem(1)
    assert probe._proc_translated("linux", lambda: lib) is None
    assert lib.names == []
    assert probe._proc_translated("darwin", lambda: None) is None


def test_probe_stays_parseable_by_old_pythons():
    # It runs in whatever Python the user names, including ones older than mpsup's own floor.
    ast.parse(PROBE_SCRIPT.read_text(), feature_version=(3, 7))


def test_probe_records_why_mps_is_unavailable(monkeypatch: pytest.MonkeyPatch):
    """A stand-in torch whose MPS is built but unavailable, warning and raising as torch does."""
    said = snapshots.REASON_NO_METAL_GPU_215

    def is_available() -> bool:
        warnings.warn("MPS: no Metal device", UserWarning, stacklevel=1)
        return False

    def empty(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(said)

    fake = types.SimpleNamespace(
        __version__="2.15.0",
        backends=types.SimpleNamespace(mps=types.SimpleNamespace(is_built=lambda: True, is_available=is_available)),
        cuda=types.SimpleNamespace(is_available=lambda: False),
        mps=types.SimpleNamespace(),
        empty=empty,
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    facts, error = _probe_module()._torch_facts()
    assert error is None
    assert facts["mps_built"] is True and facts["mps_available"] is False
    assert facts["mps_unavailable_reason"] == f"MPS: no Metal device | {said}"


def _target(s: dict[str, Any], *, machine: str, translated: bool | None) -> dict[str, Any]:
    s["interpreter"]["machine"] = machine
    s["interpreter"]["proc_translated"] = translated
    return s


def _mpsup_sysctl(s: dict[str, Any], text: str | None) -> dict[str, Any]:
    if text is None:
        s["commands"][snapshots.SYSCTL_KEY] = {"returncode": 1, "stdout": "", "stderr": "sysctl: not run"}
    else:
        s["commands"][snapshots.SYSCTL_KEY] = {"returncode": 0, "stdout": text, "stderr": ""}
    return s


def test_native_target_under_a_rosetta_mpsup_is_native():
    s = _mpsup_sysctl(snapshots.healthy(), snapshots.SYSCTL_M4.replace("proc_translated: 0", "proc_translated: 1"))
    f = _findings(_target(s, machine="arm64", translated=False))
    assert f["python-arch"].status is Status.OK
    assert "mpsup itself runs under Rosetta 2" in f["python-arch"].summary
    assert f["torch-mps"].status is Status.OK and f["torch-wheels"].status is Status.OK


def test_rosetta_target_under_a_native_mpsup_is_rosetta():
    # mpsup's sysctl said 0 for itself and gave no hw.optional.arm64: only the probe knows.
    s = _mpsup_sysctl(snapshots.healthy(), "sysctl.proc_translated: 0\nkern.osproductversion: 15.1\n")
    s["interpreter"]["torch"] = {"version": "2.2.2", "mps_built": False, "mps_available": False}
    f = _findings(_target(s, machine="x86_64", translated=True))
    assert f["python-arch"].status is Status.FAIL
    assert "under Rosetta 2" in f["python-arch"].summary
    assert f["torch-wheels"].status is Status.FAIL
    assert f["apple-silicon"].status is Status.OK  # a translated process proves Apple silicon


def test_rosetta_mpsup_with_x86_uname_still_sees_apple_silicon():
    s = _mpsup_sysctl(snapshots.healthy(), "sysctl.proc_translated: 1\n")
    s["commands"]["uname -a"]["stdout"] = snapshots.UNAME_ARM.replace(" arm64\n", " x86_64\n")
    f = _findings(_target(s, machine="arm64", translated=False))
    assert f["apple-silicon"].status is Status.OK
    assert f["python-arch"].status is Status.OK


def test_old_snapshot_without_the_probe_field_is_still_read():
    old = snapshots.rosetta()
    assert "proc_translated" not in old["interpreter"]
    f = _findings(old)
    assert f["python-arch"].status is Status.FAIL and "Rosetta 2" in f["python-arch"].summary
    healthy = snapshots.healthy()
    assert "proc_translated" not in healthy["interpreter"]
    assert all(x.status is Status.OK for x in _findings(healthy).values())


def test_real_issue_48145_m1_anaconda_x86_64(real_mac: Path):
    """An x86_64 Anaconda on an M1: the report alone cannot tell Rosetta; the probe's flag can."""
    text = (
        real_mac / "collect_env" / "pytorch_issue_48145_m1_anaconda_x86_64_rosetta_macosx11.0_TRUNCATED.txt"
    ).read_text()
    s = snapshots.from_collect_env(text, mps_built=False, mps_available=False)
    f = _findings(s)
    assert f["python-arch"].status is Status.FAIL and "Rosetta" not in f["python-arch"].summary
    s["interpreter"]["proc_translated"] = True
    f = _findings(s)
    assert f["python-arch"].status is Status.FAIL and "x86_64 Python under Rosetta 2" in f["python-arch"].summary
    assert f["torch-mps"].status is Status.FAIL and "x86_64 build" in f["torch-mps"].summary
    assert f["python"].status is Status.FAIL  # Python 3.8


def test_real_issue_121067_intel_mac_is_not_called_rosetta(real_mac: Path):
    text = (
        real_mac / "collect_env" / "pytorch_issue_121067_INTEL_macos14.5_x86_64_i9_torch2.2.2_control.txt"
    ).read_text()
    s = snapshots.from_collect_env(text, mps_built=False, mps_available=False)
    s["interpreter"]["proc_translated"] = False  # what sysctlbyname's ENOENT gives on Intel
    f = _findings(s)
    assert f["apple-silicon"].status is Status.FAIL and "Intel Mac" in f["apple-silicon"].summary
    assert f["python-arch"].status is Status.FAIL
    assert "on an Intel Mac" in f["python-arch"].summary and "Rosetta" not in f["python-arch"].summary
    assert "arm64 Python" not in (f["python-arch"].fix or "") + (f["torch-mps"].fix or "")  # impossible on Intel


def test_snapshot_with_a_wrong_typed_flag_is_one_line(tmp_path: Path):
    s = snapshots.healthy()
    s["interpreter"]["proc_translated"] = "yes"
    p = tmp_path / "snap.json"
    import json

    p.write_text(json.dumps(s))
    res = run_cli("doctor", "--from-snapshot", str(p))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"mpsup: {p}: interpreter.proc_translated has the wrong type (str)"]


@pytest.mark.mac
@pytest.mark.skipif(sys.platform != "darwin", reason="reads the real sysctl.proc_translated; needs macOS")
def test_probe_reads_the_real_flag_on_a_mac():
    import platform

    translated = _probe_module()._proc_translated()
    assert translated in (True, False)
    if platform.machine() == "arm64":  # an arm64 process is never translated
        assert translated is False
