"""What every workload builder shares: the Unsupported status, dtypes, torch's "not here" wording, random inputs,
Built."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from . import values
from .device import Device


class Unsupported(Exception):
    """This torch or this device lacks the feature: a status, not a failure."""


DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "int8": torch.int8,
}


def dtype_of(name: str) -> torch.dtype:
    if name == "fp8":
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is None:
            raise Unsupported("torch.float8_e4m3fn does not exist in this torch")
        return fp8
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


# How torch words "this op or dtype is not implemented here". The last four are MPS's own words
# for a dtype it cannot hold (read from the real macOS wheels' libtorch_cpu strings): up to 2.14
# moving an FP8 tensor to MPS raises "Trying to convert Float8_e4m3fn to the MPS backend but it
# does not have support for that dtype", and a Metal kernel asked for one raises "Undefined type".
UNSUPPORTED_NEEDLES: tuple[str, ...] = (
    "not implemented",
    "not supported",
    "unsupported",
    "does not support",
    "only supports",
    "is only supported",
    "no kernel",
    "could not run",
    "expected mat_a",
    "is not available",
    "invalid scaling configuration",
    "does not have support for that dtype",
    "undefined type",
    "mps framework doesn't support",
)


# Libraries' notices of a change to come: they warn on every call and say nothing about the device.
DEPRECATIONS: tuple[type[Warning], ...] = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def ignore_deprecations() -> None:
    """Libraries' deprecation notices off in the warnings context now open."""
    for category in DEPRECATIONS:
        warnings.filterwarnings("ignore", category=category)


@contextlib.contextmanager
def no_deprecations() -> Iterator[None]:
    """Libraries' deprecation notices off; every other warning (a CPU fallback's) still reaches its listener."""
    with warnings.catch_warnings():
        ignore_deprecations()
        yield


# torch's words when an op has no MPS kernel and runs on the CPU instead (PYTORCH_ENABLE_MPS_FALLBACK=1, or an
# op MPS always sends there); one call site in MPSFallback.mm says it for every op.
FALLBACK = re.compile(r"operator '([\w:.]+)' is not currently supported on the MPS backend and will fall back")


@dataclass
class FallbackWatch:
    """The ops torch ran on the CPU while this is open. torch says so with TORCH_WARN_ONCE, which fires once
    per process from its one call site, for every op, unless warn-always is on, and whose flag is spent even
    where Python ignores the warning: warn-always is on while this is open (restored after), and every warning
    is recorded, none printed, none ignored but libraries' deprecations. Nested watches each see their own."""

    pattern: re.Pattern[str] | None = None  # FALLBACK unless given
    ops: list[str] = field(default_factory=list)

    def __enter__(self) -> FallbackWatch:
        self._always = bool(torch.is_warn_always_enabled())
        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        ignore_deprecations()
        torch.set_warn_always(True)
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.set_warn_always(self._always)
        self._catch.__exit__(*exc)
        pattern = self.pattern or FALLBACK
        found = {m.group(1) for w in self._caught for m in [pattern.search(str(w.message))] if m}
        self.ops = sorted(found | set(self.ops))


def is_unsupported_error(exc: BaseException) -> bool:
    """Errors that mean 'this op/dtype is not implemented here', as torch words them."""
    if isinstance(exc, (Unsupported, NotImplementedError, AttributeError)):
        return True
    text = str(exc).lower()
    return any(needle in text for needle in UNSUPPORTED_NEEDLES)


def rand(shape: tuple[int, ...], dtype: torch.dtype, device: Device) -> torch.Tensor:
    """Inputs from the version-proof stream (values.py), on the device: floats uniform in [-1, 1), integers in
    [-8, 7]. Never zeros: they run measurably faster on some GPUs."""
    if dtype.is_floating_point:
        return values.floats(shape, dtype, device.torch_device)
    return values.ints(shape, dtype, device.torch_device, -8, 7)


@dataclass
class Built:
    fn: Callable[[], Any]
    bytes_per_call: float | None = None
    flops_per_call: float | None = None
    items_per_call: float | None = None  # tokens for grouped matmul throughput
    keep: Any = None  # tensors kept alive for the workload's duration
    info: dict[str, Any] | None = None  # a whole model's facts (blocks run, fallback ops, op census): setup's `phase`
    # What the build's own first call returned, where the builder made that call (a replayed op, a whole model):
    # numerics compares it, since an in-place op's later calls see the inputs it rewrote.
    first_output: Any = None
    has_first_output: bool = False
    # A language model's prefill: its logits over the prompt and a greedy continuation, compared between builds.
    extra_answers: Callable[[], dict[str, Any]] | None = None
