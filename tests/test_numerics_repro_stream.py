"""The accuracy repro script (`report --upstream`) draws its inputs as the worker does: the same values for the
same call, so the errors it prints are the report's (report/numerics_repro.py repeats worker/values.py)."""

from __future__ import annotations

from typing import Any

import torch

from mpsup.report import numerics_repro
from mpsup.report.op_repro import NUMEL
from mpsup.report.repro import PICK_DEVICE
from mpsup.worker import values
from mpsup.worker.device import Device
from mpsup.worker.replay import _tensor


def _script_namespace() -> dict[str, Any]:
    text = numerics_repro.SCRIPT.format(
        what="x",
        what_literal="'x'",
        device="cpu",
        pick_device=PICK_DEVICE,
        numel=NUMEL,
        builder="",
        tile=numerics_repro.TILE,
        tile_seed=numerics_repro.TILE_SEED,
    )
    namespace: dict[str, Any] = {"__name__": "repro_under_test"}
    exec(compile(text, "repro.py", "exec"), namespace)
    return namespace


def test_the_script_s_stream_constants_are_the_worker_s() -> None:
    assert (numerics_repro.TILE, numerics_repro.TILE_SEED) == (values.TILE, values.TILE_SEED)


def test_the_script_draws_the_worker_s_values_call_by_call() -> None:
    script = _script_namespace()
    docs = [
        ({"shape": [3, 5], "stride": [5, 1], "dtype": "bfloat16"}, None),
        ({"shape": [7], "stride": [1], "dtype": "float32", "range": 0}, [-0.25, 3.0]),
        ({"shape": [4, 4], "stride": [1, 4], "dtype": "float16"}, None),  # transposed
        ({"shape": [9], "stride": [1], "dtype": "int64", "range": 0}, [0, 100]),
        ({"shape": [6], "stride": [1], "dtype": "bool", "range": 0}, [0.3, 0.3]),
    ]
    values.TRUTH.reset()
    script["SEED"][0] = 0
    for doc, span in docs:
        want = _tensor(doc, [span] if span else [], Device("cpu"))
        dtype = getattr(torch, doc["dtype"])
        got = script["make"](doc["shape"], doc["stride"], dtype, torch.device("cpu"), span)
        assert got.dtype == want.dtype and torch.equal(got, want), doc
