"""A workload's `numerics` in a run record (bench/numerics.py writes it; report/numerics.py reads it), checked as
the record is read: every text bounded, every figure a finite number in range, every list capped."""

from __future__ import annotations

from typing import Any

from mpsup.runs.fields import MAX_QUANTITY, MAX_SECONDS, Corrupt, _check, _list, _number, _obj, _text, _whole

MAX_OUTPUTS = 64  # a multi-output op returns a handful; a model, one
MAX_CALLS = 400  # a group of a phase's other calls, each judged alone (model/op_replay.GROUP_MAX_CALLS)
MAX_DIMS = 16
MAX_SIDES = 16
STATUSES = ("compared", "not_compared")


def _errors(doc: Any, where: str) -> None:
    d = _obj(doc, where)
    for key in ("rmse", "max_abs"):
        _number(d.get(key), f"{where}.{key}")
    _number(d.get("match"), f"{where}.match", high=1.0)
    _whole(d.get("nonfinite"), f"{where}.nonfinite", high=MAX_QUANTITY)
    _text(d.get("mismatch"), f"{where}.mismatch")
    if "identical" in d:
        _check(isinstance(d["identical"], bool), f"{where}.identical", "a boolean", d["identical"])


def _output(doc: Any, where: str) -> None:
    d = _obj(doc, where)
    _text(d.get("name"), f"{where}.name", optional=False)
    _text(d.get("dtype"), f"{where}.dtype")
    for i, dim in enumerate(_list(d.get("shape"), f"{where}.shape", MAX_DIMS, optional=True)):
        _whole(dim, f"{where}.shape[{i}]", high=MAX_QUANTITY)
    _whole(d.get("elements"), f"{where}.elements", high=MAX_QUANTITY)
    _whole(d.get("truth_nonfinite"), f"{where}.truth_nonfinite", high=MAX_QUANTITY)
    _number(d.get("scale"), f"{where}.scale")
    _number(d.get("floor"), f"{where}.floor")
    errors = _obj(d.get("errors"), f"{where}.errors", optional=True)
    if len(errors) > MAX_SIDES:
        raise Corrupt(f"{where}.errors: {len(errors)} sides, more than {MAX_SIDES}")
    for label, e in errors.items():
        _errors(e, f"{where}.errors.{label}")
    if d.get("between") is not None:
        _errors(d["between"], f"{where}.between")


def check_numerics(doc: Any, where: str) -> None:
    """Raises Corrupt naming the field where `doc` (a workload's `numerics`, or absent) is not what bench writes."""
    if doc is None:
        return
    d = _obj(doc, where)
    status = d.get("status")
    _check(status in STATUSES, f"{where}.status", " or ".join(STATUSES), status)
    _text(d.get("reason"), f"{where}.reason")
    _text(d.get("digest"), f"{where}.digest")
    _number(d.get("took_s"), f"{where}.took_s", high=MAX_SECONDS)
    reference = _obj(d.get("reference"), f"{where}.reference", optional=True)
    for key in ("python", "torch"):
        _text(reference.get(key), f"{where}.reference.{key}")
    digests = _obj(d.get("digests"), f"{where}.digests", optional=True)
    for label, seen in list(digests.items())[: MAX_SIDES + 1]:
        for i, digest in enumerate(_list(seen, f"{where}.digests.{label}", MAX_SIDES)):
            _text(digest, f"{where}.digests.{label}[{i}]")
    if len(digests) > MAX_SIDES:
        raise Corrupt(f"{where}.digests: {len(digests)} sides, more than {MAX_SIDES}")
    language = _obj(d.get("language"), f"{where}.language", optional=True)
    _whole(language.get("positions"), f"{where}.language.positions", high=MAX_QUANTITY)
    _whole(language.get("greedy_tokens"), f"{where}.language.greedy_tokens", high=MAX_QUANTITY)
    _whole(language.get("greedy_diverges_at"), f"{where}.language.greedy_diverges_at", high=MAX_QUANTITY)
    _whole(language.get("kl_nonfinite"), f"{where}.language.kl_nonfinite", high=MAX_QUANTITY)
    _number(language.get("top1_agreement"), f"{where}.language.top1_agreement", high=1.0)
    _number(language.get("kl_mean"), f"{where}.language.kl_mean", low=-1e-6)
    for i, out in enumerate(_list(d.get("outputs"), f"{where}.outputs", MAX_OUTPUTS, optional=True)):
        _output(out, f"{where}.outputs[{i}]")
    for i, call in enumerate(_list(d.get("calls"), f"{where}.calls", MAX_CALLS, optional=True)):
        c = _obj(call, f"{where}.calls[{i}]")
        _whole(c.get("call"), f"{where}.calls[{i}].call", high=MAX_CALLS, optional=False)
        for k, out in enumerate(_list(c.get("outputs"), f"{where}.calls[{i}].outputs", MAX_OUTPUTS)):
            _output(out, f"{where}.calls[{i}].outputs[{k}]")
