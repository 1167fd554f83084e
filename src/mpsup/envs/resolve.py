"""Turn what the user typed for --baseline/--candidate into an interpreter path (and the stack it runs)."""

from __future__ import annotations

import stat
from pathlib import Path

from mpsup.envs.records import recorded_environments
from mpsup.envs.venvs import existing_venv_python
from mpsup.errors import UserError
from mpsup.safe_files import stat_input


def resolve_environment(value: str, flag: str) -> Path:
    """A Python executable, a venv folder, or a torch version recorded by `install-rc`."""
    p = Path(value).expanduser()
    st = stat_input(p, "interpreter or venv")  # a name over 255 bytes: one line, no traceback
    if st is not None and stat.S_ISREG(st.st_mode):
        return p
    if st is not None and stat.S_ISDIR(st.st_mode):
        py = existing_venv_python(p)
        if py is None:
            raise UserError(f"{flag} {value}: a folder without bin/python (not a virtual environment)")
        return py
    docs = recorded_environments()
    for doc in docs:
        if value == doc.get("name"):
            return Path(doc["python"])
    # A release candidate and its final carry the same version: then the version alone names neither.
    by_version = [doc for doc in docs if value == doc.get("torch_version")]
    if len(by_version) > 1:
        names = ", ".join(sorted(str(doc.get("name")) for doc in by_version))
        raise UserError(f"{flag} {value}: several recorded environments hold torch {value} ({names}); name one of them")
    if by_version:
        return Path(by_version[0]["python"])
    raise UserError(f"{flag} {value}: neither an interpreter, a venv, nor a recorded candidate version")


MLX_PREFIX = "mlx:"


def resolve_side(value: str, flag: str) -> tuple[Path, str]:
    """(interpreter, stack): `mlx:PYTHON` (an interpreter, a venv or a recorded name) runs the MLX worker there;
    a recorded environment made for MLX does too; anything else is a torch environment."""
    if value.startswith(MLX_PREFIX):
        rest = value[len(MLX_PREFIX) :]
        if not rest:
            raise UserError(f"{flag} {value}: expected mlx:PYTHON, an interpreter or venv with mlx and mlx-lm")
        return resolve_environment(rest, flag), "mlx"
    python = resolve_environment(value, flag)
    recorded = next((d for d in recorded_environments() if value == d.get("name")), None)
    return python, "mlx" if recorded is not None and recorded.get("stack") == "mlx" else "torch"
