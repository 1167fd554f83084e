"""Pick the newest wheel of a project that fits the target interpreter, or say why none does.

Facts about PyTorch's listings this relies on: macOS arm64 wheels were tagged
`cp3XX-none-macosx_11_0_arm64` up to 2.10 (2.10's cp314 already `cp314-cp314-macosx_14_0_arm64`),
`cp3XX-cp3XX-macosx_11_0_arm64` in 2.11 and `cp3XX-cp3XX-macosx_14_0_arm64` from 2.12 (free-threaded
`cp314t` from 2.13), so a Mac on macOS 13 gets no wheel from 2.12 on: the message says so. The CPU
index also lists Linux and Windows builds as local versions (`2.4.1+cpu`), which sort above `2.4.1`;
a local variant with no wheel for the target's platform is not a release for it and is ignored.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from mpsup.envs.download import wheel_file_name
from mpsup.envs.index import IndexFile
from mpsup.envs.tags import Target, platform_tags, supported_tags
from mpsup.errors import UserError


@dataclass(frozen=True)
class Wheel:
    project: str
    version: Version
    file: IndexFile
    tags: frozenset[Tag]


@dataclass(frozen=True)
class Pick:
    wheel: Wheel | None
    message: str | None = None  # why nothing was picked
    notes: tuple[str, ...] = ()  # newer releases skipped, and why


def wheels_of(files: list[IndexFile], project: str = "torch") -> list[Wheel]:
    """The files that are wheels of `project` under a plain wheel file name (nothing that could name a folder)."""
    out = []
    for f in files:
        if not f.filename.endswith(".whl"):
            continue
        try:
            wheel_file_name(f.filename, project)
            name, version, _build, wheel_tags = parse_wheel_filename(f.filename)
        except (InvalidWheelFilename, UserError):
            continue
        out.append(Wheel(str(name), version, f, frozenset(wheel_tags)))
    return out


def _for_other_platforms(wheels: list[Wheel], target: Target) -> bool:
    """A local-version release (`2.4.1+cpu`) none of whose wheels is for the target's OS and architecture."""
    accepted = set(platform_tags(target)) | {"any"}
    return not any(t.platform in accepted for w in wheels for t in w.tags)


_MACOS_TAG = re.compile(r"macosx_(\d+)_(\d+)_(\w+)")


def macos_floor(wheels: list[Wheel], target: Target) -> tuple[int, int] | None:
    """The oldest macOS that the wheels for the target's interpreter and architecture need, when it is newer than
    the target's."""
    if target.platform != "darwin" or target.macos is None:
        return None
    interpreter = "cp{}{}".format(*target.python_version)
    abis = {target.python_tag} if target.free_threaded else {target.python_tag, "none", "abi3"}
    floors = []
    for t in (t for w in wheels for t in w.tags if t.interpreter == interpreter and t.abi in abis):
        match = _MACOS_TAG.fullmatch(t.platform)
        if match and match.group(3) in (target.machine, "universal2"):
            floors.append((int(match.group(1)), int(match.group(2))))
    return min(floors) if floors and min(floors) > target.macos else None


def _macos_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _interpreters_summary(wheels: list[Wheel], target: Target) -> str:
    """'cp311 to cp314' for the target's platform family, or which platforms the release has instead."""
    family = {"darwin": "macosx", "linux": "linux", "win32": "win"}.get(target.platform, target.platform)

    def fits_platform(tag: Tag) -> bool:
        return tag.platform == "any" or (family in tag.platform and tag.platform.endswith(target.machine.lower()))

    def label(tag: Tag) -> str:
        # A free-threaded build shows in the ABI (cp314-cp314t): name it as users know it.
        return tag.abi if tag.abi.startswith("cp") and tag.abi.endswith("t") else tag.interpreter

    interps = sorted({label(t) for w in wheels for t in w.tags if fits_platform(t)}, key=_interp_key)
    if not interps:
        platforms = sorted({t.platform for w in wheels for t in w.tags})
        shown = ", ".join(platforms[:6]) + (", ..." if len(platforms) > 6 else "")
        return f"wheels only for {shown}"
    regular = [i for i in interps if not i.endswith("t")]
    free_threaded = [i for i in interps if i.endswith("t")]
    if len(regular) > 2 and all(_interp_key(b)[1] - _interp_key(a)[1] == 1 for a, b in itertools.pairwise(regular)):
        return ", ".join([f"{regular[0]} to {regular[-1]}", *free_threaded])
    return ", ".join(interps)


