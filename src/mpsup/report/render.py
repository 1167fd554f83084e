"""Report renderers: terminal (rich), Markdown, JSON and a self-contained HTML page with SVG plots."""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from mpsup.console import NARROW, md_code, printable, safe
from mpsup.model.coverage import coverage_phrase
from mpsup.report.analysis import MEMORY_NOISE_FLOOR, NOT_LAYERS, PUBLISHED_SUITE_CLAIM, Analysis, WorkloadChange
from mpsup.report.attribution import OpShare, PhaseAttribution, grouped_views, op_classes
from mpsup.report.phases import PhaseChange
from mpsup.runs.select import StoredRun
from mpsup.stats import Interval
from mpsup.units import fmt_time

MARK = {"faster": "▲", "slower": "▼", "same": "·", "n/a": " ", "uncalled": " "}

# The candidate column is baseline ÷ speedup (analysis.TIME_NOTE says why), not the candidate's own median
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
    nor become HTML, a link, an image or emphasis. GitHub links @mentions, #123 and bare URLs whatever
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


def _iv(i: Interval | None) -> str:
    if i is not None and not i.bounded:
        return unbounded_text(i)
    return "-" if i is None else f"{i.estimate:.3f}x ({i.low:.3f}-{i.high:.3f})"


def _iv_html(i: Interval) -> str:
    """The speedup cell of the page: where the column is narrow it wraps between the figure and its interval,
    never inside the interval ("(0.830-" / "1.241)")."""
    text = esc(_iv(i))
    head, sep, interval = text.partition(" (")
    return f'{head} <span class="iv">({interval}</span>' if sep and i.bounded else text


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
            f"{_iv(a.suite_geomean)}{'; ' + split if split else ''}{claim}."
        )
    if a.model_speedup:
        label = (
            "Model forward, run whole"
            if a.model_source == "whole-model"
            else "Model, estimated from its layers (which cover an unknown share of its forward)"
        )
        lines.append(f"{label}: {_iv(a.model_speedup)}")
    if a.layer_estimate:
        lines.append(f"The layers alone would have estimated the model at {_iv(a.layer_estimate)} (for comparison)")
    if a.peak_memory_ratio:
        lines.append(f"Peak memory, candidate / baseline (geometric mean): {a.peak_memory_ratio:.2f}")
    for s in a.smoke_changes:
        lines.append(f"Smoke: {quote(s['feature'])} {s['change']} ({quote(s['baseline'])} -> {quote(s['candidate'])})")
    # Notes name workloads and run ids, which come from records: data, escaped like every other such part.
    lines += [f"Method: {a.method}", *(quote(n) for n in a.notes)]
    if a.noise:
        lines.append("Conditions: " + "; ".join(quote(n) for n in a.noise))
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


SCREEN_ROWS = 12  # rows of one screen's table: every called workload, then the largest of the rest
MAX_ROWS = 40  # a report that calls more than this shows the largest; the rest are counted on one line
HIDDEN_LABEL = {"faster": "faster", "slower": "slower", "same": "no measurable change", "n/a": "n/a"}
UNMEASURED = {"too_slow": "too slow to measure", "unsupported": "unsupported here"}


def terminal_rows(workloads: list[WorkloadChange], *, details: bool) -> list[WorkloadChange]:
    """The rows one screen shows, in the report's order: what changed is never left out for a row of
    "no measurable change" (a suite of 160 workloads used to print 40 rows, most of them unchanged)."""
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
    for attr in a.attribution.values():
        _attribution_terminal(attr, console, details=details)
    # The phases' own lines above are their figures: as rows they read "share 0.0%" (a share of the layers'
    # time) and fell under the cut, counted among the "no measurable change". The ops are in their phase's table.
    layers = [w for w in a.workloads if w.part not in NOT_LAYERS] if a.model_phases else list(a.workloads)
    rows = terminal_rows(layers, details=details)
    t = _terminal_table(rows, narrow=False)
    # The wide table only where it fits whole: at 100 columns, 44-character names left rich squeezing the
    # count, share and times down to "c…" and "21.7…".
    needed = Measurement.get(console, console.options.update_width(10_000), t).maximum
    narrow = console.width < NARROW or needed > console.width
    if narrow:
        t = _terminal_table(rows, narrow=True)
    if rows:  # a model run whole from its config alone has phases and no layers: no empty table
        console.print(t)
    shown = {id(w) for w in rows}
    hidden = [w for w in layers if id(w) not in shown]
    if hidden:
        console.print(_hidden_line(hidden))
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


