"""The MLX side of a paired run: a language model's prefill, decode and training step under mlx_lm, timed with
the same phase definitions as the torch worker's whole-model phases, answering the same JSON-lines protocol
(hello, setup, sample, teardown, smoke, census) on two private pipes.

Stdlib + mlx + mlx_lm only: this file runs inside the user's MLX environment, loaded by file location, and
imports nothing of mpsup. The definitions, as the torch worker's:
- prefill: P prompt tokens on a fresh cache, the head applied to the last position only (what generation
  needs), `mx.eval` of those logits and of the filled cache ending each call;
- decode: one token on a cache of C tokens, rolled back by one (`trim_prompt_cache`) inside every call, so
  every call sees the same cache length;
- train_step: one step of mlx_lm's LoRA trainer (worker_mlx/training.py, loaded beside this file).
Random weights from config.json in the workload's dtype by default (`weights: real` loads the folder's
safetensors through mlx_lm). `mlx_bits` quantises as `mlx_lm.convert -q` does (affine, group size 64)."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import platform
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

MAX_LAYERS = 10_000
DTYPES = {"fp32": mx.float32, "bf16": mx.bfloat16, "fp16": mx.float16}
BITS = (4, 8)
GROUP_SIZE = 64  # mlx_lm.convert -q's default for affine quantisation


class Unsupported(Exception):
    """This MLX environment cannot run the workload: a status, not a failure."""


TRAIN_PHASE = "train_step"


def _training() -> Any:
    """worker_mlx/training.py (a training step under mlx_lm), loaded beside this file by its location, once."""
    module = sys.modules.get("mpsup_mlx_training")
    if module is None:
        spec = importlib.util.spec_from_file_location("mpsup_mlx_training", Path(__file__).with_name("training.py"))
        if spec is None or spec.loader is None:
            raise Unsupported("the MLX worker's training module is missing beside it")
        module = importlib.util.module_from_spec(spec)
        sys.modules["mpsup_mlx_training"] = module
        spec.loader.exec_module(module)
    return module


def mlx_lm_version() -> str:
    return str(getattr(mlx_lm, "__version__", "") or _dist_version("mlx-lm"))


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "unknown"


def _device(name: str) -> tuple[Any, bool, str]:
    """mpsup's device name -> MLX's device, and whether it is here (mps and cuda are MLX's GPU)."""
    if name == "cpu":
        return mx.cpu, True, ""
    if name == "mps":
        ok = bool(getattr(mx, "metal", None) and mx.metal.is_available())
        return mx.gpu, ok, "" if ok else "MLX sees no Metal GPU here"
    if name == "cuda":
        ok = bool(getattr(mx, "cuda", None) and mx.cuda.is_available())
        return mx.gpu, ok, "" if ok else "this MLX has no CUDA backend here"
    return mx.cpu, False, f"MLX has no device {name!r}"


def _device_info() -> dict[str, Any]:
    try:
        info = mx.device_info()
    except Exception:
        return {}
    return dict(info) if isinstance(info, dict) else {}


def _capacity() -> int | None:
    """The memory a model may be fitted to: Metal's recommended working set, else the machine's RAM."""
    info = _device_info()
    for key in ("max_recommended_working_set_size", "memory_size"):
        if isinstance(info.get(key), int) and info[key] > 0:
            return int(info[key])
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _memory_fn(name: str) -> Any:
    """mx.<name>, or mx.metal.<name> where an older MLX kept its memory counters there."""
    fn = getattr(mx, name, None) or getattr(getattr(mx, "metal", None), name, None)
    if fn is None:
        raise RuntimeError(f"this MLX ({mx.__version__}) has no {name}")
    return fn


def _bytes_of(tree: Any) -> int:
    return sum(int(v.size) * int(v.dtype.size) for _, v in tree_flatten(tree))


def _classes(config: dict[str, Any]) -> tuple[Any, Any]:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type.replace("_", "").isalnum():
        raise Unsupported(f"mlx_lm {mlx_lm_version()} has no model type {model_type!r}")
    try:
        from mlx_lm.utils import _get_classes  # private, but it applies mlx_lm's own name remapping

        return _get_classes(config)  # type: ignore[no-any-return]
    except ImportError:
        pass
    except ValueError:
        raise Unsupported(f"mlx_lm {mlx_lm_version()} has no model type {model_type!r}") from None
    try:
        arch = importlib.import_module(f"mlx_lm.models.{model_type}")
    except ImportError:
        raise Unsupported(f"mlx_lm {mlx_lm_version()} has no model type {model_type!r}") from None
    return arch.Model, arch.ModelArgs


def _kv_bytes_per_block(config: dict[str, Any], tokens: int, itemsize: int) -> int:
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    hidden = int(config.get("hidden_size") or 0)
    head_dim = int(config.get("head_dim") or (hidden // heads if heads else 0))
    return 2 * tokens * kv_heads * head_dim * itemsize


def _activation_bytes(config: dict[str, Any], tokens: int, itemsize: int) -> int:
    hidden = int(config.get("hidden_size") or 0)
    inter = int(config.get("intermediate_size") or 4 * hidden)
    heads = int(config.get("num_attention_heads") or 0)
    return tokens * (8 * hidden + 3 * inter) * itemsize + heads * tokens * tokens * 4


# The torch worker's depth fit (worker/whole_model.py) again: this file may import nothing of mpsup, and the two
# sides of a torch-vs-MLX run must fit their blocks by one rule, so a change to it goes into both.
def _depth_for(params: dict[str, Any], total: int, block: int, extra: int, layers: int) -> int:
    """Blocks to build, by the torch worker's rule: all, the forced --depth, or as many as fit the share."""
    forced = params.get("depth")
    if forced:
        return max(1, min(int(forced), layers))
    limit = _capacity()
    if not limit:
        return layers
    share = float(params.get("fit_share", 0.25))
    budget = share * limit
    fixed = total - block * layers
    if fixed + (block + extra) * layers <= budget:
        return layers
    fits = int((budget - fixed) // max(1, block + extra))
    if fits < 1:
        raise MemoryError(
            f"out of memory: even one block needs {(fixed + block + extra) / 2**30:.1f} GiB, over "
            f"{budget / 2**30:.1f} GiB ({share:.0%} of {limit / 2**30:.1f} GiB)"
        )
    return fits


class LastOnly(nn.Module):
    """The model's trunk, its output cut to the last position: the head (and any softcap after it) then runs
    on one position, as the torch side's `logits_to_keep=1` does."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("inner"), name)  # the outer model reads embed_tokens (tied heads)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)[:, -1:, :]


def _construct(model_cls: Any, args_cls: Any, config: dict[str, Any]) -> Any:
    try:
        return model_cls(args_cls.from_dict(config))
    except (TypeError, KeyError, ValueError) as exc:  # a key mlx_lm requires and transformers would default
        raise Unsupported(
            f"mlx_lm {mlx_lm_version()} cannot build model type {config.get('model_type')!r} from this config.json: "
            f"{' '.join(str(exc).split())[:300]}"
        ) from None


def _quantize(model: Any, config: dict[str, Any], bits: int) -> None:
    try:
        from mlx_lm.utils import quantize_model
    except ImportError:
        nn.quantize(model, group_size=GROUP_SIZE, bits=bits)
        return
    quantize_model(model, dict(config), GROUP_SIZE, bits)


@dataclass(frozen=True)
class _Phase:
    """One whole-model phase as the spec asks for it, every value checked."""

    phase: str  # prefill or decode
    dtype: Any
    model_cls: Any  # mlx_lm's classes for the config's model_type
    args_cls: Any
    config: dict[str, Any]
    layers: int
    tokens: int
    cache_len: int
    vocab: int


def _check_phase(spec: dict[str, Any], bits: int | None) -> tuple[str, Any]:
    """The phase and MLX dtype of a workload MLX can run here; Unsupported, in one line, for any other."""
    kind = spec.get("kind")
    params = spec.get("params") or {}
    library = params.get("library")
    if kind != "model_phase":
        raise Unsupported(f"MLX runs a model whole here; {kind!r} is a torch workload with no MLX counterpart")
    if library == "diffusers":
        raise Unsupported("MLX has no equivalent here: mlx_lm runs language models, not Diffusers pipelines")
    if library != "transformers":
        raise Unsupported(f"MLX has no equivalent here for a {library!r} model")
    if params.get("compile"):
        raise Unsupported("torch.compile has no MLX counterpart in this comparison")
    phase = params.get("phase")
    if phase not in ("prefill", "decode", TRAIN_PHASE):
        raise Unsupported(f"mlx_lm runs causal language models; phase {phase!r} (an encoder's forward) is not one")
    if bits is not None and bits not in BITS:
        raise ValueError(f"mlx_bits {bits!r}: expected 4 or 8")
    dtype_name = str(spec.get("dtype") or "fp32")
    if dtype_name not in DTYPES:
        raise Unsupported(f"dtype {dtype_name!r} has no MLX counterpart here")
    return str(phase), DTYPES[dtype_name]


def _read_phase(spec: dict[str, Any], bits: int | None) -> _Phase:
    """The spec's phase with its model's sizes, each within what a real model has."""
    phase, dtype = _check_phase(spec, bits)
    params = spec.get("params") or {}
    config = dict(params.get("config") or {})
    model_cls, args_cls = _classes(config)
    layers = int(config.get("num_hidden_layers") or 0)
    if layers > MAX_LAYERS:
        raise Unsupported(f"num_hidden_layers {layers} is beyond any real model (at most {MAX_LAYERS})")
    tokens = int(params["tokens"])
    cache_len = int(params.get("cache") or tokens)
    limit_pos = config.get("max_position_embeddings")
    if isinstance(limit_pos, int) and limit_pos > 0 and tokens + (cache_len if phase == "decode" else 0) > limit_pos:
        raise Unsupported(
            f"{tokens} tokens (+ cache {cache_len}) exceed this model's max_position_embeddings {limit_pos}"
        )
    vocab = int(config.get("vocab_size") or 0)
    if vocab <= 0:
        raise Unsupported("the config names no vocab_size")
    return _Phase(phase, dtype, model_cls, args_cls, config, layers, tokens, cache_len, vocab)


def _fitting_depth(model: Any, p: _Phase, params: dict[str, Any]) -> int:
    """Blocks of `model` (built, not yet evaluated) to keep: MLX is lazy, so its size is read before anything is
    allocated, as the torch worker reads it on the meta device, and a model too large is cut to what fits."""
    total = _bytes_of(model.parameters())
    blocks = getattr(model, "layers", None)
    if not (p.layers and isinstance(blocks, list) and len(blocks) == p.layers):
        return p.layers
    block = _bytes_of(blocks[0].parameters())
    itemsize = int(p.dtype.size)
    if p.phase == TRAIN_PHASE:
        return int(_training().training_depth(model, p.config, params, itemsize, _bytes_of, _depth_for))
    kv = _kv_bytes_per_block(p.config, p.cache_len + 1 if p.phase == "decode" else p.tokens, itemsize)
    return _depth_for(params, total + _activation_bytes(p.config, p.tokens, itemsize), block, kv, p.layers)


def _load_model(p: _Phase, params: dict[str, Any], bits: int | None) -> tuple[Any, int, str]:
    """(model with its parameters evaluated, blocks built, "random" or "real" weights)."""
    mx.random.seed(0)  # the same random weights in every process, as the torch worker's torch.manual_seed(0)
    model = _construct(p.model_cls, p.args_cls, p.config)
    model.set_dtype(p.dtype)
    depth = _fitting_depth(model, p, params)
    config = dict(p.config)
    if depth < p.layers:
        config["num_hidden_layers"] = depth
        for key in ("layer_types",):
            if isinstance(config.get(key), list):
                config[key] = config[key][:depth]
    weights = "random"
    if params.get("weights") == "real" and params.get("path"):
        from mlx_lm.utils import load_model

        del model
        model, _ = load_model(
            Path(str(params["path"])), lazy=True, strict=depth == p.layers, model_config={"num_hidden_layers": depth}
        )
        model.set_dtype(p.dtype)
        weights = "real"
    elif depth < p.layers:
        model = _construct(p.model_cls, p.args_cls, config)
        model.set_dtype(p.dtype)
    if bits:
        _quantize(model, config, bits)
    mx.eval(model.parameters())
    return model, depth, weights


def _phase_info(model: Any, p: _Phase, depth: int, weights: str, bits: int | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "library": "mlx_lm",
        "library_version": mlx_lm_version(),
        "mlx_version": str(mx.__version__),
        "architecture": f"{type(model).__module__.rsplit('.', 1)[-1]}.{type(model).__name__}",
        "layers": p.layers,
        "depth": depth,
        "tokens": p.tokens,
        "weights": weights,
        "weights_bytes": _bytes_of(model.parameters()),
        "compiled": False,
        "fallback_ops": [],
    }
    if bits:
        info["quantized"] = {"bits": bits, "group_size": GROUP_SIZE, "mode": "affine"}
    return info


def _decode_call(model: Any, p: _Phase, info: dict[str, Any]) -> Any:
    """One token on a cache of `cache_len` tokens, rolled back by one inside every call."""
    cache = make_prompt_cache(model)
    if not can_trim_prompt_cache(cache):
        raise Unsupported("decode: this model's mlx_lm cache cannot be rolled back between calls")
    model(mx.random.randint(0, p.vocab, (1, p.cache_len)), cache=cache)
    mx.eval([c.state for c in cache])
    one = mx.random.randint(0, p.vocab, (1, 1))
    mx.eval(one)

    def run() -> None:
        logits = model(one, cache=cache)
        mx.eval(logits)
        trim_prompt_cache(cache, 1)  # every timed call sees the same cache length

    info["cache"] = p.cache_len
    return run


def _prefill_call(model: Any, p: _Phase, info: dict[str, Any]) -> Any:
    """`tokens` prompt tokens on a fresh cache, the head applied to the last position where the model allows."""
    trunk = getattr(model, "model", None)
    if isinstance(trunk, nn.Module):
        model.model = LastOnly(trunk)
    prompt = mx.random.randint(0, p.vocab, (1, p.tokens))
    mx.eval(prompt)
    probe = model(prompt[:, :2], cache=make_prompt_cache(model))
    if probe.ndim == 3 and probe.shape[1] == 1:
        info["logits_kept"] = 1
    elif isinstance(trunk, nn.Module):
        model.model = trunk  # a trunk whose output is not (batch, positions, hidden): the head runs on all

    def run() -> None:
        cache = make_prompt_cache(model)
        logits = model(prompt, cache=cache)
        mx.eval(logits, [c.state for c in cache])

    return run


def build(spec: dict[str, Any], bits: int | None) -> tuple[Any, int, dict[str, Any], Any]:
    """(fn, items per call, phase info, model) for one whole-model phase."""
    p = _read_phase(spec, bits)
    params = spec.get("params") or {}
    model, depth, weights = _load_model(p, params, bits)
    info = _phase_info(model, p, depth, weights, bits)
    if p.phase == TRAIN_PHASE:
        training = _training()
        try:
            fn, items = training.train_call(model, p.vocab, params, info)
        except training.Unsupported as exc:
            raise Unsupported(str(exc)) from None
        return fn, items, info, model
    if p.phase == "decode":
        return _decode_call(model, p, info), 1, info, model
    return _prefill_call(model, p, info), p.tokens, info, model


def _synchronize() -> None:
    sync = getattr(mx, "synchronize", None)
    if sync is not None:
        sync()


def time_calls(fn: Any, calls: int) -> float:
    _synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _synchronize()
    return time.perf_counter() - start


def calibrate_calls(fn: Any, target_sample_s: float, max_calls: int = 1 << 16) -> tuple[int, float]:
    """Calls per sample so that a sample lasts about `target_sample_s` (the torch worker's rule)."""
    calls = 1
    while True:
        elapsed = time_calls(fn, calls)
        if elapsed >= target_sample_s / 4 or calls >= max_calls:
            break
        calls *= 4 if elapsed < target_sample_s / 64 else 2
    per_call = max(elapsed / calls, 1e-9)
    return max(1, min(max_calls, round(target_sample_s / per_call))), per_call


class Worker:
    def __init__(self, out: Any) -> None:
        self.out = out
        self.fn: Any = None
        self.model: Any = None
        self.calls = 1
        self.bits: int | None = None

    def send(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()

    def hello(self, req: dict[str, Any]) -> dict[str, Any]:
        name = str(req.get("device", "cpu"))
        device, ok, reason = _device(name)
        if ok:
            mx.set_default_device(device)
        bits = req.get("mlx_bits")
        self.bits = int(bits) if isinstance(bits, int) and not isinstance(bits, bool) else None
        info = _device_info()
        return {
            "type": "hello",
            "available": ok,
            "reason": reason,
            "device": name,
            "stack": "mlx",
            "torch_version": None,
            "mlx_version": str(mx.__version__),
            "mlx_lm_version": mlx_lm_version(),
            "mlx_device": str(mx.default_device()),
            "mlx_bits": self.bits,
            "metal": bool(getattr(mx, "metal", None) and mx.metal.is_available()),
            "device_name": str(info.get("device_name") or platform.processor() or platform.machine()),
            "memory_limit": _capacity(),
            "threads": None,
            "smoke_features": [],
            "python": platform.python_version(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "has_events": False,
            "event_timing": None,
            "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        }

    def setup(self, req: dict[str, Any]) -> dict[str, Any]:
        self.teardown_quietly()
        _memory_fn("reset_peak_memory")()
        fn, items, info, model = build(req["workload"], self.bits)
        first_s = time_calls(fn, 1)  # the first call: lazy graph building, kernel compilation (Metal)
        forced = req.get("calls")
        too_slow = req.get("max_first_call_s")
        first_only = isinstance(too_slow, (int, float)) and not forced and first_s > too_slow
        if first_only:
            calls, per_call = 1, first_s
        elif forced:
            calls, per_call = int(forced), time_calls(fn, 1)
        else:
            calls, per_call = calibrate_calls(fn, float(req.get("target_sample_s", 0.01)))
        self.fn, self.model, self.calls = fn, model, calls
        answer: dict[str, Any] = {
            "type": "ready",
            "calls": calls,
            "per_call_s": per_call,
            "bytes_per_call": None,
            "flops_per_call": None,
            "items_per_call": items,
            "phase": info,
        }
        if first_only:
            answer["first_call_only"] = True
        return answer

    def sample(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.fn is None:
            raise RuntimeError("sample before setup")
        discard = max(0, int(req.get("discard", 0)))
        host = [time_calls(self.fn, self.calls) / self.calls for _ in range(discard + int(req.get("count", 1)))]
        answer: dict[str, Any] = {"type": "samples", "host": host[discard:], "device": None}
        if discard:
            answer["discarded"] = host[:discard]
        return answer

    def teardown_quietly(self) -> dict[str, Any]:
        memory: dict[str, Any] = {}
        if self.fn is not None:
            memory = {
                "peak_allocated": int(_memory_fn("get_peak_memory")()),
                "current_allocated": int(_memory_fn("get_active_memory")()),
                "cache_memory": int(_memory_fn("get_cache_memory")()),
                "peak_source": "mx.get_peak_memory, reset at setup",
            }
        self.fn = self.model = None
        gc.collect()
        _memory_fn("clear_cache")()
        return memory

    def teardown(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"type": "done", "memory": self.teardown_quietly()}

    def smoke(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"type": "smoke", "feature": req.get("feature"), "status": "skip", "message": "a torch feature"}

    def census(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"type": "census", "census": None, "reason": "MLX: no op census (it counts torch's aten ops)"}


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text:
        return "oom"
    if isinstance(exc, Unsupported):
        return "unsupported"
    return "error"


def _read_requests(requests: Any, into: queue.Queue[str]) -> None:
    for line in requests:
        into.put(line)
    os._exit(0)  # mpsup closed the pipe or is gone: nobody reads our answers


# The torch worker's loop (worker/main.py) on purpose: one protocol, two workers that may share no code (each is
# loaded by file location into its own environment), so the loop and its request reader mirror each other.
def main(in_fd: int, out_fd: int) -> None:
    os.set_inheritable(in_fd, False)
    os.set_inheritable(out_fd, False)
    sys.stdout = sys.stderr
    worker = Worker(os.fdopen(out_fd, "w", encoding="utf-8"))
    handlers = {
        "hello": worker.hello,
        "setup": worker.setup,
        "sample": worker.sample,
        "teardown": worker.teardown,
        "smoke": worker.smoke,
        "census": worker.census,
    }
    pending: queue.Queue[str] = queue.Queue()
    requests = os.fdopen(in_fd, "r", encoding="utf-8")
    threading.Thread(target=_read_requests, args=(requests, pending), daemon=True).start()
    while True:
        line = pending.get()
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError as exc:
            worker.send({"type": "error", "status": "error", "message": f"request is not JSON: {exc}"})
            continue
        if isinstance(req, dict) and req.get("op") == "exit":
            break
        try:
            answer = handlers[req["op"]](req)
        except Exception as exc:
            worker.teardown_quietly()
            answer = {
                "type": "error",
                "status": _classify(exc),
                "message": f"{type(exc).__name__}: {exc}".strip()[:2000]
                if not isinstance(exc, Unsupported)
                else str(exc),
                "traceback": traceback.format_exc(limit=4),
            }
        worker.send(answer)
