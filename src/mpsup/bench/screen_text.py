"""Text helpers the bench screens share: counts with their nouns, the narrow test, wrapped lines and
commands printed whole."""

from __future__ import annotations

import re
import textwrap

from rich.console import Console
from rich.text import Text

from mpsup.console import COMMAND_PREFIX, NARROW, printable


def plural(n: int, noun: str) -> str:
    """`1 workload`, `2 workloads`: a count and its noun, agreeing."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def is_narrow(console: Console) -> bool:
    return console.width < NARROW


# A `...` span is a name, an option or a command to copy: wrapping keeps it on one line, in one piece.
_SPAN = re.compile(r"`[^`\n]*`")

_HELD = "\x00"  # stands for a space inside a span while wrapping; printable() leaves none in the text


def print_wrapped(console: Console, text: str, *, bullet: bool = False, style: str = "") -> None:
    """Plain text (no markup; names pass through printable here), wrapped at the console's width with a hanging
    indent, at spaces alone: never cut mid-word, nor inside a `...` span (rich's wrapping would cut both, and its
    grid pads every line to the full width). Printed as soft-wrapped lines: no newline beyond the wrap's own."""
    held = _SPAN.sub(lambda m: m.group().replace(" ", _HELD), printable(text))
    first, rest = ("- ", "  ") if bullet else ("", "")
    wrapped = textwrap.fill(
        held,
        width=max(20, console.width),
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=False,
    )
    console.print(Text(wrapped.replace(_HELD, " "), style=style), soft_wrap=True)


def print_lines(lines: list[str], console: Console) -> None:
    """Lines of rich markup. A command to copy (a line that is an indented `mpsup ...`) is printed whole on its
    line, however narrow the terminal: wrapped by rich it would paste as two commands; a terminal only folds it
    on screen."""
    for line in lines:
        console.print(line, highlight=False, soft_wrap=line.startswith(COMMAND_PREFIX))


def name_list(names: list[str]) -> str:
    """`linear/a, linear/b`, or `moe/* (12)` when many share a first path segment: a reason's line stays short."""
    if len(names) <= 3:
        return ", ".join(names)
    heads = {n.split("/", 1)[0] for n in names}
    return (
        f"{next(iter(heads))}/* ({len(names)})"
        if len(heads) == 1
        else f"{', '.join(names[:2])} and {len(names) - 2} more"
    )
