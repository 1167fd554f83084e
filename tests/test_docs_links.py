"""The manual in docs/ and the README: every relative link resolves, every manual page is short and free of run
logs, hardware names and history narration (those belong in docs/evidence/), the index reaches every page, and
the architecture page names every module and only real ones, and states import rules the code keeps."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "mpsup"
ARCHITECTURE = DOCS / "architecture.md"
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
# A module path as the architecture page writes it: relative to src/mpsup/ (`bench/command.py`, `cli.py`) or to
# the repository (`tests/test_docs_links.py`, `metal/__init__.py`); never the tail of a longer path.
MODULE_PATH = re.compile(r"(?<![\w/.<>-])((?:[a-z_][a-z0-9_]*/)*[a-z_][a-z0-9_]*\.py)\b")


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


def _has_code(module: Path) -> bool:
    """Whether a module holds more than a docstring: a package marker with none needs no line of its own."""
    body = ast.parse(module.read_text()).body
    return any(not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body)


def test_the_architecture_page_names_every_module_and_only_real_ones() -> None:
    named = set(MODULE_PATH.findall(ARCHITECTURE.read_text()))
    modules = {str(m.relative_to(SRC)) for m in SRC.rglob("*.py") if _has_code(m)}
    assert not modules - named, sorted(modules - named)
    missing = sorted(n for n in named if not (SRC / n).is_file() and not (ROOT / n).is_file())
    assert not missing, missing


def _module_name(path: Path) -> str:
    parts = ["mpsup", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _mpsup_imports(path: Path) -> set[str]:
    """Every mpsup module `path` imports, at its top, inside a function or for typing alike; a relative import
    inside worker/ resolves within its own package."""
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "mpsup"}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] != "mpsup":
                continue
            for alias in node.names:  # `from mpsup import clock` imports the module mpsup.clock
                sub = f"{module}.{alias.name}"
                is_module = (SRC.parent / sub.replace(".", "/")).with_suffix(".py").is_file()
                found.add(sub if is_module or (SRC.parent / sub.replace(".", "/")).is_dir() else module)
    return found


def _imports_by_module() -> dict[str, set[str]]:
    return {_module_name(p): _mpsup_imports(p) for p in SRC.rglob("*.py")}


def _inside(name: str, *packages: str) -> bool:
    return any(name == f"mpsup.{p}" or name.startswith(f"mpsup.{p}.") for p in packages)


LEAVES = ("errors", "clock", "paths", "units", "stats", "progress", "syscmd", "waits")
BASE = (*LEAVES, "safe_files", "workloads")
DECISIONS = ("analysis", "changes", "aggregate", "verdict", "findings", "phases", "attribution", "wording")
FORMATS = ("terminal", "markdown", "html", "plots", "common", "render", "runs_list")


def _broken_rules(imports: dict[str, set[str]]) -> list[str]:
    """The import rules docs/architecture.md states as holding, each import that breaks one named."""
    broken = []
    for name, got in imports.items():
        own = {g for g in got if g != name}
        worker = next((w for w in ("worker", "worker_mlx") if _inside(name, w)), None)
        rules = [
            (name != "mpsup.__main__" and "mpsup.cli" in got, "imports cli"),
            (worker is not None and any(not _inside(g, worker) for g in got), "a worker imports mpsup"),
            (worker is None and any(_inside(g, "worker", "worker_mlx") for g in got), "imports a worker"),
            (name == "mpsup.probe.interpreter_probe" and bool(got), "the probe imports mpsup"),
            (name in {f"mpsup.{m}" for m in LEAVES} and bool(own), "a leaf imports mpsup"),
            (
                _inside(name, "model", "runs")
                and any(not (_inside(g, "model", "runs", *BASE) or g == "mpsup") for g in own),
                "model/ or runs/ imports above the base",
            ),
            (_inside(name, "bench") and any(_inside(g, "report", "bisect", "doctor") for g in got), "bench imports up"),
            (_inside(name, "energy") and any(not _inside(g, "energy") for g in own), "energy/ imports beyond itself"),
            (_inside(name, "report") and any(_inside(g, "bench", "envs", "doctor") for g in got), "report imports up"),
            (
                name in {f"mpsup.report.{m}" for m in DECISIONS}
                and any(g in {f"mpsup.report.{f}" for f in FORMATS} for g in got),
                "a report decision imports a format",
            ),
        ]
        broken += [f"{name}: {why}" for bad, why in rules if bad]
    return broken


def test_the_import_rules_the_architecture_page_states_hold() -> None:
    assert not _broken_rules(_imports_by_module()), _broken_rules(_imports_by_module())


def test_the_import_rules_catch_what_they_are_for() -> None:
    assert _broken_rules({"mpsup.bench.run": {"mpsup.report.analysis"}}) == ["mpsup.bench.run: bench imports up"]
    assert _broken_rules({"mpsup.worker.ops": {"mpsup.worker.core", "mpsup.units"}})
    assert not _broken_rules({"mpsup.worker.ops": {"mpsup.worker.core"}, "mpsup.model.load": {"mpsup.safe_files"}})
    assert _broken_rules({"mpsup.report.verdict": {"mpsup.report.terminal"}})
    assert _broken_rules({"mpsup.energy.nvml": {"mpsup.units"}})
    assert _broken_rules({"mpsup.stats": {"mpsup.units"}}) and _broken_rules({"mpsup.runs.store": {"mpsup.console"}})
    worker_ops = SRC / "worker" / "ops.py"
    assert _mpsup_imports(worker_ops) >= {"mpsup.worker.core", "mpsup.worker.device"}
    assert "mpsup.clock" in _mpsup_imports(SRC / "host" / "snapshot.py")  # `from mpsup import clock`
    assert "mpsup.envs.records" in _mpsup_imports(SRC / "host" / "snapshot.py")  # inside a function
