"""Wheel tags that fit a target interpreter, computed from its probe facts, not from ours.

mpsup may run under one Python and install for another (`--python`), so `packaging.tags.sys_tags()`
would answer for the wrong interpreter. The probe reports version, ABI threading, OS, arch and libc;
`packaging` turns those into the ordered tag list pip would use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging import tags


@dataclass(frozen=True)
class Target:
    python_version: tuple[int, int]
    implementation: str  # "cpython"
    free_threaded: bool
    platform: str  # sys.platform: darwin, linux, win32
    machine: str  # arm64, x86_64, aarch64
    macos: tuple[int, int] | None = None
    glibc: tuple[int, int] | None = None

    @property
    def python_tag(self) -> str:
        major, minor = self.python_version
        return f"cp{major}{minor}{'t' if self.free_threaded else ''}"

    def describe(self) -> str:
        where = {"darwin": f"macOS {'.'.join(map(str, self.macos or ()))}", "linux": "Linux"}.get(self.platform, self.platform)
        return f"{self.python_tag} on {where} {self.machine}".replace("  ", " ")


def _pair(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def target_from_probe(probe: dict[str, Any]) -> Target:
    major, minor = (int(x) for x in str(probe["version"]).split(".")[:2])
    libc = str(probe.get("libc") or "")
    return Target(
        python_version=(major, minor),
        implementation=str(probe.get("implementation") or "cpython"),
        free_threaded=bool(probe.get("free_threaded")),
        platform=str(probe.get("platform") or ""),
        machine=str(probe.get("machine") or ""),
        macos=_pair(probe.get("mac_ver")) if probe.get("platform") == "darwin" else None,
        glibc=_pair(libc.split()[-1]) if libc.startswith("glibc") else None,
    )


def _linux_platforms(machine: str, glibc: tuple[int, int] | None) -> list[str]:
    out: list[str] = []
    if glibc is not None and glibc[0] == 2:
        floor = 5 if machine in ("x86_64", "i686") else 17
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        for minor in range(glibc[1], floor - 1, -1):
            out.append(f"manylinux_2_{minor}_{machine}")
            if minor in legacy:
                out.append(f"{legacy[minor]}_{machine}")
    out.append(f"linux_{machine}")
    return out


def platform_tags(target: Target) -> list[str]:
    if target.platform == "darwin":
        # An arm64 Python can only load arm64 (or universal2) wheels; mac_platforms knows the ladder.
        return list(tags.mac_platforms(target.macos or (11, 0), target.machine))
    if target.platform == "linux":
        return _linux_platforms(target.machine, target.glibc)
    if target.platform == "win32":
        return ["win_amd64" if target.machine.lower() in ("amd64", "x86_64") else f"win_{target.machine.lower()}"]
    return []


def supported_tags(target: Target) -> list[tags.Tag]:
    """Most specific first, as pip orders them."""
    platforms = platform_tags(target)
    if target.implementation != "cpython":
        return list(tags.compatible_tags(target.python_version, None, platforms))
    abis = [target.python_tag]
    out = list(tags.cpython_tags(target.python_version, abis, platforms))
    if target.free_threaded:
        # abi3 is not stable across the free-threaded build: such wheels cannot load there.
        out = [t for t in out if t.abi != "abi3"]
    out += list(tags.compatible_tags(target.python_version, f"cp{target.python_version[0]}{target.python_version[1]}", platforms))
    return out
