"""Notes, warnings and errors: one greppable line when piped, wrapped between words on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from mpsup.console import message_line, warning_line

NOTE = "Reporting run 20261205T071500Z-abcdef (paired, cpu, torch 2.13.0 vs 2.14.1+cu130, 162 workloads): the newest"


def _console(*, terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=80, force_terminal=terminal, color_system=None), buf


def test_piped_message_stays_one_line_for_grep():
    console, buf = _console(terminal=False)
    message_line(console, NOTE)
    assert buf.getvalue() == NOTE + "\n"


def test_terminal_message_breaks_between_words_never_inside_a_version_or_id():
    console, buf = _console(terminal=True)
    message_line(console, NOTE)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines)
    words = {w for line in lines for w in line.split()}
    assert {"2.14.1+cu130,", "20261205T071500Z-abcdef"} <= words  # whole tokens, on one line each
    assert " ".join(" ".join(lines).split()) == NOTE


def test_warning_on_a_terminal_wraps_and_keeps_its_label():
    console, buf = _console(terminal=True)
    warning_line("skipped " + "/data/runs/20261205T071500Z-abcdef.json: not valid JSON " * 2, console)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("warning: skipped") and len(lines) >= 2 and all(len(x) <= 80 for x in lines)
    assert "/data/runs/20261205T071500Z-abcdef.json:" in {w for line in lines for w in line.split()}


def test_a_command_to_paste_is_never_broken_on_a_terminal():
    console, buf = _console(terminal=True)
    command = "  mpsup report --baseline 20261203T110000Z-s6aaaa --candidate 20261203T130000Z-s6bbbb --json"
    message_line(console, command)
    assert buf.getvalue() == command + "\n"  # no newline inserted: the terminal folds it, the paste is whole
