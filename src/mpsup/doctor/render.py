"""Render a DoctorReport as a rich table, then the candidate environments."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mpsup.console import NARROW, emit_json, safe, stderr_console, stdout_console
from mpsup.doctor.checks import Finding, Status
from mpsup.doctor.command import DoctorResult
from mpsup.doctor.run import INSTALL_RC_HINT, DoctorReport

MARKS = {
    Status.OK: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "red"),
    Status.UNKNOWN: ("?", "dim"),
}


def render_result(result: DoctorResult, *, as_json: bool, verbose: bool = False) -> None:
    if result.snapshot_written is not None:
        stderr_console.print(f"snapshot written to {safe(result.snapshot_written)}")
    if as_json:
        emit_json(result.report.to_json())
    else:
        render_doctor(result.report, stdout_console, verbose=verbose)


def render_doctor(report: DoctorReport, console: Console, *, verbose: bool = False) -> None:
    # Findings quote what mpsup did not write (paths, env values, torch's messages): every cell is escaped.
    if console.width < NARROW:
        console.print(_stacked(report.findings, verbose=verbose))
    else:
        console.print(_table(report.findings, verbose=verbose))
    _render_environments(report.environments, console)
    style = "green" if report.ready else "red"
    console.print(Text(report.summary(), style=f"bold {style}"))


def _table(findings: list[Finding], *, verbose: bool) -> Table:
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("", width=1)
    table.add_column("check")
    table.add_column("finding", overflow="fold")
    table.add_column("fix", overflow="fold")
    for f in findings:
        mark, style = MARKS[f.status]
        table.add_row(Text(mark, style=style), safe(f.title), safe(f.summary), safe(f.fix or ""))
        if verbose and f.details:
            table.add_row("", "", Text(_details(f), style="dim"), "")
    return table


def _stacked(findings: list[Finding], *, verbose: bool) -> Table:
    """Below NARROW four columns squeeze each into a sliver: one block per check, finding and fix under its title."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1)
    grid.add_column(overflow="fold")
    for f in findings:
        mark, style = MARKS[f.status]
        body = Text(f.title, style="bold")
        body.append(f"\n{f.summary}")
        if f.fix:
            body.append("\nfix: ", style="bold")
            body.append(f.fix)
        if verbose and f.details:
            body.append(f"\n{_details(f)}", style="dim")
        grid.add_row(Text(mark, style=style), body)
    return grid


def _details(f: Finding) -> str:
    return ", ".join(f"{k}={v}" for k, v in f.details.items() if v is not None)


def _environment_line(env: dict[str, Any]) -> str:
    head = f"torch {env.get('torch_version', '?')}" + (f" ({env['channel']})" if env.get("channel") else "")
    rest = [f"Python {env.get('python_version', '?')}", str(env.get("mode", "?"))]
    if env.get("created_at"):
        rest.append(f"installed {env['created_at']}")
    line = f"{env.get('name', '?')}: {head}, " + ", ".join(rest)
    return line + (f" - {env['note']}" if env.get("note") else "")


def _render_environments(environments: list[dict[str, Any]] | None, console: Console) -> None:
    if environments is None:
        console.print(Text("Candidate environments: not recorded in this snapshot", style="dim"))
        return
    if not environments:
        console.print(Text(f"Candidate environments: {INSTALL_RC_HINT}"))
        return
    console.print(
        Text("Candidate environments (mpsup install-rc; `mpsup bench --candidate NAME` measures one):", style="bold")
    )
    if console.width >= NARROW:
        for env in environments:
            console.print(Text(f"  {_environment_line(env)}"))
        return
    # A wrapped line starts under the name's first letter, not at the margin.
    grid = Table.grid()
    grid.add_column(width=2)
    grid.add_column(overflow="fold")
    for env in environments:
        grid.add_row("", Text(_environment_line(env)))
    console.print(grid)
