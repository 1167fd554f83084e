"""What a user sees in an 80-column terminal (issue 16): names and ids whole, compact columns, honest run choice."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

from rich.console import Console

from mpsup.bench.guidance import meaning_lines
from mpsup.bench.listing import compact_shape, print_workload_list
from mpsup.bench.screen import render_run
from mpsup.bench.suite import build_suite
from mpsup.bench.tables import smoke_cell
from mpsup.report.analysis import analyze
from mpsup.report.render import render_terminal, summary_lines
from mpsup.runs import select
from mpsup.runs.journal import Journal
from mpsup.runs.store import new_record, new_run_id, save_record
from mpsup.units import fmt_rate
from tests.conftest import run_cli
from tests.synthetic import paired_record

NARROW_ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def _console(width: int = 80) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, legacy_windows=False), buf


def _assert_fits(text: str, width: int = 80) -> None:
    too_wide = [ln for ln in text.splitlines() if len(ln.rstrip()) > width]
    assert not too_wide, too_wide[:3]
    assert "…" not in text, [ln for ln in text.splitlines() if "…" in ln][:3]


def _single(run_id: str, torch_version: str = "2.14.1", device: str = "mps") -> dict:
    rec = paired_record(1.0, seed=9, run_id=run_id, count=6)
    rec["mode"], rec["device"] = "single", device
    rec["environments"] = [{**rec["environments"][0], "torch_version": torch_version}]
    for w in rec["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"]}
        w.pop("ratios")
    return rec


def test_compact_shapes():
    assert compact_shape("linear", {"tokens": 1, "in_features": 4096, "out_features": 14336}) == "1x4096->14336"
    moe = {"tokens": 16, "top_k": 2, "experts": 8, "in_features": 4096, "out_features": 14336, "method": "loop"}
    assert compact_shape("grouped_mm", moe) == "16x4096->14336 8e top2"
    assert compact_shape("copy", {"bytes": 64 * 2**20}) == "64.0 MiB"
    assert compact_shape("pad", {"shape": [1, 640, 4], "pad": [1, 1]}) == "1x640x4 pad 1,1"


def test_bench_list_at_80_columns_keeps_every_name_and_fits():
    workloads = build_suite("cpu", None)
    console, buf = _console()
    print_workload_list(workloads, console)
    text = buf.getvalue()
    _assert_fits(text)
    lines = text.splitlines()
    assert len(lines) <= len(workloads) + 6  # one line per workload (it was ~6 lines each)
    for w in workloads:
        assert any(ln.startswith(w.name + " ") for ln in lines), w.name
    assert "1x4096->4096" in text and "in_features=" not in text


def test_bench_list_wide_keeps_tags_and_sources():
    workloads = build_suite("cpu", None)[:3]
    console, buf = _console(160)
    print_workload_list(workloads, console)
    assert "Llama-3-8B" in buf.getvalue() and "decode" in buf.getvalue()


def test_run_tables_at_80_columns(mpsup_home: Path):
    rec = paired_record(1.1, seed=3, run_id="20261203T100000Z-cccccc", count=10)
    rec["device"] = "cpu"
    for w in rec["workloads"]:
        w["envs"]["baseline"]["median"] *= 1000  # a CPU: milliseconds, some GFLOP/s
    rec["workloads"].append(
        {
            "name": "metal/copy_f32",
            "kind": "metal",
            "part": "roofline",
            "dtype": "fp32",
            "count": 1,
            "status": "unsupported",
            "reason": "Unsupported: Metal kernels need the mps device",
            "envs": {"baseline": {"status": "unsupported", "needs_metal": True}},
        }
    )
    console, buf = _console()
    render_run(rec, console, details=True)
    text = buf.getvalue()
    _assert_fits(text)
    for w in rec["workloads"]:
        assert w["name"] in text
    assert "unsupported: Metal kernels need" in text and "Unsupported: Metal" not in text
    assert "TFLOP/s" not in text and "GFLOP/s" in text  # a CPU's rate, in units that fit


def test_paired_run_tables_say_whose_figures_they_are_and_point_at_the_report():
    rec = paired_record(1.1, seed=3, run_id="20261203T100000Z-abcdef", count=10)
    for width in (80, 160):
        console, buf = _console(width)
        render_run(rec, console, details=True)
        text = buf.getvalue()
        _assert_fits(text, width)
        # The interval column is the baseline's median's, not the comparison's.
        assert ("95% CI (baseline)" if width > 80 else "(baseline)") in text
        flat = " ".join(text.split())
        assert "Times are each environment's own median" in flat
        assert "the 95% CI, rate and memory are baseline's alone" in flat
        assert "speedup: the median of the per-round baseline / candidate ratios" in flat
        assert "are `mpsup report`'s" in flat
        assert "Suite geometric mean time over 10 linear shapes (baseline)" in flat
        # What to run next, like a single run's ending: the report of this very run.
        assert "Next, to learn whether the candidate helps this machine:" in flat
        assert text.rstrip().splitlines()[-1].split("#")[0].strip() == "mpsup report --run 20261203T100000Z-abcdef"
    aa = paired_record(1.0, seed=3, run_id="20261203T100000Z-abcdee", count=4, mode="aa")
    console, buf = _console()
    render_run(aa, console, details=True)
    assert "noise floor" in buf.getvalue() and "mpsup report --run 20261203T100000Z-abcdee" in buf.getvalue()
    # One environment: no qualifier, no paired footnote.
    console, buf = _console()
    render_run(_single("20261203T100000Z-dddddd"), console, details=True)
    assert "(baseline)" not in buf.getvalue() and "own median" not in buf.getvalue()


def test_rates_and_smoke_cells_read_well():
    assert fmt_rate(87.7e9, "FLOP/s") == "87.7 GFLOP/s"
    assert fmt_rate(2.5e12, "FLOP/s") == "2.5 TFLOP/s"
    assert smoke_cell("unsupported", "Unsupported: needs macOS 14") == "unsupported: needs macOS 14"
    assert smoke_cell("fail", "max error 0.5") == "fail: max error 0.5"
    assert smoke_cell("pass", "ignored") == "pass"


def test_single_run_ends_with_meaning_and_next_step():
    rec = _single("20261203T100000Z-dddddd", device="cpu")
    rec["workloads"].append(
        {
            "name": "roofline/copy/64MiB",
            "kind": "copy",
            "part": "roofline",
            "dtype": "fp32",
            "count": 1,
            "status": "ok",
            "envs": {"baseline": {"status": "ok", "median": 0.01, "bytes_per_call": 2**27}},
        }
    )
    text = "\n".join(meaning_lines(rec))
    assert "roofline, measured here: 13.4 GB/s copy bandwidth" in text
    assert "Where the time goes: " in text
    assert "mpsup install-rc" in text and "mpsup bench --candidate" in text
    without = "\n".join(meaning_lines(_single("20261203T100000Z-eeeeee")))
    assert "No roofline probe" in without and "--only 'roofline/*'" in without


def test_report_at_80_columns_keeps_names_and_no_nested_parentheses():
    a = analyze(paired_record(1.2, seed=4, run_id="20261203T100000Z-ffffff"))
    console, buf = _console()
    render_terminal(a, console)
    text = buf.getvalue()
    _assert_fits(text)
    for w in a.workloads:
        assert w.name in text
    assert "(geometric mean) " not in a.sentence and "((" not in a.sentence


def test_report_between_100_columns_and_the_full_width_goes_compact_instead_of_cutting_cells():
    rec = paired_record(1.2, seed=4, run_id="20261203T100000Z-ffffff")
    for w in rec["workloads"]:
        w["name"] = "moe/Qwen3-30B-A3B/gate_up/t512/grouped/" + w["name"].replace("/", "-")[:6]
    a = analyze(rec)
    for width in (100, 120, 200):
        console, buf = _console(width)
        render_terminal(a, console)
        text = buf.getvalue()
        # Never a squeezed cell ("c…", "21.7…"): the compact table where the full one does not fit.
        _assert_fits(text, width)
        header = next(ln for ln in text.splitlines() if "workload" in ln)
        assert ("baseline" in header) == (width == 200), header


# Ops as a large attention model's replay names them: long names, shapes and shape lists.
LONG_OPS = {
    "scaled_dot_product_attention": (
        "_scaled_dot_product_flash_attention_for_cpu",
        "1x512x40x128, 1x512x40x128, 1x512x40x128, 1x40x512x512, 1x512x40x128, 1x512x40x128",
    ),
    "linear": ("linear", "1x512x5120, 27648x5120, 27648"),
    "cat": ("_unsafe_index_put_with_accumulate", "1x8x512x128, 1x8x512x128"),
}


def test_the_op_tables_at_80_and_100_columns_keep_every_op_shape_and_interval_whole():
    from mpsup.report.common import attribution_rows
    from tests.test_attribution import record

    rec = record()
    for w in rec["workloads"]:
        if w.get("op") in LONG_OPS:
            w["op"], w["shapes"] = LONG_OPS[w["op"]]
    a = analyze(rec)
    rows = attribution_rows(a.attribution["decode"])
    # Each row's op, every shape of its list and its interval (the views' row lists op names for shapes).
    whole = {text for op, shapes, _, _, _, _, speedup, _, _ in rows for text in (op, speedup, *shapes.split(", "))}
    whole.discard("")
    assert whole >= {name for name, _ in LONG_OPS.values()} | {"unexplained", "1x40x512x512"}
    assert sum("(95% CI" in text for text in whole) >= 2  # the two ops that did not move read alike
    for width in (80, 100):
        console, buf = _console(width)
        render_terminal(a, console)
        lines = buf.getvalue().splitlines()
        _assert_fits(buf.getvalue(), width)
        broken = [text for text in sorted(whole) if not any(text in line for line in lines)]
        assert not broken, (width, broken)


def test_published_claim_only_where_comparable():
    mps = dataclasses.replace(analyze(paired_record(1.2, seed=4)), candidate_torch="2.15.0")
    assert any("2.15 release notes" in ln for ln in summary_lines(mps))
    cpu_aa = analyze({**paired_record(1.0, seed=4, mode="aa"), "device": "cpu"})
    assert not any("2.15" in ln for ln in summary_lines(cpu_aa))
    other = dataclasses.replace(analyze(paired_record(1.2, seed=4)), candidate_torch="2.16.0")
    assert not any("release notes" in ln for ln in summary_lines(other))


def test_report_list_at_80_columns_shows_whole_ids(mpsup_home: Path):
    ids = ["20261203T100000Z-aaaaaa", "20261203T110000Z-bbbbbb"]
    save_record(paired_record(1.0, seed=1, run_id=ids[0]), mpsup_home / "runs")
    save_record(_single(ids[1]), mpsup_home / "runs")
    res = run_cli("report", "--list", env=NARROW_ENV)
    assert res.returncode == 0, res.stderr
    _assert_fits(res.stdout)
    for run_id in ids:
        assert run_id in res.stdout
    # The torch versions whole (they read "2.13.0…"); the creation time is the id's own, so it gives way.
    assert "…" not in res.stdout and "2.15.0" in res.stdout


def test_report_list_with_no_runs_is_one_sentence():
    res = run_cli("report", "--list", env=NARROW_ENV)
    assert res.returncode == 0
    assert res.stdout.startswith("No stored runs yet") and "┃" not in res.stdout and len(res.stdout.splitlines()) <= 2
    assert json.loads(run_cli("report", "--list", "--json").stdout) == []


def test_report_says_which_run_and_what_newer_runs_exist(mpsup_home: Path):
    paired, old_single, new_single = "20261203T100000Z-aaaaaa", "20261203T110000Z-bbbbbb", "20261203T120000Z-cccccc"
    save_record(paired_record(1.0, seed=1, run_id=paired), mpsup_home / "runs")
    save_record(_single(old_single), mpsup_home / "runs")
    save_record(_single(new_single, torch_version="2.15.0"), mpsup_home / "runs")
    res = run_cli("report", "--json", env=NARROW_ENV)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["runs"] == [paired]  # stdout stays one document; the explanation is on stderr
    err = " ".join(res.stderr.split())
    assert f"Reporting run {paired}" in err and "newest run that pairs two environments" in err
    assert "2 newer single-environment run(s)" in err and old_single in err and new_single in err
    assert f"mpsup report --baseline {old_single} --candidate {new_single}" in err
    assert "mpsup bench --candidate" in err


def test_report_without_pairs_points_at_single_runs(mpsup_home: Path):
    save_record(_single("20261203T110000Z-bbbbbb"), mpsup_home / "runs")
    res = run_cli("report", env=NARROW_ENV)
    assert res.returncode == 2
    assert "1 single run(s) stored" in res.stderr and "--baseline ID --candidate ID" in res.stderr


def test_by_id_and_newest_paired_recover_interrupted_runs(mpsup_home: Path):
    j = Journal.create(new_run_id())
    header = new_record(
        "aa",
        "cpu",
        [
            {"label": "baseline", "torch_version": "2.13.0", "python": "/x/python"},
            {"label": "baseline-2", "torch_version": "2.13.0", "python": "/x/python"},
        ],
        {},
    )
    header["id"] = j.run_id
    j.append("header", header)
    j.append(
        "workload",
        {
            "name": "w0",
            "kind": "linear",
            "part": "linear",
            "dtype": "fp32",
            "count": 1,
            "status": "ok",
            "envs": {"baseline": {"status": "ok", "median": 1.0}, "baseline-2": {"status": "ok", "median": 1.0}},
        },
    )
    j.close()  # what a SIGKILL leaves: an unlocked journal, no record
    warnings: list[str] = []
    rec = select.by_id(j.run_id, warnings.append)
    assert rec.id == j.run_id and rec.partial is True
    assert any("recovered the interrupted run" in w for w in warnings)
    assert select.newest_paired(warnings.append).id == j.run_id


def test_single_run_says_what_its_intervals_can_and_cannot_tell():
    rec = _single("20261203T100000Z-gggggg", device="cpu")
    for i, w in enumerate(rec["workloads"]):
        env = w["envs"]["baseline"]
        env["median"], env["ci_low"], env["ci_high"] = 1e-3, 1e-3 * (1 - 0.01 * (i + 1)), 1e-3 * (1 + 0.01 * (i + 1))
    text = " ".join(meaning_lines(rec))
    n = len(rec["workloads"])
    assert f"known to +-{(n // 2 + 1) / 100:.1%}" in text and f"the widest +-{n / 100:.0%}" in text
    assert "A single run cannot tell whether another torch" in text
    console, buf = _console()
    for line in meaning_lines(rec):
        console.print(line, highlight=False)
    _assert_fits(buf.getvalue())


FP8_REASON = (
    "NotImplementedError: \"scatter_gather_tensor_cpu\" not implemented for 'Float8_e4m3fn' "
    "(and the rest of a long reason that must wrap, never be cut)"
)
METAL = "Unsupported: Metal kernels need the mps device (this run is on cpu)"


def _main_job_record(paired: bool = False) -> dict:
    """Like the README's main job on a CPU: the suite, smoke tests with one real failure, Metal unsupported."""
    rec = paired_record(1.05, seed=5, run_id="20261204T100000Z-aaaaaa", count=60)
    if not paired:
        rec = _single("20261204T100000Z-aaaaaa", device="cpu")
        rec["workloads"] = _single("x", device="cpu")["workloads"]
    rec["device"] = "cpu"
    labels = [e["label"] for e in rec["environments"]]
    rec["smoke"] = [
        {"feature": f"feature_{i}", "envs": {label: {"status": "pass"} for label in labels}} for i in range(12)
    ] + [
        {"feature": "fp8_index", "envs": {label: {"status": "unsupported", "message": FP8_REASON} for label in labels}},
        {
            "feature": "metal_kernels",
            "envs": {label: {"status": "unsupported", "message": METAL, "needs_metal": True} for label in labels},
        },
    ]
    copy = {"status": "ok", "median": 0.01, "ci_low": 0.0099, "ci_high": 0.0101, "bytes_per_call": 2**27}
    rec["workloads"].append(
        {
            "name": "roofline/copy/64MiB",
            "kind": "copy",
            "part": "roofline",
            "dtype": "fp32",
            "count": 1,
            "status": "ok",
            "envs": {label: copy for label in labels},
        }
    )
    for k in range(9):
        rec["workloads"].append(
            {
                "name": f"metal/kernel_{k}",
                "kind": "metal",
                "part": "roofline",
                "dtype": "fp32",
                "count": 1,
                "status": "unsupported",
                "reason": METAL,
                "envs": {label: {"status": "unsupported", "reason": METAL, "needs_metal": True} for label in labels},
            }
        )
    return rec


