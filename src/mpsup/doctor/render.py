"""Render a DoctorReport as a rich table, then the candidate environments."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mpsup.doctor.checks import Status
from mpsup.doctor.run import INSTALL_RC_HINT, DoctorReport
from mpsup.render import safe

MARKS = {
    Status.OK: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "red"),
    Status.UNKNOWN: ("?", "dim"),
}


def render_doctor(report: DoctorReport, console: Console, *, verbose: bool = False) -> None:
    # Findings quote what mpsup did not write (paths, env values, torch's messages): every cell is escaped.
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("", width=1)
    table.add_column("check")
    table.add_column("finding", overflow="fold")
    table.add_column("fix", overflow="fold")
    for f in report.findings:
        mark, style = MARKS[f.status]
        table.add_row(Text(mark, style=style), safe(f.title), safe(f.summary), safe(f.fix or ""))
        if verbose and f.details:
            detail = ", ".join(f"{k}={v}" for k, v in f.details.items() if v is not None)
            table.add_row("", "", Text(detail, style="dim"), "")
    console.print(table)
    _render_environments(report.environments, console)
    style = "red" if report.failed else "green"
    console.print(Text(report.summary(), style=f"bold {style}"))


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
    for env in environments:
        console.print(Text(f"  {_environment_line(env)}"))
