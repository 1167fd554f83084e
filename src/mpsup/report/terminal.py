"""The report on a terminal (rich): one screen per run, every row with --details, several runs side by side."""

from __future__ import annotations

import math
from collections import Counter

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mpsup.console import NARROW, printable, safe
from mpsup.report.analysis import NOT_LAYERS, Analysis, WorkloadChange
from mpsup.report.attribution import PhaseAttribution
from mpsup.report.common import (
    ATTRIBUTION_HEAD,
    ATTRIBUTION_ROWS,
    CANDIDATE_LEGEND,
    MARK,
    UNEXPLAINED_LEGEND,
    attribution_heading,
    attribution_rows,
    call_legend,
    interval_text,
    not_measured_lines,
    phase_line,
    run_label,
    summary_lines,
    unbounded_text,
    unmeasured_cell,
)
from mpsup.report.energy import energy_lines
from mpsup.report.numerics import numerics_lines
from mpsup.units import fmt_time


def _bar(speedup: float | None, width: int = 10) -> str:
    if not speedup:
        return ""
    # Centered at 1.0x; each side covers a factor of 2 on a log scale.
    pos = max(-1.0, min(1.0, math.log2(speedup)))
    half = width // 2
    cells = round(abs(pos) * half)
    if pos >= 0:
        return " " * half + "│" + "█" * cells
    return " " * (half - cells) + "█" * cells + "│"


SCREEN_ROWS = 12  # rows of one screen's table: every called workload, then the largest of the rest
MAX_ROWS = 40  # a report that calls more than this shows the largest; the rest are counted on one line
HIDDEN_LABEL = {"faster": "faster", "slower": "slower", "same": "no measurable change", "n/a": "n/a"}
UNMEASURED = {"too_slow": "too slow to measure", "unsupported": "unsupported here"}


def terminal_rows(workloads: list[WorkloadChange], *, details: bool) -> list[WorkloadChange]:
    """The rows one screen shows, in the report's order: what changed is never left out for a row of
    "no measurable change"."""
    if details:
        return list(workloads)
    called = [w for w in workloads if w.change in ("faster", "slower")][:MAX_ROWS]
    rest = [w for w in workloads if w.change not in ("faster", "slower")][: max(0, SCREEN_ROWS - len(called))]
    keep = {id(w) for w in called + rest}
    return [w for w in workloads if id(w) in keep]


def _hidden_line(hidden: list[WorkloadChange]) -> str:
    # A workload with no speedup was not measured: its status says why (too slow, unsupported), where "n/a"
    # would read as measured with too few rounds.
    counts = Counter(
        HIDDEN_LABEL.get(w.change, w.change) if w.speedup else UNMEASURED.get(w.status, w.status) for w in hidden
    )
    what = ", ".join(f"{n} {safe(label)}" for label, n in counts.items())  # a status is the record's text
    return f"... {len(hidden)} more workloads ({what}): every row with --details, or --format html"


def render_terminal(a: Analysis, console: Console, *, details: bool = False) -> None:
    style = {"benefit": "green", "regression": "red", "mixed": "yellow", "inconclusive": "yellow"}.get(a.verdict, "")
    console.print(Text(printable(a.sentence), style=f"bold {style}"))  # a Text is no markup, but may hold names
    console.print(
        f"{safe(a.machine)} · {safe(a.device)} · torch {safe(a.baseline_torch)} -> {safe(a.candidate_torch)}"
        f" · run {safe(', '.join(a.run_ids))}"
    )
    # The model's phases first: they are the verdict; the table below is the explanation.
    for p in a.model_phases:
        console.print(phase_line(p, safe))
    for line in numerics_lines(a.model_numerics) + energy_lines(a.energy):
        console.print(safe(line), highlight=False)
    for attr in a.attribution.values():
        _attribution_terminal(attr, console, details=details)
    # The phases' lines above are their figures (as rows they would show a 0% share of the layers' time); the
    # ops are in their phase's table.
    layers = [w for w in a.workloads if w.part not in NOT_LAYERS] if a.model_phases else list(a.workloads)
    rows = terminal_rows(layers, details=details)
    t = _terminal_table(rows, narrow=False)
    # The wide table only where it fits whole.
    narrow = console.width < NARROW or not _fits(console, t)
    if narrow:
        t = _terminal_table(rows, narrow=True)
    if rows:  # a model run whole from its config alone has phases and no layers: no empty table
        console.print(t)
    shown = {id(w) for w in rows}
    hidden = [w for w in layers if id(w) not in shown]
    if hidden:
        console.print(_hidden_line(hidden))
    for line in not_measured_lines(layers, safe):
        console.print(line, highlight=False)
    if a.mode == "unpaired":
        console.print("No workload is marked: two separate runs give estimates, not calls.")
    else:
        for line in call_legend(a.threshold):
            console.print(line, highlight=False)
    if not narrow:
        console.print(CANDIDATE_LEGEND, highlight=False)
    if any(w.speedup and not w.speedup.bounded for w in rows):
        console.print("n/a: too few rounds to bound a 95% interval, so no call; raise --budget")
    for line in summary_lines(a, safe, phases=False):
        console.print(line)


