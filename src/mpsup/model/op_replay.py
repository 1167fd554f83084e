"""Every op of a whole-model phase as a workload of its own: the phases' censuses (taken in each environment by
the worker, one call each) -> one `op_replay` workload per distinct call, timed like any other workload, with
how many times each phase called it in each environment.

An op whose arguments are identical in two phases (a norm of prefill and of decode alike) is one workload that
names both phases: timed once, weighed in each. An op one build calls and the other does not keeps a count of 0
on that side: it is still timed in both environments, and the report shows it appear or vanish."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

from mpsup.workloads import Workload

OP_KIND = "op_replay"
OP_PART = "op"
# The calls of a phase that no op workload of their own replays, replayed together as one workload: a small
# model's decode is mostly ops of a few microseconds each, too many to time one by one at any budget, and left
# out they are half of the phase (docs/evidence/op_coverage.md).
GROUP_KIND = "op_group"
GROUP_OP = "other calls"
# A group replays at most this many distinct calls (a census keeps 400 a phase).
GROUP_MAX_CALLS = 400
# What all ops of a run may take together, as a share of the budgets of every other workload: replay may add at
# most half again to a paired --model run.
OPS_BUDGET_SHARE = 0.5
# At most this many op workloads per run: a census keeps 400 distinct calls a phase, and each op's
# measurement has a floor (setup, calibration, twelve rounds, two visits) that no budget share removes.
MAX_OPS = 240
# That floor, seconds per op of a paired run on a small CPU (docs/evidence/op_coverage.md). The ops a run can
# afford are those whose floors fit OPS_BUDGET_SHARE of the other workloads' time.
OP_FLOOR_S = 0.35
# Whatever the budget, a run times at least this many op workloads, its phases' groups of the other calls among
# them: a change to one op class is named only where its calls have workloads of their own (a VAE decode's 14
# group_norm calls are 5 of its 40 distinct calls), while a floor of 24, which would hold them all, puts a small
# model's replay with its groups above half again its run (docs/evidence/op_coverage.md).
MIN_OPS = 12
# An op holding less than this share of every phase's rough time (the census's own timing) is left to the census.
ROUGH_LEAST = 0.001
# Each op kind whose heaviest call holds at least this share of a phase's rough time is replayed before a second
# shape of any kind: a cost every call shares is told apart from one kernel's only across several kinds
# (report/attribution.py: spread_of), and a small model's prefill is otherwise all linear shapes at the cap.
KIND_LEAST = 0.01
_ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
}
# Ops that only make a view or say something about a tensor: timed all the same (on MPS they are not free),
# and grouped as one line in the report where together they do not matter.
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "transpose",
        "t",
        "permute",
        "expand",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "as_strided",
        "alias",
        "detach",
        "detach_",
        "lift_fresh",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
        "view_as",
        "expand_as",
        "flatten",
        "unflatten",
        "_reshape_alias",
        "contiguous",
    }
)


# A training step's parts whose calls are named with the part (worker/census.py records it as `stage`).
NAMED_STAGES = ("backward", "optimizer")


def op_name(overload: str) -> str:
    """ "aten.mm.default" -> "mm"."""
    parts = overload.split(".")
    return parts[1] if len(parts) == 3 else overload


def is_view(overload: str) -> bool:
    return op_name(overload) in VIEW_OPS


def _tensors(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        if isinstance(value.get("tensor"), dict):
            return [value["tensor"]]
        inner = value.get("kwargs")
        if isinstance(inner, dict):
            return [t for v in inner.values() for t in _tensors(v)]
    return []


def call_tensors(call: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tensor a census entry names (positional, in lists, keyword), in order."""
    return _tensors(call.get("args") or []) + _tensors(call.get("kwargs") or {})


def _shape_text(t: dict[str, Any]) -> str:
    shape = t.get("shape") or []
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _layout(t: dict[str, Any]) -> str:
    """ "" for a dense row-major tensor, else "strided" (transposed, sliced, channels-last...)."""
    shape, stride = list(t.get("shape") or []), list(t.get("stride") or [])
    expect, dense = 1, list[int]()
    for d in reversed(shape):
        dense.insert(0, expect)
        expect *= max(1, int(d))
    significant = [(s, e) for d, s, e in zip(shape, stride, dense, strict=False) if d != 1]
    return "" if all(s == e for s, e in significant) else "strided"


