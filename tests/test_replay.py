"""Every op of a phase replayed: the census writes each distinct call down (overload, shapes, strides, dtypes, the
non-tensor arguments, integer ranges), worker/replay.py rebuilds it with fresh tensors, model/op_replay.py makes
the workloads (one per distinct call, across phases and environments), and bench/run.py adds them to a run."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mpsup.bench.events import WorkloadsAdded
from mpsup.model.op_replay import (
    GROUP_KIND,
    MIN_OPS,
    OP_KIND,
    affordable_ops,
    call_key,
    describe_call,
    is_view,
    op_weight,
    op_workloads,
    replay_plan,
    rest_of_phases,
)
from mpsup.progress import Event
from mpsup.worker.build import build
from mpsup.worker.census import _Census, _census_strict
from mpsup.worker.core import Unsupported
from mpsup.worker.device import Device
from mpsup.worker.replay import build_group, build_op, rebuild_call
from mpsup.workloads import Workload
from tests.fake_schedule import NoStops

CPU = Device("cpu")


def _census(fn: Any) -> dict[str, Any]:
    with torch.inference_mode():
        return _census_strict(fn, sync=CPU.synchronize)


def _model_step() -> tuple[Any, list[torch.Tensor]]:
    """A small forward with the cases replay must get right: a transposed operand, a strided slice, `dim`,
    `is_causal`, an embedding's integer indices, a boolean mask and a dtype target."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=gen)
    w = torch.randn(5, 6, generator=gen)
    table = torch.randn(50, 8, generator=gen)
    idx = torch.randint(10, 20, (3,), generator=gen)
    q = torch.randn(1, 2, 4, 8, generator=gen)
    mask = torch.rand(4, 5, generator=gen) > 0.25
    outs: list[torch.Tensor] = []

    def step() -> None:
        outs.clear()
        y = x @ w.t()  # mm on a transposed operand
        outs.append(torch.cat([y, y[:, ::2]], dim=1))  # a strided slice, dim=1
        outs.append(torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
        outs.append(torch.nn.functional.embedding(idx, table))
        outs.append(y.masked_fill(mask, 0.0).to(torch.float16))

    return step, outs


def test_the_census_writes_each_distinct_call_down_and_replay_rebuilds_it_faithfully() -> None:
    step, outs = _model_step()
    census = _census(step)
    replay = census["replay"]
    # every call counted is a replayable entry, and the old fields stand beside them
    assert sum(e["count"] for e in replay) == census["calls"] and census["replay_missing"] == 0
    assert {"op", "shapes", "dtypes", "count"} <= census["entries"][0].keys()
    assert all(isinstance(e.get("rough_s"), float) for e in replay)
    by_op = {e["overload"]: e for e in replay}
    emb = by_op["aten.embedding.default"]
    table, indices = emb["ranges"]  # the table's finite values, then the indices' observed range
    assert indices == [float(10), float(19)] or indices[0] >= 10
    assert -1e6 < table[0] < table[1] < 1e6
    # each call rebuilt: same op, outputs of the same shapes and dtypes as the model's own
    with torch.inference_mode():
        step()
    expected = {tuple(o.shape) for o in outs}
    rebuilt = set()
    for e in replay:
        built = build_op(e, CPU)
        out = built.fn()
        if isinstance(out, torch.Tensor):
            rebuilt.add(tuple(out.shape))
        json.dumps(e)  # plain JSON all the way down: it travels in the run record
    assert expected <= rebuilt
    cat = by_op["aten.cat.default"]
    assert cat["args"][1] == 1  # dim, a non-tensor argument that changes the kernel
    strided = cat["args"][0][1]["tensor"]
    assert strided["stride"] != [strided["shape"][1], 1]  # the slice's layout, not a dense copy's
    sdpa = by_op["aten.scaled_dot_product_attention.default"]
    kw = (sdpa.get("kwargs") or {}).get("kwargs", {})
    assert kw.get("is_causal") is True or sdpa["args"][5:6] == [True]  # however torch passes it down
    to = by_op["aten._to_copy.default"] if "aten._to_copy.default" in by_op else by_op["aten.to.dtype"]
    assert "float16" in json.dumps(to)  # the dtype target


def test_replayed_indices_stay_in_the_observed_range() -> None:
    entry = {
        "overload": "aten.embedding.default",
        "args": [
            {"tensor": {"shape": [1000, 4], "stride": [4, 1], "dtype": "float32"}},
            {"tensor": {"shape": [256], "stride": [1], "dtype": "int64", "range": 0}},
        ],
        "ranges": [[900.0, 999.0]],
    }
    _, args, _, _ = rebuild_call(entry, CPU)
    idx = args[1]
    assert idx.dtype == torch.int64 and int(idx.min()) >= 900 and int(idx.max()) <= 999
    # no range (a census on the meta device): zeros, a valid index of any non-empty dimension
    entry_no_range = {**entry, "ranges": []}
    _, args, _, _ = rebuild_call(entry_no_range, CPU)
    assert int(args[1].abs().max()) == 0
    mask = {
        "overload": "aten.logical_not.default",
        "args": [{"tensor": {"shape": [4000], "dtype": "bool", "range": 0}}],
    }
    _, args, _, _ = rebuild_call({**mask, "ranges": [[0.25, 0.25]]}, CPU)
    assert 0.18 < float(args[0].float().mean()) < 0.32  # the mask's density kept


def test_what_cannot_be_replayed_is_unsupported_with_its_reason() -> None:
    with pytest.raises(Unsupported, match="not an op of torch's own"):
        build_op({"overload": "os.system.default", "args": []}, CPU)
    with pytest.raises(Unsupported, match=r"no op aten\.no_such_op\.default"):
        build_op({"overload": "aten.no_such_op.default", "args": []}, CPU)
    with pytest.raises(Unsupported, match="could not be replayed"):
        build_op({"overload": "aten.mm.default", "args": [{"tensor": {"shape": [2, 3], "dtype": "float32"}}]}, CPU)
    with pytest.raises(Unsupported, match="no dtype"):
        build_op({"overload": "aten.relu.default", "args": [{"tensor": {"shape": [2], "dtype": "__class__"}}]}, CPU)
    # the worker's dispatch reaches the replay builder
    spec = {
        "kind": OP_KIND,
        "dtype": "fp32",
        "params": {
            "op_call": {"overload": "aten.relu.default", "args": [{"tensor": {"shape": [3], "dtype": "float32"}}]}
        },
    }
    assert build(spec, CPU).fn().shape == (3,)


def test_the_meta_census_keeps_no_values() -> None:
    census = _Census(ranges=False)
    with census.mode():
        torch.nn.functional.embedding(torch.zeros(3, dtype=torch.long, device="meta"), torch.empty(9, 2, device="meta"))
    entries = census.to_json()["replay"]
    assert entries and all(e["ranges"] == [] and "rough_s" not in e for e in entries)
    assert all("range" not in json.dumps(e["args"]) for e in entries)


# --- the workloads -----------------------------------------------------------------------------------------


def _phase_doc(name: str, by_label: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "name": name,
        "part": "phase",
        "kind": "model_phase",
        "dtype": "fp32",
        "phase": name.split("/")[-1],
        "envs": {
            label: {"phase": {"census": {"calls": sum(e["count"] for e in entries), "replay": entries}}}
            for label, entries in by_label.items()
        },
    }


def _entry(op: str, shape: list[int], count: int, rough: float, **extra: Any) -> dict[str, Any]:
    t = {"tensor": {"shape": shape, "stride": [1] * len(shape), "dtype": "float32"}}
    return {"overload": f"aten.{op}.default", "args": [t], "count": count, "ranges": [], "rough_s": rough, **extra}


def test_one_workload_per_distinct_call_across_phases_and_builds_with_each_sides_counts() -> None:
    norm = _entry("relu", [8], 4, 1e-4)
    prefill = _phase_doc(
        "model/prefill",
        {"baseline": [norm, _entry("cat", [8], 2, 5e-4)], "candidate": [norm, _entry("mm", [8], 3, 1e-3)]},
    )
    decode = _phase_doc("model/decode", {"baseline": [{**norm, "count": 2}], "candidate": [{**norm, "count": 2}]})
    compiled = {**prefill, "name": "model/prefill/compiled", "compile": True}
    ops = op_workloads([prefill, decode, compiled])
    by = {w.params["op_call"]["overload"]: w for w in ops}
    assert set(by) == {"aten.relu.default", "aten.cat.default", "aten.mm.default"}
    relu = by["aten.relu.default"]
    # timed once, weighed in both phases; a compiled phase adds nothing (no aten census of inductor's kernels)
    assert relu.params["op_phases"] == {
        "model/prefill": {"baseline": 4, "candidate": 4},
        "model/decode": {"baseline": 2, "candidate": 2},
    }
    # a decomposition that changed: cat vanishes, mm appears, each with the other side's count absent (0)
    assert by["aten.cat.default"].params["op_phases"] == {"model/prefill": {"baseline": 2}}
    assert by["aten.mm.default"].params["op_phases"] == {"model/prefill": {"candidate": 3}}
    # by the largest share of any phase's rough time: relu is all of decode, mm 91% of the candidate's prefill
    assert [w.params["op_call"]["overload"] for w in ops] == [
        "aten.relu.default",
        "aten.mm.default",
        "aten.cat.default",
    ]
    assert all(w.kind == OP_KIND and w.part == "op" and w.name.startswith("model/op/") for w in ops)
    assert len({w.name for w in ops}) == 3
    # names are stable across runs (what pairs two runs' ops) and tell apart calls alike in op and shape
    again = op_workloads([prefill, decode])
    assert {w.name for w in again} == {w.name for w in ops}
    twin = {**_entry("relu", [8], 1, 1e-4), "kwargs": {"kwargs": {"inplace": True}}}
    both = op_workloads([_phase_doc("model/prefill", {"baseline": [norm, twin]})])
    assert len({w.name for w in both}) == 2


def test_ops_are_kept_by_rough_time_until_the_cap_and_the_cap_follows_the_budget() -> None:
    entries = [_entry("relu", [i + 1], 1, float(i + 1)) for i in range(30)]
    doc = _phase_doc("model/prefill", {"baseline": entries})
    kept = op_workloads([doc], most=5)
    assert [w.params["op_call"]["args"][0]["tensor"]["shape"][0] for w in kept] == [30, 29, 28, 27, 26]
    # ops that hold almost nothing of the rough time are left to the census (and said as not replayed)
    heavy = _entry("mm", [1], 1, 1000.0)
    assert len(op_workloads([_phase_doc("model/prefill", {"baseline": [heavy, *entries]})])) < 31
    # a decode step's ops, far shorter than a prefill's, are not crowded out by them
    prefill = _phase_doc("model/prefill", {"baseline": [_entry("mm", [i + 1], 1, 1.0) for i in range(10)]})
    decode = _phase_doc("model/decode", {"baseline": [_entry("relu", [1], 1, 0.001), _entry("relu", [2], 1, 0.003)]})
    kept = op_workloads([prefill, decode], most=4)
    assert sum(1 for w in kept if "model/decode" in w.params["op_phases"]) == 2
    assert affordable_ops(0.0, 0.5) == MIN_OPS
    assert affordable_ops(100.0, 0.5) > affordable_ops(20.0, 0.5) >= MIN_OPS
    assert op_weight(10, 20.0) == 1.0 and op_weight(100, 20.0) == pytest.approx(0.1)
    assert op_weight(0, 20.0) == 0.0


def test_each_op_kind_of_a_phase_is_replayed_before_a_second_shape_of_any_kind() -> None:
    # a small model's prefill: five matmul shapes hold 85% of it; attention, mul and mean 14%, a view and a
    # rare op the rest
    linears = [_entry("mm", [i + 1], 1, 0.20 - 0.02 * i) for i in range(5)]
    others = [_entry("_softmax", [9], 1, 0.08), _entry("mul", [9], 1, 0.04), _entry("mean", [9], 1, 0.02)]
    small = [_entry("view", [9], 1, 0.05), _entry("neg", [9], 1, 0.005)]
    doc = _phase_doc("model/prefill", {"baseline": [*linears, *others, *small]})
    kept = [w.params["op_call"] for w in op_workloads([doc], most=5)]
    names = [c["overload"].split(".")[1] for c in kept]
    # the heaviest of each kind over 1% first, heaviest first; then the next shapes by their share
    assert names == ["mm", "_softmax", "mul", "mean", "mm"]
    assert [c["args"][0]["tensor"]["shape"][0] for c in kept if "mm" in c["overload"]] == [1, 2]
    # a view, and a kind under 1%, wait their turn by share
    everything = [c["overload"].split(".")[1] for c in (w.params["op_call"] for w in op_workloads([doc]))]
    assert everything == ["mm", "_softmax", "mul", "mean", "mm", "mm", "mm", "mm", "view", "neg"]


def test_the_calls_no_op_workload_replays_are_one_workload_per_phase() -> None:
    entries = [_entry("relu", [i + 1], 1 + i % 3, float(i + 1)) for i in range(6)]
    prefill = _phase_doc(
        "model/prefill", {"baseline": entries, "candidate": [{**entries[0], "count": 9}, *entries[1:]]}
    )
    decode = _phase_doc("model/decode", {"baseline": entries[:4], "candidate": entries[:4]})
    compiled = {**prefill, "name": "model/prefill/compiled", "compile": True}
    kept = op_workloads([prefill, decode, compiled], most=3)
    kept_keys = {call_key(w.params["op_call"]) for w in kept}
    groups = rest_of_phases([prefill, decode, compiled], kept)
    by = {w.name: w for w in groups}
    assert set(by) == {"model/op/rest/prefill", "model/op/rest/decode"}  # none for the compiled phase
    rest = by["model/op/rest/prefill"]
    assert rest.kind == GROUP_KIND and rest.part == "op" and rest.count == 1
    group = rest.params["op_group"]
    # every call of the phase is replayed once, alone or in the group, and none twice
    assert {call_key(c) for c in group} | (kept_keys & {call_key(e) for e in entries}) == {call_key(e) for e in entries}
    assert not {call_key(c) for c in group} & kept_keys
    # each call its larger count of the two builds, the commonest first; one call of the phase per timed call
    counts = dict(zip((c["args"][0]["tensor"]["shape"][0] for c in group), rest.params["op_group_counts"], strict=True))
    assert counts[1] == 9 and rest.params["op_group_counts"] == sorted(rest.params["op_group_counts"], reverse=True)
    assert rest.params["op_phases"] == {"model/prefill": {"baseline": 1, "candidate": 1}}
    assert rest.params["shapes"].startswith(f"{sum(rest.params['op_group_counts'])} calls of {len(group)} kinds: relu")
    json.dumps(rest.to_json())
    # a phase whose calls all have workloads of their own has no group
    assert rest_of_phases([decode], op_workloads([decode])) == []
    # the groups take their room in the cap: three workloads at most, one of them the prefill's group, one
    # the decode's; the compiled phase has none
    planned = replay_plan([prefill, decode, compiled], 3)
    assert len(planned) == 3 and sum(1 for w in planned if w.kind == GROUP_KIND) == 2


def test_the_group_replays_each_call_its_count_times_in_turns() -> None:
    step, _ = _model_step()
    replay = _census(step)["replay"]
    calls = [{k: e[k] for k in ("overload", "args", "kwargs", "ranges") if k in e} for e in replay]
    counts = [1 + i % 3 for i in range(len(calls))]
    built = build({"kind": "op_group", "dtype": "fp32", "params": {"op_group": calls, "op_group_counts": counts}}, CPU)
    seen: list[str] = []

    class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with _Ops():
        built.fn()
    top = [str(c["overload"]).split(".")[1] for c in calls]
    assert [s.split(".")[-1] for s in seen if s.split(".")[-1] in top][: len(calls)] == top  # one of each, then again
    assert sum(1 for s in seen if s.split(".")[-1] in top) >= sum(counts)
    # one call this torch cannot make leaves the whole group unmeasured, named
    bad = {"op_group": [*calls, {"overload": "aten.no_such_op.default", "args": []}], "op_group_counts": [*counts, 1]}
    with pytest.raises(Unsupported, match="no_such_op"):
        build_group(bad, CPU)
    with pytest.raises(Unsupported, match="not a list"):
        build_group({"op_group": calls, "op_group_counts": counts[:-1]}, CPU)


def test_describe_call_and_views() -> None:
    call = {
        "overload": "aten.cat.default",
        "args": [
            [
                {"tensor": {"shape": [2, 3], "stride": [3, 1], "dtype": "float16"}},
                {"tensor": {"shape": [2, 3], "stride": [1, 2], "dtype": "float16"}},
            ],
            1,
        ],
    }
    assert describe_call(call) == {"op": "cat", "shapes": "2x3, 2x3 strided", "dtypes": "float16"}
    assert call_key({**call, "kwargs": {}}) == call_key(call)
    assert is_view("aten.transpose.int") and is_view("aten._unsafe_view.default") and not is_view("aten.cat.default")


# --- the run adds them ----------------------------------------------------------------------------------


def test_the_run_adds_the_ops_after_the_last_phase_with_their_budget_units() -> None:
    from mpsup.bench.measurement import EnvMeasurement, WorkloadMeasurement
    from mpsup.bench.policy import SamplingPolicy
    from mpsup.bench.run import _two_passes
    from mpsup.bench.runner import BenchOptions

    shares: dict[str, float] = {}

    class _Runner:
        def __init__(self) -> None:
            self.sessions = [SimpleNamespace(env=SimpleNamespace(stack="torch")) for _ in range(2)]

        def measure(self, w: Workload, share_s: float, min_rounds: int | None = None) -> WorkloadMeasurement:
            shares[w.name] = share_s
            envs = {"baseline": EnvMeasurement("ok"), "candidate": EnvMeasurement("ok")}
            m = WorkloadMeasurement(w, envs, rounds=[], status="ok")
            m.ratios.extend([1.0] * 12)
            m.elapsed_s = 0.01
            return m

        def extend(self, w: Workload, m: WorkloadMeasurement, share_s: float, min_new: int = 2) -> bool:
            return True

        def restart(self) -> None:
            return None

    phase = Workload("model/prefill", "model_phase", "phase", "fp32", {"phase": "prefill"})
    layer = Workload("model/linear/a", "linear", "model", "fp32", {"tokens": 1, "in_features": 2, "out_features": 2})
    seen: list[list[str]] = []

    def expand(phases: list[dict[str, Any]], units: float) -> list[tuple[Workload, float]]:
        seen.append([p["name"] for p in phases])
        assert units == pytest.approx(11.0)  # a phase's ten units and a layer's one
        return [(Workload(f"model/op/x/{i}", OP_KIND, "op", "fp32", {}), 0.25) for i in range(3)]

    record: dict[str, Any] = {"workloads": []}
    events: list[Event] = []
    opts = BenchOptions(device="cpu", policy=SamplingPolicy(budget_s=1.0, split_pairs=False, leftover=False))
    _two_passes(
        _Runner(),  # type: ignore[arg-type]
        [phase, layer],
        opts,
        record,
        lambda kind, doc: record[kind].append(doc),
        events.append,
        None,
        NoStops(),  # type: ignore[arg-type]
        0.0,
        expand,
    )
    assert seen == [["model/prefill"]]  # once, right after the phase's first visit
    assert [w["name"] for w in record["workloads"]] == [
        "model/prefill",
        "model/linear/a",
        "model/op/x/0",
        "model/op/x/1",
        "model/op/x/2",
    ]
    assert WorkloadsAdded(count=3, total=5, what="ops") in events
    assert math.isclose(shares["model/op/x/0"], 0.25 * shares["model/linear/a"])


def test_a_replayed_weight_is_a_tensor_of_its_own_like_the_models_parameter() -> None:
    # torch's CPU bf16 linear picks a far slower kernel for a weight that is a view or does not require grad
    # (10 s instead of 0.1 s against a 128256x8192 head): a replayed parameter must be what the phase's was.
    weight = {"tensor": {"shape": [16, 8], "stride": [8, 1], "dtype": "bfloat16", "param": True, "range": 0}}
    sliced = {"tensor": {"shape": [1, 1, 8], "stride": [32, 8, 1], "dtype": "bfloat16", "range": 0}}
    call = {"overload": "aten.linear.default", "args": [sliced, weight], "kwargs": {}, "ranges": [[-1.0, 1.0]]}
    built = build_op(call, CPU, copies=2)
    _, made = built.keep
    weights = [t for t in made if t.shape == (16, 8)]
    assert len(weights) == 2  # the rotated copy too
    assert all(w._base is None and w.requires_grad and not w.is_inference() for w in weights)
    x = next(t for t in made if t.shape == (1, 1, 8))
    assert x.stride() == (32, 8, 1)  # a strided input keeps the census's layout
    assert built.fn().shape == (1, 1, 16)
