"""`--model org/name` from the Hugging Face cache, offline: refs/main -> snapshot, symlinks into blobs/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mpsup.model.hub import hub_cache, looks_like_repo_id
from mpsup.model.load import load_model
from mpsup.model.safetensors_header import ModelFormatError
from tests.conftest import run_cli
from tests.test_model_comfy import write_st

COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def cache_repo(
    cache: Path, repo_id: str, files: dict[str, dict[str, tuple[int, ...]] | dict], commit: str = COMMIT
) -> Path:
    """A cache entry laid out as huggingface_hub writes it: blobs named by hash, snapshot files linking to them."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    for i, (name, content) in enumerate(files.items()):
        blob = repo / "blobs" / f"{i:064x}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".safetensors"):
            write_st(blob, content)  # type: ignore[arg-type]
        else:
            blob.write_text(json.dumps(content))
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snap


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    c = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.chdir(tmp_path)
    return c


def test_cache_location_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for key in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub_cache() == tmp_path / "c"


def test_repo_ids():
    assert looks_like_repo_id("sentence-transformers/all-MiniLM-L6-v2")
    assert not any(looks_like_repo_id(x) for x in ("a/b/c", "../x", "/abs", "a--b/c", "a/..b", "model.safetensors"))


def test_sharded_checkpoint_from_the_cache(cache: Path):
    shard = {"model.layers.0.mlp.up_proj.weight": (128, 64)}
    cache_repo(
        cache,
        "org/llm",
        {
            "config.json": {"architectures": ["LlamaForCausalLM"]},
            "model.safetensors.index.json": {
                "weight_map": {"model.layers.0.mlp.up_proj.weight": "model-00001-of-00001.safetensors"}
            },
            "model-00001-of-00001.safetensors": shard,
        },
    )
    loaded = load_model(Path("org/llm"))
    assert loaded.format == "transformers-sharded" and COMMIT in str(loaded.path) and set(loaded.tensors) == set(shard)


def test_diffusers_layout_from_the_cache(cache: Path):
    cache_repo(
        cache,
        "org/pipe",
        {
            "model_index.json": {"_class_name": "FluxPipeline", "vae": ["diffusers", "AutoencoderKL"]},
            "vae/config.json": {"sample_size": 512},
            "vae/diffusion_pytorch_model.safetensors": {"decoder.conv_in.weight": (512, 4, 3, 3)},
        },
    )
    loaded = load_model(Path("org/pipe"))
    assert loaded.format == "diffusers" and loaded.components == {"vae": {"sample_size": 512}}


def test_not_cached_is_one_line_naming_where_it_looked(cache: Path, mpsup_home: Path):
    with pytest.raises(ModelFormatError, match="models--org--absent"):
        load_model(Path("org/absent"))
    r = run_cli("bench", "--model", "org/absent", "--list")
    assert (
        r.returncode == 2
        and str(cache) in r.stderr
        and "Traceback" not in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )
    # The command that fetches it, for today's huggingface_hub (`hf`) and older ones (`huggingface-cli`).
    assert "hf download org/absent" in r.stderr and "huggingface-cli download org/absent" in r.stderr


def test_bad_ref_is_one_line(cache: Path):
    cache_repo(cache, "org/bad", {"config.json": {}}, commit="../../etc")
    with pytest.raises(ModelFormatError, match="not a commit hash"):
        load_model(Path("org/bad"))


@pytest.mark.parametrize("how", ["ref-is-a-link", "refs-folder-is-a-link"])
def test_a_ref_outside_the_repository_is_refused_unread(cache: Path, tmp_path: Path, how: str):
    """Issue 26: a refs/main linking out of the cache was read and quoted ("holds '...', not a commit hash")."""
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "main").write_text("SECRET outside the cache")
    cache_repo(cache, "org/linked", {"config.json": {}})
    refs = cache / "models--org--linked" / "refs"
    if how == "ref-is-a-link":
        (refs / "main").unlink()
        (refs / "main").symlink_to(secret / "main")
    else:
        (refs / "main").unlink()
        refs.rmdir()
        refs.symlink_to(secret)
    with pytest.raises(ModelFormatError, match="not a plain file inside models--org--linked/") as info:
        load_model(Path("org/linked"))
    assert "SECRET" not in str(info.value)
