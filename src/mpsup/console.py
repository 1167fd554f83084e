"""The consoles and their safe output: one JSON document on stdout, human text via rich, messages on stderr."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape

from mpsup.safe_files import finite_json

NARROW = 100  # below this many columns tables drop their wide, secondary columns

stdout_console = Console()
stderr_console = Console(stderr=True)


def emit_json(doc: Any) -> None:
    """Strict JSON: NaN and infinities (which json.dumps would write as bare words) become null."""
    sys.stdout.write(json.dumps(finite_json(doc), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


# C0 controls but tab and newline, DEL, C1 controls, the bidi marks, embeddings, overrides and isolates, and lone
# surrogates. In a tensor or component name they would reach the terminal as commands (ESC ] retitles the window,
# ESC [ 2 J clears it, 0x9b is a one-byte CSI) or show a name reversed (U+202E): `x.weight` read as `thgiew.x`.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """Text mpsup did not write itself, with every control and bidi character shown as an escape (`\\x1b`,
    `\\u202e`) instead of acting on the terminal or the page. Every renderer's escape goes through it: `safe`
    (terminal), `md` (Markdown) and `esc` (HTML)."""
    return _UNPRINTABLE.sub(_escaped, str(text))


def safe(text: object) -> str:
    """Text mpsup did not write itself (names, paths, ids, env values), made inert for rich markup and the terminal.

    Without this, `[/x]` in a tensor name raises, `[old]` in a path silently disappears and ESC sequences in a
    name act on the terminal.
    """
    return rich_escape(printable(text))


def message_line(console: Console, markup_text: str) -> None:
    """One message (a note, a warning, an error) as rich markup. Piped or logged it stays one line, so it greps
    whole; on a terminal rich wraps it between words, where the terminal itself would cut a version or a run id
    mid-token ("2.14.1+c" / "u130"). A command to paste (a line that is an indented `mpsup ...`) is never
    broken: the terminal folds it on screen, and it pastes as one command."""
    whole = not console.is_terminal or markup_text.startswith(COMMAND_PREFIX)
    console.print(markup_text, highlight=False, soft_wrap=whole)


COMMAND_PREFIX = "  mpsup "  # a line that is a command to copy, as bench, bisect and report print them


def warning_line(message: str, console: Console = stderr_console) -> None:
    """A problem mpsup stepped around (a bad record skipped): one yellow line on stderr."""
    message_line(console, f"[yellow]warning:[/] {safe(message)}")


def error_line(message: str) -> None:
    message_line(stderr_console, f"[bold red]mpsup:[/] {safe(message)}")
