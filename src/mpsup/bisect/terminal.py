"""`mpsup bisect` as the command line runs it: a line per event and each step's bench bars on stderr, the answer on
stdout (or one JSON document)."""

from __future__ import annotations

from mpsup.bisect.request import BisectRequest


def run_and_render(request: BisectRequest, as_json: bool) -> int:
    """Bisect, show the answer, and return the exit code the result carries."""
    from mpsup.bench.render import bench_progress
    from mpsup.bisect import command
    from mpsup.bisect.render import progress_printer, render_result
    from mpsup.console import stderr_console, stdout_console, warning_line

    result = command.run(
        request, progress_printer(stderr_console), bars=lambda: bench_progress(stderr_console), warn=warning_line
    )
    render_result(result, stdout_console, as_json)
    return result.exit_code