def _attribution_terminal(attr: PhaseAttribution, console: Console, *, details: bool) -> None:
    console.print(safe(attribution_heading(attr)), highlight=False)
    rows = attribution_rows(attr, limit=None if details else ATTRIBUTION_ROWS)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    for col in ATTRIBUTION_HEAD:
        t.add_column(col, justify="left" if col in ("op", "shapes", "dtypes") else "right", no_wrap=True)
    for row in rows:
        t.add_row(*(safe(c) for c in row))
    # Squeezed, a table cuts the op names, shapes and intervals it exists to show: below its width, a block each.
    if _fits(console, t):
        console.print(t)
    else:
        console.print(OP_BLOCKS_LEGEND, highlight=False)
        for row in rows:
            _op_block(row, console)
    console.print(UNEXPLAINED_LEGEND, highlight=False)


# What the lines of each op's block hold, in the order the table's columns do.
OP_BLOCKS_LEGEND = (
    "Each op below: dtypes, calls per phase call; shapes; speedup (95% CI); time per phase call "
    "(baseline -> candidate): change, share of the phase's change"
)


def _op_block(row: tuple[str, ...], console: Console) -> None:
    """One row of the op table as a block: the op on a line, then each of its long texts on a line of its own,
    indented, so a narrow terminal wraps a list of shapes between shapes and never cuts one."""
    op, shapes, dtypes, calls, baseline, candidate, speedup, change, share = row
    calls_text = f"{calls} call{'' if calls == '1' else 's'}" if calls else ""
    console.print(" · ".join(safe(x) for x in (op, dtypes, calls_text) if x), highlight=False)
    times = f"{baseline} -> {candidate}: " if baseline or candidate else ""
    for line in (shapes, speedup, f"{times}{change}, {share} of the change" if change else ""):
        if line:
            console.print(Padding(safe(line), (0, 0, 0, 4), expand=False), highlight=False)


def _fits(console: Console, table: Table) -> bool:
    """Whether `table` fits the console whole: squeezed, rich cuts its cells to "c…"."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum <= console.width


def _terminal_table(rows: list[WorkloadChange], *, narrow: bool) -> Table:
    # Names are never cut (they are what --only takes); below NARROW columns the times and bars give way.
    t = Table(box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow, header_style="bold")
    t.add_column("workload", no_wrap=True, min_width=max((len(w.name) for w in rows), default=8))
    cols = (
        ("share", "speedup (95% CI)", "")
        if narrow
        else ("count", "share", "baseline", "candidate\n(base ÷ speedup)", "speedup (95% CI)", "", "")
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "" and not narrow else "right", no_wrap=True)
    for w in rows:
        if narrow:
            # The legend says to raise --budget.
            sp = interval_text(w.speedup, hint=False) if w.speedup else safe(unmeasured_cell(w))
            t.add_row(safe(w.name), w.share_text, sp, MARK[w.change])
            continue
        t.add_row(
            safe(w.name),
            str(w.count),
            w.share_text,
            fmt_time(w.baseline_s),
            fmt_time(w.candidate_s),
            interval_text(w.speedup) if w.speedup else safe(unmeasured_cell(w)),
            _bar(w.speedup.estimate if w.speedup else None),
            MARK[w.change],
        )
    return t


def render_multi_terminal(analyses: list[Analysis], console: Console) -> None:
    for an in analyses:
        console.print(Text(printable(f"{run_label(an)}: {an.sentence}"), style="bold"))
    names: list[str] = []
    for an in analyses:
        for w in an.workloads:
            if w.name not in names:
                names.append(w.name)
    t = Table()
    t.add_column("workload")
    for an in analyses:
        # Names and ids are never cut: the header takes a line for each.
        head = (an.machine, f"run {', '.join(an.run_ids)}", f"torch {an.baseline_torch} -> {an.candidate_torch}")
        t.add_column("\n".join(safe(h) for h in head), justify="right")
    for n in names:
        cells = []
        for an in analyses:
            hit = next((x for x in an.workloads if x.name == n), None)
            cells.append(
                "-"
                if not hit or not hit.speedup
                else f"{hit.speedup.estimate:.3f}x {MARK[hit.change]}"
                if hit.speedup.bounded
                else unbounded_text(hit.speedup, hint=False)
            )
        t.add_row(safe(n), *cells)
    console.print(t)
