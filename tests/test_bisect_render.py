"""The bisect's closing table at a narrow terminal: never a cut environment path or figure."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from mpsup.bisect.command import BisectResult, EnvFacts, Step
from mpsup.bisect.logic import Done, Figure
from mpsup.bisect.render import render_result

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
    assert "0.884x [0.870, 0.900] slower" in flat and "run 20261205T022711Z-d5ffd8" in flat


def test_a_wide_terminal_keeps_the_table():
    text = _render(200)
    assert "95% interval" in text and "…" not in text
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