def test_the_main_job_fits_one_screen_and_keeps_reasons_whole():
    for paired in (False, True):
        rec = _main_job_record(paired)
        for width in (80, 120):
            console, buf = _console(width)
            render_run(rec, console)
            text = buf.getvalue()
            _assert_fits(text, width)
            assert len(text.splitlines()) <= 40, (paired, width, len(text.splitlines()))
            flat = " ".join(text.split())
            assert FP8_REASON in flat  # whole, wrapped, never cut mid-word
            # Unsupported Metal kernels off a Mac: one line, not one per kernel; their smoke test is named in the
            # smoke tests' heading, the workloads under their own.
            metal = [ln for ln in text.splitlines() if "Metal" in ln]
            assert metal == ["- Metal kernels, 9 workloads: unsupported off a Mac"], metal
            assert "metal/kernel_0" not in text
            assert "12 of 14 pass; metal_kernels cannot run off a Mac; the rest:" in flat
            assert "take the most time" in flat
            assert "Every table: `mpsup bench --details`" in flat
            if paired:
                assert "--format html -o report.html" in flat
                assert text.rstrip().splitlines()[-1].split("#")[0].strip() == f"mpsup report --run {rec['id']}"
            else:
                assert "roofline, measured here" in flat and "Where the time goes" in flat
                assert "mpsup bench --candidate VERSION" in flat


