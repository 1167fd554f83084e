"""What a single run's figures say and what to run next: the lines under the bench screen (rich markup)."""

from __future__ import annotations

from typing import Any

from mpsup.bench.figures import RunFigures, run_figures
from mpsup.console import safe
from mpsup.runs.schema import RunRecord
from mpsup.units import fmt_rate


def meaning_lines(record: dict[str, Any]) -> list[str]:
    """What a single run's figures say about this machine, and what to run next (rich markup)."""
    return figure_lines(record) + NEXT_LINES


def figure_lines(record: dict[str, Any]) -> list[str]:
    """What a single run's figures say about this machine (rich markup)."""
    f = run_figures(record)
    return roofline_lines(f) + time_lines(f) + precision_lines(f)


def roofline_lines(f: RunFigures) -> list[str]:
    if not (f.copy_bandwidth or f.matmul_rate):
        return [
            "No roofline probe in this selection; to see what the memory system and the arithmetic units can do:",
            "  mpsup bench --only 'roofline/*'",
        ]
    peaks = " and ".join(
        x
        for x in (
            f.copy_bandwidth and fmt_rate(f.copy_bandwidth, "B/s") + " copy bandwidth",
            f.matmul_rate and fmt_rate(f.matmul_rate, "FLOP/s") + " matmul",
        )
        if x
    )
    lines = [f"This machine's roofline, measured here: {peaks}."]
    if f.copy_bandwidth and f.decode_bandwidth and f.decode_bandwidth <= f.copy_bandwidth:
        lines.append(
            f"Single-token linear layers reach up to {fmt_rate(f.decode_bandwidth, 'B/s')} "
            f"({f.decode_bandwidth / f.copy_bandwidth:.0%} of that bandwidth): decoding is bound by memory traffic."
        )
    elif f.copy_bandwidth and f.decode_bandwidth:
        # Above the copy figure, caches or a slowed probe are at work: "364% of that bandwidth: bound by
        # memory traffic" would contradict itself.
        lines.append(
            f"Single-token linear layers reach up to {fmt_rate(f.decode_bandwidth, 'B/s')}, more than the copy "
            "probe: their weights partly stay in cache (or the probe was slowed), so it does not bound them."
        )
    return lines


def time_lines(f: RunFigures) -> list[str]:
    if len(f.time_shares) <= 1:
        return []
    return ["Where the time goes: " + ", ".join(f"{safe(k)} {v:.0%}" for k, v in f.time_shares) + "."]


def precision_lines(f: RunFigures) -> list[str]:
    if f.median_width is None or f.widest_width is None:
        return []
    return [
        f"Each median is known to +-{f.median_width:.1%} (half the workloads closer, "
        f"the widest +-{f.widest_width:.0%}) for this process, now. A single run cannot tell whether another "
        "torch, or this one tomorrow, is faster: times move by a few % between processes and with heat "
        "and load, so compare two environments interleaved, not two tables."
    ]


NEXT_LINES = [
    "[bold]Next[/], to learn whether an upgrade helps this machine:",
    "  mpsup install-rc                   # a candidate torch beside this one",
    "  mpsup bench --candidate VERSION    # times both, same workloads",
    "  mpsup report                       # the verdict",
]


def paired_note(run: RunRecord) -> str:
    """The tables show each environment's own median over both visits, and a ratio of two such medians
    is not the comparison: the report's speedup is the median of the per-round ratios."""
    base, other = safe(run.labels[0]), safe(run.labels[1])
    return (
        f"Times are each environment's own median; the 95% CI, rate and memory are {base}'s alone. "
        f"The paired figures (speedup: the median of the per-round {base} / {other} ratios, its interval, "
        "the verdict) are `mpsup report`'s."
    )


def paired_next(run: RunRecord) -> list[str]:
    aa = run.mode == "aa"
    return [
        (
            "[bold]Next[/], to see this machine's noise floor (an A/A run should show no change):"
            if aa
            else "[bold]Next[/], to learn whether the candidate helps this machine:"
        ),
        f"  mpsup report --run {safe(run.id)}  # " + ("the paired figures" if aa else "the verdict"),
    ]
