"""The report's formats behind one interface (report/render.py): each its own module, small; one interval format
everywhere; why a workload was not measured; and a model's page led by its phases."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.report.analysis import analyze
from mpsup.report.render import DOCUMENTS, document, render_html, render_markdown, to_terminal
from tests.synthetic import paired_record
from tests.test_attribution import record as phase_record

REPORT = Path(__file__).resolve().parent.parent / "src" / "mpsup" / "report"


def _terminal(doc: dict[str, Any], width: int = 140, *, details: bool = False) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    to_terminal([analyze(doc)], console, details=details)
    return console.export_text()


def _unmeasured() -> dict[str, Any]:
    doc = paired_record(1.2, run_id="gaps", count=8)
    doc["options"] = {"budget_s": 0.2}
    slow, unsupported = doc["workloads"][6], doc["workloads"][7]
    slow.update(status="too_slow", ratios=[], budget_needed_s=7.5, reason="too slow for this budget; skipped")
    unsupported.update(status="unsupported", ratios=[], reason="no kernel for bfloat16")
    for w in (slow, unsupported):
        w["envs"] = {"baseline": {"status": w["status"]}, "candidate": {"status": w["status"]}}
    return doc


@pytest.mark.parametrize("module", sorted(p.name for p in REPORT.glob("*.py")))
def test_every_report_module_is_small_and_every_function_short(module: str) -> None:
    text = (REPORT / module).read_text()
    assert len(text.splitlines()) <= 600
    long = [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80
    ]
    assert long == []


def test_one_document_call_serves_every_file_format() -> None:
    a = analyze(paired_record(1.3, run_id="one"))
    assert set(DOCUMENTS) == {"json", "markdown", "html"}
    assert document([a], "markdown") == render_markdown(a)
    assert document([a], "html") == render_html(a)
    assert document([a], "json").startswith('{\n  "schema": "mpsup.report/1"')


def test_an_interval_reads_the_same_on_every_format() -> None:
    a = analyze(paired_record(1.3, run_id="one"))
    w = a.workloads[0]
    assert w.speedup is not None
    shown = f"{w.speedup.estimate:.3f}x (95% CI {w.speedup.low:.3f}-{w.speedup.high:.3f}x)"
    assert shown in _terminal(paired_record(1.3, run_id="one"))
    assert shown in _terminal(paired_record(1.3, run_id="one"), width=70)  # the narrow table too
    assert shown in render_markdown(a)
    assert re.sub(r"<[^>]+>", "", render_html(a)).count(shown) >= 1
    for text in (render_markdown(a), _terminal(paired_record(1.3, run_id="one"))):
        assert not re.search(r"\[[0-9.]+, [0-9.]+\]", text)  # no second way of printing one


def test_the_report_says_why_a_workload_was_not_measured_and_the_budget_that_would() -> None:
    doc = _unmeasured()
    text = _terminal(doc, details=True)
    assert "too slow: --budget 7.5" in text  # the row: what measures this one
    assert "`mpsup bench --budget 7.5` measures them all" in " ".join(text.split())
    assert f"Not measured, unsupported (no kernel for bfloat16): {doc['workloads'][7]['name']}" in text
    md = render_markdown(analyze(doc))
    assert "too slow: --budget 7.5" in md and "unsupported (no kernel for bfloat16)" in md
    assert "no kernel for bfloat16" in render_html(analyze(doc))


def test_a_model_page_draws_its_phases_with_intervals_before_its_layers() -> None:
    page = render_html(analyze(phase_record()))
    assert page.index('id="phase-plot"') < page.index("Speedup per workload against its size")
    plot = page[page.index('<svg id="phase-plot"') :]
    plot = plot[: plot.index("</svg>")]
    assert plot.count('class="ppoint"') == 1 and plot.count('class="pinterval"') == 1
    assert re.search(r'class="pvalue"[^>]*>0\.8[0-9]x \(95% CI 0\.[0-9]{2}-0\.[0-9]{2}x\)<', plot)


def test_a_layers_only_page_has_no_phase_plot() -> None:
    assert 'id="phase-plot"' not in render_html(analyze(paired_record(1.3, run_id="one")))


def test_the_part_column_never_breaks_inside_its_word() -> None:
    page = render_html(analyze(phase_record()))
    css = page[page.index("<style>") : page.index("</style>")]
    part_rule = re.search(r"#workloads td:nth-child\(2\) \{([^}]*)\}", css)
    assert part_rule is not None and "nowrap" in part_rule.group(1) and "keep-all" in part_rule.group(1)
    for rule in re.findall(r"([^{}]*)\{[^}]*overflow-wrap: anywhere", css):
        assert "#workloads td:nth-child(2)" not in rule  # an op table's shapes may wrap; the part never
