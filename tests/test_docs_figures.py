"""The docs' evidence: every figure file a page links or names exists. (The benchmark scripts reading the
compressed JSON kept there: tests/test_benchmark_tools.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _figure_names(text: str, named_too: bool) -> set[str]:
    linked = re.findall(r"\]\((?:docs/)?(figures/[^)#\s]+)\)", text)
    named = re.findall(r"`docs/(figures/[^`\s]+)`", text) if named_too else []
    return {n for n in linked + named if not n.endswith("/")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_a_page_links_exists(page: Path) -> None:
    # history.md names removed files as `docs/figures/...` code (they are in git); its links must resolve.
    names = _figure_names(page.read_text(), named_too=page.name != "history.md")
    missing = sorted(n for n in names if not (ROOT / "docs" / n).is_file())
    assert not missing, missing
