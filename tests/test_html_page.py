"""The HTML report page (issue 16): plots legible without hovering, a sortable table, phone and print layouts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mpsup.report.analysis import analyze
from mpsup.report.render import render_html
from tests.synthetic import paired_record

SLOW, FAST = "linear/4096x1024/t1", "linear/4096x4096/t1"


def _page(**extra_parts: str) -> tuple[str, list]:
    rec = paired_record({FAST: 1.35, SLOW: 0.82}, seed=11, run_id="20261202T100000Z-aaaaaa")
    for name, part in extra_parts.items():
        for w in rec["workloads"]:
            if w["name"] == name:
                w["part"] = part
    a = analyze(rec)
    return render_html(a), a.workloads


def _plot(page: str) -> str:
    start = page.index('<svg id="speedup-plot"')
    return page[start : page.index("</svg>", start)]


def test_y_ticks_cover_every_point():
    page, ws = _page()
    plot = _plot(page)
    ticks = [float(t) for t in re.findall(r'class="ytick"[^>]*>([0-9.]+)x<', plot)]
    estimates = [w.speedup.estimate for w in ws if w.speedup]
    assert len(ticks) >= 4
    assert (
        min(ticks) <= min(estimates) * 1.1 and max(ticks) >= max(estimates) / 1.1
    )  # before: 1.00x and 1.25x for points at 0.82x


def test_outliers_are_labelled_and_parts_have_colours_and_a_legend():
    page, _ = _page(**{SLOW: "moe"})
    plot = _plot(page)
    labels = re.findall(r'class="label"[^>]*>([^<]+)<', plot)
    assert any(lbl.startswith(FAST) for lbl in labels) and any(lbl.startswith(SLOW) for lbl in labels)
    fills = set(re.findall(r'class="point" data-part="[^"]+" [^>]*fill="(#[0-9a-f]{6})"', plot))
    assert len(fills) == 2  # linear and moe differ
    assert plot.count('class="legend"') == 2


def test_axis_titles_sit_outside_the_plot_area():
    plot = _plot(_page()[0])
    frame = re.search(r'<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)"', plot)
    assert frame is not None
    bottom = int(frame.group(2)) + int(frame.group(4))
    x_title = re.search(r'class="axis-title" x="[^"]+" y="([0-9.]+)"', plot)
    assert x_title is not None and float(x_title.group(1)) > bottom + 20
    ys = [float(y) for y in re.findall(r'<circle class="point"[^>]*cy="([0-9.]+)"', plot)]
    assert max(ys) <= bottom


def test_table_sorts_without_script_and_page_fits_phones_and_print():
    page, ws = _page()
    assert "<script" not in page.lower()  # record text can never run
    rows = re.findall(r'<tr style="--share:(\d+);--speedup:(\d+);--name:(\d+)"', page)
    assert len(rows) == len(ws)
    for col in range(3):
        assert sorted(int(r[col]) for r in rows) == list(range(len(ws)))
    assert 'name="viewport"' in page and "@media print" in page and "@media (max-width" in page
    assert 'width="760"' not in page  # plots scale with the page (viewBox only)


def test_memory_plot_explains_missing_figures():
    rec = paired_record(1.1, seed=2)
    for w in rec["workloads"]:
        for env in w["envs"].values():
            env.pop("memory", None)
    page = render_html(analyze(rec))
    assert "Peak memory was not recorded in both environments" in page


def test_page_renders_in_headless_chromium(tmp_path: Path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed here (`apt-get install chromium`)")
    page, ws = _page(**{SLOW: "moe"})
    out = tmp_path / "report.html"
    out.write_text(page)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--hide-scrollbars",
    ]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120, check=False
    ).stdout
    assert dom.count('class="point"') == len([w for w in ws if w.speedup]) and 'id="workloads"' in dom
    shot = tmp_path / "phone.png"
    subprocess.run(
        [chromium, *flags, "--window-size=390,1100", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert shot.exists() and shot.stat().st_size > 10_000


def _memory_page(peaks: dict[str, tuple[int, int]]) -> str:
    rec = paired_record({FAST: 1.35, SLOW: 0.82}, seed=11, run_id="20261202T100000Z-aaaaaa")
    for w in rec["workloads"]:
        base, cand = peaks.get(w["name"], (64 << 20, 64 << 20))
        w["envs"]["baseline"]["memory"]["peak_allocated"] = base
        w["envs"]["candidate"]["memory"]["peak_allocated"] = cand
    return render_html(analyze(rec))


def test_the_memory_plot_has_a_scale_and_each_bar_its_figure():
    page = _memory_page({FAST: (100 << 20, 80 << 20), SLOW: (100 << 20, 500 << 20)})
    plot = page[page.index('<svg id="memory-plot"') :]
    plot = plot[: plot.index("</svg>")]
    assert re.findall(r'class="mtick"[^>]*>([^<]+)<', plot) == ["0.5x", "1x: same peak", "2x"]
    values = re.findall(r'class="mvalue"[^>]*>([^<]+)<', plot)
    # Before, a bar had only a hover title: 0.80x and a 5x bar clipped at 2x read the same as their bar lengths.
    assert "0.80x" in values and "5.00x" in values


def test_an_interval_running_off_the_axis_ends_in_an_arrowhead():
    rec = paired_record({FAST: 1.35, SLOW: 0.82}, seed=11, run_id="20261202T100000Z-aaaaaa", noise=0.9)
    plot = _plot(render_html(analyze(rec)))
    lows = [float(v) for v in re.findall(r"goes on to ([0-9.]+)x, off the axis", plot)]
    assert lows, "a noisy run's intervals reach past 0.25x or 4x"
    assert all(v < 0.25 or v > 4.0 for v in lows)  # only past the axis's 0.25x-4x range
    frame = re.search(r'<rect x="\d+" y="(\d+)" width="\d+" height="(\d+)"', plot)
    assert frame is not None
    top, bottom = int(frame.group(1)), int(frame.group(1)) + int(frame.group(2))
    for arm, tip in re.findall(r'class="clipped" d="M[0-9.]+ ([0-9.]+) L[0-9.]+ ([0-9.]+)', plot):
        # The tip on the frame's edge, the arms inside the plot: an arrow pointing out, not a fork outside.
        assert float(tip) in (pytest.approx(top, abs=0.1), pytest.approx(bottom, abs=0.1))
        assert top < float(arm) < bottom


def test_whole_model_phases_are_not_points_on_the_size_axis():
    rec = paired_record({FAST: 1.35, SLOW: 0.82}, seed=11, run_id="20261202T100000Z-aaaaaa")
    for w in rec["workloads"][:2]:
        w["part"], w["kind"], w["phase"] = "phase", "model_phase", "prefill"
    plot = _plot(render_html(analyze(rec)))
    names = re.findall(r"<title>([^:<]+):", plot)
    assert rec["workloads"][0]["name"] not in names and rec["workloads"][1]["name"] not in names
    assert len(names) == len(rec["workloads"]) - 2
