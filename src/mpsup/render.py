"""Shared output helpers: one JSON document on stdout, human text via rich, messages on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

from mpsup.store import finite_json

NARROW = 100  # below this many columns tables drop their wide, secondary columns

stdout_console = Console()
stderr_console = Console(stderr=True)


def emit_json(doc: Any) -> None:
    """Strict JSON: NaN and infinities (which json.dumps would write as bare words) become null."""
    sys.stdout.write(json.dumps(finite_json(doc), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def safe(text: object) -> str:
    """Text mpsup did not write itself (names, paths, ids, env values), made inert for rich markup.

    Without this, `[/x]` in a tensor name raises and `[old]` in a path silently disappears.
    """
    return rich_escape(str(text))


def warning_line(message: str, console: Console = stderr_console) -> None:
    """A problem mpsup stepped around (a bad record skipped): one yellow line on stderr."""
    console.print(f"[yellow]warning:[/] {safe(message)}", highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    stderr_console.print(f"[bold red]mpsup:[/] {safe(message)}", markup=True, highlight=False, soft_wrap=True)
