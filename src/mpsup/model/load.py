"""A model path -> its tensors (from headers only), its config, and a fingerprint for pairing runs.

Supported: a `.safetensors` file, a sharded checkpoint (`*.safetensors.index.json`), a Hugging Face
Transformers folder (`config.json` + safetensors weights, or the config alone: run whole, no layers), a
Diffusers folder, and .pt/.pth/.bin state dicts (.pt2 exports and module:function are timed end to end by
the CLI). Every file is untrusted: only regular files inside the model's folder are opened
(`files.ModelFolder`), every JSON document goes through the store's guarded reader, and every config field
used is checked (`config.model_config`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.model import comfy, hub
from mpsup.model.config import MAX_TOP_K, model_config
from mpsup.model.files import ModelFolder
from mpsup.model.safetensors_header import ModelFormatError, TensorInfo, check_name, read_header, shown
from mpsup.safe_files import open_regular, read_json_object

NOT_YET = {".ckpt": "checkpoint"}
STATE_DICT_SUFFIXES = (".pt", ".pth", ".bin")
TORCH_DTYPES = {
    "torch.bfloat16": "BF16",
    "torch.float16": "F16",
    "torch.float32": "F32",
    "torch.float8_e4m3fn": "F8_E4M3",
    "torch.int8": "I8",
    "torch.uint8": "U8",
    "torch.int32": "I32",
    "torch.int64": "I64",
    "torch.float64": "F64",
    "torch.bool": "BOOL",
    "torch.int16": "I16",
}
# Real configs are a few kilobytes and real sharded indexes a few megabytes (a 90,000-tensor index is ~9 MB).
CONFIG_MAX_BYTES = 16 << 20
INDEX_MAX_BYTES = 64 << 20
PT2_SAMPLE_BYTES = 1 << 20
CONFIG_ONLY = "transformers-config"  # a folder with config.json and no weights
CONFIG_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}  # the dtypes a whole model is built in


@dataclass(frozen=True)
class LoadedModel:
    path: Path
    format: str
    tensors: dict[str, TensorInfo]
    config: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""
    components: dict[str, dict[str, Any]] | None = None  # a Diffusers pipeline: each component's config

    def describe(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format": self.format,
            "fingerprint": self.fingerprint,
            "tensors": len(self.tensors),
        }


def _config(path: Path, folder: ModelFolder) -> dict[str, Any]:
    """A config.json, with every field extraction will read checked now, so an error names this file."""
    doc = read_json_object(folder.member(path, "model config"), "model config", CONFIG_MAX_BYTES)
    model_config(doc, str(path))
    return doc


def _sharded(index_path: Path) -> dict[str, TensorInfo]:
    """A sharded index: its shards must be files in the index's own folder."""
    folder = ModelFolder.of(index_path.parent)
    doc = read_json_object(index_path, "sharded index", INDEX_MAX_BYTES)
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFormatError(f"{index_path}: no 'weight_map' in this sharded index")
    for name, shard_name in weight_map.items():
        check_name(index_path, name)
        if not isinstance(shard_name, str):
            raise ModelFormatError(
                f"{index_path}: tensor {shown(name)} maps to {shown(shard_name)}, not a shard file name"
            )
    tensors: dict[str, TensorInfo] = {}
    for shard_name in sorted(set(weight_map.values())):
        shard = folder.named(shard_name, index_path, "shard")
        if not os.path.lexists(shard):
            raise ModelFormatError(f"{index_path}: shard {shown(shard_name)} is missing")
        tensors.update(read_header(shard).tensors)
    missing = [name for name in weight_map if name not in tensors]
    if missing:
        raise ModelFormatError(
            f"{index_path}: {len(missing)} tensors named in the index are in no shard (e.g. {shown(missing[0])})"
        )
    return tensors


def _first_line(exc: BaseException) -> str:
    """The exception's type and the line that says what went wrong, cut short."""
    text = str(exc)
    marker = "WeightsUnpickler error:"  # torch's weights_only refusal buries the reason among advice lines
    if marker in text:
        text = text.split(marker, 1)[1]
    reason = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {reason[:200]}" if reason else type(exc).__name__


