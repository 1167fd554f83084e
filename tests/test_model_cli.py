"""`mpsup bench --model` for the formats read so far (safetensors file, sharded, HF folder)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from mpsup.runs.store import list_record_paths, load_record
from tests.conftest import run_cli


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: str = "BF16") -> Path:
    size = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return path


def tiny_llama(layers: int = 2) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (512, 64), "lm_head.weight": (512, 64)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (64, 64),
            p + "self_attn.o_proj.weight": (64, 64),
            p + "mlp.up_proj.weight": (128, 64),
            p + "mlp.down_proj.weight": (64, 128),
        }
    return shapes


def test_list_json_of_a_folder(tmp_path: Path):
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    write_safetensors(folder / "model.safetensors", tiny_llama())
    res = run_cli("bench", "--model", str(folder), "--list", "--json", "--tokens", "1,4")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    lin = {
        (i["in_features"], i["out_features"], i["tokens"]): (i["count"], i["role"])
        for i in items
        if i["kind"] == "linear"
    }
    assert (
        lin[(64, 64, 1)] == (4, "attention")
        and lin[(64, 128, 4)] == (2, "mlp")
        and lin[(64, 512, 1)] == (1, "output-head")
    )
    assert all({"kind", "count", "role"} <= set(i) for i in items)


def test_sharded_checkpoint_and_missing_shard(tmp_path: Path):
    shapes = tiny_llama()
    names = list(shapes)
    write_safetensors(tmp_path / "a.safetensors", {n: shapes[n] for n in names[:3]})
    write_safetensors(tmp_path / "b.safetensors", {n: shapes[n] for n in names[3:]})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        json.dumps({"weight_map": {n: ("a.safetensors" if i < 3 else "b.safetensors") for i, n in enumerate(names)}})
    )
    res = run_cli("bench", "--model", str(index), "--list", "--json")
    assert res.returncode == 0, res.stderr
    (tmp_path / "b.safetensors").unlink()
    res = run_cli("bench", "--model", str(index), "--list")
    assert res.returncode == 2 and "shard 'b.safetensors' is missing" in res.stderr


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("m.pt2", b"junk", "not a torch.export archive"),
        ("m.gguf", b"junk", "not a GGUF file"),
        ("m.pt", b"junk", "not a torch.save zip archive"),
        ("m.txt", b"hello", "unknown model format"),
        ("m.safetensors", b"\x00", "truncated"),
    ],
)
def test_bad_models_exit_2(tmp_path: Path, name: str, content: bytes, needle: str, mpsup_home: Path):
    p = tmp_path / name
    p.write_bytes(content)
    res = run_cli("bench", "--model", str(p))
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr
    assert not (mpsup_home / "runs").exists()


def test_measures_a_tiny_model_on_cpu(tmp_path: Path, mpsup_home: Path):
    p = write_safetensors(tmp_path / "tiny.safetensors", tiny_llama())
    res = run_cli(
        "bench",
        "--model",
        str(p),
        "--device",
        "cpu",
        "--tokens",
        "1",
        "--budget",
        "0.02",
        "--no-smoke",
        env={"COLUMNS": "160"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "estimated forward time" in res.stdout and "95% CI" in res.stdout and "float8_e4m3fn" in res.stdout
    record = load_record(list_record_paths()[0]).to_json()
    assert record["model"]["format"] == "safetensors" and len(record["model"]["fingerprint"]) == 16
    assert {w["status"] for w in record["workloads"]} == {"ok"}


def test_state_dict_pt(tmp_path: Path):
    import torch

    sd = {
        "model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64, dtype=torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.zeros(128, 64, dtype=torch.bfloat16),
        "model.norm.weight": torch.zeros(64),
    }
    p = tmp_path / "model.pt"
    torch.save(sd, p)
    res = run_cli("bench", "--model", str(p), "--list", "--json", "--tokens", "1")
    assert res.returncode == 0, res.stderr
    lin = {(i["in_features"], i["out_features"]): i["role"] for i in json.loads(res.stdout)}
    assert lin == {(64, 64): "attention", (64, 128): "mlp"}


class NotAllowed:
    pass


def test_state_dict_with_foreign_objects_is_refused(tmp_path: Path, mpsup_home: Path):
    import torch

    p = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2, 2), "obj": NotAllowed()}, p)
    res = run_cli("bench", "--model", str(p), "--list")
    assert res.returncode == 2 and "weights_only" in res.stderr and "Traceback" not in res.stderr
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(b"\x80\x02}q\x00.")
    res = run_cli("bench", "--model", str(legacy), "--list")
    assert res.returncode == 2 and "not a torch.save zip archive" in res.stderr


def test_diffusers_folder_with_wan_like_causal_vae(tmp_path: Path, mpsup_home: Path):
    root = tmp_path / "pipe"
    (root / "vae").mkdir(parents=True)
    (root / "transformer").mkdir()
    (root / "scheduler").mkdir()
    (root / "model_index.json").write_text(
        json.dumps(
            {
                "_class_name": "WanPipeline",
                "vae": ["diffusers", "AutoencoderKLWan"],
                "transformer": ["diffusers", "X"],
                "scheduler": ["diffusers", "S"],
            }
        )
    )
    (root / "vae" / "config.json").write_text(json.dumps({"base_dim": 16, "dim_mult": [1, 2], "sample_size": 32}))
    write_safetensors(
        root / "vae" / "diffusion_pytorch_model.safetensors",
        {
            "decoder.up_blocks.0.resnets.0.conv1.weight": (32, 32, 3, 3, 3),
            "decoder.up_blocks.0.resnets.0.conv2.weight": (32, 32, 3, 3, 3),
            "decoder.up_blocks.1.resnets.0.conv1.weight": (16, 16, 3, 3, 3),
            "decoder.conv_out.weight": (3, 16, 3, 3, 3),
        },
    )
    write_safetensors(
        root / "transformer" / "diffusion_pytorch_model.safetensors",
        {
            "blocks.0.attn1.to_q.weight": (64, 64),
            "blocks.1.attn1.to_q.weight": (64, 64),
            "blocks.0.ffn.net.0.proj.weight": (256, 64),
        },
    )
    res = run_cli("bench", "--model", str(root), "--list", "--json", "--tokens", "8")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)
    by_name = {i["name"]: i for i in items}
    assert by_name["model/transformer/linear/64x64/t8"]["count"] == 2
    assert "transformer" in by_name["model/transformer/linear/64x64/t8"]["tags"]
    conv = by_name["model/vae/conv3d/32x32k3x3x3/16px/4f"]
    assert conv["count"] == 2 and conv["input_shape"] == [1, 32, 6, 18, 18] and conv["padding"] == 0
    pad = by_name["model/vae/pad3d/32x4x16x16"]
    assert pad["count"] == 2 and pad["pad"] == [1, 1, 1, 1, 2, 0]
    assert by_name["model/vae/conv3d/16x16k3x3x3/32px/4f"]["count"] == 1
    # And it measures, conv3d and causal pads included, on the CPU.
    res = run_cli("bench", "--model", str(root), "--device", "cpu", "--tokens", "1", "--budget", "0.02", "--no-smoke")
    assert res.returncode == 0, res.stderr[-2000:]
    record = load_record(list_record_paths()[0]).to_json()
    assert record["model"]["format"] == "diffusers"
    assert {w["status"] for w in record["workloads"]} == {"ok"}
    assert {w["kind"] for w in record["workloads"]} == {"linear", "conv", "pad"}


FACTORY = """
import torch

