"""Which Python builds get PyTorch wheels for macOS arm64. The one place this is kept."""

from __future__ import annotations

# Recent releases (2.9 onwards) publish macOS arm64 wheels for these CPython tags.
# cp313t had wheels for a while and was dropped; cp314t is published.
MACOS_ARM64_WHEEL_TAGS: tuple[str, ...] = ("cp311", "cp312", "cp313", "cp314", "cp314t")
MIN_PYTHON = (3, 11)
MIN_MACOS_FOR_MPS = (15, 0)
# The last release with macOS x86_64 wheels: a Python under Rosetta can go no further.
LAST_X86_MACOS_TORCH = "2.2.2"


def python_tag(version: str, free_threaded: bool) -> str:
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}{'t' if free_threaded else ''}"
