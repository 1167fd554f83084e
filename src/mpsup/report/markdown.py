"""The report as Markdown: the verdict, the summary, each phase's ops and every workload's row."""

from __future__ import annotations

from mpsup.report.analysis import Analysis
from mpsup.report.common import (
    AA_TAG,
    ATTRIBUTION_HEAD,
    CANDIDATE_LABEL,
    UNEXPLAINED_LEGEND,
    attribution_heading,
    attribution_rows,
    interval_text,
    md,
    not_measured_lines,
    summary_lines,
    unmeasured_cell,
)
from mpsup.report.energy import energy_lines
from mpsup.report.numerics import numerics_lines
from mpsup.units import fmt_time


def attribution_markdown(a: Analysis) -> list[str]:
    out: list[str] = []
    for attr in a.attribution.values():
        out += ["", md(attribution_heading(attr)), ""]
        out.append("| " + " | ".join(ATTRIBUTION_HEAD) + " |")
        out.append("|---|---|---|" + "---:|" * (len(ATTRIBUTION_HEAD) - 3))
        out += ["| " + " | ".join(md(c) for c in row) + " |" for row in attribution_rows(attr)]
        out += ["", md(UNEXPLAINED_LEGEND)]
    return out


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
    out += [f"- {line}" for line in summary_lines(a, md) + not_measured_lines(a.workloads, md)]
    out += [f"- {md(line)}" for line in numerics_lines(a.model_numerics) + energy_lines(a.energy)]
    out += attribution_markdown(a)
    out += [
        "",
        f"| workload | count | share | baseline | {CANDIDATE_LABEL} | speedup (95% CI) | change |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for w in a.workloads:
        if w.part == "op":
            continue  # in its phase's table above
        sp = interval_text(w.speedup) if w.speedup else md(unmeasured_cell(w))
        out.append(
            f"| {md(w.name)} | {w.count} | {w.share_text} | {fmt_time(w.baseline_s)} | {fmt_time(w.candidate_s)} "
            f"| {sp} | {w.change} |"
        )
    return "\n".join(out) + "\n"
