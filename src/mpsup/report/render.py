"""Report renderers: terminal (rich), Markdown, JSON and a self-contained HTML page with SVG plots."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mpsup.bench.render import fmt_time
from mpsup.render import safe
from mpsup.report.analysis import PUBLISHED_SUITE_CLAIM, Analysis, WorkloadChange
from mpsup.stats import Interval

MARK = {"faster": "▲", "slower": "▼", "same": "·", "n/a": " "}

# Every string that comes from a record (workload and feature names, ids, device, versions, statuses,
# conditions) is data, never markup: each renderer passes it through its own escape.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")


def md(text: object) -> str:
    """Record text as inert Markdown on one line: it can neither leave its table cell (`|`, a newline)
    nor become HTML, a link, an image or emphasis."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))


def esc(text: object) -> str:
    """Record text for HTML element content and quoted attribute values."""
    return html.escape(str(text), quote=True)


def _iv(i: Interval | None) -> str:
    return "-" if i is None else f"{i.estimate:.3f}x ({i.low:.3f}-{i.high:.3f})"


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


def summary_lines(a: Analysis, quote: Callable[[object], str] = str) -> list[str]:
    """The figures below the table; `quote` escapes the record-derived parts for the target format."""
    lines = []
    if a.suite_geomean:
        split = ", ".join(f"{k} {v.estimate:.3f}x" for k, v in a.suite_split.items())
        lines.append(f"Suite geometric mean over BF16 linear shapes: {_iv(a.suite_geomean)}"
                     f"{' (' + split + ')' if split else ''}; the torch 2.15 notes claim {PUBLISHED_SUITE_CLAIM}x"
                     " on their Mac.")
    if a.model_speedup:
        lines.append(f"Model forward (estimated from its layers): {_iv(a.model_speedup)}")
    if a.peak_memory_ratio:
        lines.append(f"Peak memory, candidate / baseline (geometric mean): {a.peak_memory_ratio:.2f}")
    for s in a.smoke_changes:
        lines.append(f"Smoke: {quote(s['feature'])} {s['change']} ({quote(s['baseline'])} -> {quote(s['candidate'])})")
    if a.noise:
        lines.append("Conditions: " + "; ".join(quote(n) for n in a.noise))
    return lines


def render_terminal(a: Analysis, console: Console, *, limit: int = 40) -> None:
    style = {"benefit": "green", "regression": "red", "mixed": "yellow", "inconclusive": "yellow"}.get(a.verdict, "")
    console.print(Text(a.sentence, style=f"bold {style}"))
    console.print(f"{safe(a.machine)} · {safe(a.device)} · torch {safe(a.baseline_torch)} -> {safe(a.candidate_torch)}"
                  f" · run {safe(', '.join(a.run_ids))}")
    t = Table(show_lines=False)
    t.add_column("workload", no_wrap=True, overflow="ellipsis", max_width=34)
    for col, just in (("count", "right"), ("share", "right"), ("baseline", "right"),
                      ("candidate", "right"), ("speedup (95% CI)", "right"), ("", "left"), ("", "center")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for w in a.workloads[:limit]:
        t.add_row(safe(w.name), str(w.count), f"{w.share:.1%}", fmt_time(w.baseline_s), fmt_time(w.candidate_s),
                  _iv(w.speedup) if w.speedup else safe(w.status), _bar(w.speedup.estimate if w.speedup else None),
                  MARK[w.change])
    console.print(t)
    if len(a.workloads) > limit:
        console.print(f"... {len(a.workloads) - limit} more workloads (use --format json or html for all)")
    console.print(f"▲ faster, ▼ slower: the interval excludes 1x and the change exceeds {a.threshold:.0%}; · no measurable change")
    for line in summary_lines(a, safe):
        console.print(line)


def render_markdown(a: Analysis) -> str:
    out = [f"# mpsup report: {a.verdict}", "", f"**{md(a.sentence)}**", "",
           f"- Machine: {md(a.machine)} ({md(a.device)})",
           f"- torch {md(a.baseline_torch)} (baseline) vs {md(a.candidate_torch)} (candidate)",
           f"- Runs: {md(', '.join(a.run_ids))}", ""]
    out += [f"- {line}" for line in summary_lines(a, md)]
    out += ["", "| workload | count | share | baseline | candidate | speedup | 95% CI | change |",
            "|---|---:|---:|---:|---:|---:|---|---|"]
    for w in a.workloads:
        ci = f"{w.speedup.low:.3f}-{w.speedup.high:.3f}" if w.speedup else "-"
        sp = f"{w.speedup.estimate:.3f}x" if w.speedup else md(w.status)
        out.append(f"| {md(w.name)} | {w.count} | {w.share:.1%} | {fmt_time(w.baseline_s)} | {fmt_time(w.candidate_s)} "
                   f"| {sp} | {ci} | {w.change} |")
    return "\n".join(out) + "\n"


def _svg_speedup_plot(ws: list[WorkloadChange], width: int = 760, height: int = 360) -> str:
    pts = [w for w in ws if w.speedup and w.size > 0]
    pad_l, pad_r, pad_t, pad_b = 60, 20, 20, 40
    if not pts:
        return '<p class="empty">No paired workloads to plot.</p>'
    xs = [math.log10(w.size) for w in pts]
    lows = [w.speedup.low for w in pts if math.isfinite(w.speedup.low)]  # type: ignore[union-attr]
    highs = [w.speedup.high for w in pts if math.isfinite(w.speedup.high)]  # type: ignore[union-attr]
    y_lo = math.log2(max(0.25, min([*lows, 0.9])))
    y_hi = math.log2(min(4.0, max([*highs, 1.1])))
    x_lo, x_hi = min(xs) - 0.1, max(xs) + 0.1

    def px(x: float) -> float:
        return pad_l + (x - x_lo) / (x_hi - x_lo or 1) * (width - pad_l - pad_r)

    def py(s: float) -> float:
        v = math.log2(max(2**y_lo, min(2**y_hi, s)))
        return pad_t + (y_hi - v) / (y_hi - y_lo or 1) * (height - pad_t - pad_b)

    parts = [f'<svg id="speedup-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="speedup per workload against size">',
             f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{py(1):.1f}" y2="{py(1):.1f}" stroke="#888" stroke-dasharray="4"/>',
             f'<text x="4" y="{py(1) + 4:.1f}" font-size="11">1.00x</text>']
    for tick in (0.5, 0.8, 1.25, 2.0):
        if y_lo <= math.log2(tick) <= y_hi:
            parts.append(f'<text x="4" y="{py(tick) + 4:.1f}" font-size="11">{tick:.2f}x</text>')
    for decade in range(math.ceil(x_lo), math.floor(x_hi) + 1):
        parts.append(f'<text x="{px(decade) - 10:.1f}" y="{height - 10}" font-size="11">1e{decade}</text>')
    colors = {"faster": "#1a7f37", "slower": "#cf222e", "same": "#57606a", "n/a": "#57606a"}
    for w, x in zip(pts, xs, strict=True):
        s = w.speedup
        assert s is not None
        c = colors[w.change]
        lo = s.low if math.isfinite(s.low) else s.estimate
        hi = s.high if math.isfinite(s.high) else s.estimate
        parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{py(lo):.1f}" y2="{py(hi):.1f}" stroke="{c}"/>')
        parts.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(s.estimate):.1f}" r="3.5" fill="{c}">'
                     f'<title>{esc(w.name)}: {s.estimate:.3f}x ({s.low:.3f}-{s.high:.3f})</title></circle>')
    parts.append(f'<text x="{width / 2 - 120:.0f}" y="{height - 24}" font-size="12">work per call (FLOP or bytes, log scale)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_memory_plot(ws: list[WorkloadChange], width: int = 760) -> str:
    pts = [w for w in ws if w.memory_ratio][:30]
    if not pts:
        return '<p class="empty">No peak-memory figures in both environments.</p>'
    row = 16
    height = row * len(pts) + 20
    mid = 420
    parts = [f'<svg id="memory-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<line x1="{mid}" x2="{mid}" y1="0" y2="{height}" stroke="#888"/>']
    for i, w in enumerate(pts):
        r = w.memory_ratio or 1.0
        length = max(-1.0, min(1.0, math.log2(r))) * 300
        x = mid if length >= 0 else mid + length
        color = "#cf222e" if r > 1 else "#1a7f37"
        parts.append(f'<text x="4" y="{i * row + 14}" font-size="11">{esc(w.name[:60])}</text>')
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{i * row + 4}" width="{abs(length):.1f}" height="10" fill="{color}">'
                     f"<title>{r:.2f}x</title></rect>")
    parts.append("</svg>")
    return "".join(parts)


