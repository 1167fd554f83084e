"""The op census of one call of a whole-model phase: which aten ops it ran, how often, with which shapes and
dtypes, and each distinct call as replay.py rebuilds it, so that every op of the phase can be timed alone."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .replay import describe

CENSUS_MAX_ENTRIES = 400  # distinct (op, shapes, dtypes) kept; the rest are counted as "other"
# The part of a training step running now (forward, backward, optimizer), set by worker/training.py around each
# part; "" outside one. A call is recorded with its part, which tells a backward's mm from a forward's and replays
# it under the grad mode it ran in.
STAGE = [""]
# Parts whose calls are named with their part ("mm (backward)"): a forward's calls read as an inference's.
NAMED_STAGES = ("backward", "optimizer")


class _Census:
    """Which aten ops one forward ran, how often, with which shapes and dtypes; and each distinct call as
    replay.py rebuilds it (the overload, every argument's shape, strides and dtype, the non-tensor arguments,
    the value range of integer and boolean inputs), so that every op of the phase can be timed alone."""

    def __init__(self, ranges: bool = True, sync: Callable[[], None] | None = None) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.calls: dict[str, dict[str, Any]] = {}
        self.ranges = ranges  # off on the meta device, whose tensors hold no values
        self.sync = sync  # with it, each call's rough time (synchronised): what ranks the ops worth replaying

    def _record_call(self, func: Any, args: Any, kwargs: dict[str, Any], took: float | None) -> None:
        ranges: list[list[float]] = []
        try:
            call = {"overload": str(func), "args": describe(args, ranges, self.ranges)}
            if kwargs:
                call["kwargs"] = describe(kwargs, ranges, self.ranges)
            if STAGE[0]:
                call["stage"] = STAGE[0]
        except Exception:
            return  # an argument replay cannot describe: the op stays counted, not replayed
        key = json.dumps(call, sort_keys=True)
        seen = self.calls.get(key)
        if seen is None:
            if len(self.calls) >= CENSUS_MAX_ENTRIES:
                return
            self.calls[key] = {**call, "count": 1, "ranges": ranges}
            if took is not None:
                self.calls[key]["rough_s"] = took
            return
        seen["count"] += 1
        if took is not None:
            seen["rough_s"] = seen.get("rough_s", 0.0) + took
        for old, new in zip(seen["ranges"], ranges, strict=False):
            old[0], old[1] = min(old[0], new[0]), max(old[1], new[1])

    def mode(self) -> Any:
        from torch.utils._python_dispatch import TorchDispatchMode

        census = self

        class Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if func.namespace == "profiler":  # record_function's markers (an optimizer's step): no work
                    return func(*args, **(kwargs or {}))
                name = str(func.overloadpacket.__name__)
                if name == "_local_scalar_dense" and args and args[0].is_meta and args[0].dtype == torch.bool:
                    # A host check of a mask (all ones? packed?) has no value on the meta device: answered as
                    # true, the path a batch of full-length samples takes.
                    return True
                tensors = [a for a in args if isinstance(a, torch.Tensor)]
                shapes = " ".join("x".join(str(d) for d in t.shape) or "scalar" for t in tensors)
                dtypes = " ".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))
                if STAGE[0] in NAMED_STAGES:
                    name = f"{name} ({STAGE[0]})"
                census.counts[(name, shapes, dtypes)] += 1
                if census.sync is None:
                    census._record_call(func, args, kwargs or {}, None)
                    return func(*args, **(kwargs or {}))
                census.sync()
                t0 = time.perf_counter()
                out = func(*args, **(kwargs or {}))
                census.sync()
                took = time.perf_counter() - t0
                census._record_call(func, args, kwargs or {}, took)
                return out

        return Mode()

    def to_json(self) -> dict[str, Any]:
        by_op: Counter[str] = Counter()
        for (op, _, _), n in self.counts.items():
            by_op[op] += n
        entries = [
            {"op": op, "shapes": shapes, "dtypes": dtypes, "count": n}
            for (op, shapes, dtypes), n in self.counts.most_common(CENSUS_MAX_ENTRIES)
        ]
        replay = sorted(self.calls.values(), key=lambda c: -c["count"])
        doc = {"ops": dict(by_op.most_common()), "calls": sum(by_op.values()), "entries": entries, "replay": replay}
        doc["replay_missing"] = doc["calls"] - sum(c["count"] for c in replay)
        return doc


def _census_strict(
    fn: Callable[[], Any], ranges: bool = True, sync: Callable[[], None] | None = None
) -> dict[str, Any]:
    census = _Census(ranges, sync)
    with census.mode():
        fn()
    return census.to_json()


def _census_of(fn: Callable[[], Any], sync: Callable[[], None] | None = None) -> dict[str, Any] | None:
    try:
        return _census_strict(fn, sync=sync)
    except Exception:
        return None  # an op the census mode cannot wrap: the timing stands without it
