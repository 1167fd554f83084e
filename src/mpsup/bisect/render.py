"""What `mpsup bisect` shows: a line per step on stderr as it goes, the answer and every step's figures at
the end (stdout), or one JSON document."""

from __future__ import annotations

import math

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from mpsup.bisect.events import (
    Installed,
    Installing,
    NightliesListed,
    Released,
    Resumed,
    Reused,
    StepFinished,
    StepStarted,
    ThrowawaysRemoved,
)
from mpsup.bisect.logic import Figure, max_paired_runs
from mpsup.bisect.nightlies import Throwaway
from mpsup.bisect.results import BisectResult, EnvFacts, Step
from mpsup.console import emit_json, safe
from mpsup.progress import Event, Progress
from mpsup.units import fmt_bytes, fmt_interval


def _figure(f: Figure) -> str:
    return fmt_interval(f.speedup, f.low, f.high)


def _call(f: Figure) -> str:
    """The time call, and under --numerics the answers' verdict beside it."""
    return f"{f.change}, {f.accuracy}" if f.accuracy else f.change


def step_line(step: Step, environment: str, number: int) -> str:
    """One finished step, as plain text: what the progress line and the docs show."""
    figs = "; ".join(f"{f.name} {_figure(f)} {_call(f)}" for f in step.figures) or "no figures"
    return f"step {number}: {environment} -> {step.verdict} ({figs}; run {step.run_id}, {step.seconds:.0f} s)"


def event_line(event: Event) -> str | None:
    """One progress event as rich markup, every value escaped; None where it has nothing to say. An event this
    has no case for raises TypeError: a new event is never dropped in silence."""
    match event:
        case Resumed():
            return f"continuing from the journal: {event.steps} step(s) done ({safe(event.journal)})"
        case StepStarted():
            again = f", again at {event.budget_s:g} s (twice the budget)" if event.attempt > 1 else ""
            return (
                f"[bold]step {event.number}[/]: {safe(event.environment)} (torch {safe(event.torch)}) "
                f"against {safe(event.good)}, {event.budget_s:g} s per workload{again}"
            )
        case StepFinished():
            return safe(step_line(event.step, event.environment, event.number))
        case NightliesListed():
            skipped = f" ({event.skipped} without a wheel for this Python left out)" if event.skipped else ""
            return safe(
                f"{event.builds} nightly builds from {event.first} to {event.last} on {event.index_url}{skipped}; "
                f"installed one at a time as the bisect probes them ({event.at_most} when every call is clear) "
                f"under {event.folder}"
            )
        case Installing():
            size = f", a {fmt_bytes(event.size)} wheel" if event.size else ""
            return safe(f"installing torch {event.version} with {event.installer}{size} into {event.prefix}")
        case Installed():
            return safe(f"installed torch {event.version} in {event.seconds:.0f} s")
        case Released():
            return safe(
                f"removed torch {event.version}: its step is called, the bisect needs it no more ({event.prefix})"
            )
        case Reused():
            return safe(f"reusing torch {event.version}, installed by an earlier run of this bisect ({event.prefix})")
        case ThrowawaysRemoved():
            if not event.removed:
                return None
            return safe(f"removed the {event.removed} throwaway environment(s) this bisect installed ({event.folder})")
    raise TypeError(f"bisect progress has no line for {type(event).__name__}")


def progress_printer(console: Console) -> Progress:
    """The bisect's progress as a line per event on `console`."""

    def on_event(event: Event) -> None:
        line = event_line(event)
        if line is not None:
            console.print(line, highlight=False, soft_wrap=True)

    return on_event


def throwaway_lines(t: Throwaway) -> list[str]:
    """What a bisect over nightlies installed, and where it is at the end."""
    n = len(t.installed)
    lines = [
        f"Installed {n} of the {t.builds} builds over this bisect"
        + (f" ({len(t.reused)} reused from an earlier run)" if t.reused else "")
        + f"; log2(N)+2 = {math.log2(t.builds) + 2:.1f}."
    ]
    if t.state == "kept":
        lines.append(
            f"Kept (--keep-envs): {len(t.left)} environment(s) in {t.folder}, each a venv with its bin/python; "
            f"rerunning this bisect without --keep-envs removes them, or: rm -rf {t.folder}"
        )
    elif t.state == "kept-for-resume":
        lines.append(
            f"Kept for the rerun: {len(t.left)} environment(s) in {t.folder}; `mpsup bisect --resume` reuses them "
            "and removes them at its end (unless --keep-envs)."
        )
    elif t.state == "removed":
        lines.append(f"Removed at the end: nothing of them is left ({t.folder}); --keep-envs keeps them.")
    if t.skipped:
        lines.append(
            f"{len(t.skipped)} build(s) in the range have no wheel for this Python and were left out: "
            + ", ".join(t.skipped[:5])
            + (", ..." if len(t.skipped) > 5 else "")
        )
    return lines


def _env(facts: EnvFacts) -> str:
    rev = facts.git_version[:12] if facts.git_version else "revision unknown"
    return f"torch {facts.torch or '?'}, git {rev}"


