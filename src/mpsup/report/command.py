"""`mpsup report` as one call: which records, analysed, rendered to the terminal, stdout or a file."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from mpsup.console import emit_json, message_line, safe, warning_line
from mpsup.errors import UserError
from mpsup.report.analysis import Analysis, analyze, matching_aa
from mpsup.report.render import document, json_doc, render_run_list, to_terminal
from mpsup.report.upstream import Upstream
from mpsup.runs import select
from mpsup.runs.schema import RunRecord
from mpsup.runs.select import StoredRun, Warn, merge_single_runs
from mpsup.safe_files import write_file_through
from mpsup.stats import PRACTICAL_THRESHOLD

FORMATS = ("terminal", "markdown", "json", "html")
# What --format also takes for a format: `md` is how Markdown files and most tools name it.
FORMAT_ALIASES = {"md": "markdown"}


@dataclass
class ReportRequest:
    paths: list[Path] = field(default_factory=list)
    run: str | None = None
    list_runs: bool = False
    baseline: str | None = None
    candidate: str | None = None
    fmt: str = "terminal"
    output: Path | None = None
    threshold: float = PRACTICAL_THRESHOLD
    seed: int = 0
    fail_on_regression: bool = False
    upstream: bool = False  # an issue body for PyTorch (report/upstream.py)
    keep_paths: bool = False  # --upstream: leave paths and environment names in
    details: bool = False  # the terminal: every workload's row, not one screen
    # --json as given, apart from --format: a JSON document silently written in place of the page or
    # Markdown asked for (into report.html, say) is refused instead. A caller that folds --json into
    # `fmt` ("json") and leaves this False is read the same as before.
    as_json: bool = False

    def __post_init__(self) -> None:
        self.fmt = _settled_format(self.fmt, self.as_json)


@dataclass(frozen=True)
class ReportResult:
    """What a report found: the analyses (or, for --list, the stored runs) and the exit code they carry."""

    analyses: tuple[Analysis, ...] = ()
    stored: tuple[StoredRun, ...] | None = None
    exit_code: int = 0
    upstream: Upstream | None = None


def build(req: ReportRequest, warn: Warn, note: Warn) -> ReportResult:
    """Records -> analyses -> the exit code. Bad input raises UserError; nothing is printed here."""
    if req.list_runs:
        # --list shows what is stored; a record choice or a file to write would be silently ignored.
        chosen = (
            ("-o", req.output),
            ("--run", req.run),
            ("--baseline", req.baseline),
            ("--candidate", req.candidate),
            ("--details", req.details),
        )
        extra = [o for o, v in chosen if v]
        if extra or req.paths:
            raise UserError(f"--list takes no {', '.join(extra) or 'record paths'}: it lists the stored runs")
        return ReportResult(stored=tuple(select.stored_runs(warn)))
    if req.upstream:
        return _upstream(req, warn, note)
    if req.output is not None and req.fmt == "terminal":
        raise UserError("-o needs --format markdown, json or html")
    if req.output is not None:
        _refuse_overwriting_records(req.output, req.paths)
    records = _records(req, warn, note)
    if req.fmt == "html" and len(records) > 1:
        # One page per report: several machines' pages would not make one valid HTML document.
        raise UserError(
            f"--format html shows one run; {len(records)} were given (use --format markdown or json for several)"
        )
    # An A/A run of the same machine, device and torch shows how far two workers of one build drift
    # apart; its spread becomes each workload's floor, so that drift is never called a torch change.
    aa_runs = select.stored_aa_runs(warn)
    analyses = tuple(
        analyze(r, threshold=req.threshold, seed=req.seed, aa_reference=_floor_run(r, aa_runs, note)) for r in records
    )
    return ReportResult(analyses=analyses, exit_code=_exit_code(analyses) if req.fail_on_regression else 0)


def deliver(result: ReportResult, req: ReportRequest, out: Console, err: Console) -> None:
    """The one rendering the request asked for: the terminal, stdout, or the file named by -o."""
    analyses = list(result.analyses)
    if result.upstream is not None:
        _deliver_upstream(result.upstream, req, err)
    elif result.stored is not None:
        if req.fmt == "json":
            emit_json([r.to_json() for r in result.stored])
        else:
            render_run_list(list(result.stored), out)
    elif req.fmt == "terminal":
        to_terminal(analyses, out, details=req.details)
    elif req.output is not None:
        written = write_file_through(req.output, document(analyses, req.fmt), "report")
        where = f"{req.output} (-> {written})" if req.output.is_symlink() else str(req.output)
        err.print(f"report written to {safe(where)}", highlight=False, soft_wrap=True)
    elif req.fmt == "json":
        emit_json(json_doc(analyses))
    else:
        sys.stdout.write(document(analyses, req.fmt))


def console_messages(err: Console) -> tuple[Warn, Warn]:
    """Warnings and notes go to stderr: stdout stays the report alone (a JSON document, a page)."""

    def warn(msg: str) -> None:
        warning_line(msg, err)

    def note(msg: str) -> None:
        message_line(err, safe(msg))

    return warn, note


def run_report(req: ReportRequest, out: Console, err: Console) -> int:
    """build + deliver, for callers that want both; returns the exit code."""
    warn, note = console_messages(err)
    result = build(req, warn, note)
    deliver(result, req, out, err)
    return result.exit_code


def _settled_format(fmt: str, as_json: bool) -> str:
    """The one format a request means: aliases resolved, an unknown one refused in one line listing the
    valid ones, and --json beside another --format refused naming both (as --list refuses --details)."""
    name = FORMAT_ALIASES.get(fmt, fmt)
    if name not in FORMATS:
        raise UserError(f"--format {fmt}: not a report format; use one of {', '.join(FORMATS)} (md for markdown)")
    if as_json and name not in ("terminal", "json"):
        raise UserError(f"--format {fmt} and --json ask for two formats; give one (--json is --format json)")
    return "json" if as_json else name


def _records(req: ReportRequest, warn: Warn, note: Warn) -> list[RunRecord]:
    if (req.baseline is None) != (req.candidate is None):
        raise UserError("--baseline and --candidate go together (two single runs to pair)")
    if req.baseline is not None and req.candidate is not None:
        return [merge_single_runs(select.by_id(req.baseline, warn), select.by_id(req.candidate, warn))]
    if req.run is not None:
        return [select.by_id(req.run, warn)]
    if req.paths:
        return select.records_from_paths(req.paths, warn)
    return [select.newest_paired(warn, note)]


def _refuse_overwriting_records(output: Path, inputs: list[Path]) -> None:
    """`report run.json -o run.json` would replace the measurements with their report. Refused: a target
    that is (or links to) a record being read, anything in the data dir's runs/ (mpsup's own records), and
    a .json inside a folder of records being read (it would be read as one next time)."""
    from mpsup.paths import runs_dir

    try:
        # realpath, as the writer resolves it: `link/../x` is where the link leads, then up.
        target = Path(os.path.realpath(output))
        for p in inputs:
            real = Path(os.path.realpath(p))
            if real.is_dir():
                if target.suffix.lower() == ".json" and target.is_relative_to(real):
                    raise UserError(f"-o {output}: a .json among the records being read in {p}; write elsewhere")
                files = select.record_files_in(real)
            else:
                files = [real]
            for f in files:
                # samefile: a link among the records, or another spelling on a case-insensitive disk
                if target == Path(os.path.realpath(f)) or (target.exists() and f.exists() and target.samefile(f)):
                    raise UserError(f"-o {output}: that is a record being reported ({f}); write to another file")
        if target.is_relative_to(Path(os.path.realpath(runs_dir()))):
            raise UserError(f"-o {output}: inside mpsup's run records ({runs_dir()}); write the report elsewhere")
    except (OSError, RuntimeError) as exc:  # a link loop, a folder we may not read
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"-o {output}: cannot check it against the records read ({why})") from None


def _upstream(req: ReportRequest, warn: Warn, note: Warn) -> ReportResult:
    """One record: the one named, else the ends of the newest finished bisect, else the newest paired run."""
    from mpsup.bisect.journal import finished_journals
    from mpsup.report.upstream import bisect_for, build_upstream

    if req.fmt not in ("terminal", "markdown", "json"):
        raise UserError(f"--upstream writes Markdown (or --json); not --format {req.fmt}")
    if req.output is not None:
        _refuse_overwriting_records(req.output, req.paths)
    journals = finished_journals()
    if not (req.run or req.paths or req.baseline or req.candidate) and journals:
        # After a bisect, its ends step (the good build against the bad) is the regression to report.
        doc = journals[0]
        last = len(doc.get("environments", [])) - 1
        ends = [s for s in doc.get("steps", []) if isinstance(s, dict) and s.get("index") == last]
        records = [select.by_id(str(ends[-1]["run_id"]), warn)] if ends and ends[-1].get("run_id") else []
    else:
        records = []
    records = records or _records(req, warn, note)
    if len(records) != 1:
        raise UserError(f"--upstream reports one run; {len(records)} were given")
    record = records[0]
    if record.mode != "paired":
        raise UserError(f"run {record.id}: --upstream needs a paired run (bench --candidate), not a {record.mode} one")
    aa = _floor_run(record, select.stored_aa_runs(warn), note)
    analysis = analyze(record, threshold=req.threshold, seed=req.seed, aa_reference=aa)
    body = build_upstream(analysis, record, bisect_for(record.id, journals), keep_paths=req.keep_paths)
    return ReportResult(analyses=(analysis,), upstream=body)


def _floor_run(record: RunRecord, aa_runs: list[RunRecord], note: Warn) -> RunRecord | None:
    """The A/A run whose noise floors this run's calls; one passed over for its conditions is said, not merged."""
    passed: list[str] = []
    aa = matching_aa(record, aa_runs, passed)
    for line in passed:
        note(line)
    return aa


def _deliver_upstream(body: Upstream, req: ReportRequest, err: Console) -> None:
    """-o NAME.py writes the repro script alone; any other -o the Markdown body; without -o, stdout."""
    if req.output is not None:
        if req.output.suffix == ".py":
            if body.script is None:
                raise UserError(f"-o {req.output}: no standalone script for {body.workload}; see the Markdown body")
            text, what = body.script, "repro script"
        else:
            text, what = body.markdown, "issue body"
        write_file_through(req.output, text, what)
        err.print(f"{what} written to {safe(str(req.output))}", highlight=False, soft_wrap=True)
    elif req.fmt == "json":
        emit_json(
            {"schema": "mpsup.upstream/1", "workload": body.workload, "markdown": body.markdown, "script": body.script}
        )
    else:
        sys.stdout.write(body.markdown)


def _exit_code(analyses: tuple[Analysis, ...]) -> int:
    verdicts = {a.verdict for a in analyses}
    if "regression" in verdicts:
        return 1
    # A phase whose answers were to be judged and could not be: whether it still computes the same is unknown.
    unjudged = any(pn.verdict == "not compared" for a in analyses for pn in a.model_numerics.values())
    return 3 if "inconclusive" in verdicts or unjudged else 0
