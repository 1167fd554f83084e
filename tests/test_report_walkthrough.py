"""What a new user's walkthrough of `mpsup report` tripped on: a suggested command that failed, a memory
figure from allocator noise, --json beside --format, a candidate column that disagreed with bench's, a doc
and a legend that said less than the code does, A/A runs read as upgrades, runs of one machine headed
alike, HTML cells run together, and --list's wording of --aa."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.errors import UserError
from mpsup.report.analysis import MEMORY_NOISE_FLOOR, analyze, memory_ratio
from mpsup.report.command import ReportRequest, run_report
from mpsup.report.render import (
    call_legend,
    render_html,
    render_markdown,
    render_multi_terminal,
    render_run_list,
    render_terminal,
)
from mpsup.runs.store import save_record
from mpsup.stats import METHOD
from tests.conftest import REPO, run_cli
from tests.synthetic import paired_record

ENV = {"COLUMNS": "140", "NO_COLOR": "1", "TERM": "dumb"}
MIB = 2**20


def _terminal(a: Any, width: int = 140) -> str:
    buf = io.StringIO()
    render_terminal(a, Console(file=buf, width=width, color_system=None, legacy_windows=False))
    return buf.getvalue()


def _single(run_id: str, workloads: int = 6, torch_version: str = "2.14.1") -> dict[str, Any]:
    rec = paired_record(1.0, seed=9, run_id=run_id, count=workloads)
    rec["mode"] = "single"
    rec["environments"] = [{**rec["environments"][0], "torch_version": torch_version}]
    for w in rec["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"]}
        w.pop("ratios")
    return rec


def _peaks(rec: dict[str, Any], baseline: float, candidate: float) -> dict[str, Any]:
    for w in rec["workloads"]:
        w["envs"]["baseline"]["memory"] = {"peak_allocated": baseline}
        w["envs"]["candidate"]["memory"] = {"peak_allocated": candidate}
    return rec


def _aa(truth: float = 1.0, **kw: Any) -> dict[str, Any]:
    rec = paired_record(truth, mode="aa", **kw)
    for env in rec["environments"]:
        env["torch_version"] = "2.13.0+cpu"
    return rec


# 1. The command printed for newer single runs is one the comparison accepts.


def _suggested(stderr: str) -> list[str] | None:
    flat = " ".join(stderr.split())
    m = re.search(r"mpsup report --baseline (\S+) --candidate (\S+)", flat)
    return ["report", "--baseline", m.group(1), "--candidate", m.group(2)] if m else None


def test_the_suggested_comparison_is_the_newest_pair_that_runs(mpsup_home: Path):
    runs = mpsup_home / "runs"
    save_record(paired_record(1.0, seed=1, run_id="20261203T090000Z-pppppp"), runs)
    # Newest first: 4, 6, 4, 6 workloads. The two newest differ (the old suggestion, refused with exit 2);
    # the newest two that agree are the 6-workload runs, one apart.
    for run_id, n in (
        ("20261203T100000Z-s4aaaa", 4),
        ("20261203T110000Z-s6aaaa", 6),
        ("20261203T120000Z-s4bbbb", 4),
        ("20261203T130000Z-s6bbbb", 6),
    ):
        save_record(_single(run_id, n), runs)
    res = run_cli("report", env=ENV)
    assert res.returncode == 0, res.stderr
    args = _suggested(res.stderr)
    assert args == ["report", "--baseline", "20261203T110000Z-s6aaaa", "--candidate", "20261203T130000Z-s6bbbb"]
    ran = run_cli(*args, "--json")
    assert ran.returncode == 0, ran.stderr  # the printed command runs as printed
    assert json.loads(ran.stdout)["mode"] == "unpaired"


def test_no_comparison_is_suggested_where_no_two_newer_runs_pair(mpsup_home: Path):
    runs = mpsup_home / "runs"
    save_record(paired_record(1.0, seed=1, run_id="20261203T090000Z-pppppp"), runs)
    save_record(_single("20261203T100000Z-s6aaaa", 6), runs)
    save_record(_single("20261203T110000Z-s4aaaa", 4), runs)
    res = run_cli("report", env=ENV)
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stderr.split())
    assert _suggested(res.stderr) is None and "--baseline" not in flat, flat
    assert "No two of them can be compared side by side" in flat
    assert "For a verdict, measure both torches in one run: mpsup bench --candidate VERSION" in flat
    assert "  mpsup bench --candidate VERSION" in res.stderr.splitlines()  # a line of its own, to paste


def test_one_newer_single_run_gets_no_placeholder_command(mpsup_home: Path):
    runs = mpsup_home / "runs"
    save_record(paired_record(1.0, seed=1, run_id="20261203T090000Z-pppppp"), runs)
    save_record(_single("20261203T100000Z-s6aaaa", 6), runs)
    res = run_cli("report", env=ENV)
    flat = " ".join(res.stderr.split())
    assert "BASELINE_ID" not in flat and "--baseline" not in flat, flat
    assert "mpsup bench --candidate VERSION" in flat


# 2. Peaks of a few KB are allocator noise, not a memory figure.


def test_kilobyte_peaks_give_no_memory_figure_on_any_surface():
    a = analyze(_peaks(_aa(seed=2, count=6), 49152, 8192))  # as a tiny model against itself measured them
    assert a.peak_memory_ratio is None and all(w.memory_ratio is None for w in a.workloads)
    assert "Peak memory" not in _terminal(a) and "peak memory" not in a.sentence
    assert "Peak memory" not in render_markdown(a)
    page = render_html(a)
    assert "Peak memory, candidate / baseline (geometric mean)" not in page
    assert 'id="memory-plot"' not in page and f"under {MEMORY_NOISE_FLOOR // MIB} MiB (allocator noise)" in page
    doc = a.to_json()
    assert "peak_memory_ratio" in doc and doc["peak_memory_ratio"] is None


def test_workloads_under_the_floor_on_both_sides_are_left_out_and_one_side_above_it_counts():
    rec = _peaks(paired_record(1.2, seed=3, count=6), 100 * MIB, 80 * MIB)
    for w in rec["workloads"][:2]:  # noise on both sides
        w["envs"]["baseline"]["memory"] = {"peak_allocated": 4096}
        w["envs"]["candidate"]["memory"] = {"peak_allocated": 49152}
    a = analyze(rec)
    assert a.peak_memory_ratio == pytest.approx(0.8)
    assert "peak memory falls 20%" in a.sentence
    assert "Peak memory, candidate / baseline (geometric mean): 0.80" in _terminal(a)
    # From half a MiB to 400 MiB is no noise: every workload's peak grew 800-fold, and it must say so.
    grown = _peaks(paired_record(1.0, seed=3, count=6), MIB // 2, 400 * MIB)
    assert analyze(grown).peak_memory_ratio == pytest.approx(800)
    # Under a MiB apart is granularity, whatever the ratio: a small VAE conv against itself read 2.78x.
    assert memory_ratio(458752, 1273856) == 1.0 and memory_ratio(100 * MIB, 80 * MIB) == pytest.approx(0.8)
    assert memory_ratio(8192, 49152) is None and memory_ratio(None, 80 * MIB) is None


# 3. --json beside another --format, and `md`.


@pytest.mark.parametrize("fmt", ["html", "markdown", "md"])
def test_json_beside_another_format_is_refused_naming_both(fmt: str, tmp_path: Path):
    with pytest.raises(UserError) as err:
        ReportRequest(fmt=fmt, as_json=True, output=tmp_path / "o2.html")
    msg = str(err.value)
    assert f"--format {fmt}" in msg and "--json" in msg and "\n" not in msg
    assert not (tmp_path / "o2.html").exists()


def test_json_alone_or_with_format_json_is_json():
    assert ReportRequest(as_json=True).fmt == "json"
    assert ReportRequest(fmt="json", as_json=True).fmt == "json"
    assert ReportRequest(fmt="json").fmt == "json"  # as the CLI folds --json in today


def test_md_is_markdown_and_an_unknown_format_is_one_line_listing_the_valid_ones(mpsup_home: Path):
    assert ReportRequest(fmt="md").fmt == "markdown"
    with pytest.raises(UserError) as err:
        ReportRequest(fmt="pdf")
    msg = str(err.value)
    assert "\n" not in msg and "Value error" not in msg
    assert all(f in msg for f in ("terminal", "markdown", "json", "html"))
    save_record(paired_record(1.2, seed=4, run_id="20261203T100000Z-mdmdmd"), mpsup_home / "runs")
    out = io.StringIO()
    run_report(ReportRequest(fmt="md", output=mpsup_home.parent / "r.md"), Console(file=out), Console(file=out))
    assert (mpsup_home.parent / "r.md").read_text().startswith("# mpsup report: benefit")


# Through the command line: --format and --json reach the request apart, and --format takes `md`.


def test_cli_refuses_format_html_with_json(mpsup_home: Path, tmp_path: Path):
    save_record(paired_record(1.2, seed=4, run_id="20261203T100000Z-cliaaa"), mpsup_home / "runs")
    out = tmp_path / "o2.html"
    res = run_cli("report", "--format", "html", "-o", str(out), "--json")
    assert res.returncode == 2 and "--format html" in res.stderr and "--json" in res.stderr
    assert not out.exists()


def test_cli_takes_format_md(mpsup_home: Path):
    save_record(paired_record(1.2, seed=4, run_id="20261203T100000Z-clibbb"), mpsup_home / "runs")
    res = run_cli("report", "--format", "md")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# mpsup report")


# 4. The candidate column says what it is, on every surface.


def test_the_candidate_column_is_labelled_as_baseline_over_speedup_everywhere():
    a = analyze(paired_record(1.2, seed=4, count=6))
    text = _terminal(a)
    assert "(base ÷ speedup)" in text
    assert "candidate = baseline ÷ speedup" in text and "bench shows the candidate's own median" in text
    assert "| candidate (baseline ÷ speedup) |" in render_markdown(a)
    assert "candidate <small>(baseline ÷ speedup)</small>" in render_html(a)
    row = a.to_json()["workloads"][0]
    assert "as bench shows it" in row["time_note"] and "candidate_measured_s" in row["time_note"]
    assert row["candidate_s"] == pytest.approx(row["baseline_s"] / row["speedup"])
    assert row["candidate_measured_s"] != row["candidate_s"]  # bench's figure, kept beside it


# 5. The doc says what the suite interval resamples.


def test_the_doc_describes_the_suite_interval_the_code_computes():
    doc = " ".join((REPO / "docs" / "reference" / "report.md").read_text().split())
    assert "bootstrap over workloads" in METHOD
    assert "not the choice of shapes" not in doc
    assert "Its interval is a bootstrap over workloads and, within each, over its rounds" in doc


# 6. The legend names every rule of the call.


def test_an_unmarked_row_whose_interval_excludes_1x_does_not_contradict_the_legend():
    doc = paired_record(count=40, rounds=24, mode="aa")
    w = doc["workloads"][0]
    ratios, rounds = [], []
    for visit, (lean, n) in enumerate([(0.87, 9), (1.15, 10), (0.87, 25)], start=1):
        for k in range(n):
            ratios.append(lean * (1.0 + 0.001 * ((k % 3) - 1)))
            rounds.append({"first": "baseline" if k % 2 == 0 else "candidate", "visit": visit})
    w["ratios"], w["rounds"] = ratios, rounds
    a = analyze(doc)
    hit = next(c for c in a.workloads if c.name == w["name"])
    # Excludes 1x by far, clears 3%, and still no call: its visits disagree.
    assert hit.speedup is not None and hit.speedup.high < 1.0 and hit.speedup.estimate < 0.97
    assert hit.change == "same"
    legend = call_legend(a.threshold)
    assert len(legend) == 2 and all(len(ln) <= 80 for ln in legend)
    text = _terminal(a, 80)
    flat = " ".join(text.split())
    for rule in ("95% CI excludes 1x", "change > 3%", "floor", "Benjamini-Hochberg", "all visits agree"):
        assert rule in flat, rule
    assert "the interval excludes 1x and the change exceeds" not in flat


# 7. An A/A run says so, and never reads as an upgrade's benefit or regression.


def test_an_aa_run_says_so_first_on_every_surface():
    a = analyze(_aa(seed=3, count=8))
    lead = "A/A run (torch 2.13.0+cpu against itself, the noise floor)"
    assert a.verdict == "no-change" and a.sentence.startswith(lead + ": no measurable difference")
    assert _terminal(a).startswith(lead)
    md_doc = render_markdown(a)
    assert md_doc.startswith("# mpsup report (A/A run): no-change") and f"**{lead}" in md_doc
    page = render_html(a)
    assert "<title>mpsup report (A/A run): no-change</title>" in page
    assert f'<p class="verdict" id="verdict">{lead}' in page
    assert a.to_json()["sentence"].startswith(lead)


@pytest.mark.parametrize("truth", [1.3, 0.75])
def test_an_aa_run_that_finds_a_difference_is_inconclusive_not_an_upgrade_claim(truth: float):
    a = analyze(_aa(truth, seed=3, count=8))
    assert a.verdict == "inconclusive"
    assert a.sentence.startswith("A/A run (torch 2.13.0+cpu against itself, the noise floor): the two sides differ")
    for claim in ("Upgrade", "Regression", "Mixed", "faster with", "(slower)", "peak memory"):
        assert claim not in a.sentence, claim
    assert "not a torch change" in a.sentence


def test_a_record_marked_aa_with_two_torches_is_read_as_the_paired_run_it_is():
    rec = paired_record(0.5, mode="aa", seed=3, count=8)
    rec["environments"][0]["torch_version"], rec["environments"][1]["torch_version"] = "2.14.1", "2.15.0"
    a = analyze(rec)
    # A real 2x regression between two torches must not be excused as A/A noise.
    assert a.verdict == "regression" and not a.sentence.startswith("A/A run")
    assert "Recorded as an A/A run, yet its two sides ran torch 2.14.1 and 2.15.0" in a.sentence


def test_a_slower_aa_run_does_not_fail_a_regression_gate(mpsup_home: Path):
    save_record(_aa(0.75, seed=3, count=8, run_id="20261203T100000Z-aaslow"), mpsup_home / "runs")
    res = run_cli("report", "--fail-on-regression", "--json")
    assert res.returncode == 3, res.stdout[-500:]  # inconclusive, not 1 (regression)
    assert json.loads(res.stdout)["verdict"] == "inconclusive"


# 8. Several records: each column and verdict names its run.


def test_several_runs_of_one_machine_are_told_apart():
    first = analyze(paired_record(1.2, seed=1, count=4, run_id="20261203T100000Z-first0"))
    other = paired_record(1.0, seed=2, count=4, run_id="20261203T110000Z-secnd0")
    other["environments"][1]["torch_version"] = "2.16.0"
    second = analyze(other)
    buf = io.StringIO()
    render_multi_terminal([first, second], Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith("Apple M4 Max, run 20261203T100000Z-first0 (torch 2.14.1 -> 2.15.0): Upgrade")
    assert any(ln.startswith("Apple M4 Max, run 20261203T110000Z-secnd0 (torch 2.14.1 -> 2.16.0): ") for ln in lines)
    header = "\n".join(ln for ln in lines if ln.startswith("┃"))
    for needle in ("run 20261203T100000Z-first0", "run 20261203T110000Z-secnd0", "torch 2.14.1 -> 2.16.0"):
        assert needle in header, needle


# 9. HTML cells keep apart.


def _ms_page() -> str:
    rec = paired_record({"linear/4096x4096/t1": 1.35}, seed=11, run_id="20261202T100000Z-aaaaaa")
    for w in rec["workloads"]:
        for env in w["envs"].values():
            env["samples"] = [s * 3e4 for s in env["samples"]]  # 300 ms-7 s: "896.78 ms" overflowed 5.2em
            env["median"] *= 3e4
    return render_html(analyze(rec))


def test_html_time_tracks_fit_their_widest_figure_with_padding():
    page = _ms_page()
    tracks = re.search(r"#workloads thead tr, #workloads tbody tr \{[^}]*grid-template-columns: ([^;]+);", page)
    assert tracks is not None
    widths = re.findall(r"minmax\([^)]*\)|\S+", tracks.group(1))
    assert all(float(w.removesuffix("em")) >= 6.5 for w in widths[3:5]), widths  # baseline, candidate
    assert re.search(r"td, th \{[^}]*padding: \S+ 0\.5em", page)


def test_html_cells_do_not_run_into_each_other_in_chromium(tmp_path: Path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed here (`apt-get install chromium`)")
    # The page carries no script; this copy adds one that measures every cell and writes what overflows.
    probe = """<script>