def _is_zip(fh: Any) -> bool:
    try:
        return zipfile.is_zipfile(fh)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):  # is_zipfile raises BadZipFile for some broken archives
        return False


def _state_dict(path: Path) -> dict[str, TensorInfo]:
    """A torch.save'd state dict, opened with weights_only=True (never a full unpickle) and mmap=True
    (shapes come from the archive's metadata; no weight page is read)."""
    with open_regular(path, "state dict") as fh:
        if not _is_zip(fh):
            raise ModelFormatError(f"{path}: not a torch.save zip archive (legacy or foreign pickle: not read)")
    import pickle

    import torch  # only now: importing it takes seconds, and most refusals need none of it

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise ModelFormatError(f"{path}: weights_only loading refused this pickle ({_first_line(exc)})") from None
    except Exception as exc:  # a damaged archive surfaces as any of a dozen types (BadZipFile, KeyError, IndexError...)
        raise ModelFormatError(f"{path}: cannot open as a state dict ({_first_line(exc)})") from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelFormatError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    tensors: dict[str, TensorInfo] = {}
    for key, value in obj.items():
        if isinstance(value, torch.Tensor):
            name = str(key)
            check_name(path, name)
            dtype = TORCH_DTYPES.get(str(value.dtype), str(value.dtype))
            tensors[name] = TensorInfo(name, dtype, tuple(value.shape), value.numel() * value.element_size())
    return tensors


def _diffusers(path: Path) -> LoadedModel:
    """A Diffusers pipeline: each component folder (unet/, transformer/, vae/, text_encoder/ ...) is read
    on its own; tensor names get the component as a prefix so each is measured and reported apart."""
    folder = ModelFolder.of(path)
    index_path = folder.member(path / "model_index.json", "Diffusers model index")
    index = read_json_object(index_path, "Diffusers model index", CONFIG_MAX_BYTES)
    tensors: dict[str, TensorInfo] = {}
    configs: dict[str, Any] = {}
    for component in sorted(k for k in index if not k.startswith("_")):
        sub = folder.named(component, index_path, "component", plain=True)
        if not os.path.isdir(sub):
            continue  # a component without a folder (or not downloaded)
        part = _component_tensors(sub)
        if not part:
            continue  # schedulers, tokenizers: no weights
        for name, t in part.items():
            tensors[f"{component}/{name}"] = TensorInfo(f"{component}/{name}", t.dtype, t.shape, t.nbytes)
        if os.path.lexists(sub / "config.json"):
            configs[component] = _config(sub / "config.json", ModelFolder.of(sub))
    if not tensors:
        raise ModelFormatError(f"{path}: a Diffusers folder whose components hold no safetensors weights")
    return LoadedModel(path, "diffusers", tensors, {}, _fingerprint(tensors), components=configs)


def _component_tensors(sub: Path) -> dict[str, TensorInfo]:
    folder = ModelFolder.of(sub)
    indexes = sorted(sub.glob("*.safetensors.index.json"))
    if indexes:
        return _sharded(folder.member(indexes[0], "sharded index"))
    return {
        k: v
        for f in sorted(sub.glob("*.safetensors"))
        for k, v in read_header(folder.member(f, "checkpoint")).tensors.items()
    }


def _components(path: Path, fmt: str, parts: list[comfy.Component]) -> LoadedModel:
    """Components (a ComfyUI file's, or a repackaged folder's) as a pipeline: tensors named `component/name`,
    each component's config holding only the architecture its names revealed."""
    tensors: dict[str, TensorInfo] = {}
    configs: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, t in part.tensors.items():
            tensors[f"{part.name}/{name}"] = TensorInfo(f"{part.name}/{name}", t.dtype, t.shape, t.nbytes)
        configs[part.name] = {comfy.ARCHITECTURE_KEY: part.architecture} if part.architecture else {}
        if part.name.startswith("text_encoder"):
            configs[part.name]["tie_word_embeddings"] = False  # a text encoder ends in no head over its vocabulary
    return LoadedModel(path, fmt, tensors, {}, _fingerprint(tensors), components=configs)


