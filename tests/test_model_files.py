"""Issue 10, items 6 and 7: a model may make mpsup open only regular files inside its own folder.

Every hostile layout is built here: indexes naming absolute paths, `..`, devices and /proc; symlinks
out of the folder; FIFOs where a checkpoint, shard, config or index should be; Hugging Face's cache,
whose symlinks into blobs/ must keep working."""

from __future__ import annotations

import json
import os
import signal
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpsup.errors import UserError
from mpsup.model.load import load_model, pt2_fingerprint
from tests.conftest import count_reads

GOOD = {"model.layers.0.mlp.up_proj.weight": {"dtype": "F16", "shape": [8, 4], "data_offsets": [0, 64]}}


def write_st(path: Path, header: dict | None = None, data: int = 64) -> Path:
    raw = json.dumps(header or GOOD).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + data)
    return path


def write_index(folder: Path, shard: str, name: str = "model.layers.0.mlp.up_proj.weight") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {name: shard}}))
    return index


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail, rather than hang the suite, if opening something blocks (a FIFO without a writer does)."""

    def expired(signum, frame):
        raise TimeoutError("blocked for 10 s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 10)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _refused(path: Path, needle: str) -> str:
    with pytest.raises(UserError, match=needle) as exc:
        load_model(path)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "shard",
    [
        "/etc/passwd",
        "/dev/zero",
        "/proc/self/environ",
        "../outside/a.safetensors",
        "sub/../../outside/a.safetensors",
        "..",
        "OUTSIDE_ABSOLUTE",
        "a\\..\\..\\x.safetensors",
        "nul\0byte.safetensors",
    ],
)
def test_a_sharded_index_cannot_name_files_outside_its_folder(tmp_path: Path, shard: str):
    outside = write_st(tmp_path / "outside" / "a.safetensors")
    shard = shard.replace("OUTSIDE_ABSOLUTE", str(outside))
    index = write_index(tmp_path / "model", shard)
    msg = _refused(index, "lies outside the model folder")
    assert str(index) in msg


def test_non_string_or_empty_shard_names_are_refused(tmp_path: Path):
    folder = tmp_path / "model"
    for shard, needle in ((5, "5, not a shard file name"), ("", "'' is not a file name"), (None, "None, not a shard")):
        _refused(write_index(folder, shard), needle)  # type: ignore[arg-type]


def test_symlinks_out_of_the_folder_are_refused(tmp_path: Path):
    outside = write_st(tmp_path / "elsewhere" / "real.safetensors")
    (tmp_path / "elsewhere" / "config.json").write_text("{}")
    single = tmp_path / "single"
    single.mkdir()
    (single / "model.safetensors").symlink_to(outside)
    msg = _refused(single, "is a link to .*outside the model folder")
    assert str(outside) in msg
    # the same through a sharded index naming an innocent-looking shard
    sharded = tmp_path / "sharded"
    write_index(sharded, "model-00001.safetensors")
    (sharded / "model-00001.safetensors").symlink_to(outside)
    _refused(sharded / "model.safetensors.index.json", "this shard is a link to")
    # and a config.json next to real weights
    cfg = tmp_path / "cfg"
    write_st(cfg / "model.safetensors")
    (cfg / "config.json").symlink_to(tmp_path / "elsewhere" / "config.json")
    _refused(cfg, "config.json: this model config is a link to")
    # a link to a device is outside too (and would never be opened)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "model.safetensors").symlink_to("/dev/zero")
    _refused(dev, "is a link to /dev/zero")


def test_links_that_stay_inside_are_fine_and_loops_are_one_line(tmp_path: Path):
    folder = tmp_path / "model"
    write_st(folder / "weights" / "real.safetensors")
    (folder / "model.safetensors").symlink_to("weights/real.safetensors")
    assert len(load_model(folder).tensors) == 1
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "a.safetensors").symlink_to("b.safetensors")
    (loop / "b.safetensors").symlink_to("a.safetensors")
    _refused(loop, "a.safetensors")


def test_the_model_folder_itself_may_be_a_link(tmp_path: Path):
    write_st(tmp_path / "real" / "model.safetensors")
    (tmp_path / "current").symlink_to(tmp_path / "real")
    assert load_model(tmp_path / "current").format == "transformers"


def test_hugging_face_cache_layout_is_accepted(tmp_path: Path):
    """snapshots/<rev>/ holds symlinks into the repository's blobs/: the one place outside allowed."""
    repo = tmp_path / "hub" / "models--org--tiny"
    blob_st = write_st(repo / "blobs" / "9f2c")
    (repo / "blobs" / "77aa").write_text(json.dumps({"num_experts_per_tok": 2}))
    (repo / "blobs" / "5e11").write_text(
        json.dumps({"weight_map": {"model.layers.0.mlp.up_proj.weight": "model-00001-of-00001.safetensors"}})
    )
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00001.safetensors").symlink_to("../../blobs/9f2c")
    (snap / "config.json").symlink_to("../../blobs/77aa")
    (snap / "model.safetensors.index.json").symlink_to("../../blobs/5e11")
    m = load_model(snap)
    assert m.format == "transformers-sharded" and m.config == {"num_experts_per_tok": 2}
    assert load_model(snap / "model.safetensors.index.json").format == "safetensors-sharded"
    # but not the rest of the cache: another repository's blob is outside
    other = write_st(tmp_path / "hub" / "models--org--other" / "blobs" / "1111")
    (snap / "model-00001-of-00001.safetensors").unlink()
    (snap / "model-00001-of-00001.safetensors").symlink_to(other)
    _refused(snap, "is a link to")
    assert blob_st.exists()