const bad = [];
for (const td of document.querySelectorAll('#workloads td, #workloads th')) {
  if (td.scrollWidth > td.clientWidth + 1) bad.push(td.textContent);
}
document.body.setAttribute('data-overflow', JSON.stringify(bad));
</script>"""
    out = tmp_path / "page.html"
    out.write_text(_ms_page().replace("</body>", probe + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    flags += ["--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    for size in ("1500,900", "390,1100"):
        dom = subprocess.run(
            [chromium, *flags, f"--window-size={size}", "--virtual-time-budget=2000", "--dump-dom", out.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
        m = re.search(r'data-overflow="([^"]*)"', dom)
        assert m is not None, dom[-500:]
        assert json.loads(m.group(1).replace("&quot;", '"')) == [], (size, m.group(1))


# 10. --list's wording of --aa.


def test_list_with_no_runs_says_aa_pairs_a_torch_with_itself():
    buf = io.StringIO()
    render_run_list([], Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "--aa to pair two torches" not in text
    assert "--candidate VERSION to pair two torches" in text and "--aa to pair this torch with itself" in text


# Another dtype is another measurement (a second walkthrough).


def test_two_single_runs_in_other_dtypes_are_not_paired(mpsup_home: Path):
    fp32, bf16 = _single("20261203T100000Z-fp32aa"), _single("20261203T110000Z-bf16aa")
    for w in bf16["workloads"]:
        w["dtype"] = "fp32" if w.get("dtype") == "bf16" else "bf16"
    save_record(fp32, mpsup_home / "runs")
    save_record(bf16, mpsup_home / "runs")
    res = run_cli("report", "--baseline", "20261203T100000Z-fp32aa", "--candidate", "20261203T110000Z-bf16aa")
    # It paired them and read 1.55-2.44x per row: the dtype's effect, told as the torch's.
    assert res.returncode == 2 and "in other dtypes" in res.stderr and "Traceback" not in res.stderr


def test_an_aa_floor_is_taken_only_from_the_same_workloads_in_the_same_dtype():
    from mpsup.report.analysis import matching_aa
    from mpsup.runs.schema import as_record

    doc = paired_record(1.0, seed=1, run_id="20261203T120000Z-runaaa")
    for env in doc["environments"]:
        env["torch_version"] = "2.13.0+cpu"
    run, same = as_record(doc), as_record(_aa(seed=2, run_id="20261203T100000Z-aasame"))
    other = _aa(seed=3, run_id="20261203T110000Z-aabf16")
    for w in other["workloads"]:
        w["dtype"] = "fp32" if w.get("dtype") == "bf16" else "bf16"
    assert matching_aa(run, [same]) is same
    assert matching_aa(run, [same, as_record(other)]) is same  # the newer one, in other dtypes, is passed over


def test_list_marks_only_aa_runs_as_aa(mpsup_home: Path):
    wrapped = paired_record(1.0, seed=1, run_id="20261203T100000Z-wrapaa")  # two wrappers of one torch
    for env in wrapped["environments"]:
        env["torch_version"] = "2.13.0+cpu"
    save_record(wrapped, mpsup_home / "runs")
    save_record(_aa(seed=2, run_id="20261203T110000Z-aarunn"), mpsup_home / "runs")
    text = run_cli("report", "--list", env={"COLUMNS": "200"}).stdout
    rows = {m.group(): ln for ln in text.splitlines() if (m := re.search(r"20261203T\S+Z-\w+", ln))}
    assert "(A/A)" in rows["20261203T110000Z-aarunn"]
    assert (
        "(A/A)" not in rows["20261203T100000Z-wrapaa"] and "2.13.0+cpu -> 2.13.0+cpu" in rows["20261203T100000Z-wrapaa"]
    )


# A phase at another size is another measurement under the same name (a review of the pipeline-size change).


def _as_phase(rec: dict[str, Any], resolution: list[int]) -> dict[str, Any]:
    w = rec["workloads"][0]
    w.update(part="phase", kind="model_phase", phase="step", library="diffusers", resolution=resolution)
    return rec


def test_two_single_runs_of_a_step_at_other_resolutions_are_not_paired(mpsup_home: Path):
    small = _as_phase(_single("20261203T100000Z-s512aa"), [512, 512])
    big = _as_phase(_single("20261203T110000Z-s1024a"), [1024, 1024])
    save_record(small, mpsup_home / "runs")
    save_record(big, mpsup_home / "runs")
    res = run_cli("report", "--baseline", "20261203T100000Z-s512aa", "--candidate", "20261203T110000Z-s1024a")
    # One name, model/unet/step, and a 4x "slower" that is the image size's, told as the torch's.
    assert res.returncode == 2 and "at other sizes" in res.stderr and "Traceback" not in res.stderr
    assert "(resolution [512, 512], tokens 1 vs resolution [1024, 1024], tokens 1)" in res.stderr


def test_an_aa_floor_is_not_taken_from_a_phase_at_another_size():
    from mpsup.report.analysis import matching_aa
    from mpsup.runs.schema import as_record

    doc = _as_phase(paired_record(1.0, seed=1, run_id="20261203T120000Z-runaaa"), [1024, 1024])
    for env in doc["environments"]:
        env["torch_version"] = "2.13.0+cpu"
    run = as_record(doc)
    same = as_record(_as_phase(_aa(seed=2, run_id="20261203T100000Z-aasame"), [1024, 1024]))
    other = as_record(_as_phase(_aa(seed=3, run_id="20261203T110000Z-aa512a"), [512, 512]))
    assert matching_aa(run, [same, other]) is same
    assert matching_aa(run, [other]) is None
