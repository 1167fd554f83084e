"""The report as one self-contained HTML page: no script, CSS-only sorting, SVG plots (plots.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mpsup.report.analysis import Analysis, WorkloadChange
from mpsup.report.common import (
    AA_TAG,
    ATTRIBUTION_HEAD,
    UNEXPLAINED_LEGEND,
    attribution_heading,
    attribution_rows,
    esc,
    interval_text,
    not_measured_lines,
    summary_lines,
    unmeasured_cell,
)
from mpsup.report.numerics import numerics_lines
from mpsup.report.plots import svg_memory_plot, svg_phase_plot, svg_speedup_plot
from mpsup.units import fmt_time


def _speedup_cell(w: WorkloadChange) -> str:
    """The speedup cell of the page: where the column is narrow it wraps between the figure, "(95% CI" and the
    interval's two ends, never inside a number; why nothing was measured where nothing was."""
    if w.speedup is None:
        return esc(unmeasured_cell(w))
    text = esc(interval_text(w.speedup))
    head, sep, interval = text.partition(" (")
    if not sep or not w.speedup.bounded:
        return text
    label, _, ends = interval.rpartition(" ")
    return f'{head} <span class="iv">({label}</span> <span class="iv">{ends}</span>'


def _attribution_html(a: Analysis) -> str:
    parts = []
    for attr in a.attribution.values():
        head = "".join(f"<th>{esc(c)}</th>" for c in ATTRIBUTION_HEAD)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in attribution_rows(attr, limit=None)
        )
        parts.append(
            f"<h2>Which op: {esc(attr.phase)}</h2><p>{esc(attribution_heading(attr))}</p>"
            f'<div class="tablebox"><table class="ops"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>"
            f"<p><small>{esc(UNEXPLAINED_LEGEND)}</small></p>"
        )
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
   its track would run into the next one. The time and share tracks fit "999.99 ms" inside their padding;
   names, intervals and headers wrap rather than run over. */
th { white-space: normal; }
#workloads td:nth-child(1), #workloads td:nth-child(6), #workloads td:nth-child(7) { white-space: normal;
  overflow-wrap: anywhere; }
/* A part is one short word (phase, model, linear, roofline): its track fits the longest whole, never broken. */
#workloads td:nth-child(2) { white-space: nowrap; overflow-wrap: normal; word-break: keep-all; }
td { font-variant-numeric: tabular-nums; }
.iv { white-space: nowrap; }
.faster { color: #1a7f37; } .slower { color: #cf222e; }
.sorter { font-size: 0.85em; margin: 0 0 0.4em; }
.sorter label { text-decoration: underline; cursor: pointer; }
#workloads tbody { display: flex; flex-direction: column; }
#workloads thead tr, #workloads tbody tr { display: grid; align-items: end;
  grid-template-columns: minmax(9em, 2fr) 5.2em 4em 6.5em 6.5em minmax(7.5em, 1fr) 4.8em; }
th small { display: block; font-weight: normal; }
#workloads tbody tr { order: var(--share); }
/* An op table is a plain table: its shapes and dtypes wrap at their commas and x's rather than overlap. */
.ops td:nth-child(2), .ops td:nth-child(3), .ops th:nth-child(2), .ops th:nth-child(3) { white-space: normal;
  overflow-wrap: anywhere; text-align: left; }
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
        f"<td>{fmt_time(w.candidate_s)}</td><td>{_speedup_cell(w)}</td>"
        f'<td class="{esc(w.change)}">{esc(w.change)}</td></tr>'
        for i, w in enumerate(a.workloads)
    )
    answers = [esc(line) for line in numerics_lines(a.model_numerics)]
    summary = "".join(
        f"<li>{line}</li>" for line in summary_lines(a, esc) + answers + not_measured_lines(a.workloads, esc)
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>mpsup report{AA_TAG if a.mode == "aa" else ""}: {esc(a.verdict)}</title>
<style>{_CSS}</style></head><body>
<p class="verdict" id="verdict">{esc(a.sentence)}</p>
<p>{esc(a.machine)} ({esc(a.device)}) · torch {esc(a.baseline_torch)} → {esc(a.candidate_torch)}
 · runs {esc(", ".join(a.run_ids))}</p>
<ul>{summary}</ul>
{_phase_section(a)}
{_attribution_html(a)}
{_census_html(a)}
<div class="grid">
<div><h2>Speedup per workload against its size</h2>
{svg_speedup_plot(a.workloads)}
<h2>Peak memory, candidate / baseline</h2>
{svg_memory_plot(a.workloads)}</div>
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


def _phase_section(a: Analysis) -> str:
    """The model run whole: its phases are the answer, so their plot, with their intervals, comes first."""
    if not a.model_phases:
        return ""
    return f"<h2>Each phase of your model, run whole</h2>\n{svg_phase_plot(a.model_phases)}"


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
