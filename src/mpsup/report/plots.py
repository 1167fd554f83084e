"""The page's SVG plots: each phase's speedup with its interval, speedup per workload against its size, and
peak memory."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpsup.report.analysis import MEMORY_NOISE_FLOOR, NOT_LAYERS, WorkloadChange
from mpsup.report.common import esc, interval_text, unbounded_text
from mpsup.report.phases import PhaseChange

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


@dataclass(frozen=True)
class _Axes:
    """The speedup plot's frame: log10 work per call across, log2 speedup up, titles and ticks in the margins."""

    width: int
    height: int
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    pad_l: int = 64
    pad_r: int = 16
    pad_t: int = 28
    pad_b: int = 56

    @property
    def plot_w(self) -> int:
        return self.width - self.pad_l - self.pad_r

    @property
    def plot_h(self) -> int:
        return self.height - self.pad_t - self.pad_b

    def px(self, x: float) -> float:
        return self.pad_l + (x - self.x_lo) / (self.x_hi - self.x_lo or 1) * self.plot_w

    def py(self, v: float) -> float:
        lv = math.log2(max(2**self.y_lo, min(2**self.y_hi, v)))
        return self.pad_t + (self.y_hi - lv) / (self.y_hi - self.y_lo or 1) * self.plot_h


def _speedup_frame(ax: _Axes) -> list[str]:
    """The frame, the speedup grid (1x dashed) and the size decades."""
    parts = [
        f'<svg id="speedup-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {ax.width} {ax.height}" '
        'preserveAspectRatio="xMinYMin meet" role="img" aria-label="speedup per workload against its size" '
        'font-size="12">',
        f'<rect x="{ax.pad_l}" y="{ax.pad_t}" width="{ax.plot_w}" height="{ax.plot_h}" fill="none" stroke="#d0d7de"/>',
    ]
    for tick in _Y_TICKS:
        if ax.y_lo <= math.log2(tick) <= ax.y_hi:
            y = ax.py(tick)
            dash = ' stroke-dasharray="4"' if tick == 1.0 else ""
            parts.append(
                f'<line x1="{ax.pad_l}" x2="{ax.width - ax.pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{"#888" if tick == 1 else "#eaeef2"}"{dash}/>'
            )
            parts.append(f'<text class="ytick" x="{ax.pad_l - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:.2f}x</text>')
    for decade in range(math.ceil(ax.x_lo), math.floor(ax.x_hi) + 1):
        parts.append(
            f'<text class="xtick" x="{ax.px(decade):.1f}" y="{ax.height - ax.pad_b + 16}" text-anchor="middle">'
            f"1e{decade}</text>"
        )
    return parts


def _speedup_point(ax: _Axes, w: WorkloadChange, x: float) -> list[str]:
    """One workload: its interval as a line (an arrowhead where it runs off the axis), its estimate as a point."""
    s = w.speedup
    assert s is not None
    c = _part_color(w.part)
    parts = []
    if s.bounded and s.low > 0:
        parts.append(
            f'<line x1="{ax.px(x):.1f}" x2="{ax.px(x):.1f}" y1="{ax.py(s.low):.1f}" y2="{ax.py(s.high):.1f}" '
            f'stroke="{c}" stroke-opacity="0.6"/>'
        )
        # An interval that runs off the axis would end at its edge like one that stops there: an arrowhead
        # says it goes on. SVG's y grows downwards: the low end's arms rise into the plot (-), the high end's
        # fall into it (+).
        for end, beyond, sign in ((s.low, s.low < 2**ax.y_lo, -1), (s.high, s.high > 2**ax.y_hi, 1)):
            if beyond:
                tip, mid = ax.py(end), ax.px(x)
                parts.append(
                    f'<path class="clipped" d="M{mid - 4:.1f} {tip + 6 * sign:.1f} L{mid:.1f} {tip:.1f} '
                    f'L{mid + 4:.1f} {tip + 6 * sign:.1f}" fill="none" stroke="{c}">'
                    f"<title>{esc(w.name)}: the interval goes on to {end:.3f}x, off the axis</title></path>"
                )
        fill, what = f'fill="{c}"', interval_text(s)
    else:
        # No interval (too few rounds): a hollow point, so it cannot pass for an exact one.
        fill, what = f'fill="none" stroke="{c}"', f"{s.estimate:.3f}x {unbounded_text(s)}"
    ring = ' stroke="#1f2328" stroke-width="1.5"' if w.significant else ""
    parts.append(
        f'<circle class="point" data-part="{esc(w.part)}" cx="{ax.px(x):.1f}" cy="{ax.py(s.estimate):.1f}" r="4" '
        f"{fill}{ring}><title>{esc(w.name)}: {what}</title></circle>"
    )
    return parts


