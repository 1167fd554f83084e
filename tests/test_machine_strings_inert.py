"""What the machine says is data (issue 56, item 5): a saved record whose device name, machine string, platform,
OS build, conditions and per-visit readings hold a code fence, @mentions, `<img>` and `<details>` tags and an
issue number shows them as text on every surface: the terminal report and the bench screen (rich markup escaped),
Markdown, HTML and the `report --upstream` body. Each surface is compared with the same record holding plain text,
so only what the hostile text would add counts."""

from __future__ import annotations

import copy
import io
import re
from typing import Any

import pytest
from rich.console import Console

from mpsup.bench.screen import render_run
from mpsup.report.analysis import analyze
from mpsup.report.render import document, to_terminal
from mpsup.report.upstream import build_upstream
from mpsup.runs.schema import RunRecord
from tests.rendered_page import Page, github
from tests.synthetic import paired_record
from tests.test_machine_moved import with_visits

HOSTILE = "```\n@everyone <img src=x onerror=alert(1)> <details open><summary>x</summary> #123 [/] ``` @mpsup-bot"
PLAIN = "Apple M4 Max"


def _record(text: str) -> dict[str, Any]:
    """A paired run the report calls a regression (so --upstream writes a body), with `text` in every field the
    machine fills: the device name, machine and platform, the OS build and power source, and a thermal level that
    rose during the run (so the moved line carries it too)."""
    doc = paired_record(0.5, count=3)
    for env in doc["environments"]:
        env.update(device_name=text, machine=text, platform=text)
    doc["hygiene"] = {
        "before": {"os_build": text, "power_source": text, "thermal_pressure": "nominal"},
        "after": {"os_build": text, "power_source": text, "thermal_pressure": text},
        "changed": [f"thermal pressure changed from nominal to {text}"],
    }
    doc["machine_state"] = {"reads": [text], "absent": {text: text}}
    return with_visits(
        doc,
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.3, "candidate": 1.3}],
        [({"thermal_pressure": "nominal"}, {"thermal_pressure": "nominal"}), ({"thermal_pressure": text}, {})],
    )


def _surfaces(doc: dict[str, Any]) -> dict[str, str]:
    record = RunRecord.from_json(copy.deepcopy(doc), "machine.json")
    analysis = analyze(record)
    out = {}
    for name, show in (
        ("terminal", lambda c: to_terminal([analysis], c, details=True)),
        ("bench screen", lambda c: render_run(doc, c, details=False)),
        ("bench details", lambda c: render_run(doc, c, details=True)),
    ):
        buf = io.StringIO()
        show(Console(file=buf, width=200, color_system=None))
        out[name] = buf.getvalue()
    out["markdown"] = document([analysis], "markdown")
    out["html"] = document([analysis], "html")
    out["upstream"] = build_upstream(analysis, record, keep_paths=True).markdown
    return out


@pytest.fixture(scope="module")
def surfaces() -> tuple[dict[str, str], dict[str, str]]:
    return _surfaces(_record(HOSTILE)), _surfaces(_record(PLAIN))


def test_the_machine_strings_reach_every_surface(surfaces: tuple[dict[str, str], dict[str, str]]) -> None:
    hostile, _ = surfaces
    for name, text in hostile.items():
        assert "everyone" in text, f"the machine's text never reached {name}"
    # The moved line carries the hostile thermal level on every surface that shows it.
    for name in ("terminal", "markdown", "html", "upstream", "bench screen"):
        assert "s thermal pressure changed from nominal to" in hostile[name], name


@pytest.mark.parametrize("name", ["markdown", "upstream"])
def test_github_links_no_one_and_renders_no_tag(surfaces: tuple[dict[str, str], dict[str, str]], name: str) -> None:
    hostile, plain = surfaces
    page, before = github(hostile[name]), github(plain[name])
    # A code span is how Markdown keeps text GitHub would link inert: the one tag the record's text may add.
    assert sorted(set(page.tags) - set(before.tags) - {"code"}) == [], "a tag from the record was rendered"
    assert page.tags.count("img") == before.tags.count("img") and page.tags.count("details") == before.tags.count(
        "details"
    )
    live = "\n".join(page.live)
    assert "@everyone" not in live and "@mpsup-bot" not in live, "a live @mention"
    assert re.findall(r"#\d", live) == re.findall(r"#\d", "\n".join(before.live)), "a live issue reference"
    # The fenced blocks close where the body closes them: as many as the plain record's.
    assert page.tags.count("pre") == before.tags.count("pre")


def test_the_html_report_renders_no_tag_from_the_record(surfaces: tuple[dict[str, str], dict[str, str]]) -> None:
    hostile, plain = surfaces
    page, before = Page(hostile["html"]), Page(plain["html"])
    assert sorted(set(page.tags) - set(before.tags)) == []
    assert page.tags.count("img") == before.tags.count("img")
    assert page.tags.count("details") == before.tags.count("details")
    assert "&lt;img src=x onerror=alert(1)&gt;" in hostile["html"]


@pytest.mark.parametrize("name", ["terminal", "bench screen", "bench details"])
def test_the_terminal_shows_the_text_as_it_is(surfaces: tuple[dict[str, str], dict[str, str]], name: str) -> None:
    hostile, _ = surfaces
    # rich markup escaped: `[/]` is shown, not taken as a closing tag (which would raise); the tags are plain text.
    assert "[/]" in hostile[name] and "<img src=x onerror=alert(1)>" in hostile[name]
    assert "\x1b" not in hostile[name]


def test_the_bench_screen_says_the_absent_reader_in_its_own_words(
    surfaces: tuple[dict[str, str], dict[str, str]],
) -> None:
    hostile, _ = surfaces
    assert "Not read during the run: " in hostile["bench details"]
