"""Errors that end a command with a clear one-line message instead of a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or usage: the CLI prints the message on one line and exits 2."""

    exit_code = 2


class OperationFailed(Exception):
    """The thing attempted did not succeed (install, bench): one line, exit 1."""

    exit_code = 1
