"""The manual in docs/ and the README: every relative link resolves, every manual page is short and free of run
logs, hardware names and history narration (those belong in docs/evidence/), and the index reaches every page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EVIDENCE = DOCS / "evidence"
ALL_PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
MANUAL = [p for p in ALL_PAGES if EVIDENCE not in p.parents]
MAX_PAGE_BYTES = 20 * 1024

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`+[^`]*`+")
RUN_LOG = re.compile(r"measured here|^#+ .*\bevidence\b|^#+ measured", re.I | re.M)
HARDWARE = re.compile(r"\bH[12]00\b")
ISSUE = re.compile(r"(?<!PyTorch )\bissue \d+|(?<![\w/&])#\d+\b", re.I)
NARRATION = re.compile(r"\bused to\b|\bno longer\b", re.I)


def _prose(text: str) -> str:
    """The text a reader reads as sentences: code blocks and code spans left out (they quote output and syntax)."""
    return CODE_SPAN.sub("", CODE_BLOCK.sub("", text))


def _links(page: Path) -> list[str]:
    return [t for t in LINK.findall(CODE_BLOCK.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


def _ids(pages: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in pages]


@pytest.mark.parametrize("page", ALL_PAGES, ids=_ids(ALL_PAGES))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert not broken, broken


@pytest.mark.parametrize("page", MANUAL, ids=_ids(MANUAL))
def test_a_manual_page_is_short_and_holds_no_run_log(page: Path) -> None:
    text = page.read_text()
    assert len(text.encode()) <= MAX_PAGE_BYTES, len(text.encode())
    prose = _prose(text)
    assert not RUN_LOG.findall(prose), RUN_LOG.findall(prose)
    assert not HARDWARE.findall(text), "hardware names belong in docs/evidence/"
    words = " ".join(prose.split())  # a phrase broken across lines is still one phrase
    assert not ISSUE.findall(words), ISSUE.findall(words)
    assert not NARRATION.findall(words), NARRATION.findall(words)


def test_the_index_reaches_every_manual_page() -> None:
    index = DOCS / "README.md"
    seen: set[Path] = set()
    todo = [index]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.is_file() or EVIDENCE in page.parents:
            continue
        seen.add(page)
        todo += [(page.parent / t.split("#", 1)[0]).resolve() for t in _links(page) if t.split("#", 1)[0]]
    unreached = sorted(str(p.relative_to(ROOT)) for p in MANUAL if p.resolve() not in seen and p != ROOT / "README.md")
    assert not unreached, unreached


def test_the_evidence_index_names_every_evidence_page() -> None:
    index = EVIDENCE / "README.md"
    linked = {(EVIDENCE / t.split("#", 1)[0]).resolve() for t in _links(index)}
    pages = [p for p in EVIDENCE.glob("*.md") if p != index]
    assert pages and all(p.resolve() in linked for p in pages), sorted(
        p.name for p in pages if p.resolve() not in linked
    )


def test_the_cli_reference_lists_every_command_and_option() -> None:
    import typer

    from mpsup import cli

    sections = re.split(r"^## ", (DOCS / "reference" / "cli.md").read_text(), flags=re.M)
    by_command = {s.split("`", 2)[1].removeprefix("mpsup "): s for s in sections[1:] if s.startswith("`mpsup ")}
    app = typer.main.get_command(cli.app)
    assert isinstance(app, typer.core.TyperGroup)
    missing = []
    for name, command in app.commands.items():
        section = by_command.get(name, "")
        for param in command.params:
            opts = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
            missing += [f"{name} {o}" for o in opts if o.startswith("-") and f"`{o}`" not in section]
        if not section:
            missing.append(name)
    assert not missing, missing


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert LINK.findall("see [a](b.md#c) and ![img](fig.png)") == ["b.md#c", "fig.png"]
    assert RUN_LOG.findall("## Measured here\n") and RUN_LOG.findall("## Evidence\n")
    assert HARDWARE.findall("on an H200") and not HARDWARE.findall("H2000")
    assert ISSUE.findall("fixed in issue 28") and ISSUE.findall("see #12")
    assert not ISSUE.findall("PyTorch issue 194922") and not ISSUE.findall("[x](a.md#12-b)")
    assert not _prose("`#123` and\n```\nissue 5\n```\n").strip(" and\n")
