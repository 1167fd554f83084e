"""The command line: parse options, call one core function, render what it returns."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mpsup.errors import OperationFailed, UserError
from mpsup.render import emit_json, error_line, stderr_console, stdout_console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Does the next PyTorch make your model faster on your Mac's GPU? Check, install, measure, report.",
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
PythonOpt = Annotated[
    Path | None, typer.Option("--python", help="Target interpreter (default: the one running mpsup).")
]


@app.callback()
def _root() -> None:
    """mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""


@app.command()
def doctor(
    python: PythonOpt = None,
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show each check's details.")] = False,
    save_snapshot: Annotated[
        Path | None, typer.Option("--save-snapshot", help="Write everything the checks read to FILE.")
    ] = None,
    from_snapshot: Annotated[
        Path | None, typer.Option("--from-snapshot", help="Run the checks on a saved snapshot instead.")
    ] = None,
) -> None:
    """Is this Mac and this Python ready for a PyTorch MPS upgrade?"""
    from mpsup.doctor.render import render_doctor
    from mpsup.doctor.run import diagnose
    from mpsup.host.snapshot import capture, load_snapshot, save_snapshot as write_snapshot

    if from_snapshot is not None and python is not None:
        raise UserError("--from-snapshot and --python cannot be combined: a snapshot already names its Python")
    if from_snapshot is not None:
        snapshot = load_snapshot(from_snapshot)
    else:
        if python is not None and not python.exists():
            raise UserError(f"{python}: no such interpreter")
        with stderr_console.status("Reading this machine and its Python..."):
            snapshot = capture(python)
    if save_snapshot is not None:
        write_snapshot(snapshot, save_snapshot)
        stderr_console.print(f"snapshot written to {save_snapshot}")
    report = diagnose(snapshot)
    if as_json:
        emit_json(report.to_json())
    else:
        render_doctor(report, stdout_console, verbose=verbose)
    raise typer.Exit(1 if report.failed else 0)


def main() -> None:
    # Typer's standalone mode turns usage errors into exit 2 with click's message; our own
    # errors carry their exit code and one line of text.
    try:
        app()
    except (UserError, OperationFailed) as exc:
        error_line(str(exc))
        sys.exit(exc.exit_code)
