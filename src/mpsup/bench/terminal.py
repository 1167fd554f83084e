"""`mpsup bench` as the command line runs it: the plan's notes and bars on stderr, the listing or the result on
stdout (or one JSON document)."""

from __future__ import annotations

from mpsup.bench.command import BenchRequest


def run_and_render(request: BenchRequest, *, list_only: bool, as_json: bool, details: bool) -> int:
    """Plan, then list or measure, show what came of it, and return the exit code it carries."""
    from mpsup.bench import command
    from mpsup.bench.render import bench_progress, census_progress, print_plan_notes, render_list, render_result
    from mpsup.console import safe, stderr_console, stdout_console, warning_line

    plan = command.prepare(request)
    print_plan_notes(plan, stderr_console)
    if list_only:
        censuses = command.list_census(plan, progress=census_progress(stderr_console))
        render_list(plan, as_json, stdout_console, censuses)
        return 0
    estimate = command.time_estimate(plan)
    if estimate:
        stderr_console.print(f"planned: {safe(estimate)}", highlight=False, soft_wrap=True)
    with bench_progress(stderr_console) as on_event:
        result = command.run(plan, progress=on_event, warn=warning_line)
    render_result(result, as_json, stdout_console, details, selected=len(plan.workloads))
    return result.exit_code
