"""One op of a whole-model phase, rebuilt from its census entry with fresh tensors and timed alone.

The census (census.py) writes each distinct call with `describe`: the overload ("aten.mm.default"),
and every argument as plain JSON: a tensor as its shape, strides, dtype and (when it sits on the CPU beside a
device model) its device; numbers, booleans, lists, dtypes and memory formats as themselves. Integer and
boolean tensors also leave their observed value range (integers: min and max; booleans: the share of True),
so that indices, positions and masks rebuilt here are valid for the op and alike in density. `build_op`
turns such an entry back into a call on the worker's device, under inference mode as the phases run.

A model's parameter is marked `param`: inside the phase the rest of the model's weights pass through the
caches between two uses of it, so `build_op` rotates over copies of it that keep that distance (the entry's
`reuse_bytes`) and reads it from where the phase does, not from the cache a loop of one call keeps it in."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from . import outputs, values
from .core import Built, Unsupported
from .definitions import reference_op
from .device import Device

# Namespaces whose ops are torch's own: an op of another library's extension may not exist in the other build.
NAMESPACES = ("aten", "prims")
_FLOAT_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
# Rotated copies of a call's parameters stay under both: memory held only while the op is measured, and few
# enough copies to make quickly. 1 GiB is past a laptop's or desktop's last-level cache, so a weight rotated
# through that much is read from memory, as inside a phase whose weights exceed it, and it lets a weight of a few
# hundred MB rotate at all: copies average where each landed, and one copy's time depends on its process (a 131 MB
# weight's matrix-vector product spread 3.5-6.2% across fresh processes with one copy, 1.5-4.3% with three;
# docs/evidence/op_coverage.md).
ROTATE_MAX_BYTES = 2**30
ROTATE_MAX_COPIES = 512


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe(value: Any, ranges: list[list[float]], with_ranges: bool) -> Any:
    """An op argument as JSON that `_rebuild` turns back into an equivalent one; raises on what it cannot say."""
    if isinstance(value, torch.Tensor):
        doc: dict[str, Any] = {
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "dtype": _dtype_name(value.dtype),
        }
        if value.device.type == "cpu":
            doc["cpu"] = True  # a CPU scalar or index tensor beside a device model: where the op sees it
        if isinstance(value, torch.nn.Parameter):
            doc["param"] = True  # a weight: the phase reads it one whole forward after its last use
        integral = not value.dtype.is_floating_point and not value.dtype.is_complex
        if value.numel() and with_ranges and value.device.type != "meta" and not value.dtype.is_complex:
            span = _span(value, integral)
            if span is not None:
                ranges.append(span)
                doc["range"] = len(ranges) - 1
        return {"tensor": doc}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return [describe(v, ranges, with_ranges) for v in value]
    if isinstance(value, dict):
        return {"kwargs": {str(k): describe(v, ranges, with_ranges) for k, v in value.items()}}
    raise TypeError(f"cannot describe a {type(value).__name__}")


def _span(value: torch.Tensor, integral: bool) -> list[float] | None:
    """The values an input took: a boolean's share of True (twice), an integer's or a float's least and greatest
    (finite values only), so a replay draws indices, masks and a variance's positive values where the op saw
    them (uniform(-1, 1) would hand rsqrt, log and sqrt negatives)."""
    if value.dtype == torch.bool:
        share = float(value.float().mean().item())
        return [share, share]
    if integral:
        return [float(value.min().item()), float(value.max().item())]
    try:
        low, high = float(value.min().item()), float(value.max().item())
    except RuntimeError:  # a dtype without min/max kernels here (FP8): drawn in [-1, 1) as before
        return None
    if not (math.isfinite(low) and math.isfinite(high)):
        # Rare (a mask of -inf, a NaN): only then a copy of the finite values, which costs the tensor's size again.
        finite = value.detach()[torch.isfinite(value.detach())]
        if not finite.numel():
            return None
        low, high = float(finite.min().item()), float(finite.max().item())
    return [low, high] if math.isfinite(low) and math.isfinite(high) else None


def resolve(name: str) -> Any:
    """ "aten.mm.default" -> the OpOverload, or Unsupported where this torch has no such op."""
    parts = name.split(".")
    if len(parts) != 3 or parts[0] not in NAMESPACES or not all(p.isidentifier() for p in parts):
        raise Unsupported(f"{name!r} is not an op of torch's own that can be replayed")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError):
        raise Unsupported(f"this torch has no op {name}") from None


def _dtype(name: Any) -> torch.dtype:
    dt = getattr(torch, str(name), None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dt, torch.dtype):
        raise Unsupported(f"this torch has no dtype {name!r}")
    return dt


def _extent(shape: list[int], stride: list[int]) -> int:
    """Elements of storage a strided view of this shape reaches."""
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * abs(s) for d, s in zip(shape, stride, strict=True))


def _contiguous_stride(shape: list[int]) -> list[int]:
    stride, step = [], 1
    for d in reversed(shape):
        stride.append(step)
        step *= max(d, 1)
    return stride[::-1]


def _tensor(doc: dict[str, Any], ranges: list[list[float]], device: Device) -> torch.Tensor:
    shape = [int(d) for d in doc["shape"]]
    stride = [int(s) for s in doc.get("stride") or []] or None
    dtype = _dtype(doc["dtype"])
    target = torch.device("cpu") if doc.get("cpu") else device.torch_device
    if stride is not None and (len(stride) != len(shape) or any(s < 0 for s in stride)):
        raise Unsupported(f"strides {stride} do not fit shape {shape}")
    if stride is not None and stride == _contiguous_stride(shape):
        stride = None  # made as a tensor of its own rather than a view (see values.floats)
    n = _extent(shape, stride) if stride is not None else math.prod(shape)
    span = ranges[doc["range"]] if isinstance(doc.get("range"), int) and doc["range"] < len(ranges) else None
    if dtype.is_floating_point:
        # Where the op saw its values (the census's range), else uniform(-1, 1); a census of an older mpsup has
        # ranges for integers and booleans only.
        low, high = (float(span[0]), float(span[1])) if span else (-1.0, 1.0)
        if stride is None:
            return values.floats(tuple(shape), dtype, target, low=low, high=high)
        flat = values.floats((n,), dtype, target, low=low, high=high)
    elif dtype.is_complex:
        flat = torch.randn(n, dtype=dtype, device=target)
    elif dtype == torch.bool:
        share = sum(span) / 2 if span else 0.5
        flat = values.bools((n,), target, share)
    else:
        # No range (a census on the meta device): zeros are a valid index of any non-empty dimension.
        low_i, high_i = (int(span[0]), int(span[1])) if span else (0, 0)
        flat = values.ints((n,), dtype, target, low_i, high_i)
    if stride is None:
        return flat.view(shape)
    return flat.as_strided(shape, stride)


def _rebuild(
    value: Any,
    ranges: list[list[float]],
    device: Device,
    tensors: list[torch.Tensor],
    keep: list[torch.Tensor] | None = None,
) -> Any:
    """An argument rebuilt; with `keep` (the tensors of a first rebuild, in order), parameters are copies of
    the first rebuild's (a copy is quicker than drawing random values again) and every other tensor is its own."""
    if isinstance(value, list):
        return [_rebuild(v, ranges, device, tensors, keep) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        doc = value["tensor"]
        first = keep[len(tensors)] if keep is not None and len(tensors) < len(keep) else None
        # A model's weight is what the phase's parameters are: a tensor of its own, made outside inference mode,
        # that requires grad. Kernels choose by these (torch 2.13's CPU bf16 linear of a sliced last token
        # against a 128256x8192 head took 10 s with a weight that did not require grad, 0.1 s with one that did).
        with torch.inference_mode(False) if doc.get("param") else contextlib.nullcontext(), torch.no_grad():
            if first is None:
                t = _tensor(doc, ranges, device)
            elif doc.get("param"):
                t = torch.empty_strided(first.shape, first.stride(), dtype=first.dtype, device=first.device)
                t.copy_(first)
            else:
                t = first
            if doc.get("param") and t.is_floating_point() and not values.TRUTH.on:
                t.requires_grad_(True)
        tensors.append(t)
        return t
    if "float" in value:
        return _FLOAT_SPECIAL.get(str(value["float"]), math.nan)
    if "dtype" in value:
        dt = _dtype(value["dtype"])
        # The float64 reference computes every float in float64, a cast's target too.
        return torch.float64 if values.TRUTH.on and dt.is_floating_point else dt
    if "device" in value:
        return torch.device("cpu") if value["device"] == "cpu" or values.TRUTH.on else device.torch_device
    if "memory_format" in value:
        fmt = getattr(torch, str(value["memory_format"]), None)
        if not isinstance(fmt, torch.memory_format):
            raise Unsupported(f"this torch has no memory format {value['memory_format']!r}")
        return fmt
    if "layout" in value:
        return getattr(torch, str(value["layout"]), torch.strided)
    if "kwargs" in value:
        return {k: _rebuild(v, ranges, device, tensors, keep) for k, v in value["kwargs"].items()}
    raise Unsupported(f"cannot rebuild the argument {value!r}")


def rebuild_call(
    params: dict[str, Any], device: Device, keep: list[torch.Tensor] | None = None
) -> tuple[Any, list[Any], dict[str, Any], list[torch.Tensor]]:
    """The op and fresh arguments for one census entry: (op, args, kwargs, the tensors made); with `keep`, the
    tensors of an earlier rebuild stand for all but the parameters, which are copies of them."""
    op = resolve(str(params["overload"]))
    if values.TRUTH.on:
        op = reference_op(str(params["overload"]), op)
    ranges = [list(r) for r in params.get("ranges") or []]
    tensors: list[torch.Tensor] = []
    args = _rebuild(list(params.get("args") or []), ranges, device, tensors, keep)
    described = params.get("kwargs") or {"kwargs": {}}  # as describe() writes a mapping; none at all: {}
    kwargs = _rebuild(described if isinstance(described, dict) else None, ranges, device, tensors, keep)
    if not isinstance(kwargs, dict):
        raise Unsupported("the census entry's keyword arguments are not a mapping")
    return op, args, kwargs, tensors


def _param_docs(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [d for v in value for d in _param_docs(v)]
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("tensor"), dict):
        return [value["tensor"]] if value["tensor"].get("param") else []
    inner = value.get("kwargs")
    return [d for v in inner.values() for d in _param_docs(v)] if isinstance(inner, dict) else []


def param_bytes(params: dict[str, Any]) -> int:
    """Bytes of the model's parameters one call of this census entry reads."""
    total = 0
    for doc in _param_docs(list(params.get("args") or [])) + _param_docs(params.get("kwargs") or {}):
        shape = [int(d) for d in doc.get("shape") or []]
        stride = [int(s) for s in doc.get("stride") or []] or None
        n = _extent(shape, stride) if stride is not None and len(stride) == len(shape) else math.prod(shape)
        total += n * _dtype(doc.get("dtype")).itemsize
    return total


def copies_for(params: dict[str, Any], max_bytes: int = ROTATE_MAX_BYTES) -> int:
    """How many sets of arguments the replay rotates over: enough that between two uses of a parameter the
    replay reads as many bytes of parameters as the phase does (`reuse_bytes`), within the caps."""
    own = param_bytes(params)
    reuse = params.get("reuse_bytes")
    if not own or not isinstance(reuse, (int, float)) or not math.isfinite(reuse) or reuse <= own:
        return 1
    return max(1, min(ROTATE_MAX_COPIES, math.ceil(reuse / own), max_bytes // own))


# A training step's parts and the grad mode each ran its ops in: the forward records a graph, backward and the
# optimizer's step run without one (as autograd's engine and torch.optim run them), none under inference mode.
GRAD_MODES = {"forward": True, "backward": False, "optimizer": False}


def grad_mode(params: dict[str, Any]) -> bool | None:
    """The grad mode a census call ran in (a training step's part), or None: an inference phase's, replayed under
    inference mode. A kernel may differ between them (a build's own override, a dispatch on the mode)."""
    stage = params.get("stage")
    return GRAD_MODES.get(stage) if isinstance(stage, str) else None


def build_op(params: dict[str, Any], device: Device, copies: int | None = None) -> Built:
    """A census entry as a workload: one call of the op per timed call, under inference mode (as the inference
    phases run; a training step's call under its part's grad mode), on tensors made once (an in-place op rewrites
    the same ones call after call); each call takes the next of `copies` sets of arguments (`copies_for` unless
    given), which differ in their parameters only."""
    if values.TRUTH.on:
        copies = 1  # the reference calls it once: rotated copies would only cost float64 memory
    grad = grad_mode(params)
    with torch.inference_mode() if grad is None else torch.no_grad():
        op, args, kwargs, tensors = rebuild_call(params, device)
        sets = [(args, kwargs)]
        made = list(tensors)
        for _ in range((copies_for(params) if copies is None else copies) - 1):
            _, more_args, more_kwargs, more = rebuild_call(params, device, keep=tensors)
            sets.append((more_args, more_kwargs))
            made += [t for t, first in zip(more, tensors, strict=False) if t is not first]
    guard = getattr(torch._C, "_InferenceMode", None)
    turn = [0]

    def fn() -> Any:
        call_args, call_kwargs = sets[turn[0]]
        turn[0] = (turn[0] + 1) % len(sets)
        if grad is not None:  # a training step's call: under the grad mode it ran in, outside inference mode
            with torch.set_grad_enabled(grad):
                return op(*call_args, **call_kwargs)
        # The C guard, not torch.inference_mode(): its Python wrapper costs about a microsecond a call, a
        # share of the smallest ops that the phase does not pay per op.
        if guard is None:
            with torch.inference_mode():
                return op(*call_args, **call_kwargs)
        with guard(True):
            return op(*call_args, **call_kwargs)

    try:
        first = fn()
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise Unsupported(f"{params['overload']} could not be replayed: {type(exc).__name__}: {text}") from None
    size = float(sum(t.numel() * t.element_size() for t in tensors))
    return Built(fn, size or None, None, 1, (sets, made), None, first_output=first, has_first_output=True)


# Of each call replayed in a group, the elements its answer keeps for numerics (outputs.kept's even stride): a
# group holds up to 400 calls, each judged alone.
GROUP_ANSWER_ELEMENTS = 1 << 16


def _answers(out: Any) -> dict[str, torch.Tensor]:
    """A call's answer as the numerics pass keeps it: each output sampled to GROUP_ANSWER_ELEMENTS, on the CPU."""
    return {name: outputs.kept(t, GROUP_ANSWER_ELEMENTS) for name, t in outputs.answer_tensors(out)}


def group_calls(params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """A group's census entries and their counts, checked."""
    calls, counts = params.get("op_group"), params.get("op_group_counts")
    if not (
        isinstance(calls, list)
        and isinstance(counts, list)
        and len(calls) == len(counts)
        and calls
        and all(isinstance(c, dict) for c in calls)
        and all(type(n) is int and n > 0 for n in counts)
    ):
        raise Unsupported("the calls to replay together are not a list of census entries with their counts")
    return calls, counts


def _group_truth(calls: list[dict[str, Any]], device: Device) -> Built:
    """The reference's group: each call built and run alone, its answer kept, then dropped (no timing follows)."""
    answers = {}
    for i, call in enumerate(calls):
        values.TRUTH.restart_counter()
        try:
            built = build_op(call, device, 1)
        except Unsupported:
            continue  # this call has no float64 truth here: it alone is not compared
        answers[f"c{i}"] = _answers(built.first_output)
        del built
    return Built(lambda: None, None, None, 1, None, None, first_output=answers, has_first_output=True)


def build_group(params: dict[str, Any], device: Device) -> Built:
    """The calls of a phase replayed together (model/op_replay.rest_of_phases): each distinct call built as
    `build_op` builds it, then called its count times, in turns, per timed call. Rotated parameters share one
    ROTATE_MAX_BYTES among all the calls. One call this torch cannot make leaves the group unmeasured here: the
    two builds must time the same calls. Each call's first answer is kept (sampled): the numerics pass judges
    every call alone, untimed."""
    calls, counts = group_calls(params)
    if values.TRUTH.on:
        return _group_truth(calls, device)
    fns: list[Any] = []
    kept: list[Any] = []
    answers: dict[str, Any] = {}
    size = 0.0
    rotate_left = ROTATE_MAX_BYTES
    for i, call in enumerate(calls):
        values.TRUTH.restart_counter()
        copies = copies_for(call, max(0, rotate_left))
        rotate_left -= param_bytes(call) * (copies - 1)
        built = build_op(call, device, copies)
        answers[f"c{i}"] = _answers(built.first_output)
        fns.append(built.fn)
        kept.append(built.keep)
        size += built.bytes_per_call or 0.0
    order = tuple(f for turn in range(max(counts)) for f, n in zip(fns, counts, strict=True) if n > turn)

    def fn() -> None:
        for call_once in order:
            call_once()

    return Built(fn, size or None, None, 1, kept, None, first_output=answers, has_first_output=True)
