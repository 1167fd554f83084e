"""Run the stdlib-only interpreter probe inside a target Python and read its JSON answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mpsup.syscmd import run_command

PROBE_SCRIPT = Path(__file__).with_name("interpreter_probe.py")


def run_interpreter_probe(python: Path, *, timeout: float = 180.0) -> dict[str, Any] | None:
    """Facts about `python` and its torch; None when the interpreter cannot be run at all."""
    # Started by path: its folder holds only the probe, so nothing of mpsup is importable there.
    res = run_command([python, PROBE_SCRIPT], timeout=timeout)
    if res.returncode != 0:
        return None
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return None
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