def describe_call(call: dict[str, Any]) -> dict[str, str]:
    """What a person reads of one call: the op, its tensors' shapes (with strided ones marked) and dtypes."""
    ts = call_tensors(call)
    shapes = ", ".join(_shape_text(t) + (" strided" if _layout(t) else "") for t in ts)
    dtypes = " ".join(sorted({str(t.get("dtype")) for t in ts}))
    op = op_name(str(call.get("overload", "?")))
    stage = call.get("stage")
    if stage in NAMED_STAGES:  # a training step's backward or optimizer call: "mm (backward)"
        op = f"{op} ({stage})"
    return {"op": op, "shapes": shapes, "dtypes": dtypes}


def _tensor_bytes(t: dict[str, Any]) -> int:
    shape = [int(d) for d in t.get("shape") or []]
    stride = [abs(int(s)) for s in t.get("stride") or []] or [1] * len(shape)
    extent = 0 if any(d == 0 for d in shape) else 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=False))
    return extent * _ITEMSIZE.get(str(t.get("dtype")), 4)


def _bytes(call: dict[str, Any]) -> int:
    sizes = [_tensor_bytes(t) for t in call_tensors(call)]
    return sum(sizes) + max(sizes, default=0)  # the output, about as large as the largest input


def reuse_bytes(census: Any) -> int:
    """Bytes of the model's parameters one call of the phase reads (each call's parameters, times its count):
    how far apart, in bytes read, two uses of one weight are inside the phase."""
    return sum(e["count"] * sum(_tensor_bytes(t) for t in call_tensors(e) if t.get("param")) for e in _entries(census))


def call_key(call: dict[str, Any]) -> str:
    """One distinct call, whoever wrote it down (the census, or an op workload's params)."""
    doc = {"overload": call.get("overload"), "args": call.get("args"), "kwargs": call.get("kwargs") or None}
    if call.get("stage"):  # a training step's part: the same op and shapes in backward is another call
        doc["stage"] = call["stage"]
    return json.dumps(doc, sort_keys=True)


def _name(call: dict[str, Any], key: str) -> str:
    seen = describe_call(call)
    shapes = seen["shapes"].replace(", ", ",").replace(" strided", "s")
    shapes = shapes if len(shapes) <= 60 else shapes[:57] + "..."
    # The hash tells apart calls alike in op and shapes (strides, dim, is_causal...), stably across runs.
    return f"model/op/{seen['op']}/{shapes}/{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def _entries(census: Any) -> list[dict[str, Any]]:
    replay = census.get("replay") if isinstance(census, dict) else None
    if not isinstance(replay, list):
        return []
    return [
        e
        for e in replay
        if isinstance(e, dict)
        and isinstance(e.get("overload"), str)
        and isinstance(e.get("args"), list)
        and type(e.get("count")) is int
        and e["count"] > 0
    ]


