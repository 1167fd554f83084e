"""How the mpsup process ends: our errors as one line (and one JSON document under --json), a reader that
closed our stdout pipe as a quiet exit 0, and everything else with the code it carries."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from itertools import pairwise
from typing import NoReturn

from mpsup.console import emit_json, error_line, stdout_console
from mpsup.errors import OperationFailed, UserError


def run_app(app: Callable[[], object], argv: list[str] | None = None) -> None:
    """Run the typer app. Its standalone mode turns usage errors into exit 2 with click's message; our own
    errors carry their exit code and one line of text."""
    args = sys.argv[1:] if argv is None else argv
    was_pipe = _stdout_is_pipe()
    try:
        app()
    except (UserError, OperationFailed) as exc:
        error_line(str(exc))
        if wants_json(args):
            # --json promises one JSON document on stdout: a failure is one too, for scripts to read.
            emit_json({"status": "error", "message": str(exc), "exit_code": exc.exit_code})
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _reader_left()
    except SystemExit as exc:
        # rich and typer both turn a broken stdout pipe into exit 1: rich's Console.on_broken_pipe marks
        # the console quiet, typer wraps the streams in a PacifyFlushWrapper. That is how we tell them from a failure.
        # A console of typer's own (help text) only leaves a trace in fd 1: our pipe became devnull.
        if exc.code == 1 and (
            stdout_console.quiet
            or type(sys.stdout).__name__ == "PacifyFlushWrapper"
            or (was_pipe and _stdout_is_devnull())
        ):
            _reader_left()
        raise


def wants_json(args: list[str]) -> bool:
    return "--json" in args or "--format=json" in args or ("--format", "json") in pairwise(args)


def _stdout_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(1).st_mode)
    except OSError:
        return False


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(1), os.stat(os.devnull))
    except OSError:
        return False


def _reader_left() -> NoReturn:
    """The reader closed our stdout (`mpsup report | head -2`): exit 0 quietly. stdout goes to devnull so
    that the interpreter's final flush cannot raise again (Python's signal docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