# Ops listed one by one per phase on the terminal and in Markdown; --details and the HTML list them all.
ATTRIBUTION_ROWS = 8
UNEXPLAINED_LABEL = "unexplained"
UNEXPLAINED_LEGEND = (
    "unexplained: the phase's change that its ops, each timed alone, do not account for (launch gaps, fusion, "
    "synchronisation, Python between ops, ops not replayed)"
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
    return (
        f"Ops of {attr.phase}, each timed alone in both builds: their sum is {_pct(attr.coverage_baseline)} of the "
        f"phase (baseline) and {_pct(attr.coverage_candidate)} (candidate); they explain "
        f"{_pct(attr.explained_change)} of its change ({_signed(attr.change_s)} a call){extra}"
        + (f"; by op, all shapes together: {by_op}" if by_op else "")
    )


def _op_row(o: OpShare) -> tuple[str, ...]:
    sp = o.speedup
    speed = "-" if sp is None else f"{sp.estimate:.2f}x ({_ci_short(sp)})"
    calls = (
        str(o.count_baseline) if o.count_baseline == o.count_candidate else f"{o.count_baseline} -> {o.count_candidate}"
    )
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
    if attr.unexplained_s is not None:
        share = attr.unexplained_s / attr.change_s if attr.change_s else None
        rows.append((UNEXPLAINED_LABEL, "", "", "", "", "", "", _signed(attr.unexplained_s), _pct(share)))
    return rows


def _attribution_terminal(attr: PhaseAttribution, console: Console, *, details: bool) -> None:
    console.print(safe(attribution_heading(attr)), highlight=False)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
    for col in ATTRIBUTION_HEAD:
        t.add_column(col, justify="left" if col in ("op", "shapes", "dtypes") else "right")
    for row in attribution_rows(attr, limit=None if details else ATTRIBUTION_ROWS):
        t.add_row(*(safe(c) for c in row))
    console.print(t)
    console.print(UNEXPLAINED_LEGEND, highlight=False)


def attribution_markdown(a: Analysis) -> list[str]:
    out: list[str] = []
    for attr in a.attribution.values():
        out += ["", md(attribution_heading(attr)), ""]
        out.append("| " + " | ".join(ATTRIBUTION_HEAD) + " |")
        out.append("|---|---|---|" + "---:|" * (len(ATTRIBUTION_HEAD) - 3))
        out += ["| " + " | ".join(md(c) for c in row) + " |" for row in attribution_rows(attr)]
        out += ["", md(UNEXPLAINED_LEGEND)]
    return out


def _attribution_html(a: Analysis) -> str:
    parts = []
    for attr in a.attribution.values():
        head = "".join(f"<th>{esc(c)}</th>" for c in ATTRIBUTION_HEAD)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in attribution_rows(attr, limit=None)
        )
        parts.append(
            f"<h2>Which op: {esc(attr.phase)}</h2><p>{esc(attribution_heading(attr))}</p>"
            f'<div class="tablebox"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
            f"<p><small>{esc(UNEXPLAINED_LEGEND)}</small></p>"
        )
    return "".join(parts)


def call_legend(threshold: float) -> list[str]:
    """What a mark means, every rule of the call (analysis._apply_fdr) named, in two lines of 80 columns:
    a row at 0.85x (0.69-0.95) left unmarked must not contradict its legend."""
    return [
        f"▲ faster ▼ slower: 95% CI excludes 1x, change > {threshold:.0%} (or a floor noted below),",
        "sign test passes Benjamini-Hochberg, all visits agree; · no measurable change",
    ]


