"""Odd but plausible input from the third hostile campaign (issue 26): each is one line naming the input and
the problem, exit code 2, never a traceback."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from mpsup.bench.workerproc import check_interpreter
from mpsup.envs.resolve import resolve_environment
from mpsup.errors import UserError
from mpsup.model.load import load_model
from mpsup.runs import select
from mpsup.safe_files import parse_json
from tests.conftest import run_cli
from tests.synthetic import paired_record

LONG = "a" * 300  # one path component over the 255 bytes a file name may have: ENAMETOOLONG


def _one_line_exit_2(args: list[str], needle: str) -> None:
    res = run_cli(*args)
    err = res.stderr.strip()
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert len(err.splitlines()) == 1 and needle in err, err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["bench", "--model", "m.safetensors", "--resolution", "²", "--list"], "--resolution '²'"),
        (["bench", "--model", "m.safetensors", "--resolution", "1" * 5000, "--list"], "expected pixels"),
        (["bench", "--only", "re:a{99999999999}", "--list"], "not a valid regular expression"),
        (["bench", "--device", "cpu", "--python", f"/tmp/{LONG}", "--no-smoke"], "File name too long"),
        (["bench", "--device", "cpu", "--candidate", LONG, "--no-smoke"], "File name too long"),
        (["bench", "--device", "cpu", "--baseline", f"/tmp/{LONG}", "--aa", "--no-smoke"], "File name too long"),
        (["doctor", "--python", f"/tmp/{LONG}"], "File name too long"),
        (["report", f"/tmp/{LONG}.json"], "File name too long"),
    ],
    ids=["superscript", "5000-digits", "huge-repeat", "python", "candidate", "baseline", "doctor", "record-path"],
)
def test_odd_option_values_are_one_line(args: list[str], needle: str, tmp_path: Path):
    (tmp_path / "m.safetensors").write_bytes(_safetensors({"x.weight": [8, 8]}))
    res_args = [a.replace("m.safetensors", str(tmp_path / "m.safetensors")) for a in args]
    _one_line_exit_2(res_args, needle)


def test_an_interpreter_path_this_user_may_not_look_at_is_one_line(monkeypatch: pytest.MonkeyPatch):
    """What a non-root user meets under a folder without search permission (root never does)."""

    def denied(*_a: object, **_k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("os.stat", denied)
    for call in (lambda: check_interpreter(Path("/locked/python")), lambda: resolve_environment("/locked/x", "--x")):
        with pytest.raises(UserError, match="Permission denied"):
            call()
    with pytest.raises(UserError, match="Permission denied"):
        select.records_from_paths([Path("/locked/r.json")], lambda _m: None)


def _safetensors(shapes: dict[str, list[int]], raw_names: dict[str, str] | None = None) -> bytes:
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header)
    for placeholder, raw in (raw_names or {}).items():
        text = text.replace(placeholder, raw)
    data = text.encode()
    return struct.pack("<Q", len(data)) + data + bytes(offset)


def test_a_lone_surrogate_in_json_becomes_a_replacement_character():
    doc = parse_json(b'{"a\\ud800": ["x\\udc00y", {"k": "\\ud83d\\ude00", "e": "\\\\ud800"}]}', "s", "w")
    assert doc == {"a\ufffd": ["x\ufffdy", {"k": "\U0001f600", "e": "\\ud800"}]}


def test_a_tensor_name_with_a_lone_surrogate_loads_and_fingerprints(tmp_path: Path):
    path = tmp_path / "s.safetensors"
    path.write_bytes(_safetensors({"up.weightXX": [8, 4], "x.weight": [4, 4]}, {"XX": "\\ud800"}))
    model = load_model(path)  # the fingerprint encoded the name: UnicodeEncodeError
    assert "up.weight\ufffd" in model.tensors and model.fingerprint
    res = run_cli("bench", "--model", str(path), "--list")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_a_record_name_with_a_lone_surrogate_reports_in_every_format(fmt: str, mpsup_home: Path, tmp_path: Path):
    doc = paired_record(1.2, seed=5, count=2, rounds=8, run_id="20261202T100000Z-surr00")
    doc["workloads"][0]["name"] = "linear/SURROGATE"
    runs = mpsup_home / "runs"
    runs.mkdir(parents=True)
    (runs / "20261202T100000Z-surr00.json").write_text(json.dumps(doc).replace("SURROGATE", "\\udfff"))
    out = tmp_path / "r.out"
    res = run_cli("report", "--format", fmt, *(["-o", str(out)] if fmt != "terminal" else []))
    assert res.returncode in (0, 1, 3) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "linear/\ufffd" in (res.stdout if fmt == "terminal" else out.read_text(encoding="utf-8"))


# --- item 9: small things --------------------------------------------------------------------------------------


def test_threads_are_bounded_by_the_machine():
    """--threads 100000 ended in "can't start new thread" with a partial record."""
    _one_line_exit_2(
        ["bench", "--device", "cpu", "--threads", "100000", "--no-smoke"], "--threads 100000: expected 1 to"
    )


def test_a_limit_under_a_mib_is_printed_exactly(tmp_path: Path):
    from mpsup.safe_files import read_bytes_bounded

    (tmp_path / "main").write_text("x" * 300)
    with pytest.raises(UserError, match="larger than 256 bytes"):  # was "larger than 0 MiB"
        read_bytes_bounded(tmp_path / "main", "Hugging Face cache ref", 256)


def test_a_gguf_expert_count_out_of_range_is_named_by_its_gguf_key(tmp_path: Path):
    from mpsup.model.safetensors_header import ModelFormatError
    from tests.test_model_gguf import write_gguf

    path = write_gguf(
        tmp_path / "m.gguf",
        {"blk.0.attn_q.weight": ((64, 64), "F32")},
        {"general.architecture": "qwen3moe", "qwen3moe.expert_used_count": 5000},
    )
    with pytest.raises(ModelFormatError, match=r"'qwen3moe\.expert_used_count' must be .* found 5000"):
        load_model(path)


def test_a_38_digit_block_index_is_no_level_count(tmp_path: Path):
    from mpsup.model.extract import extract_model
    from tests.test_model_comfy import sd15_keys, write_st

    keys = sd15_keys()
    keys["model.diffusion_model.input_blocks." + "9" * 38 + ".0.in_layers.2.weight"] = (320, 320, 3, 3)
    loaded = load_model(write_st(tmp_path / "sd.safetensors", keys, "F16"))
    ex = extract_model(loaded.tensors, loaded.config, tokens=(1,), components=loaded.components)
    (unet,) = [n for n in ex.notes if n.startswith("diffusion_model:")]
    assert "over 4 levels" in unet, unet  # was "over 33333333333333333333333333333333333334 levels"


def test_a_record_at_the_value_cap_is_resampled_in_bounded_time(monkeypatch: pytest.MonkeyPatch):
    """A 74 MB record took 70-85 s a report (here: over 5 minutes for one of 44 MB): the suite bootstrap drew
    every round of every workload 1000 times. Above EXACT_RESAMPLE_LIMIT blocks it draws one rank instead."""
    import random

    from mpsup import stats

    rng = random.Random(3)
    groups = [[rng.lognormvariate(0.1, 0.05) for _ in range(20_000)] for _ in range(3)]
    drawn: list[int] = []
    real = random.Random.choices

    def counting(self, population, weights=None, *, cum_weights=None, k=1):  # type: ignore[no-untyped-def]
        drawn.append(k)
        return real(self, population, weights, cum_weights=cum_weights, k=k)

    monkeypatch.setattr(random.Random, "choices", counting)
    ci = stats.suite_geomean_ci(groups, floor=0.0)
    assert sum(drawn) <= 1000 * 3  # was 1000 x 3 x 10,000 block draws
    assert ci.low < ci.estimate < ci.high and abs(math.log(ci.estimate) - 0.1) < 0.01
    assert math.log(ci.high / ci.low) < 0.01  # 10,000 blocks a workload: a narrow interval
    # Short workloads, every real record's, are still resampled in full: the same draws as before.
    drawn.clear()
    stats.suite_geomean_ci([g[:40] for g in groups], floor=0.0)
    assert sum(drawn) == 1000 * 3 + 1000 * 3 * 20
