"""`mpsup report` as one call: which records, analysed, rendered to the terminal, stdout or a file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from mpsup.errors import UserError
from mpsup.render import NARROW, emit_json, safe
from mpsup.report import load
from mpsup.report.analysis import Analysis, analyze, matching_aa, merge_single_runs
from mpsup.report.render import multi_json, render_html, render_markdown, render_multi_terminal, render_terminal
from mpsup.store import finite_json, write_file_through

FORMATS = ("terminal", "markdown", "json", "html")


@dataclass
class ReportRequest:
    paths: list[Path] = field(default_factory=list)
    run: str | None = None
    list_runs: bool = False
    baseline: str | None = None
    candidate: str | None = None
    fmt: str = "terminal"
    output: Path | None = None
    threshold: float = 0.03
    seed: int = 0
    fail_on_regression: bool = False


def run_report(req: ReportRequest, out: Console, err: Console) -> int:
    """Do what the request asks; returns the exit code (bad input raises UserError)."""

    def warn(msg: str) -> None:
        err.print(f"[yellow]warning:[/] {safe(msg)}", highlight=False, soft_wrap=True)

    if req.list_runs:
        _list_runs(load.stored_runs(warn), req.fmt, out)
        return 0
    if req.output is not None and req.fmt == "terminal":
        raise UserError("-o needs --format markdown, json or html")

    def note(msg: str) -> None:
        # stderr: stdout stays the report alone (a JSON document, a page), and the choice still shows on a terminal.
        err.print(safe(msg), highlight=False, soft_wrap=True)

    records = _records(req, warn, note)
    # An A/A run of the same machine, device and torch shows how far two workers of one build drift
    # apart; its spread becomes each workload's floor, so that drift is never called a torch change.
    aa_runs = load.stored_aa_runs(warn)
    analyses = [
        analyze(r, threshold=req.threshold, seed=req.seed, aa_reference=matching_aa(r, aa_runs)) for r in records
    ]
    if req.fmt == "terminal":
        if len(analyses) > 1:
            render_multi_terminal(analyses, out)
        else:
            render_terminal(analyses[0], out)
    elif req.output is not None:
        written = write_file_through(req.output, _document(analyses, req.fmt), "report")
        where = f"{req.output} (-> {written})" if req.output.is_symlink() else str(req.output)
        err.print(f"report written to {safe(where)}", highlight=False, soft_wrap=True)
    elif req.fmt == "json":
        emit_json(_json_doc(analyses))
    else:
        sys.stdout.write(_document(analyses, req.fmt))
    return _exit_code(analyses) if req.fail_on_regression else 0


def _records(req: ReportRequest, warn: load.Warn, note: load.Warn) -> list[dict[str, Any]]:
    if (req.baseline is None) != (req.candidate is None):
        raise UserError("--baseline and --candidate go together (two single runs to pair)")
    if req.baseline is not None and req.candidate is not None:
        return [merge_single_runs(load.by_id(req.baseline, warn), load.by_id(req.candidate, warn))]
    if req.run is not None:
        return [load.by_id(req.run, warn)]
    if req.paths:
        return load.records_from_paths(req.paths, warn)
    return [load.newest_paired(warn, note)]


def _json_doc(analyses: list[Analysis]) -> dict[str, Any]:
    return analyses[0].to_json() if len(analyses) == 1 else multi_json(analyses)


def _document(analyses: list[Analysis], fmt: str) -> str:
    if fmt == "json":
        # What --json prints on stdout, byte for byte.
        return json.dumps(finite_json(_json_doc(analyses)), indent=2, default=str, allow_nan=False) + "\n"
    if fmt == "markdown":
        return "\n".join(render_markdown(a) for a in analyses)
    # One page per report: several machines' pages would not make one valid HTML document.
    return render_html(analyses[0])


def _exit_code(analyses: list[Analysis]) -> int:
    verdicts = {a.verdict for a in analyses}
    if "regression" in verdicts:
        return 1
    return 3 if "inconclusive" in verdicts else 0


def _list_runs(rows: list[dict[str, Any]], fmt: str, out: Console) -> None:
    if fmt == "json":
        emit_json(rows)
        return
    if not rows:
        out.print(
            "No stored runs yet: `mpsup bench` records one (add --candidate VERSION or --aa to pair two torches).",
            highlight=False,
        )
        return
    narrow = out.width < NARROW
    t = Table(
        title=f"{len(rows)} stored run{'s' * (len(rows) != 1)}",
        title_justify="left",
        box=None if narrow else box.HEAVY_HEAD,
        pad_edge=not narrow,
        header_style="bold",
    )
    t.add_column("id", no_wrap=True)  # what --run, --baseline and --candidate take: never cut
    for c in ("created", "mode", "device", "torch", "n"):
        t.add_column(c, no_wrap=c != "torch", justify="right" if c == "n" else "left")
    if not narrow:
        t.add_column("model", overflow="fold")
    for r in rows:
        cells = [
            safe(r["id"]),
            safe(_when(r["created_at"])),
            safe(r["mode"]) + (" (partial)" if r["partial"] else ""),
            safe(r["device"]),
            safe(_torches(r["torch"])),
            str(r["workloads"]),
        ]
        t.add_row(*cells, *([] if narrow else [safe(r["model"] or "")]))
    out.print(t)
    if narrow and any(r["model"] for r in rows):
        out.print("Model paths: 100+ columns or --list --json.", highlight=False)


def _when(created: object) -> str:
    # 2026-12-03T12:04:07Z -> 2026-12-03 12:04: minutes tell runs apart; the id carries the rest.
    text = str(created or "")
    return text[:16].replace("T", " ") if len(text) >= 16 else text


def _torches(versions: list[object]) -> str:
    names = [str(v) for v in versions]
    if len(names) == 2 and names[0] == names[1]:
        return f"{names[0]} (A/A)"
    return " -> ".join(names)