def _rough_totals(phase_docs: Sequence[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(phase, environment) -> the census's rough time of the whole phase, the sum over its calls."""
    totals: dict[tuple[str, str], float] = {}
    for w in phase_docs:
        for label, env in (w.get("envs") or {}).items():
            census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
            times = [e.get("rough_s") for e in _entries(census)]
            totals[(str(w.get("name")), str(label))] = sum(
                float(t) for t in times if isinstance(t, (int, float)) and math.isfinite(t) and t >= 0
            )
    return totals


def _reuse_by_call(phase_docs: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Each distinct call that reads weights -> the most bytes of parameters any phase calling it reads a call."""
    out: dict[str, int] = {}
    for w in phase_docs:
        for env in (w.get("envs") or {}).values():
            census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
            phase = reuse_bytes(census)
            for e in _entries(census):
                if phase and any(t.get("param") for t in call_tensors(e)):
                    out[call_key(e)] = max(out.get(call_key(e), 0), phase)
    return out


def _widen_ranges(slot: dict[str, Any], ranges: Any) -> None:
    """A slot's integer and boolean value ranges, widened to cover another census's of the same call."""
    if not (isinstance(ranges, list) and all(isinstance(r, list) and len(r) == 2 for r in ranges)):
        return
    if slot["ranges"] is None or len(slot["ranges"]) != len(ranges):
        slot["ranges"] = [list(r) for r in ranges]
    else:
        for old, new in zip(slot["ranges"], ranges, strict=True):
            old[0], old[1] = min(old[0], new[0]), max(old[1], new[1])


def _op_call(call: dict[str, Any], ranges: Any, reuse: int | None) -> dict[str, Any]:
    """What the worker rebuilds a census entry from: the call, its value ranges, its parameters' reuse distance."""
    op_call = {"overload": call["overload"], "args": call["args"], "kwargs": call.get("kwargs") or {}}
    if isinstance(call.get("stage"), str):
        op_call["stage"] = call["stage"]  # replayed under the grad mode its part of a training step ran in
    if ranges:
        op_call["ranges"] = ranges
    if reuse:
        op_call["reuse_bytes"] = reuse
    return op_call


def affordable_ops(units: float, budget_s: float) -> int:
    """How many op workloads fit OPS_BUDGET_SHARE of the time `units` budgets of other workloads take."""
    if not math.isfinite(units * budget_s):
        return MAX_OPS
    return max(MIN_OPS, min(MAX_OPS, int(OPS_BUDGET_SHARE * units * budget_s / OP_FLOOR_S)))


def op_workloads(phase_docs: Sequence[dict[str, Any]], most: int = MAX_OPS) -> list[Workload]:
    """The phases' measured record entries -> one op workload per distinct call of any phase in any environment,
    at most `most`: each phase's heaviest by its share of that phase's rough time (the larger of the two
    environments'), taken in turns across the phases (a decode step's ops are not crowded out by a prefill's
    larger ones), none under ROUGH_LEAST; count x bytes first where the census has no times. The rest stay in
    the census; the report says what was not replayed."""
    merged: dict[str, dict[str, Any]] = {}
    rough: dict[str, dict[str, float] | None] = {}
    totals = _rough_totals(phase_docs)
    reuse = _reuse_by_call(phase_docs)
    for w in phase_docs:
        if w.get("part") != "phase" or w.get("compile"):
            continue  # a compiled phase runs inductor's kernels, which no aten census lists
        for label, env in (w.get("envs") or {}).items():
            census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
            for e in _entries(census):
                key = call_key(e)
                slot = merged.setdefault(key, {"call": e, "ranges": None, "phases": {}, "dtype": w.get("dtype")})
                _widen_ranges(slot, e.get("ranges"))
                counts = slot["phases"].setdefault(str(w["name"]), {})
                counts[str(label)] = counts.get(str(label), 0) + e["count"]
                took = e.get("rough_s")
                whole = totals.get((str(w["name"]), str(label))) or 0.0
                if isinstance(took, (int, float)) and math.isfinite(took) and took >= 0 and whole > 0:
                    shares = slot.setdefault("shares", {})
                    shares[str(w["name"])] = max(shares.get(str(w["name"]), 0.0), float(took) / whole)
    out: list[Workload] = []
    for key, slot in merged.items():
        call = slot["call"]
        op_call = _op_call(call, slot["ranges"], reuse.get(key))
        calls = max((n for c in slot["phases"].values() for n in c.values()), default=1)
        rough[_name(call, key)] = slot.get("shares")
        out.append(
            Workload(
                _name(call, key),
                OP_KIND,
                OP_PART,
                str(slot["dtype"] or "fp32"),
                {"op_call": op_call, "op_phases": slot["phases"], **describe_call(call)},
                ("op", op_name(call["overload"])),
                "census",
                _bytes(call),
                calls,
            )
        )
    cap = max(0, min(most, MAX_OPS))
    if out and all(r for r in rough.values()):
        by_name = {w.name: w for w in out}
        phases = sorted({p for r in rough.values() for p in r or {}})
        ranked = [
            _kinds_first(
                sorted(
                    (n for n, r in rough.items() if (r or {}).get(p, 0.0) >= ROUGH_LEAST),
                    key=lambda n, p=p: -(rough[n] or {}).get(p, 0.0),  # type: ignore[misc]
                ),
                {n: (rough[n] or {}).get(p, 0.0) for n in rough},
                by_name,
            )
            for p in phases
        ]
        kept: dict[str, Workload] = {}
        for turn in range(max(len(r) for r in ranked)):
            for r in ranked:
                if len(kept) < cap and turn < len(r):
                    kept.setdefault(r[turn], by_name[r[turn]])
        return list(kept.values())
    out.sort(key=lambda w: -w.count * max(1, w.memory_bytes))
    return out[:cap]


def _kinds_first(names: list[str], share: dict[str, float], by_name: dict[str, Workload]) -> list[str]:
    """`names` (heaviest first) with each op kind's heaviest call of at least KIND_LEAST share moved ahead of the
    rest, in their order; views stay where they are (they launch no kernel, so no kind of theirs is compared)."""
    seen: set[str] = set()
    first: list[str] = []
    for n in names:
        kind = by_name[n].tags[-1]
        if kind not in seen and share[n] >= KIND_LEAST and not is_view(str(by_name[n].params["op_call"]["overload"])):
            seen.add(kind)
            first.append(n)
    ahead = set(first)
    return first + [n for n in names if n not in ahead]


def rest_of_phases(phase_docs: Sequence[dict[str, Any]], kept: Sequence[Workload]) -> list[Workload]:
    """Per phase, the calls that no workload of `kept` replays, as one workload that replays them together: each
    distinct call its count times, in turns (one call of each, then again, as a phase's layers interleave
    them), so the replayed sum covers the whole census and not only its heaviest calls. Its time per call is
    the rest's time in one call of the phase: a count of 1 in each environment whose census lists the phase.
    The calls are those of both environments' censuses (a call only one build makes is replayed in both, each
    its larger count), the commonest first, at most GROUP_MAX_CALLS."""
    kept_keys = {call_key(w.params["op_call"]) for w in kept if isinstance(w.params.get("op_call"), dict)}
    reuse = _reuse_by_call(phase_docs)
    out: list[Workload] = []
    for w in phase_docs:
        if w.get("part") != "phase" or w.get("compile"):
            continue
        rest: dict[str, dict[str, Any]] = {}
        labels: list[str] = []
        for label, env in (w.get("envs") or {}).items():
            census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
            entries = _entries(census)
            if entries:
                labels.append(str(label))
            for e in entries:
                key = call_key(e)
                if key not in kept_keys:
                    slot = rest.setdefault(key, {"call": e, "ranges": None, "count": 0})
                    slot["count"] = max(slot["count"], e["count"])
                    _widen_ranges(slot, e.get("ranges"))
        if not rest:
            continue
        chosen = sorted(rest.items(), key=lambda kv: -kv[1]["count"])[:GROUP_MAX_CALLS]
        calls = [_op_call(s["call"], s["ranges"], reuse.get(k)) for k, s in chosen]
        counts = [int(s["count"]) for _, s in chosen]
        by_op: dict[str, int] = {}
        for c, n in zip(calls, counts, strict=True):
            by_op[op_name(str(c["overload"]))] = by_op.get(op_name(str(c["overload"])), 0) + n
        top = sorted(by_op.items(), key=lambda kv: -kv[1])
        names = ", ".join(f"{op} {n}" for op, n in top[:6]) + (", ..." if len(top) > 6 else "")
        dtypes = sorted({str(t.get("dtype")) for c in calls for t in call_tensors(c)})
        phase = str(w.get("name"))
        out.append(
            Workload(
                f"model/op/rest/{phase.removeprefix('model/')}",
                GROUP_KIND,
                OP_PART,
                str(w.get("dtype") or "fp32"),
                {
                    "op_group": calls,
                    "op_group_counts": counts,
                    "op_phases": {phase: dict.fromkeys(labels, 1)},
                    "op": GROUP_OP,
                    "shapes": f"{sum(counts)} calls of {len(calls)} kinds: {names}",
                    "dtypes": " ".join(dtypes[:4]) + (" ..." if len(dtypes) > 4 else ""),
                },
                ("op", "rest"),
                "census",
                sum(_bytes(c) for c in calls),
                1,
            )
        )
    return out


def replay_plan(phase_docs: Sequence[dict[str, Any]], cap: int) -> list[Workload]:
    """At most `cap` op workloads for these phases: the heaviest calls alone, and per eager phase one group of
    the calls left over (its room kept out of the cap first)."""
    groups = sum(1 for w in phase_docs if w.get("part") == "phase" and not w.get("compile"))
    alone = op_workloads(phase_docs, max(1, cap - groups))
    return alone + rest_of_phases(phase_docs, alone)


def op_weight(ops: int, other_weights: float) -> float:
    """Budget units each op workload gets: together at most OPS_BUDGET_SHARE of every other workload's units,
    and never more than a layer's one."""
    if ops <= 0:
        return 0.0
    return min(1.0, OPS_BUDGET_SHARE * other_weights / ops) if math.isfinite(other_weights) else 1.0