def _ci_short(i: Interval | None) -> str:
    if i is None:
        return ""
    if not i.bounded:
        return unbounded_text(i, hint=False)  # the legend says to raise --budget
    return f"{i.low:.2f}-{i.high:.2f}"


def _terminal_table(rows: list[WorkloadChange], *, narrow: bool) -> Table:
    # Names are never cut (they are what --only takes); below NARROW columns the times and bars give way.
    t = Table(box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow, header_style="bold")
    t.add_column("workload", no_wrap=True, min_width=max((len(w.name) for w in rows), default=8))
    cols = (
        ("share", "speedup", "95% CI", "")
        if narrow
        else ("count", "share", "baseline", "candidate\n(base ÷ speedup)", "speedup (95% CI)", "", "")
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "" and not narrow else "right", no_wrap=True)
    for w in rows:
        if narrow:
            sp = f"{w.speedup.estimate:.3f}x" if w.speedup else safe(w.status)
            ci = _ci_short(w.speedup)
            t.add_row(safe(w.name), w.share_text, sp, ci, MARK[w.change])
            continue
        t.add_row(
            safe(w.name),
            str(w.count),
            w.share_text,
            fmt_time(w.baseline_s),
            fmt_time(w.candidate_s),
            _iv(w.speedup) if w.speedup else safe(w.status),
            _bar(w.speedup.estimate if w.speedup else None),
            MARK[w.change],
        )
    return t


