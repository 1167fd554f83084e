"""Which Python builds get PyTorch wheels for macOS arm64, and which macOS each build needs. The one place this is
kept."""

from __future__ import annotations

import itertools

from mpsup.envs.tags import python_tag as python_tag  # one definition, shared with install-rc

# Recent releases (2.9 onwards) publish macOS arm64 wheels for these CPython tags.
# The free-threaded 3.13 build (cp313t) is left out: not every recent release publishes it; cp314t is.
MACOS_ARM64_WHEEL_TAGS: tuple[str, ...] = ("cp311", "cp312", "cp313", "cp314", "cp314t")
MIN_PYTHON = (3, 11)
# The upgrade this doctor prepares for, and the macOS its MPS needs.
UPGRADE_TORCH = "2.15"
MIN_MACOS_FOR_MPS = (15, 0)
# The last release with macOS x86_64 wheels: a Python under Rosetta can go no further.
LAST_X86_MACOS_TORCH = "2.2.2"

# The macOS each build's MPS backend needs, newest first, as its binary says ("The MPS backend is
# supported on macOS 15.0+" in 2.15; 14.0+ in 2.9-2.14; 13.0+ in 2.6-2.8; 12.3+ since MPS began).
# A build on an older macOS imports fine and reports MPS unavailable.
MPS_MACOS_FLOORS: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 15), (15, 0)),
    ((2, 9), (14, 0)),
    ((2, 6), (13, 0)),
    ((0, 0), (12, 3)),
)
# The macOS a build's arm64 wheel is tagged for, i.e. where pip installs it: macosx_14_0 from 2.12,
# macosx_11_0 before. From 2.15 a wheel installs on a macOS (14) where its MPS cannot run.
WHEEL_MACOS_FLOORS: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 12), (14, 0)),
    ((0, 0), (11, 0)),
)


def _floor(
    table: tuple[tuple[tuple[int, int], tuple[int, int]], ...], torch_version: tuple[int, ...]
) -> tuple[int, int] | None:
    if len(torch_version) < 2:
        return None
    return next((floor for since, floor in table if torch_version[:2] >= since), None)


def mps_macos_floor(torch_version: tuple[int, ...]) -> tuple[int, int] | None:
    """The macOS this torch's MPS needs; None when the version is not known."""
    return _floor(MPS_MACOS_FLOORS, torch_version)


def wheel_macos_floor(torch_version: tuple[int, ...]) -> tuple[int, int] | None:
    return _floor(WHEEL_MACOS_FLOORS, torch_version)


def last_torch_with_mps_on(macos: tuple[int, ...]) -> tuple[int, int] | None:
    """The newest minor release whose MPS still runs on this macOS, e.g. (2, 14) on macOS 14.

    None when even the newest build's MPS runs there, or the oldest does not.
    """
    for newer, older in itertools.pairwise(MPS_MACOS_FLOORS):
        if macos[:2] < newer[1] and macos[:2] >= older[1]:
            return newer[0][0], newer[0][1] - 1
    return None


def show(version: tuple[int, ...]) -> str:
    return ".".join(str(v) for v in version)