def render_html(a: Analysis) -> str:
    rows = "".join(
        f"<tr><td>{esc(w.name)}</td><td>{w.count}</td><td>{w.share:.1%}</td><td>{fmt_time(w.baseline_s)}</td>"
        f"<td>{fmt_time(w.candidate_s)}</td><td>{_iv(w.speedup) if w.speedup else esc(w.status)}</td>"
        f"<td class=\"{esc(w.change)}\">{esc(w.change)}</td></tr>"
        for w in a.workloads
    )
    summary = "".join(f"<li>{line}</li>" for line in summary_lines(a, esc))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>mpsup report: {esc(a.verdict)}</title>
<style>
body {{ font-family: -apple-system, system-ui, sans-serif; margin: 2em; color: #1f2328; }}
.verdict {{ font-size: 1.3em; font-weight: 600; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 2px 8px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.faster {{ color: #1a7f37; }} .slower {{ color: #cf222e; }}
</style></head><body>
<p class="verdict" id="verdict">{esc(a.sentence)}</p>
<p>{esc(a.machine)} ({esc(a.device)}) · torch {esc(a.baseline_torch)} → {esc(a.candidate_torch)}
 · runs {esc(", ".join(a.run_ids))}</p>
<ul>{summary}</ul>
<h2>Speedup per workload against its size</h2>
{_svg_speedup_plot(a.workloads)}
<h2>Peak memory, candidate / baseline</h2>
{_svg_memory_plot(a.workloads)}
<h2>Workloads</h2>
<table><thead><tr><th>workload</th><th>count</th><th>share</th><th>baseline</th><th>candidate</th><th>speedup (95% CI)</th><th>change</th></tr></thead>
<tbody>{rows}</tbody></table>
</body></html>
"""


def render_multi_terminal(analyses: list[Analysis], console: Console) -> None:
    for an in analyses:
        console.print(Text(f"{an.machine}: {an.sentence}", style="bold"))
    names: list[str] = []
    for an in analyses:
        for w in an.workloads:
            if w.name not in names:
                names.append(w.name)
    t = Table()
    t.add_column("workload")
    for an in analyses:
        t.add_column(safe(an.machine), justify="right")
    for n in names:
        cells = []
        for an in analyses:
            hit = next((x for x in an.workloads if x.name == n), None)
            cells.append(f"{hit.speedup.estimate:.3f}x {MARK[hit.change]}" if hit and hit.speedup else "-")
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