def render_markdown(a: Analysis) -> str:
    out = [
        f"# mpsup report{AA_TAG if a.mode == 'aa' else ''}: {a.verdict}",
        "",
        f"**{md(a.sentence)}**",
        "",
        f"- Machine: {md(a.machine)} ({md(a.device)})",
        f"- torch {md(a.baseline_torch)} (baseline) vs {md(a.candidate_torch)} (candidate)",
        f"- Runs: {md(', '.join(a.run_ids))}",
        "",
    ]
    out += [f"- {line}" for line in summary_lines(a, md)]
    out += attribution_markdown(a)
    out += [
        "",
        f"| workload | count | share | baseline | {CANDIDATE_LABEL} | speedup | 95% CI | change |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for w in a.workloads:
        if w.part == "op":
            continue  # in its phase's table above
        ci = (
            "-"
            if not w.speedup
            else f"{w.speedup.low:.3f}-{w.speedup.high:.3f}"
            if w.speedup.bounded
            else unbounded_text(w.speedup)
        )
        sp = f"{w.speedup.estimate:.3f}x" if w.speedup else md(w.status)
        out.append(
            f"| {md(w.name)} | {w.count} | {w.share_text} | {fmt_time(w.baseline_s)} | {fmt_time(w.candidate_s)} "
            f"| {sp} | {ci} | {w.change} |"
        )
    return "\n".join(out) + "\n"


PART_COLORS = {
    "linear": "#0969da",
    "moe": "#8250df",
    "fp8": "#bf3989",
    "int8": "#9a6700",
    "pad": "#1a7f37",
    "roofline": "#57606a",
    "model": "#cf222e",
}
_Y_TICKS = (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


def _part_color(part: str) -> str:
    return PART_COLORS.get(part, "#6e7781")


def _outliers(pts: list[WorkloadChange], n: int = 3) -> list[WorkloadChange]:
    # The points a reader asks about first: the largest changes, measured or not significant.
    return sorted(pts, key=lambda w: -abs(math.log(w.speedup.estimate)) if w.speedup and w.speedup.estimate > 0 else 0)[
        :n
    ]


def _svg_speedup_plot(ws: list[WorkloadChange], width: int = 760, height: int = 380) -> str:
    # Not the whole-model phases: they have no work size on this axis (they sat at 1e0, stretching it four
    # decades), and the phase lines above the plot are their figures.
    pts = [w for w in ws if w.speedup and w.size > 0 and w.speedup.estimate > 0 and w.part not in NOT_LAYERS]
    # Axis titles and tick labels live in the margins, never over the data.
    pad_l, pad_r, pad_t, pad_b = 64, 16, 28, 56
    if not pts:
        return '<p class="empty">No workload was measured in both environments, so there is nothing to plot.</p>'
    xs = [math.log10(w.size) for w in pts]
    ends = [
        v
        for w in pts
        for v in (w.speedup.estimate, w.speedup.low, w.speedup.high)  # type: ignore[union-attr]
        if math.isfinite(v) and v > 0
    ]
    y_lo = math.log2(max(0.25, min([*ends, 0.95]))) - 0.05
    y_hi = math.log2(min(4.0, max([*ends, 1.05]))) + 0.05
    x_lo, x_hi = min(xs) - 0.2, max(xs) + 0.2
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b

    def px(x: float) -> float:
        return pad_l + (x - x_lo) / (x_hi - x_lo or 1) * plot_w

    def py(v: float) -> float:
        lv = math.log2(max(2**y_lo, min(2**y_hi, v)))
        return pad_t + (y_hi - lv) / (y_hi - y_lo or 1) * plot_h

    parts = [
        f'<svg id="speedup-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        'preserveAspectRatio="xMinYMin meet" role="img" aria-label="speedup per workload against its size" '
        'font-size="12">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#d0d7de"/>',
    ]
    for tick in _Y_TICKS:
        if y_lo <= math.log2(tick) <= y_hi:
            y = py(tick)
            dash = ' stroke-dasharray="4"' if tick == 1.0 else ""
            parts.append(
                f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{"#888" if tick == 1 else "#eaeef2"}"{dash}/>'
            )
            parts.append(f'<text class="ytick" x="{pad_l - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:.2f}x</text>')
    for decade in range(math.ceil(x_lo), math.floor(x_hi) + 1):
        parts.append(
            f'<text class="xtick" x="{px(decade):.1f}" y="{height - pad_b + 16}" text-anchor="middle">1e{decade}</text>'
        )
    for w, x in zip(pts, xs, strict=True):
        s = w.speedup
        assert s is not None
        c = _part_color(w.part)
        if s.bounded and s.low > 0:
            parts.append(
                f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{py(s.low):.1f}" y2="{py(s.high):.1f}" stroke="{c}" '
                'stroke-opacity="0.6"/>'
            )
            # An interval that runs off the axis would end at its edge like one that stops there: an arrowhead
            # says it goes on.
            # SVG's y grows downwards: the low end's arms rise into the plot (-), the high end's fall into it (+).
            for end, beyond, sign in ((s.low, s.low < 2**y_lo, -1), (s.high, s.high > 2**y_hi, 1)):
                if beyond:
                    tip = py(end)
                    parts.append(
                        f'<path class="clipped" d="M{px(x) - 4:.1f} {tip + 6 * sign:.1f} L{px(x):.1f} {tip:.1f} '
                        f'L{px(x) + 4:.1f} {tip + 6 * sign:.1f}" fill="none" stroke="{c}">'
                        f"<title>{esc(w.name)}: the interval goes on to {end:.3f}x, off the axis</title></path>"
                    )
            fill, what = f'fill="{c}"', f"({s.low:.3f}-{s.high:.3f})"
        else:
            # No interval (too few rounds): a hollow point, so it cannot pass for an exact one.
            fill, what = f'fill="none" stroke="{c}"', unbounded_text(s)
        ring = ' stroke="#1f2328" stroke-width="1.5"' if w.significant else ""
        parts.append(
            f'<circle class="point" data-part="{esc(w.part)}" cx="{px(x):.1f}" cy="{py(s.estimate):.1f}" r="4" '
            f"{fill}{ring}>"
            f"<title>{esc(w.name)}: {s.estimate:.3f}x {what}</title></circle>"
        )
    for w in _outliers(pts):
        s = w.speedup
        assert s is not None
        x, y = px(math.log10(w.size)), py(s.estimate)
        anchor = "end" if x > width * 0.6 else "start"
        dx = -7 if anchor == "end" else 7
        parts.append(
            f'<text class="label" x="{x + dx:.1f}" y="{y - 6:.1f}" text-anchor="{anchor}" font-size="11">'
            f"{esc(w.name)} {s.estimate:.2f}x</text>"
        )
    parts.append(
        f'<text class="axis-title" x="{pad_l + plot_w / 2:.0f}" y="{height - 12}" text-anchor="middle">'
        "work per call (FLOP, or bytes moved; log scale)</text>"
    )
    parts.append(
        f'<text class="axis-title" transform="translate(14 {pad_t + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle">'
        "speedup, candidate vs baseline</text>"
    )
    seen = list(dict.fromkeys(w.part for w in pts))
    for i, part in enumerate(seen):
        lx = pad_l + 8 + i * 96
        parts.append(
            f'<circle class="legend" cx="{lx}" cy="{pad_t - 14}" r="4" fill="{_part_color(part)}"/>'
            f'<text x="{lx + 8}" y="{pad_t - 10}">{esc(part)}</text>'
        )
    parts.append(
        f'<text x="{width - pad_r}" y="{pad_t - 10}" text-anchor="end" font-size="11">outlined: significant '
        "change</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def _svg_memory_plot(ws: list[WorkloadChange], width: int = 760) -> str:
    pts = [w for w in ws if w.memory_ratio][:30]
    if not pts:
        return (
            '<p class="empty">Peak memory was not recorded in both environments, or was under '
            f"{MEMORY_NOISE_FLOOR // 2**20} MiB (allocator noise) on both, so there is no memory change to show.</p>"
        )
    row, top = 16, 22  # the scale sits above the bars
    height = top + row * len(pts) + 8
    mid, half = 420, 240  # 1x, and the length of a halving or a doubling (log scale, clipped beyond)
    parts = [
        f'<svg id="memory-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" font-size="11">',
        f'<line x1="{mid}" x2="{mid}" y1="{top - 4}" y2="{height}" stroke="#888"/>',
    ]
    for ratio, label in ((0.5, "0.5x"), (1.0, "1x: same peak"), (2.0, "2x")):
        tx = mid + math.log2(ratio) * half
        parts.append(f'<text class="mtick" x="{tx:.1f}" y="{top - 8}" text-anchor="middle">{label}</text>')
    for i, w in enumerate(pts):
        r = w.memory_ratio or 1.0
        length = max(-1.0, min(1.0, math.log2(r))) * half
        x = mid if length >= 0 else mid + length
        y = top + i * row
        color = "#cf222e" if r > 1 else "#1a7f37"
        parts.append(f'<text x="4" y="{y + 10}" font-size="11">{esc(w.name[:60])}</text>')
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y}" width="{abs(length):.1f}" height="10" fill="{color}">'
            f"<title>{r:.2f}x</title></rect>"
        )
        # The figure itself at the bar's end: the bar alone has no scale a reader can read off, and it is
        # clipped at 0.5x and 2x.
        end = mid + length + (4 if length >= 0 else -4)
        parts.append(
            f'<text class="mvalue" x="{end:.1f}" y="{y + 9}" text-anchor="{"start" if length >= 0 else "end"}">'
            f"{r:.2f}x</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _sort_ranks(ws: list[WorkloadChange]) -> dict[str, list[int]]:
    # CSS-only sorting (the page carries no script, so record text can never run): each row knows its rank
    # per key, and a radio button picks which rank sets its `order`.
    keys: dict[str, Callable[[WorkloadChange], Any]] = {
        "share": lambda w: (w.part != "phase", -w.share),
        "speedup": lambda w: -(w.speedup.estimate if w.speedup else 0.0),
        "name": lambda w: w.name,
    }
    ranks: dict[str, list[int]] = {}
    for key, fn in keys.items():
        order = sorted(range(len(ws)), key=lambda i: fn(ws[i]))
        rank = [0] * len(ws)
        for pos, i in enumerate(order):
            rank[i] = pos
        ranks[key] = rank
    return ranks


_CSS = """
body { font-family: -apple-system, system-ui, sans-serif; margin: 1.5em auto; padding: 0 1em; max-width: 1400px;
       color: #1f2328; }
.verdict { font-size: 1.3em; font-weight: 600; }
.grid { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 1.5em; align-items: start; }
svg { width: 100%; height: auto; display: block; }
svg text { fill: #1f2328; font-family: inherit; }
.tablebox { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85em; width: 100%; }
td, th { border-bottom: 1px solid #d0d7de; padding: 3px 0.5em; text-align: right; white-space: nowrap; }
td:first-child, th:first-child { text-align: left; }
/* Each row is its own grid (for CSS-only sorting), so no track grows to fit its cells: a cell too wide for
   its track ran into the next one ("385.19 ms0.932x"). The time and share tracks fit "999.99 ms" inside
   their padding; names, parts, intervals and headers wrap rather than run over. */
th { white-space: normal; }
td:nth-child(1), td:nth-child(2), td:nth-child(6), td:nth-child(7) { white-space: normal; overflow-wrap: anywhere; }
td { font-variant-numeric: tabular-nums; }
.iv { white-space: nowrap; }
.faster { color: #1a7f37; } .slower { color: #cf222e; }
.sorter { font-size: 0.85em; margin: 0 0 0.4em; }
.sorter label { text-decoration: underline; cursor: pointer; }
tbody { display: flex; flex-direction: column; }
thead tr, tbody tr { display: grid; align-items: end;
  grid-template-columns: minmax(9em, 2fr) 4em 4em 6.5em 6.5em minmax(7.5em, 1fr) 4.8em; }
th small { display: block; font-weight: normal; }
tbody tr { order: var(--share); }
#by-speedup:checked ~ .tablebox tbody tr { order: var(--speedup); }
#by-name:checked ~ .tablebox tbody tr { order: var(--name); }
@media (max-width: 1200px) { .grid { grid-template-columns: minmax(0, 1fr); } body { margin: 0.5em; } }
@media print { body { max-width: none; margin: 0; } .grid { grid-template-columns: minmax(0, 1fr); }
  .sorter { display: none; }
  svg, tr { break-inside: avoid; } a { color: inherit; } }
"""


def render_html(a: Analysis) -> str:
    # The ops are in their phase's table: the workloads table and plots are the phases and layers.
    a = replace(a, workloads=[w for w in a.workloads if w.part != "op"])
    ranks = _sort_ranks(a.workloads)
    rows = "".join(
        f'<tr style="--share:{ranks["share"][i]};--speedup:{ranks["speedup"][i]};--name:{ranks["name"][i]}">'
        # A name breaks after a slash first (linear/ 896x151936/t1), mid-shape only if it must.
        f"<td>{esc(w.name).replace('/', '/<wbr>')}</td><td>{esc(w.part)}</td><td>{w.share_text}</td>"
        f"<td>{fmt_time(w.baseline_s)}</td>"
        f"<td>{fmt_time(w.candidate_s)}</td><td>{_iv_html(w.speedup) if w.speedup else esc(w.status)}</td>"
        f'<td class="{esc(w.change)}">{esc(w.change)}</td></tr>'
        for i, w in enumerate(a.workloads)
    )
    summary = "".join(f"<li>{line}</li>" for line in summary_lines(a, esc))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>mpsup report{AA_TAG if a.mode == "aa" else ""}: {esc(a.verdict)}</title>
<style>{_CSS}</style></head><body>
<p class="verdict" id="verdict">{esc(a.sentence)}</p>
<p>{esc(a.machine)} ({esc(a.device)}) · torch {esc(a.baseline_torch)} → {esc(a.candidate_torch)}
 · runs {esc(", ".join(a.run_ids))}</p>
<ul>{summary}</ul>
{_attribution_html(a)}
{_census_html(a)}
<div class="grid">
<div><h2>Speedup per workload against its size</h2>
{_svg_speedup_plot(a.workloads)}
<h2>Peak memory, candidate / baseline</h2>
{_svg_memory_plot(a.workloads)}</div>
<div><h2>Workloads</h2>
<input type="radio" name="sort" id="by-share" checked hidden><input type="radio" name="sort" id="by-speedup" hidden>
<input type="radio" name="sort" id="by-name" hidden>
<p class="sorter">Sort by <label for="by-share">share of time</label> · <label for="by-speedup">speedup</label>
 · <label for="by-name">name</label></p>
<div class="tablebox"><table id="workloads"><thead><tr><th>workload</th><th>part</th><th>share</th><th>baseline</th>
<th>candidate <small>(baseline ÷ speedup)</small></th><th>speedup (95% CI)</th><th>change</th></tr></thead>
<tbody>{rows}</tbody></table></div></div>
</div>
</body></html>
"""


def _census_html(a: Analysis) -> str:
    """The op census of one forward per phase: which kernels a release could have changed."""
    parts = []
    for phase, census in a.census.items():
        ops = census.get("ops") or {}
        if not isinstance(ops, dict):
            continue
        rows = "".join(f"<tr><td>{esc(op)}</td><td>{esc(n)}</td></tr>" for op, n in list(ops.items())[:30])
        parts.append(
            f"<details><summary>Op census, {esc(phase)}: {esc(census.get('calls'))} aten calls in one call "
            f"(baseline)</summary><table><thead><tr><th>op</th><th>calls</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></details>"
        )
    return "".join(parts)


def run_label(a: Analysis) -> str:
    """Which run a column or verdict of several is: the machine alone left two runs of one machine (or two
    machines of one model) headed alike."""
    return f"{a.machine}, run {', '.join(a.run_ids)} (torch {a.baseline_torch} -> {a.candidate_torch})"


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


def multi_json(analyses: list[Analysis]) -> dict[str, Any]:
    worst = "benefit"
    order = ["benefit", "no-change", "mixed", "inconclusive", "regression"]
    for an in analyses:
        if order.index(an.verdict) > order.index(worst):
            worst = an.verdict
    first = analyses[0].to_json()
    return {**first, "verdict": worst, "machines": [an.to_json() for an in analyses]}


def render_run_list(rows: list[StoredRun], out: Console) -> None:
    """`report --list` on a terminal: what --run, --baseline and --candidate take, newest last."""
    if not rows:
        out.print(
            "No stored runs yet: `mpsup bench` records one (add --candidate VERSION to pair two torches, or --aa "
            "to pair this torch with itself).",
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
    # Narrow, the id's own timestamp says when, and the torch pair gets the room ("2.13.0…" told nothing).
    columns = ("mode", "device", "torch", "n") if narrow else ("created", "mode", "device", "torch", "n")
    for c in columns:
        t.add_column(c, no_wrap=c != "torch", overflow="fold", justify="right" if c == "n" else "left")
    if not narrow:
        t.add_column("model", overflow="fold")
    for r in rows:
        # A file renamed by hand: --run takes its name; the id written inside is shown beside it.
        inside = f" (record id {r.record_id})" if r.record_id and r.record_id != r.id else ""
        cells = [
            safe(r.id + inside),
            *([] if narrow else [safe(_when(r.created_at))]),
            safe(r.mode) + (" (partial)" if r.partial else ""),
            safe(r.device),
            safe(_torches(r.torch, r.mode)),
            str(r.workloads),
        ]
        t.add_row(*cells, *([] if narrow else [safe(r.model or "")]))
    out.print(t)
    if narrow and any(r.model for r in rows):
        out.print("Model paths: 100+ columns or --list --json.", highlight=False)


def _when(created: object) -> str:
    # 2026-12-03T12:04:07Z -> 2026-12-03 12:04: minutes tell runs apart; the id carries the rest.
    text = str(created or "")
    return text[:16].replace("T", " ") if len(text) >= 16 else text


def _torches(versions: list[str | None], mode: str | None) -> str:
    """`2.13.0 (A/A)` for an A/A run; a paired run of one version (two wrappers, two settings) is no A/A."""
    names = [str(v) for v in versions]
    if mode == "aa" and len(set(names)) == 1:
        return f"{names[0]} (A/A)"
    return " -> ".join(names)