def test_details_show_every_table():
    rec = _main_job_record()
    console, buf = _console(120)
    render_run(rec, console, details=True)
    text = buf.getvalue()
    assert "Smoke tests (device vs CPU reference)" in text and "BF16 linear layers" in text
    for w in rec["workloads"]:
        assert w["name"] in text


def test_decode_above_the_copy_bandwidth_is_not_called_memory_bound():
    rec = _single("20261203T100000Z-dddddd", device="cpu")
    copy = {"status": "ok", "median": 0.01, "bytes_per_call": 2**27}  # 13.4 GB/s
    rec["workloads"].append(
        {
            "name": "roofline/copy/64MiB",
            "kind": "copy",
            "part": "roofline",
            "count": 1,
            "status": "ok",
            "envs": {"baseline": copy},
        }
    )
    decode = rec["workloads"][0]
    decode["tokens"] = 1
    decode["envs"]["baseline"]["bytes_per_call"] = decode["envs"]["baseline"]["median"] * 4e10  # 40 GB/s
    text = " ".join(meaning_lines(rec))
    assert "more than the copy probe" in text and "bound by memory traffic" not in text


def test_a_large_suite_reports_on_one_screen_with_every_change_and_details_shows_every_row(mpsup_home):
    """A paired main job on this CPU printed 40 rows of "no measurable change" (65 lines at 80 columns) and
    would have pushed a change among the smallest workloads below the 40 largest."""
    names = [w["name"] for w in paired_record(count=60)["workloads"]]
    changed = names[:2]  # the two shortest workloads: the smallest shares, last in the report's order
    rec = paired_record({n: 0.7 for n in changed}, seed=3, count=60, run_id="20261205T100000Z-aaaaaa")
    a = analyze(rec)
    assert {w.name for w in a.workloads if w.change != "same"} == set(changed)
    assert all(w.name not in changed for w in a.workloads[:40])  # below the old 40-row cut
    console, buf = _console()
    render_terminal(a, console)
    text = buf.getvalue()
    _assert_fits(text)
    shown = [n for n in names if f"{n} " in text]
    assert set(changed) <= set(shown) and len(shown) == 12, shown
    hidden = len(a.workloads) - 12
    assert f"... {hidden} more workloads ({hidden} no measurable change): every row with --details" in text
    assert "--details" in text
    assert len(text.splitlines()) <= 50
    console, buf = _console()
    render_terminal(a, console, details=True)
    assert all(f"{n} " in buf.getvalue() for n in names) and "more workloads" not in buf.getvalue()
    save_record(rec)
    out = run_cli("report", "--details", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert all(n in out.stdout for n in names)


def test_a_no_change_sentence_names_the_workloads_it_called_but_set_aside():
    names = [w["name"] for w in paired_record(count=60)["workloads"]]
    a = analyze(paired_record({n: 0.7 for n in names[:2]}, seed=3, count=60))
    assert a.verdict == "no-change"
    slowest = min((w for w in a.workloads if w.change == "slower"), key=lambda w: w.speedup.estimate)
    assert f"2 workload(s) called slower (e.g. {slowest.name} {slowest.speedup.estimate:.2f}x)" in a.sentence
    assert "not enough to move the verdict" in a.sentence
    quiet = analyze(paired_record(1.0, seed=3, count=60))
    assert quiet.verdict == "no-change" and "called" not in quiet.sentence
