"""Snapshot documents for doctor tests, written by hand in the format of real macOS output."""

from __future__ import annotations

import copy
from typing import Any

SW_VERS_15 = "ProductName:\t\tmacOS\nProductVersion:\t\t15.1\nBuildVersion:\t\t24B83\n"
UNAME_ARM = (
    "Darwin studio.local 24.1.0 Darwin Kernel Version 24.1.0: Thu Oct 10 21:06:57 PDT 2024; "
    "root:xnu-11215.41.3~3/RELEASE_ARM64_T6041 arm64\n"
)
SYSCTL_M4 = """hw.ncpu: 16
hw.memsize: 68719476736
hw.optional.arm64: 1
hw.perflevel0.name: Performance
machdep.cpu.brand_string: Apple M4 Max
kern.ostype: Darwin
kern.osrelease: 24.1.0
kern.osproductversion: 15.1
kern.osversion: 24B83
kern.version: Darwin Kernel Version 24.1.0: Thu Oct 10 21:06:57 PDT 2024;
root:xnu-11215.41.3~3/RELEASE_ARM64_T6041
sysctl.proc_translated: 0
"""
PMSET_G = "System-wide power settings:\nCurrently in use:\n standby              1\n lowpowermode         0\n sleep                1\n"
PMSET_BATT_AC = (
    "Now drawing from 'AC Power'\n -InternalBattery-0 (id=1234)\t100%; charged; 0:00 remaining present: true\n"
)
PMSET_BATT_BATTERY = (
    "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1234)\t63%; discharging; 4:10 remaining present: true\n"
)
PMSET_THERM_OK = (
    "Note: No thermal warning level has been recorded\n"
    "Note: No performance warning level has been recorded\n"
    "Note: No CPU power status has been recorded\n"
)
SYSTEM_PROFILER_JSON = """{
  "SPDisplaysDataType" : [
    {"_name" : "Apple M4 Max", "sppci_cores" : "40", "sppci_model" : "Apple M4 Max",
     "spdisplays_mtlgpufamilysupport" : "spdisplays_metal3", "sppci_device_type" : "spdisplays_gpu"}
  ],
  "SPHardwareDataType" : [
    {"chip_type" : "Apple M4 Max", "machine_name" : "Mac Studio", "physical_memory" : "64 GB"}
  ]
}"""
PLIST_15 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
\t<key>ProductBuildVersion</key>
\t<string>24B83</string>
\t<key>ProductName</key>
\t<string>macOS</string>
\t<key>ProductVersion</key>
\t<string>15.1</string>
</dict>
</plist>
"""


def _ok(stdout: str) -> dict[str, Any]:
    return {"returncode": 0, "stdout": stdout, "stderr": ""}


HEALTHY: dict[str, Any] = {
    "schema": "mpsup.snapshot/1",
    "captured_at": "2026-12-02T10:00:00Z",
    "commands": {
        "sw_vers": _ok(SW_VERS_15),
        "uname -a": _ok(UNAME_ARM),
        "sysctl hw machdep kern sysctl.proc_translated": _ok(SYSCTL_M4),
        "pmset -g": _ok(PMSET_G),
        "pmset -g batt": _ok(PMSET_BATT_AC),
        "pmset -g therm": _ok(PMSET_THERM_OK),
        "system_profiler -json SPHardwareDataType SPDisplaysDataType": _ok(SYSTEM_PROFILER_JSON),
    },
    "files": {"/System/Library/CoreServices/SystemVersion.plist": PLIST_15},
    "env": {},
    # What energy/apple.py names with zeus-apple-silicon installed (no Mac captured this key: see test_energy_meters).
    "energy_meter": {"name": "apple-ioreport", "reads": "IOReport Energy Model: the SoC's estimates"},
    # What host/machine_state.py reads on a Mac at rest: notify level 0 (public `notifyutil -g
    # com.apple.system.thermalpressurelevel` captures print `... 0` at rest), NSProcessInfo's nominal, LPM off,
    # kern.memorystatus_vm_pressure_level 1. Written by hand: no Mac captured this key.
    "readings": {
        "device": "mps",
        "values": {
            "thermal_pressure": "nominal",
            "thermal_state": "nominal",
            "low_power_mode": False,
            "memory_pressure": "normal",
            "swap_used_bytes": 0,
        },
        "reads": [
            "thermal pressure (notify)",
            "NSProcessInfo thermal state and Low Power Mode",
            "memory pressure and swap (sysctl)",
        ],
        "absent": {},
    },
    "interpreter": {
        "executable": "/Users/me/venv/bin/python",
        "version": "3.12.4",
        "implementation": "cpython",
        "machine": "arm64",
        "bits": 64,
        "in_venv": True,
        "pip": True,
        "uv": "/opt/homebrew/bin/uv",
        "platform": "darwin",
        "loadavg": [1.2, 1.5, 1.4],
        "cpu_count": 16,
        "torch": {
            "version": "2.15.0",
            "mps_built": True,
            "mps_available": True,
            "mps_op_ok": True,
            "mps_name": "Apple M4 Max",
            "mps_core_count": 40,
            "recommended_max_memory": 55 * 2**30,
        },
    },
}


def healthy() -> dict[str, Any]:
    return copy.deepcopy(HEALTHY)


SYSCTL_KEY = "sysctl hw machdep kern sysctl.proc_translated"


def with_macos(s: dict[str, Any], version: str, build: str) -> dict[str, Any]:
    """The same Mac on another macOS release: every source of the version agrees."""
    s["commands"]["sw_vers"] = _ok(SW_VERS_15.replace("15.1", version).replace("24B83", build))
    s["files"]["/System/Library/CoreServices/SystemVersion.plist"] = PLIST_15.replace("15.1", version).replace(
        "24B83", build
    )
    s["commands"][SYSCTL_KEY] = _ok(
        SYSCTL_M4.replace("osproductversion: 15.1", f"osproductversion: {version}").replace(
            "osversion: 24B83", f"osversion: {build}"
        )
    )
    return s


def mps_unavailable(s: dict[str, Any], torch_version: str, reason: str | None = None) -> dict[str, Any]:
    """torch imports, MPS is built, is_available() says False; `reason` is what torch said when asked for an mps tensor."""
    t = s["interpreter"]["torch"]
    t.update(version=torch_version, mps_available=False)
    for key in ("mps_op_ok", "mps_name", "mps_core_count", "recommended_max_memory"):
        t.pop(key, None)
    if reason is not None:
        t["mps_unavailable_reason"] = reason
    return s


def macos14() -> dict[str, Any]:
    return mps_unavailable(with_macos(healthy(), "14.5", "23F79"), "2.15.0")


def rosetta() -> dict[str, Any]:
    """An x86_64 Python under Rosetta, captured by an mpsup that also ran under Rosetta (old snapshots: no probe flag)."""
    s = healthy()
    s["commands"][SYSCTL_KEY] = _ok(SYSCTL_M4.replace("sysctl.proc_translated: 0", "sysctl.proc_translated: 1"))
    s["interpreter"]["machine"] = "x86_64"
    s["interpreter"]["torch"] = {"version": "2.2.2", "mps_built": False, "mps_available": False}
    return s


def python310() -> dict[str, Any]:
    s = healthy()
    s["interpreter"]["version"] = "3.10.14"
    s["interpreter"]["torch"] = None
    return s


def mps_not_available() -> dict[str, Any]:
    """macOS 14 with torch 2.15: the wheel installs, MPS is built, but not available."""
    return macos14()


def empty() -> dict[str, Any]:
    return {"schema": "mpsup.snapshot/1", "commands": {}, "files": {}, "env": {}, "interpreter": None}


# What torch says when asked for an mps tensor it cannot make. 2.15's words as issue 15 quotes them
# (the middle of the sentence is not quoted there, so it stays elided here); the macOS-floor sentence
# as 2.9-2.14 print it, and as seen printed on macOS 15 and 26 by processes with no Metal device.
REASON_NO_METAL_GPU_215 = (
    "MPS backend is unavailable: no supported Metal GPU was found ... virtual machine, sandbox or container"
)
REASON_FLOOR_215 = "The MPS backend is supported on macOS 15.0+"
REASON_FLOOR_214 = "The MPS backend is supported on macOS 14.0+. Current OS version can be queried using `sw_vers`"


def collect_env_fields(text: str) -> dict[str, str]:
    """The `Name: value` lines of torch.utils.collect_env output, and the line after `CPU:`."""
    fields: dict[str, str] = {}
    lines = text.splitlines()
    for n, line in enumerate(lines):
        name, sep, value = line.partition(": ")
        if sep and name and not name.startswith("["):
            fields.setdefault(name.strip(), value.strip())
        if line.strip() == "CPU:" and n + 1 < len(lines):
            fields["CPU"] = lines[n + 1].strip()
    return fields


def from_collect_env(text: str, *, mps_built: bool, mps_available: bool, reason: str | None = None) -> dict[str, Any]:
    """A snapshot of the Mac a real `collect_env` report describes: its macOS, CPU, Python and torch.

    Only what the report states is filled in; the rest stays "not known" (no sw_vers build, no pmset).
    """
    f = collect_env_fields(text)
    os_version, _, arch = f["OS"].removeprefix("macOS ").removeprefix("Mac OSX ").partition(" ")
    machine = arch.strip("()")
    cpu = f.get("CPU", "")
    python_version = f["Python version"].split()[0]
    if python_version.count(".") == 1:
        python_version += ".0"
    sysctl = f"kern.osproductversion: {os_version}\n"
    if cpu:
        sysctl += f"machdep.cpu.brand_string: {cpu}\n"
    if cpu.startswith("Apple"):  # an Apple CPU is Apple silicon, which is what hw.optional.arm64 says
        sysctl += "hw.optional.arm64: 1\n"
    torch: dict[str, Any] = {"version": f["PyTorch version"], "mps_built": mps_built, "mps_available": mps_available}
    if reason is not None:
        torch["mps_unavailable_reason"] = reason
    if mps_available:
        torch["mps_op_ok"] = True
    return {
        "schema": "mpsup.snapshot/1",
        "captured_at": "",
        "commands": {SYSCTL_KEY: _ok(sysctl)},
        "files": {},
        "env": {},
        "interpreter": {
            "version": python_version,
            "implementation": "cpython",
            "machine": machine,
            "bits": 64 if "(64-bit runtime)" in text else None,
            "platform": "darwin",
            "torch": torch,
        },
    }


# Hand-written in the format that public captures of these commands show (none is under shared/data/real-mac):
# `sysctl vm.swapusage` and `sysctl kern.memorystatus_vm_pressure_level`.
SWAPUSAGE_1G_USED = "vm.swapusage: total = 2048.00M  used = 1024.25M  free = 1023.75M  (encrypted)\n"
SWAPUSAGE_NONE = "vm.swapusage: total = 0.00M  used = 0.00M  free = 0.00M  \n"
PRESSURE_NORMAL = "kern.memorystatus_vm_pressure_level: 1\n"
PRESSURE_WARN = "kern.memorystatus_vm_pressure_level: 2\n"
SYSCTL_INTEL = """hw.ncpu: 16
hw.memsize: 17179869184
machdep.cpu.brand_string: Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz
kern.ostype: Darwin
kern.osproductversion: 14.5
kern.osversion: 23F79
"""
UNKNOWN_OID = {"returncode": 1, "stdout": "", "stderr": "sysctl: unknown oid 'sysctl.proc_translated'\n"}


def split_sysctl(s: dict[str, Any], main: str, translated: dict[str, Any] | None = None) -> dict[str, Any]:
    """The snapshot as this mpsup captures it: `sysctl hw machdep kern` and `sysctl sysctl.proc_translated` apart."""
    s["commands"].pop(SYSCTL_KEY, None)
    s["commands"]["sysctl hw machdep kern"] = _ok(main)
    s["commands"]["sysctl sysctl.proc_translated"] = translated or _ok("sysctl.proc_translated: 0\n")
    return s


def with_memory(s: dict[str, Any], swapusage: str, pressure: str) -> dict[str, Any]:
    s["commands"]["sysctl vm.swapusage"] = _ok(swapusage)
    s["commands"]["sysctl kern.memorystatus_vm_pressure_level"] = _ok(pressure)
    return s