def _pipeline(root: Path, components: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": "X", **components}))
    return root


@pytest.mark.parametrize("component", ["OUTSIDE_ABSOLUTE", "../outside", "unet/../../outside", "a/b", ".", ""])
def test_diffusers_components_must_be_folders_inside(tmp_path: Path, component: str):
    outside = write_st(tmp_path / "outside" / "diffusion_pytorch_model.safetensors").parent
    component = component.replace("OUTSIDE_ABSOLUTE", str(outside))
    root = _pipeline(tmp_path / "pipe", {component: ["diffusers", "X"]})
    write_st(root / "unet" / "diffusion_pytorch_model.safetensors")
    _refused(root, "model_index.json: component .* (lies outside the model folder|is not a file name)")


def test_a_symlinked_diffusers_component_out_of_the_folder_is_refused(tmp_path: Path):
    outside = write_st(tmp_path / "outside" / "diffusion_pytorch_model.safetensors").parent
    root = _pipeline(tmp_path / "pipe", {"unet": ["diffusers", "X"]})
    (root / "unet").symlink_to(outside, target_is_directory=True)
    _refused(root, "unet: this component is a link to")


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_a_fifo_anywhere_is_refused_at_once(tmp_path: Path, no_hang: None):
    """Each of these blocked forever before (open() of a FIFO waits for a writer)."""
    _refused(_fifo(tmp_path / "a" / "model.safetensors"), "not a regular file; expected a safetensors file")
    _refused(tmp_path / "a", "not a regular file")  # the same FIFO, found by listing the folder
    b = tmp_path / "b"
    _fifo(b / "s.safetensors")
    _refused(write_index(b, "s.safetensors"), "s.safetensors: not a regular file")
    c = tmp_path / "c"
    write_st(c / "model.safetensors")
    _fifo(c / "config.json")
    _refused(c, "config.json: not a regular file; expected a model config")
    _refused(_fifo(tmp_path / "d" / "model.safetensors.index.json"), "not a regular file; expected a sharded index")
    e = tmp_path / "e"
    _fifo(e / "model_index.json")
    _refused(e, "model_index.json: not a regular file")
    _refused(_fifo(tmp_path / "f" / "model.pt"), "model.pt: not a regular file; expected a state dict")
    with pytest.raises(UserError, match=r"not a regular file; expected a \.pt2 export"):
        pt2_fingerprint(_fifo(tmp_path / "g" / "model.pt2"))


def test_a_folder_named_like_a_checkpoint_is_one_line(tmp_path: Path):
    folder = tmp_path / "m"
    (folder / "model.safetensors").mkdir(parents=True)
    _refused(folder, "model.safetensors: a folder; expected a safetensors file")


def test_pt2_fingerprint_reads_a_bounded_amount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """At most 2 MiB read, whatever the size; a change in the program near the end changes it."""
    import mpsup.model.load as load

    big = tmp_path / "big.pt2"
    with big.open("wb") as fh:
        fh.truncate(64 << 20)  # a 64 MiB hole before the archive
    with zipfile.ZipFile(big, "a") as z:
        z.writestr("m/models/model.json", '{"op": "aten.tanh.default"}')
    reads = count_reads(monkeypatch, load)
    first = pt2_fingerprint(big)
    assert sum(reads) <= (2 << 20) + 1024  # two samples, plus the zip end record is_zipfile checks
    same_size = tmp_path / "other.pt2"
    with same_size.open("wb") as fh:
        fh.truncate(64 << 20)
    with zipfile.ZipFile(same_size, "a") as z:
        z.writestr("m/models/model.json", '{"op": "aten.relu.default"}')  # same length, other graph
    assert same_size.stat().st_size == big.stat().st_size
    assert pt2_fingerprint(same_size) != first
    assert pt2_fingerprint(big) == first
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"PK" + b"\0" * 100)
    with pytest.raises(UserError, match=r"not a torch\.export archive"):
        pt2_fingerprint(bad)
