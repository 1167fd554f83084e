"""A model path -> its tensors (from headers only), its config, and a fingerprint for pairing runs.

Supported so far: a `.safetensors` file, a sharded checkpoint (`*.safetensors.index.json`), and a
Hugging Face Transformers folder (`config.json` + safetensors weights). Other formats of issue 5
(Diffusers folders, .pt/.pth/.bin state dicts, .pt2 exports, module:function) are refused with a
clear message until they are implemented."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpsup.model.safetensors_header import ModelFormatError, TensorInfo, read_header

NOT_YET = {".gguf": "GGUF", ".ckpt": "checkpoint"}
STATE_DICT_SUFFIXES = (".pt", ".pth", ".bin")
TORCH_DTYPES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32", "torch.float8_e4m3fn": "F8_E4M3",
                "torch.int8": "I8", "torch.uint8": "U8", "torch.int32": "I32", "torch.int64": "I64", "torch.float64": "F64",
                "torch.bool": "BOOL", "torch.int16": "I16"}


@dataclass
class LoadedModel:
    path: Path
    format: str
    tensors: dict[str, TensorInfo]
    config: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.format, "fingerprint": self.fingerprint,
                "tensors": len(self.tensors)}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _sharded(index_path: Path) -> dict[str, TensorInfo]:
    doc = _read_json(index_path)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFormatError(f"{index_path}: no 'weight_map' in this sharded index")
    tensors: dict[str, TensorInfo] = {}
    for shard_name in sorted({str(v) for v in weight_map.values()}):
        shard = index_path.parent / shard_name
        if not shard.exists():
            raise ModelFormatError(f"{index_path}: shard {shard_name} is missing")
        tensors.update(read_header(shard).tensors)
    missing = [name for name in weight_map if name not in tensors]
    if missing:
        raise ModelFormatError(f"{index_path}: {len(missing)} tensors named in the index are in no shard (e.g. {missing[0]})")
    return tensors


def _state_dict(path: Path) -> dict[str, TensorInfo]:
    """A torch.save'd state dict, opened with weights_only=True (never a full unpickle) and mmap=True
    (shapes come from the archive's metadata; no weight page is read)."""
    import pickle
    import zipfile

    import torch

    if not zipfile.is_zipfile(path):
        raise ModelFormatError(f"{path}: not a torch.save zip archive (legacy or foreign pickle: not read)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else "refused"
        raise ModelFormatError(f"{path}: weights_only loading refused this pickle ({first})") from None
    except (RuntimeError, OSError, ValueError, EOFError) as exc:
        raise ModelFormatError(f"{path}: cannot open as a state dict ({str(exc).splitlines()[0][:200]})") from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelFormatError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    tensors: dict[str, TensorInfo] = {}
    for name, value in obj.items():
        if isinstance(value, torch.Tensor):
            dtype = TORCH_DTYPES.get(str(value.dtype), str(value.dtype))
            tensors[str(name)] = TensorInfo(str(name), dtype, tuple(value.shape), value.numel() * value.element_size())
    return tensors


def _diffusers(path: Path) -> LoadedModel:
    """A Diffusers pipeline: each component folder (unet/, transformer/, vae/, text_encoder/ ...) is read
    on its own; tensor names get the component as a prefix so each is measured and reported apart."""
    index = _read_json(path / "model_index.json")
    if not isinstance(index, dict):
        raise ModelFormatError(f"{path / 'model_index.json'}: not a JSON object")
    tensors: dict[str, TensorInfo] = {}
    configs: dict[str, Any] = {}
    for component in sorted(k for k in index if not k.startswith("_")):
        folder = path / component
        weights = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        idx = sorted(folder.glob("*.safetensors.index.json")) if folder.is_dir() else []
        if not weights and not idx:
            continue  # schedulers, tokenizers: no weights
        part = _sharded(idx[0]) if idx else {k: v for f in weights for k, v in read_header(f).tensors.items()}
        for name, t in part.items():
            tensors[f"{component}/{name}"] = TensorInfo(f"{component}/{name}", t.dtype, t.shape, t.nbytes)
        if (folder / "config.json").exists():
            cfg = _read_json(folder / "config.json")
            configs[component] = cfg if isinstance(cfg, dict) else {}
    if not tensors:
        raise ModelFormatError(f"{path}: a Diffusers folder whose components hold no safetensors weights")
    return LoadedModel(path, "diffusers", tensors, {"components": configs}, _fingerprint(tensors))


def _fingerprint(tensors: dict[str, TensorInfo]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}|{t.dtype}|{t.shape}\n".encode())
    return h.hexdigest()[:16]


def load_model(path: Path) -> LoadedModel:
    if not path.exists():
        raise ModelFormatError(f"{path}: no such file or folder")
    config: dict[str, Any] = {}
    if path.is_dir():
        if (path / "model_index.json").exists():
            return _diffusers(path)
        if (path / "config.json").exists():
            cfg = _read_json(path / "config.json")
            config = cfg if isinstance(cfg, dict) else {}
        indexes = sorted(path.glob("*.safetensors.index.json"))
        singles = sorted(path.glob("*.safetensors"))
        if indexes:
            tensors, fmt = _sharded(indexes[0]), "transformers-sharded"
        elif singles:
            tensors = {}
            for f in singles:
                tensors.update(read_header(f).tensors)
            fmt = "transformers"
        else:
            raise ModelFormatError(f"{path}: a folder without safetensors weights (not a model mpsup can read yet)")
    elif path.name.endswith(".safetensors.index.json"):
        tensors, fmt = _sharded(path), "safetensors-sharded"
        if (path.parent / "config.json").exists():
            cfg = _read_json(path.parent / "config.json")
            config = cfg if isinstance(cfg, dict) else {}
    elif path.suffix == ".safetensors":
        tensors, fmt = read_header(path).tensors, "safetensors"
    elif path.suffix in STATE_DICT_SUFFIXES:
        tensors, fmt = _state_dict(path), "state-dict"
    elif path.suffix in NOT_YET:
        raise ModelFormatError(f"{path}: {NOT_YET[path.suffix]} files are not supported yet")
    else:
        raise ModelFormatError(f"{path}: unknown model format (expected .safetensors, a sharded index or a model folder)")
    if not tensors:
        raise ModelFormatError(f"{path}: holds no tensors")
    return LoadedModel(path, fmt, tensors, config, _fingerprint(tensors))
