"""What every report format shows alike: record text made inert, intervals, the summary lines, the legends
and the op-attribution rows."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable

from mpsup.console import md_code, printable
from mpsup.model.coverage import coverage_phrase
from mpsup.report.analysis import PUBLISHED_SUITE_CLAIM, Analysis, WorkloadChange
from mpsup.report.attribution import OpShare, PhaseAttribution, grouped_views, op_classes
from mpsup.report.phases import PhaseChange
from mpsup.stats import Interval
from mpsup.units import fmt_interval, fmt_time

MARK = {"faster": "▲", "slower": "▼", "same": "·", "n/a": " ", "uncalled": " "}

# The candidate column is baseline ÷ speedup (wording.TIME_NOTE says why), not the candidate's own median
# that `mpsup bench` prints: every surface says so, or the two screens read as disagreeing.
CANDIDATE_LABEL = "candidate (baseline ÷ speedup)"
AA_TAG = " (A/A run)"  # beside the verdict word in a heading: one torch against itself, no upgrade
CANDIDATE_LEGEND = "candidate = baseline ÷ speedup, so a row agrees with it; bench shows the candidate's own median"

# Every string that comes from a record (workload and feature names, ids, device, versions, statuses,
# conditions) is data, never markup: each renderer passes it through its own escape.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")
_MD_LINKED = re.compile(r"@|#[0-9]|www\.|[a-z]+://", re.IGNORECASE)


def md(text: object) -> str:
    """Record text as inert Markdown on one line: it can neither leave its table cell (`|`, a newline)
    nor become HTML, a link, an image or emphasis. GitHub links @mentions, #N and bare URLs whatever
    backslashes stand before them, so text holding one goes in a code span, where nothing is linked."""
    value = printable(" ".join(str(text).splitlines()))
    if _MD_LINKED.search(value):
        return md_code(value, table=True, limit=max(200, len(value)))
    return _MD_SPECIAL.sub(r"\\\1", value)


def esc(text: object) -> str:
    """Record text for HTML element content and quoted attribute values."""
    return html.escape(printable(text), quote=True)


def unbounded_text(i: Interval, *, hint: bool = True) -> str:
    """What stands in for an interval too few rounds could bound (a bare point would look exact); without
    the hint where a legend line says to raise --budget."""
    return f"n/a: {i.n} rounds; raise --budget" if hint else f"n/a: {i.n} rounds"


def interval_text(i: Interval | None, *, hint: bool = True, digits: int = 3) -> str:
    """A speedup and its 95% interval as every format prints them (units.fmt_interval); `-` for none, and
    what stands in for an interval too few rounds could bound."""
    if i is None:
        return "-"
    if not i.bounded:
        return unbounded_text(i, hint=hint)
    return fmt_interval(i.estimate, i.low, i.high, digits)


def unmeasured_cell(w: WorkloadChange) -> str:
    """A row's speedup cell where nothing was measured: why, and for one too slow the budget that measures it."""
    if w.status == "too_slow" and w.budget_needed_s:
        return f"too slow: --budget {w.budget_needed_s:g}"
    return w.status


def not_measured_lines(workloads: list[WorkloadChange], quote: Callable[[object], str] = str) -> list[str]:
    """The workloads not measured for a reason other than time (the too-slow note says those, with the budget),
    one line per reason: `unsupported (no kernel): linear/a, linear/b`."""
    groups: dict[str, list[str]] = {}
    for w in workloads:
        if w.speedup is None and w.part != "phase" and w.status not in ("ok", "too_slow"):
            groups.setdefault(w.status + (f" ({w.reason})" if w.reason else ""), []).append(w.name)
    lines = []
    for why, names in groups.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(f"Not measured, {quote(why)}: {quote(shown)}")
    return lines


def claim_comparable(a: Analysis) -> bool:
    """The published 2.15 figure was measured on MPS against 2.15: citing it beside a CPU or A/A run misleads."""
    return (
        a.device == "mps"
        and a.mode != "aa"
        and a.candidate_torch.startswith("2.15")
        and a.baseline_torch != a.candidate_torch
    )


