"""The report decides in analysis.py (kinds and numbers) and words in wording.py: no sentence is written where a
decision is made, and what the wording module says is what the JSON, the terminal and the page carry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mpsup.report.analysis import analyze
from mpsup.report.findings import LayerCall, TooSlowNote, UnpairedCall
from mpsup.report.wording import note_text, verdict_sentence
from tests.synthetic import paired_record

REPORT = Path(__file__).resolve().parent.parent / "src" / "mpsup" / "report"
DECIDING = ("analysis.py", "verdict.py", "aggregate.py", "changes.py", "findings.py")


def _texts(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string literal and f-string's literal text, docstrings left out."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(n) is not None
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.append((n.lineno, n.value))
        elif isinstance(n, ast.JoinedStr):
            text = "".join(v.value for v in n.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            out.append((n.lineno, text + " {}" * sum(isinstance(v, ast.FormattedValue) for v in n.values)))
    return out


@pytest.mark.parametrize("module", DECIDING)
def test_the_deciding_modules_hold_no_sentence(module: str) -> None:
    # A kind may be a short phrase ("now on the device" is a smoke change's kind in the JSON); a sentence has
    # five words or more, or words around a formatted value.
    tree = ast.parse((REPORT / module).read_text())
    sentences = [
        (line, text)
        for line, text in _texts(tree)
        if len(text.split()) >= 5 or ("{}" in text and len(text.replace("{}", " ").split()) >= 2)
    ]
    assert sentences == [], f"{module} words what wording.py should: {sentences}"


def test_the_verdict_is_a_kind_and_its_sentence_comes_from_the_wording() -> None:
    a = analyze(paired_record(1.3, run_id="up"))
    assert a.verdict == "benefit"
    assert isinstance(a.finding.call, LayerCall) and a.finding.call.case == "faster"
    assert a.sentence == verdict_sentence(a.finding)
    assert a.to_json()["sentence"] == a.sentence
    assert a.sentence.startswith("Upgrade: the geometric mean of the suite's BF16 linear layers is estimated 1.3")


def test_separate_runs_point_to_the_evidence_and_name_no_hardware() -> None:
    a = analyze(paired_record(1.1, mode="unpaired", run_id="sep"))
    assert isinstance(a.finding.call, UnpairedCall)
    text = " ".join([a.sentence, *a.notes])
    assert "docs/explanation/methodology.md" in text
    for word in ("H200", "H100", "#"):
        assert word not in text


def test_the_too_slow_note_carries_the_budget_that_measures_them() -> None:
    doc = paired_record(1.2, run_id="slow", count=6)
    doc["options"] = {"budget_s": 0.2}
    for i, w in enumerate(doc["workloads"][4:]):
        w.update(status="too_slow", ratios=[], budget_needed_s=3.0 + i)
        w["envs"] = {"baseline": {"status": "too_slow"}, "candidate": {"status": "too_slow"}}
    a = analyze(doc)
    slow = [n for n in a.note_facts if isinstance(n, TooSlowNote)]
    assert slow == [TooSlowNote(2, doc["workloads"][4]["name"], 0.2, 4.0)]
    assert "`mpsup bench --budget 4` measures them all" in note_text(slow[0])
    assert [w.budget_needed_s for w in a.workloads if w.status == "too_slow"] == [3.0, 4.0]
