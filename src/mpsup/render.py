"""Shared output helpers: one JSON document on stdout, human text via rich, messages on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from mpsup.store import finite_json

stdout_console = Console()
stderr_console = Console(stderr=True)


def emit_json(doc: Any) -> None:
    """Strict JSON: NaN and infinities (which json.dumps would write as bare words) become null."""
    sys.stdout.write(json.dumps(finite_json(doc), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    stderr_console.print(f"[bold red]mpsup:[/] {message}", markup=True, highlight=False, soft_wrap=True)