def _speedup_labels(ax: _Axes, pts: list[WorkloadChange]) -> list[str]:
    """The outliers' names, the axis titles and the parts' legend."""
    parts = []
    for w in _outliers(pts):
        s = w.speedup
        assert s is not None
        x, y = ax.px(math.log10(w.size)), ax.py(s.estimate)
        anchor = "end" if x > ax.width * 0.6 else "start"
        dx = -7 if anchor == "end" else 7
        parts.append(
            f'<text class="label" x="{x + dx:.1f}" y="{y - 6:.1f}" text-anchor="{anchor}" font-size="11">'
            f"{esc(w.name)} {s.estimate:.2f}x</text>"
        )
    parts.append(
        f'<text class="axis-title" x="{ax.pad_l + ax.plot_w / 2:.0f}" y="{ax.height - 12}" text-anchor="middle">'
        "work per call (FLOP, or bytes moved; log scale)</text>"
    )
    parts.append(
        f'<text class="axis-title" transform="translate(14 {ax.pad_t + ax.plot_h / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">speedup, candidate vs baseline</text>'
    )
    for i, part in enumerate(dict.fromkeys(w.part for w in pts)):
        lx = ax.pad_l + 8 + i * 96
        parts.append(
            f'<circle class="legend" cx="{lx}" cy="{ax.pad_t - 14}" r="4" fill="{_part_color(part)}"/>'
            f'<text x="{lx + 8}" y="{ax.pad_t - 10}">{esc(part)}</text>'
        )
    parts.append(
        f'<text x="{ax.width - ax.pad_r}" y="{ax.pad_t - 10}" text-anchor="end" font-size="11">outlined: significant '
        "change</text>"
    )
    return parts


def svg_speedup_plot(ws: list[WorkloadChange], width: int = 760, height: int = 380) -> str:
    """Each layer's speedup and interval against its work per call (log-log)."""
    # Not the whole-model phases: they have no work size on this axis, and the phase plot above is theirs.
    pts = [w for w in ws if w.speedup and w.size > 0 and w.speedup.estimate > 0 and w.part not in NOT_LAYERS]
    if not pts:
        if any(w.part in NOT_LAYERS for w in ws):
            return '<p class="empty">No layer was measured in both environments: the phases above are the run.</p>'
        return '<p class="empty">No workload was measured in both environments, so there is nothing to plot.</p>'
    xs = [math.log10(w.size) for w in pts]
    ends = [
        v
        for w in pts
        for v in (w.speedup.estimate, w.speedup.low, w.speedup.high)  # type: ignore[union-attr]
        if math.isfinite(v) and v > 0
    ]
    ax = _Axes(
        width,
        height,
        x_lo=min(xs) - 0.2,
        x_hi=max(xs) + 0.2,
        y_lo=math.log2(max(0.25, min([*ends, 0.95]))) - 0.05,
        y_hi=math.log2(min(4.0, max([*ends, 1.05]))) + 0.05,
    )
    parts = _speedup_frame(ax)
    for w, x in zip(pts, xs, strict=True):
        parts += _speedup_point(ax, w, x)
    return "".join([*parts, *_speedup_labels(ax, pts), "</svg>"])


def svg_memory_plot(ws: list[WorkloadChange], width: int = 760) -> str:
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


def svg_phase_plot(phases: list[PhaseChange], width: int = 760) -> str:
    """Each phase of the model run whole, the answer itself: its speedup as a point and its 95% interval as a
    bar, on a log axis around 1x; a phase with no bounded interval is said in words, never a bare point."""
    if not phases:
        return ""
    pad_l, pad_r, top, row = 150, 24, 30, 36
    height = top + row * len(phases) + 12
    bounded = [p.speedup for p in phases if p.speedup and p.speedup.bounded and p.speedup.low > 0]
    ends = [v for s in bounded for v in (s.low, s.high, s.estimate)]
    lo = math.log2(max(0.25, min([*ends, 0.8]))) - 0.05
    hi = math.log2(min(4.0, max([*ends, 1.25]))) + 0.05
    plot_w = width - pad_l - pad_r

    def px(v: float) -> float:
        lv = math.log2(max(2**lo, min(2**hi, v)))
        return pad_l + (lv - lo) / (hi - lo) * plot_w

    parts = [
        f'<svg id="phase-plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="speedup per phase of the model, with its 95% interval" font-size="12">'
    ]
    for tick in _Y_TICKS:
        if lo <= math.log2(tick) <= hi:
            x = px(tick)
            dash = ' stroke="#888" stroke-dasharray="4"' if tick == 1.0 else ' stroke="#eaeef2"'
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" y2="{height - 6}"{dash}/>'
                f'<text class="ptick" x="{x:.1f}" y="{top - 10}" text-anchor="middle">{tick:g}x</text>'
            )
    for i, p in enumerate(phases):
        y = top + i * row + row / 2
        parts.append(f'<text x="4" y="{y + 4:.1f}">{esc(p.phase)}</text>')
        s = p.speedup
        if s is None or p.change == "n/a" or not s.bounded or s.low <= 0:
            parts.append(f'<text class="pvalue" x="{pad_l + 4}" y="{y + 4:.1f}">{esc(p.text())}</text>')
            continue
        color = {"faster": "#1a7f37", "slower": "#cf222e"}.get(p.change, "#57606a")
        parts.append(
            f'<line class="pinterval" x1="{px(s.low):.1f}" x2="{px(s.high):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{color}" stroke-width="3" stroke-opacity="0.6"/>'
            f'<circle class="ppoint" cx="{px(s.estimate):.1f}" cy="{y:.1f}" r="5" fill="{color}">'
            f"<title>{esc(p.text())}</title></circle>"
        )
        # The figures above the point, kept inside the plot: the bar may run off the axis, the words do not.
        tx = min(max(px(s.estimate), pad_l + 90), width - 90)
        parts.append(
            f'<text class="pvalue" x="{tx:.1f}" y="{y - 8:.1f}" text-anchor="middle">'
            f"{esc(interval_text(s, digits=2))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
