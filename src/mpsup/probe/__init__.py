"""Run the stdlib-only interpreter probe inside a target Python and read its JSON answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mpsup.syscmd import run_command
from mpsup.waits import announced

PROBE_SCRIPT = Path(__file__).with_name("interpreter_probe.py")
# Importing a torch the first time on a cold disk takes tens of seconds; an interpreter still silent after
# this long is not importing anything.
PROBE_DEADLINE_S = 180.0


def run_interpreter_probe(python: Path, *, timeout: float | None = None) -> dict[str, Any] | None:
    """Facts about `python` and its torch; None when the interpreter cannot be run at all or gives no answer
    within `timeout` (said on stderr while it waits)."""
    deadline = PROBE_DEADLINE_S if timeout is None else timeout
    # Started by path: its folder holds only the probe, so nothing of mpsup is importable there.
    with announced(f"{python} to answer the interpreter probe (it imports torch)", deadline):
        res = run_command([python, PROBE_SCRIPT], timeout=deadline)
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
