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
PMSET_BATT_AC = "Now drawing from 'AC Power'\n -InternalBattery-0 (id=1234)\t100%; charged; 0:00 remaining present: true\n"
PMSET_BATT_BATTERY = "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1234)\t63%; discharging; 4:10 remaining present: true\n"
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


def macos14() -> dict[str, Any]:
    s = healthy()
    s["commands"]["sw_vers"] = _ok(SW_VERS_15.replace("15.1", "14.5").replace("24B83", "23F79"))
    s["files"]["/System/Library/CoreServices/SystemVersion.plist"] = PLIST_15.replace("15.1", "14.5")
    s["commands"]["sysctl hw machdep kern sysctl.proc_translated"] = _ok(
        SYSCTL_M4.replace("osproductversion: 15.1", "osproductversion: 14.5")
    )
    s["interpreter"]["torch"]["mps_available"] = False
    s["interpreter"]["torch"].pop("mps_op_ok")
    return s


def rosetta() -> dict[str, Any]:
    s = healthy()
    s["commands"]["sysctl hw machdep kern sysctl.proc_translated"] = _ok(
        SYSCTL_M4.replace("sysctl.proc_translated: 0", "sysctl.proc_translated: 1")
    )
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
