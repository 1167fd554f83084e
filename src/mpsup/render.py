"""Shared output helpers: one JSON document on stdout, human text via rich, messages on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

stdout_console = Console()
stderr_console = Console(stderr=True)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    stderr_console.print(f"[bold red]mpsup:[/] {message}", markup=True, highlight=False, soft_wrap=True)
