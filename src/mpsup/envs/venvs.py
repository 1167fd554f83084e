"""Making a virtual environment under a temporary name and moving it into place.

Venvs hard-code their own path in script shebangs, activate scripts and pyvenv.cfg. Building under
a temporary name means a failed or interrupted build is never mistaken for a usable environment,
but the move must then rewrite those paths, which `relocate` does for the files venv and the
installer write into bin/.
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
        raise OperationFailed(f"{base_python} -m venv failed: {detail[-1] if detail else 'exit ' + str(res.returncode)}")


def relocate(old: Path, new: Path) -> int:
    """Move a venv from `old` to `new` and point its scripts at the new place; files rewritten."""
    old_bytes, new_bytes = str(old).encode(), str(new).encode()
    old.rename(new)
    rewritten = 0
    candidates = [new / "pyvenv.cfg"]
    bindir = new / "bin"
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


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
