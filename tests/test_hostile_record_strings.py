"""Every string of a run record, made hostile, on every surface that shows records.

A record is shared (a colleague's, an issue's attachment): any of its strings may hold what would act on a
page or a thread, a comment end, an @mention, a tag, a backtick, a link. The record here is real: a small
paired CPU run of a tiny Llama folder (phases, replayed ops, smoke tests), written by this mpsup, then made a
regression by halving its ratios so that `report --upstream` has a body to write. Each string field, one at
a time (every instance of it), gets the hostile text appended; the record is read as the report reads it and
shown on the terminal (report and bench's screen), as Markdown, as HTML and as the upstream body. Where it
reaches them it must be inert: no live mention, no raw tag, no comment that ends early.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import re
import sys
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from mpsup.bench.screen import render_run
from mpsup.errors import UserError
from mpsup.report.analysis import analyze
from mpsup.report.render import document, to_terminal
from mpsup.report.upstream import build_upstream
from mpsup.runs import schema
from mpsup.runs.schema import RunRecord
from tests.conftest import run_cli
from tests.pkgindex import slow_linear
from tests.rendered_page import Page, github
from tests.tiny_models import write_llama_folder

pytestmark = pytest.mark.slow

MARK = "zqx"  # a word no escape changes: where it shows, the field reached that surface
HOSTILE = f" {MARK} --> @everyone <script>alert(1)</script> `x` ``y ](javascript:alert(1)) <!-- [/] #1 \x1b[2J"


@pytest.fixture(scope="module")
def real_record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A record a small paired CPU run wrote: the candidate is this interpreter behind a wrapper whose
    sitecustomize doubles every linear (tests/pkgindex.py: slow_linear), so the two sides are two environments."""
    root = tmp_path_factory.mktemp("hostile-run")
    folder = write_llama_folder(root / "llama")
    hook = root / "slow-linear"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import torch\n\n" + slow_linear("torch"))
    candidate = root / "candidate"
    candidate.write_text(f'#!/bin/sh\nexport PYTHONPATH="{hook}"\nexec "{sys.executable}" "$@"\n')
    candidate.chmod(0o755)
    home = root / "home"
    res = run_cli(
        "bench", "--model", str(folder), "--device", "cpu", "--budget", "0.01", "--tokens", "1",
        "--threads", "1", "--visits", "2", "--candidate", str(candidate), "--json",
        env={"MPSUP_HOME": str(home)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(next((home / "runs").glob("*.json")).read_text())
    return _slowed(doc)


def _slowed(doc: dict[str, Any]) -> dict[str, Any]:
    """A regression the report calls, ratios and samples alike: every workload twice as slow in the candidate,
    the whole-model phases far more (so the upstream body is a phase's, with its ops' table) and the replayed
    linears most (so they carry the phase's change, and the upstream script times them by name)."""
    for w in doc["workloads"]:
        factor = 32 if w.get("part") == "phase" else 1000 if w.get("op") == "linear" else 2
        if w.get("ratios"):
            w["ratios"] = [r / factor for r in w["ratios"]]
        cand = (w.get("envs") or {}).get("candidate") or {}
        if cand.get("samples"):
            cand["samples"] = [s * factor for s in cand["samples"]]
            cand["median"] = cand["median"] * factor
    return doc


# --- which strings ---------------------------------------------------------------------------------------------

_LABELS = re.compile(r"\.envs\.(baseline|candidate)\b")


def _string_paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every string leaf's path (dict keys are names, not values: labels stay what they are)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _string_paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _string_paths(v, (*path, i))
    elif isinstance(doc, str):
        yield path


def _field(path: tuple[Any, ...]) -> str:
    """A leaf's field, its list positions and environment labels left out: `workloads.*.envs.<label>.reason`."""
    text = ".".join("*" if isinstance(p, int) else str(p) for p in path)
    return _LABELS.sub(".envs.<label>", text)


# The schema's text fields (runs/schema.py), and where each value sits in the document.
_WHERE = {
    schema.RunRecord: "",
    schema.Environment: "environments.*.",
    schema.WorkloadRun: "workloads.*.",
    schema.EnvRun: "workloads.*.envs.<label>.",
    schema.SmokeRun: "smoke.*.",
    schema.SmokeResult: "smoke.*.envs.<label>.",
    schema.ModelInfo: "model.",
}


def _schema_text_fields() -> set[str]:
    fields = set()
    for cls, where in _WHERE.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if hints[f.name] in (str, str | None):
                fields.add(where + f.name)
    # Text the schema keeps as `extra` and the report reads: an environment's machine facts, a stopped run's why.
    return fields | {"environments.*.platform", "environments.*.machine", "failure", "signal"}


def _with_every_schema_field(doc: dict[str, Any]) -> dict[str, Any]:
    """The record with each schema text field it lacks set once (a reason on an ok workload, an event timing)."""
    doc = copy.deepcopy(doc)
    have = {_field(p) for p in _string_paths(doc)}
    for name in sorted(_schema_text_fields() - have):
        *parents, leaf = name.split(".")
        node: Any = doc
        for part in parents:
            node = node[0] if part == "*" else node["candidate"] if part == "<label>" else node[part]
        node[leaf] = "text"
    return doc


def _fields_of(doc: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    by_field: dict[str, list[tuple[Any, ...]]] = {}
    for p in _string_paths(doc):
        by_field.setdefault(_field(p), []).append(p)
    return by_field


def _hostile(doc: dict[str, Any], paths: list[tuple[Any, ...]]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for path in paths:
        node = doc
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] += HOSTILE
    return doc


# --- the surfaces ----------------------------------------------------------------------------------------------


def _surfaces(doc: dict[str, Any]) -> dict[str, str]:
    """Each surface's text for the record; upstream's is absent where the record has no regression to report."""
    record = RunRecord.from_json(doc, "hostile")
    analysis = analyze(record)
    out = {}
    for name, show in (("report terminal", lambda c: to_terminal([analysis], c, details=True)),
                       ("bench screen", lambda c: render_run(doc, c, details=True))):  # fmt: skip
        buf = io.StringIO()
        show(Console(file=buf, width=100, color_system=None))
        out[name] = buf.getvalue()
    out["markdown"] = document([analysis], "markdown")
    out["html"] = document([analysis], "html")
    with contextlib.suppress(UserError):  # no workload called slower: --upstream refuses, nothing to show
        out["upstream"] = build_upstream(analysis, record, keep_paths=True).markdown
    return out


def _problems(surface: str, text: str, clean: str) -> list[str]:
    """What in `text` acts where `clean` (the same record without the hostile text) had nothing of the kind."""
    # Every surface may end on a terminal (`report --upstream` prints its body): an escape sequence would act on it.
    found = ["an escape sequence"] if "\x1b" in text else []
    if surface in ("report terminal", "bench screen"):
        return found  # rich markup (`[/]`) would have raised
    page, before = (Page(text), Page(clean)) if surface == "html" else (github(text), github(clean))
    # A code span is how text GitHub would link is kept inert; a changed label may open a section of the page.
    new_tags = set(page.tags) - set(before.tags) - {"code", "details", "summary"}
    if new_tags or page.tags.count("script") or page.tags.count("a") > before.tags.count("a"):
        found.append(f"tags {sorted(new_tags)}, {page.tags.count('script')} script, {page.tags.count('a')} links")
    if len(page.comments) != len(before.comments):  # one that ended early leaves its rest live, or opens another
        found.append(f"comments {page.comments}")
    if any(a.lstrip().lower().startswith("javascript:") for a in page.links):
        found.append("a javascript: link")
    if surface != "html":  # GitHub links mentions and issue numbers in text outside code
        live, was = "\n".join(page.live), "\n".join(before.live)
        if "@everyone" in live:
            found.append("a live @mention")
        if len(re.findall(r"#\d", live)) != len(re.findall(r"#\d", was)):
            found.append("a live issue reference")
    return found


def test_every_record_string_is_inert_on_every_surface(real_record: dict[str, Any]) -> None:
    base = _with_every_schema_field(real_record)
    fields = _fields_of(base)
    assert _schema_text_fields() <= set(fields), _schema_text_fields() - set(fields)
    clean = _surfaces(base)
    assert set(clean) == {"report terminal", "bench screen", "markdown", "html", "upstream"}
    reached: dict[str, set[str]] = {}
    refused, problems = [], []
    for name, paths in sorted(fields.items()):
        if name == "schema":
            continue  # a version, checked before anything else is read: other text is no record at all
        try:
            shown = _surfaces(_hostile(base, paths))
        except UserError:
            refused.append(name)  # the reader refuses the record: nothing of it is shown
            continue
        for surface, text in shown.items():
            if MARK in text:
                reached.setdefault(surface, set()).add(name)
            problems += [f"{name} on {surface}: {p}" for p in _problems(surface, text, clean[surface])]
    assert not problems, problems
    # The fields the issue named reach every surface that shows a machine, and are inert there.
    machine = {"environments.*.device_name", "environments.*.platform", "environments.*.machine"}
    assert machine <= reached["upstream"], machine - reached["upstream"]
    assert {"environments.*.device_name"} <= reached["markdown"] & reached["html"] & reached["report terminal"]
    ops = {"workloads.*.name", "workloads.*.op", "workloads.*.shapes", "workloads.*.dtypes"}
    assert ops <= reached["html"] & reached["markdown"] & reached["upstream"] & reached["report terminal"]
    assert {"smoke.*.feature", "smoke.*.envs.<label>.message"} <= reached["bench screen"]
    # Only a census's shapes (parsed as dimensions) and a numerics status (one of two words) are checked as they
    # are read, so only they can refuse the text.
    assert refused == ["workloads.*.envs.<label>.phase.census.entries.*.shapes", "workloads.*.numerics.status"], refused