def _repackaged(path: Path) -> LoadedModel | None:
    """ComfyUI's repackaged layout: diffusion_models/, vae/, text_encoders/ (or under split_files/), one
    component per safetensors file, named `<kind>-<file stem>`."""
    base = path / "split_files" if os.path.isdir(path / "split_files") else path
    folder = ModelFolder.of(path)
    parts: list[comfy.Component] = []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        kind = comfy.repackaged_kind(sub.name)
        if kind is None:
            continue
        for f in sorted(sub.glob("*.safetensors")):
            part = comfy.component_for(kind, read_header(folder.member(f, "checkpoint")).tensors)
            parts.append(comfy.Component(f"{kind}-{f.stem}", part.tensors, part.architecture))
    return _components(path, "comfyui-repackaged", parts) if parts else None


def _gguf(path: Path) -> LoadedModel:
    """A GGUF file: an LLM in llama.cpp's names (top-k from `<arch>.expert_used_count`), or a diffusion model
    with its original names (city96's Flux/Wan GGUFs), told by ComfyUI's markers like a safetensors file."""
    from mpsup.model.gguf import read_gguf

    header = read_gguf(path)
    if not header.tensors:
        raise ModelFormatError(f"{path}: holds no tensors")
    parts = comfy.split(header.tensors)
    if parts is not None:
        loaded = _components(path, "gguf", parts)
        return loaded
    arch = header.metadata.get("general.architecture")
    key = f"{arch}.expert_used_count"
    top_k = header.metadata.get(key) if isinstance(arch, str) else None
    config: dict[str, Any] = (
        {"num_experts_per_tok": top_k} if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0 else {}
    )
    if config and config["num_experts_per_tok"] > MAX_TOP_K:  # here, so the error names the GGUF key
        raise ModelFormatError(f"{path}: {shown(key)} must be a positive integer up to {MAX_TOP_K}, found {top_k}")
    model_config(config, str(path))
    return LoadedModel(path, "gguf", header.tensors, config, _fingerprint(header.tensors))


def _other_weights(folder: Path) -> Path | None:
    """The first file of the folder that holds weights in another format than safetensors, or None."""
    for suffix in (*STATE_DICT_SUFFIXES, ".bin.index.json", *NOT_YET, ".gguf", ".pt2", ".h5", ".msgpack", ".onnx"):
        found = sorted(folder.glob(f"*{suffix}"))
        if found:
            return found[0]
    return None


def _config_only(path: Path, config: dict[str, Any]) -> LoadedModel:
    """A Transformers folder with its config.json and no weights (a config copied from the Hub, or one written
    by hand): the whole model is built from the config with random weights, as it is by default anyway, and
    there are no weight headers to list its layers from. The fingerprint is the config itself: two runs of
    the same config pair; an edited config does not."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    fingerprint = hashlib.sha256(f"config {canonical}".encode()).hexdigest()[:16]
    return LoadedModel(path, CONFIG_ONLY, {}, config, fingerprint)


def checkpoint_dtype(config: dict[str, Any]) -> str | None:
    """The dtype a Transformers config says its checkpoint holds ("bf16"), from `dtype` (transformers 5) or
    `torch_dtype` (before), or None where it names none mpsup measures."""
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if isinstance(value, str):
            name = TORCH_DTYPES.get(value if value.startswith("torch.") else f"torch.{value}")
            if name in CONFIG_DTYPES:
                return CONFIG_DTYPES[name]
    return None


def _fingerprint(tensors: dict[str, TensorInfo]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}|{t.dtype}|{t.shape}\n".encode())
    return h.hexdigest()[:16]


def pt2_fingerprint(path: Path) -> str:
    """A .pt2 export's fingerprint from its size, its first MiB and its last MiB: at most 2 MiB read,
    whatever the file's size (an export of gigabytes would otherwise be read whole, into memory).

    Bounded rather than whole-file: a .pt2 is a zip archive whose central directory, at the end, records
    every member's CRC-32 and size, so a change anywhere (the program, any weight) changes the last MiB;
    the first MiB adds the leading weights' bytes. The prefix alone would not do: torch.export writes
    the weights first and the program (models/model.json) near the end, so two graphs over the same
    weights would share their first MiB."""
    with open_regular(path, ".pt2 export") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not _is_zip(fh):
            raise ModelFormatError(f"{path}: not a torch.export archive (.pt2 files are zip archives)")
        h = hashlib.sha256(f"pt2 {size}\n".encode())
        try:
            fh.seek(0)
            h.update(fh.read(PT2_SAMPLE_BYTES))
            fh.seek(max(PT2_SAMPLE_BYTES, size - PT2_SAMPLE_BYTES))
            h.update(fh.read(PT2_SAMPLE_BYTES))
        except OSError as exc:
            raise ModelFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return h.hexdigest()[:16]


def _file_type(path: Path) -> int:
    """The st_mode of path (links followed), or one line for a missing or unreadable path."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file or folder") from None
    except OSError as exc:  # a name too long, a link loop, a folder we may not enter
        raise ModelFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None


