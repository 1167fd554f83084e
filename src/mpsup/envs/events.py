"""What an install reports while it runs: one frozen event per step, and the download's bytes.

The install (execute.py, download.py) sends these through a `mpsup.progress.Progress`; the terminal renderer
(render.py) turns each into its line and refuses an event it does not know.
"""

from __future__ import annotations

from pathlib import Path

from mpsup.progress import Event


class Fetching(Event):
    """The wheel is being fetched (downloaded, or checked where it lies for a local one)."""

    filename: str


class Downloaded(Event):
    """Bytes of the wheel written so far; `total` is None when neither the server nor the index gave a size."""

    done: int
    total: int | None


class CreatingVenv(Event):
    base_python: Path


class Installing(Event):
    """Side by side: torch (and `cloned` packages from the user's environment) into the new environment."""

    version: str
    installer: str
    cloned: int = 0


class Verifying(Event):
    in_place: bool  # the upgraded environment itself, else the new one


class MovingIntoPlace(Event):
    name: str


class SavedPackages(Event):
    """In place: the environment's package list, saved for --rollback before anything changes."""

    count: int
    path: Path


class Upgrading(Event):
    python: Path
    version: str
    installer: str


class RestoringSaved(Event):
    """An in-place upgrade failed: the saved packages go back."""
