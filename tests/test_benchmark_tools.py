"""Every script in benchmarks/ runs against this tree: `--help` says what it does and how to run it, and each
one that can run here in seconds does a tiny real run."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.synthetic import paired_record

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
FIGURE_RECORD = (
    ROOT / "docs" / "evidence" / "figures" / "h200_aa_fullsuite_dec5.json.gz"
)  # a stored paired A/A run record

# Each script and what it needs beyond the test extra; a new script must be added here (and given a run).
SCRIPTS: dict[str, str | None] = {
    "anchors_compare.py": None,
    "build_cost.py": None,
    "compare_timers.py": None,
    "energy_gpu.py": None,
    "header_scan.py": None,
    "machine_moved.py": None,
    "mlx_plain.py": "mlx_lm",
    "mlx_train_plain.py": "mlx_lm",
    "op_attribution.py": None,
    "op_coverage.py": None,
    "numerics_candidates.py": None,
    "numerics_cost.py": None,
    "numerics_gpu.py": None,
    "numerics_kl.py": "transformers",
    "omp_wait.py": None,
    "phase_overhead.py": None,
    "plain_binding.py": None,
    "real_size.py": None,
    "report_screenshots.py": None,
    "speed.py": None,
    "train_step.py": None,
    "unpaired_aa.py": None,
    "visits_show.py": None,
    "whole_model.py": None,
    "zeus_api_surface.py": None,
}


def run_script(name: str, *args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / name), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def single_record(seed: int, run_id: str) -> dict[str, Any]:
    """A single-environment run record: one side of a synthetic paired record."""
    rec = paired_record(1.0, seed=seed, count=8, run_id=run_id, mode="single")
    rec["environments"] = rec["environments"][:1]
    for w in rec["workloads"]:
        w["envs"] = {"baseline": w["envs"]["baseline"]}
        w.pop("ratios")
    return rec


def test_every_script_in_benchmarks_is_listed_here() -> None:
    # Folders beside the scripts hold what a script installs (numerics_hook's startup hooks), not scripts.
    found = sorted(p.name for p in BENCH.iterdir() if p.suffix == ".py" and p.name != "__init__.py")
    assert found == sorted(SCRIPTS)


# The scripts whose docstrings this suite keeps to the project's rule: --help shows the command line to run.
SHOWS_ITS_COMMAND = {
    "anchors_compare.py",
    "compare_timers.py",
    "header_scan.py",
    "machine_moved.py",
    "omp_wait.py",
    "phase_overhead.py",
    "plain_binding.py",
    "report_screenshots.py",
    "speed.py",
    "train_step.py",
    "unpaired_aa.py",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_says_what_the_script_does_and_how_to_run_it(name: str) -> None:
    needs = SCRIPTS[name]
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{name} runs in an environment with {needs} installed")
    res = run_script(name, "--help", timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:") and len(res.stdout.splitlines()) > 3
    if name in SHOWS_ITS_COMMAND:
        assert f"python benchmarks/{name}" in res.stdout


def test_anchors_compare_counts_calls_in_a_stored_compressed_record(tmp_path: Path) -> None:
    out = tmp_path / "anchors.json"
    res = run_script("anchors_compare.py", str(FIGURE_RECORD), "--json", str(out))
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(out.read_text())
    paired = [w for w in json.loads(gzip.decompress(FIGURE_RECORD.read_bytes()))["workloads"] if w.get("ratios")]
    assert row["mode"] == "aa" and row["workloads"] == len(paired) > 100
    assert 0 <= row["mpsup"] <= row["workloads"] and 0 <= row["pyperf"] <= row["workloads"]
    assert row["run"][:32] in res.stdout


def test_anchors_compare_reads_a_folder_of_compressed_records(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "changed.json.gz").write_bytes(gzip.compress(json.dumps(paired_record(1.5, count=6)).encode()))
    res = run_script("anchors_compare.py", str(runs), "--json", str(tmp_path / "a.json"))
    assert res.returncode == 0, res.stderr
    (row,) = json.loads((tmp_path / "a.json").read_text())
    assert row["workloads"] == 6 and row["mpsup"] == 6  # every workload 1.5x faster: all called


def test_anchors_compare_refuses_a_broken_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = run_script("anchors_compare.py", str(bad), "--json", str(tmp_path / "a.json"))
    assert res.returncode == 2 and "bad.json" in res.stderr and "Traceback" not in res.stderr


def test_unpaired_aa_compares_every_pair_of_single_runs(tmp_path: Path) -> None:
    paths = []
    for seed in (1, 2, 3):
        path = tmp_path / f"single{seed}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(single_record(seed, f"run{seed}")).encode()))
        paths.append(str(path))
    res = run_script("unpaired_aa.py", *paths)
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("| single")]
    assert [r.split("|")[1].strip() for r in rows] == [
        "single1.json.gz / single2.json.gz",
        "single1.json.gz / single3.json.gz",
        "single2.json.gz / single3.json.gz",
    ]
    assert all(" of 8 " in r for r in rows)


def test_unpaired_aa_refuses_a_paired_record_in_one_line(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(single_record(1, "a")))
    b.write_text("[1, 2]")
    res = run_script("unpaired_aa.py", str(a), str(b))
    assert res.returncode == 2 and "b.json" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_header_scan_reads_a_sparse_checkpoint(tmp_path: Path) -> None:
    res = run_script("header_scan.py", "--layers", "1", "--skip-safe-open", "--dir", str(tmp_path / "ckpt"))
    assert res.returncode == 0, res.stderr
    # One layer: the embeddings and the head plus a layer's seven linear weights.
    assert "mpsup header scan: 9 tensors" in res.stdout
    assert len(list((tmp_path / "ckpt").glob("*.safetensors"))) > 1


def test_report_screenshots_page_carries_the_fixture_banner(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    res = run_script("report_screenshots.py", "--html", str(page))
    assert res.returncode == 0, res.stderr
    html = page.read_text()
    assert "FIXTURE: made from a synthetic test record" in html and "<svg" in html


def test_speed_refuses_an_unknown_run() -> None:
    res = run_script("speed.py", "--runs", "nightly")
    assert res.returncode != 0 and "unknown run 'nightly'" in res.stderr


@pytest.mark.slow
def test_speed_times_a_paired_run_and_says_where_its_time_went(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    args = ["--runs", "paired", "--device", "cpu", "--only", "linear/4096x8/t1", "--budget", "0.02"]
    res = run_script("speed.py", *args, "--json", str(out), timeout=300)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(out.read_text())
    assert row["run"] == "paired" and row["exit"] == 0 and row["workloads"] == 1
    assert 0 < row["in_workloads_s"] < row["wall_s"] and row["min_units"] >= 1
    assert "| paired |" in res.stdout


@pytest.mark.slow
def test_compare_timers_times_one_shape_with_mpsup_and_torch_utils_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "timers.json"
    args = ["--device", "cpu", "--shapes", "1", "--tokens", "1", "--budget", "0.02", "--out", str(out)]
    res = run_script("compare_timers.py", *args, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and set(doc["wall_s"]) == {"mpsup", "adaptive_autorange"}
    assert "linear/" in res.stdout and "A/A max" in res.stdout


@pytest.mark.slow
def test_train_step_runs_mpsup_and_the_plain_loop_on_a_tiny_model_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft", reason="the LoRA step runs through peft")
    args = ["run", "--device", "cpu", "--size", "tiny", "--dtype", "fp32", "--batch", "2", "--tokens", "16",
            "--budget", "0.05", "--visits", "2", "--calls", "5", "--warmup", "1", "--no-ops",
            "--out", str(tmp_path)]  # fmt: skip
    res = run_script("train_step.py", *args, timeout=600)
    # Exit 1 is a disagreement over --agree: on a small shared CPU a tiny step's times are not what it tests.
    assert res.returncode in (0, 1), res.stdout + res.stderr
    rows = {line.split()[0]: line.split() for line in res.stdout.splitlines() if line.startswith(("for-loop", "fused"))}
    assert set(rows) == {"for-loop", "fused"}
    assert rows["fused"][-2:] == ["fused,", "fused"] and rows["for-loop"][-2:] == ["for-loop,", "for-loop"]
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows.values())  # mpsup's and the plain loop's s/step
    assert "report: " in res.stdout and "agree within" in res.stdout


def test_train_step_says_which_wheels_it_needs() -> None:
    res = run_script("train_step.py", "wheels")
    assert res.returncode in (0, 1) and ("has everything" in res.stdout or "pip download" in res.stdout)


def test_omp_wait_times_the_plain_loop_and_two_workers_taking_turns() -> None:
    res = run_script("omp_wait.py", "--policy", "OMP_WAIT_POLICY=PASSIVE", "--rounds", "4", "--calls", "5")
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("[1] OMP_WAIT_POLICY=PASSIVE: plain loop: linear 1x896 @ 896x896 bf16")
    assert "two workers taking turns: worker 1" in line and line.endswith(" us")


def test_op_attribution_reads_each_op_kind_of_a_stored_record(tmp_path: Path) -> None:
    """`op_attribution.py kinds RECORD`: the kinds of a record whose attention alone slowed (tests/test_attribution.py),
    attention's ratio and share of the change, and no spread."""
    from tests.test_attribution import record

    path = tmp_path / "run.json"
    path.write_text(json.dumps(record()))
    done = run_script("op_attribution.py", "kinds", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run.json decode: kinds 3 ") and lines[0].endswith("spread=None")
    sdpa = next(x for x in lines if "scaled_dot_product_attention" in x).split()
    # about 1/1.9, and 95% of the change: the cat the candidate alone calls holds the rest
    assert sdpa[1] == "0.528" and sdpa[-1] == "95%"
    assert next(x for x in lines if " linear " in x).split()[1] == "1.000"


def test_phase_overhead_rereads_a_printed_run_of_either_width_within_each_process(tmp_path: Path) -> None:
    """`phase_overhead.py log FILE` rebuilds the table from the pair lines, a log from before the sixth way too, and
    gives each way over bare inside each worker process."""
    log = tmp_path / "run.txt"
    log.write_text(
        "# header\n"
        "pair 0 plain: prefill 10.000 decode 5.000 ms\n"
        "pair 0 worker: prefill 10.000/10.100/9.700/9.800/9.900/9.600 decode 5.000/5.000/5.050/5.100/5.100/5.000 ms\n"
        "pair 1 worker: prefill 20.000/20.200/19.400/19.600/19.800 decode 5.000/5.000/5.050/5.100/5.100 ms\n"
        "pair 1 plain: prefill 30.000 decode 5.000 ms\n"
    )
    done = run_script("phase_overhead.py", "log", str(log))
    assert done.returncode == 0, done.stderr
    inside = done.stdout.split("within each worker process")[1].split("decode:")[0]
    assert "over 2 processes" in inside
    assert "block   0.9700x (0.970-0.970) -3.00%" in inside  # 9.7/10 and 19.4/20: the processes' spread cancels
    assert "own     0.9600x (0.960-0.960) -4.00%" in inside  # only the new log has it
    assert "plain     20.0000 (10.0000-30.0000, n  2)" in done.stdout


def test_real_size_makes_a_real_shape_without_weights_and_times_its_build(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    folder = tmp_path / "llama-1b"
    res = run_script("real_size.py", "make", "1b", str(folder), "--layers", "1")
    assert res.returncode == 0, res.stderr
    config = json.loads((folder / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (2048, 1, 128256)
    weights = folder / "model.safetensors"
    assert weights.stat().st_size > 2048 * 128256 * 2  # the embedding alone, named in the header...
    assert weights.stat().st_blocks * 512 < 2**20  # ...and a hole on disk
    cost = run_script("build_cost.py", str(folder), "--tokens", "4", "--repeat", "2", cwd=tmp_path, timeout=300)
    assert cost.returncode == 0, cost.stderr
    doc = json.loads(cost.stdout)
    assert len(doc["builds_s"]) == 2 and doc["depth"] == 1 and doc["peak_rss_gib"] > 0


def test_machine_moveds_default_workload_is_in_each_devices_suite() -> None:
    # Its CUDA default once named a token count the CUDA suite does not build: the H100 run failed at once.
    from benchmarks.machine_moved import DEFAULT_ONLY
    from mpsup.bench.suite import build_suite

    for device, name in DEFAULT_ONLY.items():
        assert name in {w.name for w in build_suite(device)}, (device, name)
