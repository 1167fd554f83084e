"""The worker's modules read top to bottom: each imports its own siblings at the top of the file, and none
reaches back to a module that imports it (no cycle held apart by imports inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

WORKER = Path(__file__).resolve().parent.parent / "src" / "mpsup" / "worker"


def _sibling_imports(path: Path) -> tuple[set[str], list[int]]:
    """The worker modules `path` imports, and the lines of any sibling import not at the module's top level."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found: set[str] = set()
    nested: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        names = [node.module] if node.module else [a.name for a in node.names]
        found.update(n.split(".")[0] for n in names if n)
        if id(node) not in top:
            nested.append(node.lineno)
    return found, nested


def test_the_worker_imports_its_own_modules_at_the_top_and_in_one_direction() -> None:
    graph: dict[str, set[str]] = {}
    for path in sorted(WORKER.glob("*.py")):
        deps, nested = _sibling_imports(path)
        assert not nested, f"{path.name}: a sibling imported inside a function at line(s) {nested}"
        graph[path.stem] = {d for d in deps if (WORKER / f"{d}.py").exists()}
    done: set[str] = set()

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, "import cycle: " + " -> ".join((*stack, module))
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, (*stack, module))
        done.add(module)

    for module in graph:
        visit(module, ())
    assert "truth" not in graph["replay"] and "build" in graph["truth"]
