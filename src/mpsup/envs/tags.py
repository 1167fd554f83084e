"""Wheel tags that fit a target interpreter, computed from its probe facts, not from ours.

mpsup may run under one Python and install for another (`--python`), so `packaging.tags.sys_tags()`
would answer for the wrong interpreter. The probe reports version, ABI threading, OS, arch and libc;
`packaging` turns those into the ordered tag list pip would use.

macOS versions: a Python built against an old SDK is told 10.16 on macOS 11 and later (16.0 on
macOS 26), and `packaging` then offers no `macosx_11_0`/`macosx_14_0` tag, so no torch wheel would
fit. Such an alias is replaced by the host's real version (read by the caller, e.g. from sw_vers).
Tags are always computed, never read from installed metadata: torch 2.10.0's own WHEEL file says
`macosx_110_0_arm64` (pytorch PR 173541).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging import tags

from mpsup.host.facts import is_compat_version


def python_tag(version: str, free_threaded: bool) -> str:
    """cp312, or cp313t for a free-threaded build: the tag a wheel for this Python carries."""
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}{'t' if free_threaded else ''}"


@dataclass(frozen=True)
class Target:
    python_version: tuple[int, int]
    implementation: str  # "cpython"
    free_threaded: bool
    platform: str  # sys.platform: darwin, linux, win32
    machine: str  # arm64, x86_64, aarch64
    macos: tuple[int, int] | None = None
    glibc: tuple[int, int] | None = None
    macos_reported: str | None = None  # what the Python said when that was a compatibility alias (10.16, 16.0)
    macos_assumed: bool = False  # the alias could not be resolved: the oldest macOS it stands for is used

    @property
    def python_tag(self) -> str:
        return python_tag(".".join(map(str, self.python_version)), self.free_threaded)

    def describe(self) -> str:
        where = {"darwin": f"macOS {'.'.join(map(str, self.macos or ()))}", "linux": "Linux"}.get(
            self.platform, self.platform
        )
        return f"{self.python_tag} on {where} {self.machine}".replace("  ", " ")

    def macos_note(self) -> str | None:
        """Why the macOS version used for tags is not the one the Python reports, if it is not."""
        if self.macos_reported is None or self.macos is None:
            return None
        used = ".".join(map(str, self.macos))
        if self.macos_assumed:
            return (
                f"this Python reports macOS {self.macos_reported}, a compatibility alias, and the real version "
                "could not be read; "
                f"wheel tags assume macOS {used}, the oldest it stands for"
            )
        return (
            f"this Python reports macOS {self.macos_reported}, a compatibility alias; wheel tags are computed for "
            f"macOS {used}"
        )


def _pair(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _macos(reported: str | None, host_macos: str | None) -> tuple[tuple[int, int] | None, str | None, bool]:
    """(version for tags, the alias reported or None, whether the version is a guess)."""
    if not is_compat_version(reported):
        return _pair(reported), None, False
    if host_macos and not is_compat_version(host_macos) and _pair(host_macos):
        return _pair(host_macos), reported, False
    if _pair(reported) == (16, 0):
        return (26, 0), reported, False  # macOS 26 is the only release shown as 16.0
    return (11, 0), reported, True


def target_from_probe(probe: dict[str, Any], host_macos: str | None = None) -> Target:
    """`host_macos`: the host's real macOS version, used when the probe's is a compatibility alias."""
    major, minor = (int(x) for x in str(probe["version"]).split(".")[:2])
    libc = str(probe.get("libc") or "")
    darwin = probe.get("platform") == "darwin"
    macos, reported, assumed = _macos(str(probe.get("mac_ver") or ""), host_macos) if darwin else (None, None, False)
    return Target(
        python_version=(major, minor),
        implementation=str(probe.get("implementation") or "cpython"),
        free_threaded=bool(probe.get("free_threaded")),
        platform=str(probe.get("platform") or ""),
        machine=str(probe.get("machine") or ""),
        macos=macos,
        glibc=_pair(libc.split()[-1]) if libc.startswith("glibc") else None,
        macos_reported=reported,
        macos_assumed=assumed,
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
    out += list(
        tags.compatible_tags(
            target.python_version, f"cp{target.python_version[0]}{target.python_version[1]}", platforms
        )
    )
    return out
