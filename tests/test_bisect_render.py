"""What the bisect shows: its closing table at a narrow terminal (never a cut environment path or figure) and a
line for every progress event."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from mpsup.bisect import events
from mpsup.bisect.command import BisectResult, EnvFacts, Step
from mpsup.bisect.logic import Done, Figure
from mpsup.bisect.render import event_line, progress_printer, render_result
from mpsup.progress import Event

ENVS = tuple(f"/tmp/a-rather-long-folder/of-environments/env{i}" for i in range(1, 9))


def _result() -> BisectResult:
    steps = (
        Step(
            7,
            0,
            0.5,
            "20261205T022711Z-d5ffd8",
            "bad",
            (Figure("linear/2048x2304/t1", "slower", 0.884, 0.87, 0.9),),
            30,
        ),
        Step(
            3,
            0,
            0.5,
            "20261205T022811Z-aaaaaa",
            "good",
            (Figure("linear/2048x2304/t1", "same", 1.002, 0.99, 1.01),),
            28,
        ),
    )
    facts = {i: EnvFacts(torch="2.11.0+cu130", git_version="70d99e998b" if i < 4 else "abcdef1234") for i in range(8)}
    return BisectResult(
        environments=ENVS,
        pythons=ENVS,
        device="cuda",
        workloads=("linear/2048x2304/t1",),
        targets=("linear/2048x2304/t1",),
        budget_s=0.5,
        threshold=0.03,
        steps=steps,
        facts=facts,
        done=Done("found", 3, 4),
        journal=Path("/tmp/j.json"),
        resumed_steps=0,
        elapsed_s=90.0,
    )


def _render(width: int, result: BisectResult | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=True)
    render_result(result or _result(), console, as_json=False)
    return out.getvalue()


def test_at_80_columns_each_step_is_a_whole_line_not_a_cut_table():
    text = _render(80)
    assert "…" not in text
    flat = text.replace("\n", "")
    for env in (ENVS[7], ENVS[3]):
        assert env in flat
    assert "0.884x (95% CI 0.870-0.900x) slower" in flat and "run 20261205T022711Z-d5ffd8" in flat


def test_a_wide_terminal_keeps_the_table():
    text = _render(200)
    assert "0.884x (95% CI 0.870-0.900x)" in text and "…" not in text
    assert ENVS[7] in text


@pytest.mark.parametrize(
    ("status", "offered"), [("found", True), ("no-regression", False), ("ends-inconclusive", False)]
)
def test_the_upstream_report_is_offered_only_where_there_is_a_regression(status: str, offered: bool):
    text = _render(80, replace(_result(), done=Done(status, 3, 4)))
    # `report --upstream` refuses a run without a regression: offering it there sent users into an error.
    assert ("mpsup report --upstream" in text) is offered
    if offered:  # on a line of its own, whole, for pasting
        assert "  mpsup report --upstream" in text.splitlines()


def test_builds_of_one_git_revision_are_not_offered_upstream():
    result = _result()
    one = {i: EnvFacts(torch="2.11.0+cu130", git_version="70d99e998b") for i in range(8)}
    two = {**one, 4: EnvFacts(torch="2.11.0+cu130", git_version="abcdef1234")}
    assert "mpsup report --upstream" not in _render(80, replace(result, facts=one))  # nothing in torch changed
    assert "mpsup report --upstream" in _render(80, replace(result, facts=two))


def test_a_bisect_stopped_before_any_step_shows_no_legend():
    text = _render(80, replace(_result(), steps=(), done=None, interrupted="SIGINT", elapsed_s=3.0))
    assert "Interrupted (SIGINT) after 0 finished step(s)" in " ".join(text.split())
    assert "speedup:" not in text


# -- progress: one line per typed event ----------------------------------------------------------------------------

_STEP = _result().steps[0]
_SAMPLES = {
    events.Resumed: events.Resumed(2, "/tmp/j.json"),
    events.StepStarted: events.StepStarted(3, 5, 2, 1.0, "env6", "env1", "2.11.0", 4),
    events.StepFinished: events.StepFinished(_STEP, "env8", 1),
    events.NightliesListed: events.NightliesListed(
        8, "2.16.0.dev20261101", "2.16.0.dev20261109", "file:///i", 1, "/f", 4
    ),
    events.Installing: events.Installing("2.16.0.dev20261105", "/f/a", 3 << 20, "uv"),
    events.Installed: events.Installed("2.16.0.dev20261105", "/f/a", 12.0),
    events.Reused: events.Reused("2.16.0.dev20261101", "/f/b"),
    events.Released: events.Released("2.16.0.dev20261109", "/f/c"),
    events.ThrowawaysRemoved: events.ThrowawaysRemoved(2, "/f"),
}


def test_every_bisect_event_has_a_line():
    declared = {
        c
        for c in vars(events).values()
        if isinstance(c, type) and issubclass(c, Event) and c is not Event and c.__module__ == events.__name__
    }
    assert declared == set(_SAMPLES)  # a new event needs a sample here, and so a line
    for cls, event in _SAMPLES.items():
        line = event_line(event)
        assert line and line.strip(), cls.__name__
    assert "again at 1 s (twice the budget)" in str(event_line(_SAMPLES[events.StepStarted]))
    assert "0.884x (95% CI 0.870-0.900x) slower" in str(event_line(_SAMPLES[events.StepFinished]))
    assert "a 3.0 MiB wheel" in str(event_line(_SAMPLES[events.Installing]))
    assert event_line(events.ThrowawaysRemoved(0, "/f")) is None  # nothing was installed: nothing to say


def test_an_event_without_a_line_is_an_error_not_silence():
    class Unknown(Event):
        pass

    with pytest.raises(TypeError, match="Unknown"):
        event_line(Unknown())


def test_the_printer_escapes_what_the_user_named():
    out = io.StringIO()
    printer = progress_printer(Console(file=out, width=200, color_system=None))
    printer(events.StepStarted(1, 7, 1, 0.5, "/tmp/[old]/env8", "/tmp/env1", None, 4))
    assert "step 1: /tmp/[old]/env8 (torch None) against /tmp/env1, 0.5 s per workload" in out.getvalue()