def summary_lines(a: Analysis, quote: Callable[[object], str] = str, *, phases: bool = True) -> list[str]:
    """The figures beside the table; `quote` escapes the record-derived parts for the target format.
    `phases=False`: the model's phase lines are printed elsewhere (the terminal puts them above its table)."""
    lines = [phase_line(p, quote) for p in a.model_phases] if phases else []
    if a.suite_geomean:
        split = ", ".join(f"{k} {v.estimate:.3f}x" if v.bounded else f"{k} n/a" for k, v in a.suite_split.items())
        claim = (
            f"; the torch 2.15 release notes claim {PUBLISHED_SUITE_CLAIM}x on their Mac" if claim_comparable(a) else ""
        )
        lines.append(
            "Suite geometric mean over BF16 linear shapes: "
            f"{interval_text(a.suite_geomean)}{'; ' + split if split else ''}{claim}."
        )
    if a.model_speedup:
        label = (
            "Model forward, run whole"
            if a.model_source == "whole-model"
            else "Model, estimated from its layers (which cover an unknown share of its forward)"
        )
        lines.append(f"{label}: {interval_text(a.model_speedup)}")
    if a.layer_estimate:
        lines.append(
            f"The layers alone would have estimated the model at {interval_text(a.layer_estimate)} (for comparison)"
        )
    if a.peak_memory_ratio:
        lines.append(f"Peak memory, candidate / baseline (geometric mean): {a.peak_memory_ratio:.2f}")
    for s in a.smoke_changes:
        lines.append(f"Smoke: {quote(s['feature'])} {s['change']} ({quote(s['baseline'])} -> {quote(s['candidate'])})")
    # Notes name workloads and run ids, which come from records: data, escaped like every other such part.
    lines += [f"Method: {a.method}", *(quote(n) for n in a.notes)]
    shown = a.conditions.shown_noise if a.conditions.visits or a.conditions.moved else tuple(a.noise)
    if shown:
        lines.append("Conditions: " + "; ".join(quote(n) for n in shown))
    if a.conditions.line:
        # Its values come from the record (a level's word, a workload's name): quoted whole, as data.
        lines.append(f"Machine moved: {quote(a.conditions.line)}")
    return lines


def phase_line(p: PhaseChange, quote: Callable[[object], str] = str) -> str:
    """One phase of the model run whole: its call, both times, and how much its layers explain."""
    if p.baseline_s and p.candidate_s:
        times = f"; {fmt_time(p.baseline_s)} -> {fmt_time(p.candidate_s)} per call"
    else:  # one side did not run it: its time alone, not "2.26 ms -> - per call"
        side, t = ("baseline", p.baseline_s) if p.baseline_s else ("candidate", p.candidate_s)
        times = f"; {side} {fmt_time(t)} per call" if t else ""
    cover = f"; {coverage_phrase(p.coverage)}" if p.coverage is not None else ""
    cpu = f"; on the CPU (no MPS kernel): {', '.join(p.fallback)}" if p.fallback else ""
    return f"Phase {quote(p.text())}{times}{cover}{quote(cpu)}"


# Ops listed one by one per phase on the terminal and in Markdown; --details and the HTML list them all.
ATTRIBUTION_ROWS = 8
UNEXPLAINED_LABEL = "unexplained"
UNEXPLAINED_LEGEND = (
    "unexplained: the phase's change that its ops, each timed alone, do not account for (launch gaps, fusion, "
    "synchronisation, Python between ops, ops not replayed); other calls: the phase's calls without a line of "
    "their own, replayed together"
)
ATTRIBUTION_HEAD = ("op", "shapes", "dtypes", "calls", "baseline", "candidate", "speedup (95% CI)", "change", "share")


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None and math.isfinite(x) else "-"


def _signed(x: float | None) -> str:
    if x is None:
        return "-"
    return ("+" if x >= 0 else "-") + fmt_time(abs(x))