def _interp_key(interp: str) -> tuple[int, int, str]:
    digits = "".join(ch for ch in interp[2:] if ch.isdigit())
    return (int(digits[:1] or 0), int(digits[1:] or 0), interp)


def _python_ok(f: IndexFile, target: Target) -> bool:
    if not f.requires_python:
        return True
    try:
        spec = SpecifierSet(f.requires_python)
    except InvalidSpecifier:
        return True
    return spec.contains(".".join(map(str, target.python_version)), prereleases=True)


def pick_wheel(
    files: list[IndexFile],
    target: Target,
    *,
    project: str = "torch",
    version: str | None = None,
    allow_prereleases: bool = True,
    where: str = "the index",
) -> Pick:
    """The newest version with a fitting wheel; within it, the wheel with the most specific tag."""
    wheels = [w for w in wheels_of(files, project) if not w.file.yanked or version is not None]
    if not wheels:
        return Pick(None, f"{where} lists no {project} wheels")
    by_version: dict[Version, list[Wheel]] = defaultdict(list)
    for w in wheels:
        by_version[w.version].append(w)
    by_version = defaultdict(
        list, {v: ws for v, ws in by_version.items() if not (v.local and _for_other_platforms(ws, target))}
    )
    if not by_version:
        return Pick(None, f"{where} lists {project} wheels only for other platforms than {target.describe()}")
    if version is not None:
        wanted = Version(version)
        chosen = [v for v in by_version if v == wanted or v.public == wanted.public]
        if not chosen:
            newest = ", ".join(str(v) for v in sorted(by_version, reverse=True)[:5])
            return Pick(None, f"{project} {version} is not on {where} (newest there: {newest})")
        versions = sorted(chosen, reverse=True)
    else:
        versions = sorted((v for v in by_version if allow_prereleases or not v.is_prerelease), reverse=True)
        if not versions:
            return Pick(None, f"{where} has only pre-releases of {project}; use --channel test or nightly")
    ranked = {tag: i for i, tag in enumerate(supported_tags(target))}
    notes: list[str] = []
    for v in versions:
        fitting = []
        for w in by_version[v]:
            best = min((ranked[t] for t in w.tags if t in ranked), default=None)
            if best is not None and _python_ok(w.file, target):
                fitting.append((best, w.file.filename, w))
        if fitting:
            return Pick(min(fitting, key=lambda item: (item[0], item[1]))[2], None, tuple(notes))
        notes.append(_no_wheel_note(project, v, by_version[v], target))
    if version is not None:
        floor = macos_floor(by_version[versions[0]], target)
        if floor is not None:
            return Pick(
                None,
                f"no {project} {version} wheel for {target.describe()}: {project} {version} needs macOS "
                f"{_macos_text(floor)} or newer{_mac_runs(target)}",
            )
        has = _interpreters_summary(by_version[versions[0]], target)
        return Pick(None, f"no {project} {version} wheel for {target.describe()}; this release has {has}")
    latest = versions[0]
    floor = macos_floor(by_version[latest], target)
    if floor is not None:
        return Pick(
            None,
            f"no {project} wheel on {where} fits {target.describe()}: the newest release, {latest}, needs macOS "
            f"{_macos_text(floor)} or newer{_mac_runs(target)}",
            tuple(notes[:1]),
        )
    return Pick(
        None,
        f"no {project} wheel on {where} fits {target.describe()}; the newest release, {latest}, has "
        f"{_interpreters_summary(by_version[latest], target)}",
        tuple(notes[:1]),
    )


def _mac_runs(target: Target) -> str:
    assert target.macos is not None
    return f" (this Mac runs macOS {_macos_text(target.macos)}; PyTorch publishes no wheel for it from that release on)"


def _no_wheel_note(project: str, v: Version, wheels: list[Wheel], target: Target) -> str:
    floor = macos_floor(wheels, target)
    if floor is not None:
        return (
            f"{project} {v} needs macOS {_macos_text(floor)} or newer; this Mac runs macOS "
            f"{_macos_text(target.macos or (0, 0))}"
        )
    return f"{project} {v} has no wheel for {target.describe()} (it has {_interpreters_summary(wheels, target)})"