def _print_answer(result: BisectResult, console: Console) -> None:
    """The headline: the first bad and last good builds, what is left open, or where the bisect stopped."""
    d = result.done
    names = result.environments
    p = console.print
    if result.interrupted:
        p(
            f"Interrupted ({result.interrupted}) after {result.paired_runs} finished step(s); the journal keeps them: "
            "rerun the same command (or `mpsup bisect --resume`) to continue.",
            highlight=False,
            soft_wrap=True,
        )
    elif d is not None:
        good = result.facts.get(d.last_good, EnvFacts())
        bad = result.facts.get(d.first_bad, EnvFacts())
        if d.status == "found":
            p(f"[bold]First bad:[/] {safe(names[d.first_bad])} ({safe(_env(bad))})", highlight=False, soft_wrap=True)
            p(f"[bold]Last good:[/] {safe(names[d.last_good])} ({safe(_env(good))})", highlight=False, soft_wrap=True)
            url = result.compare_url()
            if url:
                p(f"Compare:   {url}", highlight=False, soft_wrap=True)
            elif good.git_version and good.git_version == bad.git_version:
                p(f"Compare:   nothing to compare: both are git {good.git_version[:12]}", highlight=False)
        elif d.status == "inconclusive":
            p(
                f"[bold]Inconclusive:[/] the first bad build is after {safe(names[d.last_good])} and at or before "
                f"{safe(names[d.first_bad])}",
                highlight=False,
                soft_wrap=True,
            )
        elif d.status == "no-regression":
            p(
                f"[bold]No regression[/] between {safe(names[0])} and {safe(names[-1])} at this budget",
                highlight=False,
                soft_wrap=True,
            )
        else:
            p(
                f"[bold]Inconclusive:[/] {safe(names[0])} and {safe(names[-1])} not told apart",
                highlight=False,
                soft_wrap=True,
            )


def render_result(result: BisectResult, console: Console, as_json: bool) -> None:
    if as_json:
        emit_json(result.to_json())
        return
    _print_answer(result, console)
    d = result.done
    names = result.environments
    p = console.print
    n = len(names)
    resumed = f"; {result.resumed_steps} of them from the journal" if result.resumed_steps else ""
    p(
        f"{result.paired_runs} paired run(s) in {result.elapsed_s / 60:.1f} min over {n} environments "
        f"({max_paired_runs(n)} when every call is clear; log2(N)+2 = {math.log2(n) + 2:.1f}){resumed}",
        highlight=False,
        soft_wrap=True,
    )
    if result.steps:
        table = _steps_table(result)
        needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
        if needed <= console.width:
            p(table)
        else:  # a line per step: squeezed, the table would cut paths and figures to "/tm…" and "1.0…"
            for k, s in enumerate(result.steps, 1):
                p(safe(step_line(s, result.environments[s.index], k)), highlight=False, soft_wrap=True)
    if result.steps:  # the legend of figures shown, not of a table that is not there
        p(
            "speedup: the good build's time / this build's (below 1x: slower), paired as `bench --candidate`.",
            highlight=False,
            soft_wrap=True,
        )
    for note in result.notes:
        p(safe(note), highlight=False, soft_wrap=True)
    if result.throwaway is not None:
        for line in throwaway_lines(result.throwaway):
            p(safe(line), highlight=False, soft_wrap=True)
    # Only where the ends differ, and in torch's source: `report --upstream` writes up a regression and refuses
    # a run without one, and builds of one git revision hold no change for PyTorch to look at.
    revs = [result.facts.get(i, EnvFacts()).git_version for i in ((d.last_good, d.first_bad) if d else ())]
    one_revision = bool(revs and revs[0] and revs[0] == revs[1])
    if d is not None and d.status in ("found", "inconclusive") and not result.interrupted and not one_revision:
        p("An issue body for PyTorch with a standalone repro script:", highlight=False)
        p("  mpsup report --upstream", highlight=False, soft_wrap=True)  # its own line: pasted whole


def _steps_table(result: BisectResult) -> Table:
    # Builds named by their versions (--nightlies) would show each version twice: the torch column goes.
    torch_col = any(result.facts.get(s.index, EnvFacts()).torch != result.environments[s.index] for s in result.steps)
    cols = ("step", "environment", *(("torch",) if torch_col else ()), "budget", "workload", "speedup")
    table = Table(box=None, pad_edge=False)
    for col in (*cols, "call", "step is"):
        table.add_column(col, justify="right" if col in ("step", "speedup", "budget") else "left")
    table.add_column("run", no_wrap=True)
    for k, s in enumerate(result.steps, 1):
        facts = result.facts.get(s.index, EnvFacts())
        torch = (safe(facts.torch or "?"),) if torch_col else ()
        for j, f in enumerate(s.figures):
            first = j == 0
            table.add_row(
                str(k) if first else "",
                safe(result.environments[s.index]) if first else "",
                *(torch if first else ("",) * len(torch)),
                f"{s.budget_s:g} s" if first else "",
                safe(f.name),
                _figure(f),
                _call(f),
                s.verdict if first else "",
                safe(s.run_id or "") if first else "",
            )
        if not s.figures:
            blank = ("",) * len(torch)
            table.add_row(
                str(k), safe(result.environments[s.index]), *blank, f"{s.budget_s:g} s", "", "", "", s.verdict
            )
    return table
