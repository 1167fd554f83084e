"""Workload inputs: from a stream no torch version can change (worker/values.py), never zeros, the same values in
the float64 reference as in the builds (rounded to the builds' dtype first), and an FP8 tensor costs no wide copy
of itself to make (a bf16 copy had put an FP8 embedding's peak memory above its BF16 twin's on the H200)."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from mpsup.worker import values
from mpsup.worker.core import rand
from mpsup.worker.device import Device

FP8 = getattr(torch, "float8_e4m3fn", None)


@pytest.fixture(autouse=True)
def fresh_stream() -> None:
    values.TRUTH.reset()
    values.TRUTH.on = False


def _hash32(i: int, seed: int) -> int:
    """The stream's hash written again in plain Python integers: what any torch must reproduce."""
    x = (i + (seed * 0x9E3779B1) % (1 << 32)) & 0xFFFFFFFF
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_the_stream_is_its_definition_not_torch_s_generator() -> None:
    got = values.uniform(1000, seed=7)
    want = [(-1.0 + (_hash32(i, 7) >> 8) * 2.0**-24 * 2.0) for i in range(1000)]
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx(want, abs=0)  # exact: 24 bits fit float32
    torch.manual_seed(123)  # torch's own generator has no say
    assert torch.equal(values.uniform(1000, seed=7), got)


def test_values_are_spread_never_zero_and_in_range() -> None:
    x = rand((257, 33), torch.bfloat16, Device("cpu"))
    assert x.dtype == torch.bfloat16 and x.abs().max() <= 1 and (x != 0).float().mean() > 0.99
    assert -0.2 < float(x.float().mean()) < 0.2 and 0.5 < float(x.float().std()) < 0.65
    i = rand((4096,), torch.int8, Device("cpu"))
    assert i.dtype == torch.int8 and int(i.min()) == -8 and int(i.max()) == 7


def test_each_draw_has_its_own_values_and_the_order_repeats_after_a_reset() -> None:
    a, b = rand((64,), torch.float32, Device("cpu")), rand((64,), torch.float32, Device("cpu"))
    assert not torch.equal(a, b)
    first = values.TRUTH.hexdigest()
    values.TRUTH.reset()
    assert torch.equal(rand((64,), torch.float32, Device("cpu")), a)
    assert torch.equal(rand((64,), torch.float32, Device("cpu")), b)
    assert values.TRUTH.hexdigest() == first


def test_the_reference_sees_the_builds_values_rounded_then_widened() -> None:
    built = rand((5000,), torch.bfloat16, Device("cpu"))
    digest = values.TRUTH.hexdigest()
    values.TRUTH.reset()
    values.TRUTH.on = True
    try:
        truth = rand((5000,), torch.bfloat16, Device("cpu"))
    finally:
        values.TRUTH.on = False
    assert truth.dtype == torch.float64 and torch.equal(truth, built.double())
    assert values.TRUTH.hexdigest() == digest  # the digest is of the bf16 bytes on both sides


def test_the_digest_is_of_the_bytes() -> None:
    t = values.uniform(10, seed=3).to(torch.bfloat16)
    raw = bytes(t.contiguous().view(torch.uint8).tolist())
    assert values.bytes_of(t) == raw and len(raw) == 20  # read through ctypes: no numpy needed
    strided = t[::2]  # a view: its own elements, not the storage's
    assert values.bytes_of(strided) == bytes(strided.contiguous().view(torch.uint8).tolist())
    assert hashlib.sha256(values.bytes_of(t)).hexdigest() == hashlib.sha256(raw).hexdigest()


def test_a_large_tensor_repeats_its_tile() -> None:
    n = values.TILE + 1000
    x = rand((n,), torch.float32, Device("cpu"))
    assert torch.equal(x[values.TILE : values.TILE + 1000], x[:1000])


@pytest.mark.skipif(FP8 is None, reason="this torch has no float8_e4m3fn")
@pytest.mark.parametrize("numel", [1000, values.TILE + 7, 3 * values.TILE + 3])
def test_fp8_inputs_make_no_wide_copy_of_themselves(numel: int, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[int, torch.dtype]] = []
    empty = torch.empty

    def recording_empty(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = empty(*args, **kwargs)
        made.append((t.numel(), t.dtype))
        return t

    monkeypatch.setattr(torch, "empty", recording_empty)
    x = rand((numel,), FP8, Device("cpu"))  # type: ignore[arg-type]
    assert x.dtype == FP8 and x.shape == (numel,)
    floats = x.float()
    assert torch.isfinite(floats).all() and (floats != 0).float().mean() > 0.9
    assert floats.min() < -0.5 and floats.max() > 0.5
    wide = [n for n, dt in made if dt.itemsize > 1]
    assert not wide or max(wide) <= values.TILE


def test_a_model_s_parameters_come_from_their_names() -> None:
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32))
    torch.manual_seed(1)  # another library init: the filled values must not depend on it
    b = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32))
    values.fill_parameters(a, torch.bfloat16)
    values.fill_parameters(b, torch.bfloat16)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    weight = a[0].weight.detach()
    assert abs(float(weight.std()) - 1 / math.sqrt(64)) < 0.02  # activations keep their scale
    assert torch.equal(a[1].weight, torch.ones(32))  # a norm's constant gain stays exact
