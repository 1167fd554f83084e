"""`mpsup report` as one call: which records, analysed, rendered to the terminal, stdout or a file."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mpsup.errors import UserError
from mpsup.render import emit_json, safe
from mpsup.report import load
from mpsup.report.analysis import Analysis, analyze, merge_single_runs
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
    analyses = [analyze(r, threshold=req.threshold, seed=req.seed) for r in _records(req, warn)]
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


def _records(req: ReportRequest, warn: load.Warn) -> list[dict[str, Any]]:
    if (req.baseline is None) != (req.candidate is None):
        raise UserError("--baseline and --candidate go together (two single runs to pair)")
    if req.baseline is not None and req.candidate is not None:
        return [merge_single_runs(load.by_id(req.baseline, warn), load.by_id(req.candidate, warn))]
    if req.run is not None:
        return [load.by_id(req.run, warn)]
    if req.paths:
        return load.records_from_paths(req.paths, warn)
    return [load.newest_paired(warn)]


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
    t = Table(title=f"{len(rows)} stored runs")
    for c in ("id", "created", "mode", "device", "torch", "workloads", "model"):
        t.add_column(c)
    for r in rows:
        t.add_row(safe(r["id"]), safe(r["created_at"]), safe(r["mode"]) + (" (partial)" if r["partial"] else ""),
                  safe(r["device"]), safe(" vs ".join(str(x) for x in r["torch"])), str(r["workloads"]), safe(r["model"] or ""))
    out.print(t)
