"""Turn what the user typed for --baseline/--candidate into an interpreter path."""

from __future__ import annotations

import json
from pathlib import Path

from mpsup.errors import UserError
from mpsup.paths import envs_dir


def _venv_python(root: Path) -> Path | None:
    for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
        if (root / rel).exists():
            return root / rel
    return None


def recorded_environments() -> list[dict]:
    out = []
    base = envs_dir()
    if not base.is_dir():
        return out
    for rec in sorted(base.glob("*/mpsup-env.json")):
        try:
            doc = json.loads(rec.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("python"), str):
            out.append(doc)
    return out


def resolve_environment(value: str, flag: str) -> Path:
    """A Python executable, a venv folder, or a torch version recorded by `install-rc`."""
    p = Path(value).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        py = _venv_python(p)
        if py is None:
            raise UserError(f"{flag} {value}: a folder without bin/python (not a virtual environment)")
        return py
    for doc in recorded_environments():
        if doc.get("torch_version") == value:
            return Path(doc["python"])
    raise UserError(f"{flag} {value}: neither an interpreter, a venv, nor a recorded candidate version")
