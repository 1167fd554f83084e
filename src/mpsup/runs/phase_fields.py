"""A whole-model phase's fields in a run record: what coverage, the report's phases, the HTML census and --upstream
read, checked when the record is read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mpsup.runs import fields

MAX_FALLBACK_OPS = 1_000
MAX_CENSUS_ENTRIES = 10_000  # a worker keeps 400 (op, shapes, dtypes) entries per phase
MAX_CENSUS_DIM = 2**31 - 1
# A census shape beyond this many elements (per tensor) no storage holds: a repro of it would fail with
# "Storage size calculation overflowed" (2^48 elements of 8 bytes is still under 2^63 bytes).
MAX_CENSUS_ELEMENTS = 2**48
_PHASE_COUNTS = ("tokens", "cache", "depth", "frames", "batch")
_PHASE_TEXTS = ("phase", "library", "component", "weights", "path", "train", "optimizer", "optimizer_impl")
_INFO_COUNTS = ("layers", "depth", "tokens", "cache", "logits_kept", "factor", "frames", "batch")
_INFO_TEXTS = ("library", "library_version", "architecture", "attention", "latent", "loss")
# A training step's (worker/training.py): what trained, and the optimizer that ran.
_TRAIN_COUNTS = ("parameters", "trainable_parameters")
_TRAIN_TEXTS = ("mode", "dropout")
_LORA_TEXTS = ("adapter_dtype", "peft_version")
_OPTIMIZER_TEXTS = ("name", "requested", "implementation")


def _scalars(d: Mapping[str, Any], where: str, counts: tuple[str, ...], texts: tuple[str, ...], flag: str) -> None:
    """Whole numbers under `counts`, text under `texts`, true or false under `flag`: a phase's own keys."""
    for k in counts:
        fields._whole(d.get(k), f"{where}.{k}")
    for k in texts:
        fields._text(d.get(k), f"{where}.{k}")
    value = d.get(flag)
    fields._check(value is None or isinstance(value, bool), f"{where}.{flag}", "true or false", value)


def _census_shapes(text: str, where: str) -> None:
    """A census entry's shapes, as the worker writes them: `AxB` per tensor (`scalar` for none), space-separated."""
    for token in text.split():
        if token == "scalar":
            continue
        dims = token.split("x")
        if not all(d.isascii() and d.isdigit() and len(d) <= 10 for d in dims):
            raise fields.Corrupt(f"{where}: {token[:40]!r} is not a shape")
        if any(int(d) > MAX_CENSUS_DIM for d in dims) or math.prod(int(d) for d in dims) > MAX_CENSUS_ELEMENTS:
            raise fields.Corrupt(
                f"{where}: {token[:40]} is larger than any tensor (at most 2^31-1 a dimension, 2^48 in all)"
            )


def _census(doc: Any, where: str) -> None:
    d = fields._obj(doc, where)
    ops = fields._obj(d.get("ops"), f"{where}.ops", optional=True)
    if len(ops) > MAX_CENSUS_ENTRIES:
        raise fields.Corrupt(f"{where}.ops: {len(ops)} entries, more than the {MAX_CENSUS_ENTRIES} any run can have")
    for op, n in ops.items():
        fields._whole(n, f"{where}.ops[{op[:40]!r}]", high=fields.MAX_COUNT**2, optional=False)
    fields._whole(d.get("calls"), f"{where}.calls", high=fields.MAX_COUNT**2)
    for i, e in enumerate(fields._list(d.get("entries"), f"{where}.entries", MAX_CENSUS_ENTRIES, optional=True)):
        at = f"{where}.entries[{i}]"
        entry = fields._obj(e, at)
        fields._required_text(entry.get("op"), f"{at}.op")
        _census_shapes(fields._text(entry.get("shapes"), f"{at}.shapes") or "", f"{at}.shapes")
        fields._text(entry.get("dtypes"), f"{at}.dtypes")
        fields._whole(entry.get("count"), f"{at}.count", high=fields.MAX_COUNT**2)


def _training_info(d: Mapping[str, Any], where: str) -> None:
    """A training step's `train` and `optimizer` objects, where the phase is one."""
    train = fields._obj(d.get("train"), f"{where}.train", optional=True)
    for k in _TRAIN_COUNTS:
        fields._whole(train.get(k), f"{where}.train.{k}", high=fields.MAX_COUNT**2)
    for k in _TRAIN_TEXTS:
        fields._text(train.get(k), f"{where}.train.{k}")
    lora = fields._obj(train.get("lora"), f"{where}.train.lora", optional=True)
    fields._whole(lora.get("rank"), f"{where}.train.lora.rank")
    fields._number(lora.get("scale"), f"{where}.train.lora.scale")
    for k in _LORA_TEXTS:
        fields._text(lora.get(k), f"{where}.train.lora.{k}")
    for i, t in enumerate(fields._list(lora.get("targets"), f"{where}.train.lora.targets", 64, optional=True)):
        fields._text(t, f"{where}.train.lora.targets[{i}]", optional=False)
    optimizer = fields._obj(d.get("optimizer"), f"{where}.optimizer", optional=True)
    for k in _OPTIMIZER_TEXTS:
        fields._text(optimizer.get(k), f"{where}.optimizer.{k}")
    fields._number(optimizer.get("lr"), f"{where}.optimizer.lr")


def _phase_info(doc: Any, where: str) -> None:
    """What the worker said of one phase call (env.phase): the blocks run, the ops that fell back, the census."""
    d = fields._obj(doc, where)
    _scalars(d, where, _INFO_COUNTS, _INFO_TEXTS, "compiled")
    _training_info(d, where)
    fallback = fields._list(d.get("fallback_ops"), f"{where}.fallback_ops", MAX_FALLBACK_OPS, optional=True)
    for i, op in enumerate(fallback):
        fields._text(op, f"{where}.fallback_ops[{i}]", optional=False)
    if d.get("census") is not None:
        _census(d["census"], f"{where}.census")


def check_env_phase(d: Mapping[str, Any], where: str) -> None:
    """An environment's figures beside its samples: a phase's info, its interval and items per call."""
    if d.get("phase") is not None:
        _phase_info(d["phase"], f"{where}.phase")
    for k in ("ci_low", "ci_high"):
        fields._number(d.get(k), f"{where}.{k}", high=fields.MAX_SECONDS)
    fields._number(d.get("items_per_call"), f"{where}.items_per_call")


def check_phase_workload(d: Mapping[str, Any], where: str) -> None:
    """A whole-model phase's parameters (workloads[i] with part "phase"), as model.phases writes them."""
    _scalars(d, where, _PHASE_COUNTS, _PHASE_TEXTS, "compile")
    for i, v in enumerate(fields._list(d.get("resolution"), f"{where}.resolution", 3, optional=True)):
        fields._whole(v, f"{where}.resolution[{i}]", optional=False)
    fields._obj(d.get("config"), f"{where}.config", optional=True)
