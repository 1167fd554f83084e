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


# --- GitHub Markdown: text mpsup did not write, inert wherever it lands in an issue body ---

# Plain words and version numbers stay bare: none of these characters starts a mention (@), a reference (#),
# HTML (<), a link ([), emphasis (* _), code (`) or a URL (:); a `www.` inside one could still read as a link.
_MD_BARE = re.compile(r"[0-9][0-9A-Za-z.+-]*|[A-Za-z]+")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def one_line(text: object, limit: int = 200) -> str:
    """Record text on one line, controls shown as escapes, at most `limit` characters."""
    return _LINE_BREAKS.sub(" ", printable(text))[:limit]


def md_code(text: object, *, table: bool = False, limit: int = 200) -> str:
    """Record text for a GitHub Markdown body: a plain word or version as it is, anything else as a code span,
    where GitHub links no @mention or #N reference and renders no HTML, link, image or emphasis. The span's backtick
    fence is longer than any run of backticks inside, so nothing inside can close it; on one line, so nothing
    can start a heading or a fence; in a table cell `|` is escaped, which GFM splits cells on even in a span."""
    value = one_line(text, limit)
    if _MD_BARE.fullmatch(value) and "www" not in value.lower():
        return value
    fence = "`" * (max((len(run) for run in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    if table:
        value = value.replace("|", "\\|")
    return f"{fence}{pad}{value}{pad}{fence}"


def md_comment(text: str) -> str:
    """Text for inside an HTML comment `<!-- ... -->`: without `<` and `>` nothing in it can end the comment
    (`-->`, `--!>`) or open another; they become the look-alikes ‹ and ›."""
    return one_line(text, 2000).replace("<", "\u2039").replace(">", "\u203a")


def md_fence(text: str, info: str = "") -> list[str]:
    """A fenced code block around `text`: its fence longer than any backtick run inside, so no line closes it."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return [f"{fence}{info}", *text.split("\n"), fence]
