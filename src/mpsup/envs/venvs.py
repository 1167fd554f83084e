"""Making a virtual environment under a temporary name and moving it into place.

Venvs hard-code their own path in script shebangs, activate scripts and pyvenv.cfg. Building under
a temporary name means a failed or interrupted build is never mistaken for a usable environment,
but those paths must then name the final place. `point_at` rewrites them while the environment is
still in its build folder, so that the single rename into place is the commit: before it nothing
is at the final name, after it everything there already points at itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mpsup.errors import OperationFailed
from mpsup.syscmd import run_command

_MAX_SCRIPT_BYTES = 1 << 20


def existing_venv_python(prefix: Path) -> Path | None:
    for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
        if (prefix / rel).exists():
            return prefix / rel
    return None


def venv_python(prefix: Path) -> Path:
    """The interpreter a venv at `prefix` has, or will have once created."""
    return existing_venv_python(prefix) or prefix / "bin" / "python"


def create_venv(base_python: Path, prefix: Path, *, with_pip: bool) -> None:
    argv = [str(base_python), "-m", "venv", str(prefix)] + ([] if with_pip else ["--without-pip"])
    res = run_command(argv, timeout=300)
    if not res.ok:
        detail = (res.stderr or res.stdout).strip().splitlines()
        raise OperationFailed(
            f"{base_python} -m venv failed: {detail[-1] if detail else 'exit ' + str(res.returncode)}"
        )


BUILD_MARKER = ".mpsup-build"


def mark_as_ours(prefix: Path) -> None:
    """Left inside every environment mpsup builds: a folder at a final name with this but no record
    is what an interrupted install leaves, and may be removed; anything else there is not ours."""
    (prefix / BUILD_MARKER).write_text("built by mpsup install-rc; complete only once mpsup-env.json is here\n")


def is_ours(prefix: Path) -> bool:
    return (prefix / BUILD_MARKER).is_file()


def point_at(folder: Path, final: Path) -> int:
    """Rewrite the paths of `folder` in pyvenv.cfg and bin/ to name `final`, where it is about to move; files
    rewritten."""
    old_bytes, new_bytes = str(folder).encode(), str(final).encode()
    rewritten = 0
    candidates = [folder / "pyvenv.cfg"]
    bindir = folder / "bin"
    if bindir.is_dir():
        candidates += [p for p in bindir.iterdir() if p.is_file() and not p.is_symlink()]
    for path in candidates:
        try:
            if path.stat().st_size > _MAX_SCRIPT_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if b"\0" in data or old_bytes not in data:
            continue  # binaries (the interpreter itself) hold no path of ours
        mode = path.stat().st_mode
        path.write_bytes(data.replace(old_bytes, new_bytes))
        path.chmod(mode)
        rewritten += 1
    return rewritten


def commit_move(folder: Path, final: Path) -> None:
    """The one step that makes the environment appear under its name. rename(2) would replace an
    empty folder there, so an existing one is refused first."""
    if final.exists() or final.is_symlink():
        raise OperationFailed(
            f"{final} appeared while the environment was being built; the new one was not moved there"
        )
    folder.rename(final)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
