"""The report's formats behind one interface: `document` writes a file's or stdout's text (Markdown, JSON, HTML),
`to_terminal` prints to a console. Each format is its own module (terminal, markdown, html with plots, runs_list)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console

from mpsup.report.analysis import Analysis
from mpsup.report.common import call_legend, esc, md, phase_line, summary_lines
from mpsup.report.html import render_html
from mpsup.report.markdown import render_markdown
from mpsup.report.runs_list import render_run_list
from mpsup.report.terminal import render_multi_terminal, render_terminal
from mpsup.safe_files import finite_json

__all__ = [
    "DOCUMENTS",
    "call_legend",
    "document",
    "esc",
    "json_document",
    "md",
    "multi_json",
    "phase_line",
    "render_html",
    "render_markdown",
    "render_multi_terminal",
    "render_run_list",
    "render_terminal",
    "summary_lines",
    "to_terminal",
]

# A document format: the analyses of one report (one run, or several machines) -> its whole text.
Document = Callable[[list[Analysis]], str]


def multi_json(analyses: list[Analysis]) -> dict[str, Any]:
    """Several runs in one document: the first's figures, the worst verdict, and every run under `machines`."""
    worst = "benefit"
    order = ["benefit", "no-change", "mixed", "inconclusive", "regression"]
    for an in analyses:
        if order.index(an.verdict) > order.index(worst):
            worst = an.verdict
    first = analyses[0].to_json()
    return {**first, "verdict": worst, "machines": [an.to_json() for an in analyses]}


def json_doc(analyses: list[Analysis]) -> dict[str, Any]:
    """The report's JSON document: one run's, or several runs' (multi_json)."""
    return analyses[0].to_json() if len(analyses) == 1 else multi_json(analyses)


def json_document(analyses: list[Analysis]) -> str:
    """What --json prints on stdout, byte for byte."""
    return json.dumps(finite_json(json_doc(analyses)), indent=2, default=str, allow_nan=False) + "\n"


def _markdown_document(analyses: list[Analysis]) -> str:
    return "\n".join(render_markdown(a) for a in analyses)


def _html_document(analyses: list[Analysis]) -> str:
    # One page per report: several machines' pages would not make one valid HTML document (command refuses them).
    return render_html(analyses[0])


DOCUMENTS: dict[str, Document] = {"json": json_document, "markdown": _markdown_document, "html": _html_document}


def document(analyses: list[Analysis], fmt: str) -> str:
    """The whole text of a report in a document format (a key of DOCUMENTS)."""
    return DOCUMENTS[fmt](analyses)


def to_terminal(analyses: list[Analysis], console: Console, *, details: bool = False) -> None:
    """The report on a terminal: one run's screen, or several runs side by side."""
    if len(analyses) > 1:
        render_multi_terminal(analyses, console)
    else:
        render_terminal(analyses[0], console, details=details)
