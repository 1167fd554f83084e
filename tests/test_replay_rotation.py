"""A replayed op reads a model's weights from where the phase does: the census marks parameters, the workloads
carry how many bytes of parameters the phase reads per call, and the replay rotates over that many bytes of
copies of the call's parameters (its other tensors made once)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mpsup.model.op_replay import op_workloads, reuse_bytes
from mpsup.worker.census import _census_strict
from mpsup.worker.device import Device
from mpsup.worker.replay import ROTATE_MAX_COPIES, build_op, copies_for, param_bytes

CPU = Device("cpu")


def _linear_census() -> dict[str, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(2, 16)
    with torch.inference_mode():
        return _census_strict(lambda: model(x), sync=CPU.synchronize)


def test_the_census_marks_parameters_and_only_them() -> None:
    census = _linear_census()
    linears = [e for e in census["replay"] if e["overload"] == "aten.linear.default"]
    assert len(linears) == 2
    for e in linears:
        x, weight, bias = (a["tensor"] for a in e["args"])
        assert weight.get("param") is True and bias.get("param") is True
        assert "param" not in x  # the activation: made by the op before it, not a weight
    relu = next(e for e in census["replay"] if e["overload"] == "aten.relu.default")
    assert "param" not in relu["args"][0]["tensor"]
    # each call's weight and bias bytes, and the phase's sum of them over its calls
    assert sorted(param_bytes(e) for e in linears) == [(8 * 32 + 8) * 4, (32 * 16 + 32) * 4]
    assert reuse_bytes(census) == ((8 * 32 + 8) + (32 * 16 + 32)) * 4


def _call(reuse: int | None) -> dict[str, Any]:
    x = {"tensor": {"shape": [1, 64], "stride": [64, 1], "dtype": "float32"}}
    w = {"tensor": {"shape": [128, 64], "stride": [64, 1], "dtype": "float32", "param": True}}
    call: dict[str, Any] = {"overload": "aten.linear.default", "args": [x, w]}
    if reuse is not None:
        call["reuse_bytes"] = reuse
    return call


def test_copies_keep_the_phase_s_distance_between_two_uses_of_a_weight_within_the_caps() -> None:
    own = 128 * 64 * 4
    assert param_bytes(_call(None)) == own
    assert copies_for(_call(None)) == 1  # no distance said (an older record): one set, as before
    assert copies_for(_call(own)) == 1  # the phase reads only this weight: it stays where the loop keeps it
    assert copies_for(_call(10 * own)) == 10
    assert copies_for(_call(10 * own + 1)) == 11
    assert copies_for(_call(10**15)) == ROTATE_MAX_COPIES
    no_weight = {"overload": "aten.relu.default", "args": [{"tensor": {"shape": [4], "dtype": "float32"}}]}
    assert copies_for({**no_weight, "reuse_bytes": 10**9}) == 1


def test_the_replay_rotates_its_weights_and_keeps_its_other_tensors() -> None:
    built = build_op(_call(5 * 128 * 64 * 4), CPU)
    sets, _made = built.keep
    assert len(sets) == 5
    inputs = {args[0].data_ptr() for args, _ in sets}
    weights = {args[1].data_ptr() for args, _ in sets}
    assert len(inputs) == 1 and len(weights) == 5
    # the copies hold the first weight's values, so each call computes the same thing from another address
    assert all(torch.equal(args[1], sets[0][0][1]) for args, _ in sets)
    # each call takes the next set in turn: six calls read the five weights, then the first again
    read: list[int] = []

    class Watch(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            read.append(args[1].data_ptr())
            return func(*args, **(kwargs or {}))

    with Watch():
        outs = [built.fn() for _ in range(6)]
    assert len(set(read[:5])) == 5 and read[5] == read[0]
    assert all(o.shape == (1, 128) and torch.equal(o, outs[0]) for o in outs)
    assert built.bytes_per_call == (64 + 128 * 64) * 4  # one call's tensors, not the copies'


def test_the_workloads_carry_the_phase_s_parameter_bytes_for_calls_that_read_weights() -> None:
    census = _linear_census()
    doc = {
        "name": "model/prefill",
        "part": "phase",
        "kind": "model_phase",
        "dtype": "fp32",
        "envs": {"baseline": {"phase": {"census": census}}},
    }
    ops = op_workloads([doc])
    by = {w.params["op_call"]["overload"] for w in ops}
    assert "aten.linear.default" in by
    for w in ops:
        call = w.params["op_call"]
        if call["overload"] == "aten.linear.default":
            assert call["reuse_bytes"] == reuse_bytes(census)
        else:
            assert "reuse_bytes" not in call


def test_calls_replayed_together_share_one_rotation_budget(monkeypatch: Any) -> None:
    import mpsup.worker.replay as replay

    own = 128 * 64 * 4
    monkeypatch.setattr(replay, "ROTATE_MAX_BYTES", 6 * own)
    calls = [{**_call(10 * own), "args": [*_call(None)["args"], None]} for _ in range(3)]
    built = replay.build_group({"op_group": calls, "op_group_counts": [1, 1, 1]}, CPU)
    copies = [len(sets) for sets, _made in built.keep]
    # alone each would take 6 (the cap); together their extra copies stay within one cap's bytes
    assert copies_for(calls[0], 6 * own) == 6 and sum(c - 1 for c in copies) * own <= 6 * own
    assert copies[0] == 6 and copies[1:] == [1, 1]
