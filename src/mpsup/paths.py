"""Where mpsup keeps its data: MPSUP_HOME, else platformdirs' user data dir."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    override = os.environ.get("MPSUP_HOME")
    if override:
        return Path(override).expanduser()
    # Imported lazily so that modules needing no data dir don't pay for it.
    from platformdirs import user_data_dir

    return Path(user_data_dir("mpsup", appauthor=False))


def runs_dir() -> Path:
    return data_dir() / "runs"


def envs_dir() -> Path:
    return data_dir() / "envs"


def rollback_dir() -> Path:
    """The package sets saved before an --in-place upgrade, one folder per environment."""
    return data_dir() / "rollback"


def tmp_dir() -> Path:
    """Scratch space on the data dir's file system (so that a rename into place stays atomic); created on demand."""
    path = data_dir() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def downloads_dir() -> Path:
    """Wheels fetched by install-rc, each named by its validated wheel file name (kept private: 0700)."""
    return data_dir() / "downloads"


def bisect_dir() -> Path:
    """`mpsup bisect`'s journals, one per set of arguments: an interrupted bisect continues from its own."""
    return data_dir() / "bisect"


def bisect_envs_dir() -> Path:
    """`mpsup bisect --nightlies`' throwaway environments, one folder per bisect (named as its journal): removed
    at the bisect's end unless --keep-envs, kept for --resume when it is interrupted."""
    return data_dir() / "bisect-envs"
