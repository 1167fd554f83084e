"""One workload spec -> Built: the dispatch over every kind (bundled ops, Metal kernels, whole models)."""

from __future__ import annotations

from typing import Any

from .core import Built, dtype_of
from .device import Device
from .end_to_end import build_end_to_end
from .metal import build_metal
from .ops import BUILDERS
from .replay import build_group, build_op
from .training import PHASE as TRAIN_PHASE
from .training import build_train_step
from .whole_model import build_phase, forget


def build(spec: dict[str, Any], device: Device) -> Built:
    kind = spec["kind"]
    if kind != "model_phase":
        forget()  # a model kept for the next phase is memory this workload may need
    if kind == "metal":
        return build_metal(spec, device)
    if kind == "end_to_end":
        return build_end_to_end(spec["params"], device)
    if kind == "model_phase" and spec["params"].get("phase") == TRAIN_PHASE:
        return build_train_step(spec, device)
    if kind == "model_phase":
        return build_phase(spec, device)
    if kind == "op_replay":
        return build_op(spec["params"]["op_call"], device)
    if kind == "op_group":
        return build_group(spec["params"], device)
    builder = BUILDERS.get(kind)
    if builder is None:
        raise ValueError(f"unknown workload kind {kind!r}")
    return builder(spec.get("params", {}), dtype_of(spec.get("dtype", "fp32")), device)
