"""Bench output, as the CLI calls it: progress on stderr (bench/progress_bar.py), `--list` (bench/listing.py),
the finished run on screen (bench/screen.py) or as one JSON document (bench/summary.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpsup.bench.listing import census_progress, print_plan_notes, render_list
from mpsup.bench.progress_bar import bench_progress
from mpsup.bench.screen import render_run
from mpsup.bench.summary import run_summary
from mpsup.console import emit_json, error_line, safe

if TYPE_CHECKING:
    from rich.console import Console

    from mpsup.bench.command import BenchResult

__all__ = ["bench_progress", "census_progress", "print_plan_notes", "render_list", "render_result"]


def render_result(
    result: BenchResult, as_json: bool, console: Console, details: bool = False, *, selected: int | None = None
) -> None:
    """The finished run: its JSON summary or its tables, and the one line saying why it stopped early.
    `selected`: how many workloads the plan held (`len(plan.workloads)`), for a stopped run's count."""
    record = result.record
    if as_json:
        emit_json(run_summary(record, str(result.path) if result.path else None))
    else:
        render_run(record, console, details, selected=selected)
        console.print(f"Run record: {safe(result.path)}", highlight=False, soft_wrap=True)
    if record.get("failure") and not record.get("interrupted"):
        error_line(f"{record['failure']}; the finished measurements are in {result.path}")