def build():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return model, (torch.randn(4, 32),)
"""


def test_module_function_and_pt2_run_end_to_end(tmp_path: Path, mpsup_home: Path):
    import os
    import subprocess
    import sys

    import torch

    (tmp_path / "mymodels.py").write_text(FACTORY)
    env = {k: v for k, v in os.environ.items()}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mpsup",
            "bench",
            "--model",
            "mymodels:build",
            "--device",
            "cpu",
            "--budget",
            "0.02",
            "--no-smoke",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert [(w["name"], w["status"]) for w in summary["workloads"]] == [("model/end-to-end", "ok")]
    # Measured end to end, not estimated from layers: no layer estimate, the forward's own median instead.
    assert summary["model_forward_s"] is None
    assert summary["workloads"][0]["median_s"] > 0
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())
    ep = torch.export.export(model, (torch.randn(2, 16),))
    pt2 = tmp_path / "tiny.pt2"
    torch.export.save(ep, pt2)
    res = run_cli("bench", "--model", str(pt2), "--device", "cpu", "--budget", "0.02", "--no-smoke", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    (w,) = json.loads(res.stdout)["workloads"]
    assert w["status"] == "ok" and w["kind"] == "end_to_end"
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"nope")
    res = run_cli("bench", "--model", str(bad))
    assert res.returncode == 2 and "not a torch.export archive" in res.stderr


# ---- issue 10: hostile input through `bench --model` ----


def _pt_archive(path: Path, pickle_bytes: bytes) -> Path:
    """A torch.save-shaped zip whose data.pkl is the given (hostile) pickle program."""
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", "3\n")
        z.writestr("archive/byteorder", "little")
    return path


def _spans_disks(path: Path) -> Path:
    """A zip64 end locator claiming two disks: zipfile.is_zipfile itself raises BadZipFile on it."""
    path.write_bytes(b"x" * 64 + struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 2) + b"PK\x05\x06" + b"\0" * 18)
    return path


def _empty(path: Path) -> Path:
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: _pt_archive(p, b"h\xad."), "KeyError: 173"),  # BINGET of a memo slot never set
        (lambda p: _pt_archive(p, b"K\x01K\x02s."), "IndexError"),  # SETITEM with too short a stack
        (
            lambda p: _pt_archive(p, b"}X\x01\x00\x00\x00a(X\x07\x00\x00\x00storage"),
            r"cannot open as a state dict \(EOFError\)",
        ),
        (lambda p: _pt_archive(p, b"garbage"), "refused this pickle .*Unsupported operand 103"),
        (_spans_disks, "not a torch.save zip archive"),  # BadZipFile from is_zipfile
        (lambda p: _empty(p), "not a torch.save zip archive"),
    ],
)
def test_broken_state_dicts_are_one_line(tmp_path: Path, make, needle: str):
    from mpsup.errors import UserError
    from mpsup.model.load import load_model

    p = make(tmp_path / "broken.pt")
    with pytest.raises(UserError, match=needle) as exc:
        load_model(p)
    assert str(exc.value).startswith(f"{p}: ") and "\n" not in str(exc.value)


def test_broken_state_dict_on_the_command_line(tmp_path: Path, mpsup_home: Path):
    p = _pt_archive(tmp_path / "broken.pt", b"h\xad.")
    res = run_cli("bench", "--model", str(p), "--list")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "KeyError: 173" in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("mpsup:")]) == 1


def test_markup_in_tensor_names_and_paths_is_shown_as_written(tmp_path: Path):
    """Issue 10, item 5: `[/x]` in a tensor name raised MarkupError; `[old]` in a path vanished."""
    folder = tmp_path / "[old] llama"
    folder.mkdir()
    p = write_safetensors(folder / "model.safetensors", {"[/x].q_proj.weight": (8, 8)})
    header = json.loads(p.read_bytes()[8 : 8 + struct.unpack("<Q", p.read_bytes()[:8])[0]])
    header["[bold]packed.weight"] = {"dtype": "I8", "shape": [4, 4], "data_offsets": [128, 144]}
    raw = json.dumps(header).encode()
    with p.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + 144)
    res = run_cli("bench", "--model", str(folder), "--list", "--tokens", "1", env={"COLUMNS": "200"})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "not measured: [bold]packed.weight: quantized or packed (I8)" in res.stderr
    import zipfile

    pt2 = folder / "m.pt2"
    with zipfile.ZipFile(pt2, "w") as z:
        z.writestr("archive_format", "pt2")
    res = run_cli("bench", "--model", str(pt2), "--list", env={"COLUMNS": "400"})
    assert res.returncode == 0 and "[old] llama" in res.stdout, res.stdout


def test_names_too_long_for_the_file_system_are_one_line(tmp_path: Path):
    for name in (
        "a" * 5000 + ".safetensors",
        "a" * 5000 + ".pt2",
        "a" * 5000,
        str(tmp_path / ("d" * 300)) + "/x.safetensors",
    ):
        res = run_cli("bench", "--model", name, "--list")
        assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr[-300:]


# VmHWM, not ru_maxrss: Linux carries the parent's high-water RSS into ru_maxrss across fork and exec,
# so under a full pytest run (transformers and diffusers imported) the child reported 646 MiB for a
# process that peaks at about 40.
RSS_PROBE = (
    "import runpy, sys\nsys.argv = ['mpsup', *sys.argv[1:]]\ntry:\n    runpy.run_module('mpsup', run_name='__main__')\n"
    "finally:\n    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "    print('RSS_KB', hwm[0], file=sys.stderr)"
)


def test_a_3_gib_pt2_is_fingerprinted_without_reading_it(tmp_path: Path):
    """Issue 10, item 7: `--list` of a 3 GiB .pt2 took 3.1 GB of memory and 17 s (the whole file was read)."""
    import subprocess
    import sys
    import zipfile

    big = tmp_path / "big.pt2"
    with big.open("wb") as fh:
        fh.truncate(3 << 30)  # a hole: no disk used
    with zipfile.ZipFile(big, "a") as z:
        z.writestr("big/archive_format", "pt2")
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, "bench", "--model", str(big), "--list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-2000:]
    rss_mb = int(res.stderr.split("RSS_KB")[-1]) / 1024
    assert rss_mb < 600 and elapsed < 10, (rss_mb, elapsed)
    assert len(json.loads(res.stdout)) == 1