def attribution_heading(attr: PhaseAttribution) -> str:
    """One line: how much of the phase the replayed ops cover, in both builds, and how much of its change."""
    calls = ", ".join(
        f"{n} of {attr.census_calls.get(label, n)} calls not replayed ({label})"
        for label, n in attr.not_replayed_calls.items()
        if n
    )
    extra = f"; {calls}" if calls else ""
    several = [c for c in op_classes(attr) if len(c.calls) > 1 and c.share_of_change is not None][:3]
    by_op = ", ".join(f"{c.op} {_pct(c.share_of_change)} ({len(c.calls)} shapes)" for c in several)
    covers = (
        f"Ops of {attr.phase}, each timed alone in both builds: their sum is {_pct(attr.coverage_baseline)} of the "
        f"phase (baseline) and {_pct(attr.coverage_candidate)} (candidate); "
    )
    if not attr.phase_changed:
        return (
            covers + f"their changes add up to {_signed(attr.ops_change_s)} a call, the phase's to "
            f"{_signed(attr.change_s)}, within its noise (no change to share out){extra}"
        )
    return (
        covers
        + f"they explain {_pct(attr.explained_change)} of its change ({_signed(attr.change_s)} a call){extra}"
        + (f"; by op, all shapes together: {by_op}" if by_op else "")
    )


def _op_row(o: OpShare) -> tuple[str, ...]:
    sp = o.speedup
    speed = interval_text(sp, hint=False, digits=2)  # the legend says to raise --budget
    calls = (
        str(o.count_baseline) if o.count_baseline == o.count_candidate else f"{o.count_baseline} -> {o.count_candidate}"
    )
    if o.together:
        calls = ""  # one replay of them all per phase call; its shapes column counts the calls
    return (
        o.op,
        o.shapes,
        o.dtypes,
        calls,
        fmt_time(o.baseline_s),
        fmt_time(o.candidate_s),
        speed,
        _signed(o.change_s),
        _pct(o.share_of_change),
    )


def attribution_rows(attr: PhaseAttribution, *, limit: int | None = ATTRIBUTION_ROWS) -> list[tuple[str, ...]]:
    """The phase's ops as rows (ranked by their share of the change), views folded into one line where together
    they do not matter, the ops past `limit` as one line, and the unexplained remainder as its own line."""
    shown, views = grouped_views(attr)
    together = [o for o in shown if o.together]
    shown = [o for o in shown if not o.together]
    rest = shown[limit:] if limit is not None else []
    shown = shown[:limit] if limit is not None else shown
    rows = [_op_row(o) for o in shown]
    for group, label in ((views, "views"), (rest, "more ops")):
        if not group:
            continue
        change = sum(o.change_s or 0.0 for o in group)
        share = change / attr.change_s if attr.change_s else None
        rows.append(
            (
                f"{len(group)} {label}",
                ", ".join(sorted({o.op for o in group}))[:60],
                "",
                str(sum(o.count_baseline for o in group)),
                fmt_time(sum(o.baseline_s or 0.0 for o in group)),
                fmt_time(sum(o.candidate_s or 0.0 for o in group)),
                "",
                _signed(change),
                _pct(share),
            )
        )
    rows += [_op_row(o) for o in together]
    if attr.unexplained_s is not None:
        share = attr.unexplained_s / attr.change_s if attr.change_s else None
        rows.append((UNEXPLAINED_LABEL, "", "", "", "", "", "", _signed(attr.unexplained_s), _pct(share)))
    return rows


def call_legend(threshold: float) -> list[str]:
    """What a mark means, every rule of the call (analysis._apply_fdr) named, in two lines of 80 columns:
    a row at 0.85x (0.69-0.95) left unmarked must not contradict its legend."""
    return [
        f"▲ faster ▼ slower: 95% CI excludes 1x, change > {threshold:.0%} (or a floor noted below),",
        "sign test passes Benjamini-Hochberg, all visits agree; · no measurable change",
    ]


def run_label(a: Analysis) -> str:
    """Which run a column or verdict of several is: the machine alone left two runs of one machine (or two
    machines of one model) headed alike."""
    return f"{a.machine}, run {', '.join(a.run_ids)} (torch {a.baseline_torch} -> {a.candidate_torch})"