def load_model(path: Path) -> LoadedModel:
    """path: a file or folder as listed above, or a Hugging Face id (org/name) found in the local cache
    when no such path exists."""
    config: dict[str, Any] = {}
    if not os.path.lexists(path) and hub.looks_like_repo_id(str(path)):
        path = hub.resolve(str(path))
    if stat.S_ISDIR(_file_type(path)):
        folder = ModelFolder.of(path)
        if os.path.lexists(path / "model_index.json"):
            return _diffusers(path)
        if os.path.lexists(path / "config.json"):
            config = _config(path / "config.json", folder)
        indexes = sorted(path.glob("*.safetensors.index.json"))
        singles = sorted(path.glob("*.safetensors"))
        if indexes:
            tensors, fmt = _sharded(folder.member(indexes[0], "sharded index")), "transformers-sharded"
        elif singles:
            tensors = {}
            for f in singles:
                tensors.update(read_header(folder.member(f, "checkpoint")).tensors)
            fmt = "transformers"
        elif (repackaged := _repackaged(path)) is not None:
            return repackaged
        elif (other := _other_weights(path)) is not None:
            # Weights in a format a folder is not read in. Taken for "no weights", the model would run on random
            # ones as if it had none, and --real-weights would say there are none.
            raise ModelFormatError(
                f"{path}: holds {other.name} but no safetensors weights; a folder is read by its safetensors "
                f"files (a state dict is read as a file of its own: --model {other})"
            )
        elif isinstance(config.get("model_type"), str) and config["model_type"].strip():
            return _config_only(path, config)
        else:
            raise ModelFormatError(
                f"{path}: a folder without safetensors weights or a config.json naming a model_type "
                "(not a model mpsup can read yet)"
            )
    elif path.name.endswith(".safetensors.index.json"):
        tensors, fmt = _sharded(path), "safetensors-sharded"
        if os.path.lexists(path.parent / "config.json"):
            config = _config(path.parent / "config.json", ModelFolder.of(path.parent))
    elif path.suffix == ".safetensors":
        tensors, fmt = read_header(path).tensors, "safetensors"
        parts = comfy.split(tensors)
        if parts is not None:
            return _components(path, "comfyui", parts)
    elif path.suffix == ".gguf":
        return _gguf(path)
    elif path.suffix in STATE_DICT_SUFFIXES:
        tensors, fmt = _state_dict(path), "state-dict"
    elif path.suffix in NOT_YET:
        raise ModelFormatError(f"{path}: {NOT_YET[path.suffix]} files are not supported yet")
    else:
        raise ModelFormatError(
            f"{path}: unknown model format (expected .safetensors, a sharded index or a model folder)"
        )
    if not tensors:
        raise ModelFormatError(f"{path}: holds no tensors")
    return LoadedModel(path, fmt, tensors, config, _fingerprint(tensors))
