"""Render a DoctorReport as a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mpsup.doctor.checks import Status
from mpsup.doctor.run import DoctorReport

MARKS = {
    Status.OK: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "red"),
    Status.UNKNOWN: ("?", "dim"),
}


def render_doctor(report: DoctorReport, console: Console, *, verbose: bool = False) -> None:
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("", width=1)
    table.add_column("check")
    table.add_column("finding", overflow="fold")
    table.add_column("fix", overflow="fold")
    for f in report.findings:
        mark, style = MARKS[f.status]
        table.add_row(Text(mark, style=style), f.title, f.summary, f.fix or "")
        if verbose and f.details:
            detail = ", ".join(f"{k}={v}" for k, v in f.details.items() if v is not None)
            table.add_row("", "", Text(detail, style="dim"), "")
    console.print(table)
    style = "red" if report.failed else "green"
    console.print(Text(report.summary(), style=f"bold {style}"))
