"""Input values that no torch version can change, and the float64 truth's view of them.

Both builds of a paired run, and the float64 reference that judges them, must compute on the same numbers. A
library's init or `manual_seed` + `randn` is not promised across versions, so values come from a counter-based
integer hash computed with int64 arithmetic that never overflows (exact in every torch, on every device): 24
random bits per element, scaled into the range asked for in float64 and rounded to float32 (exactly: 24 bits),
then to the tensor's dtype on the CPU, where rounding is IEEE round-to-nearest-even in every build. Only a tile
is drawn; a larger tensor repeats it (as the worker always has: the values' statistics do not change timing).

Every tensor drawn feeds a digest of its bytes in its own dtype, so a record can show that both builds and the
reference saw the same values. The reference (`TRUTH.on`) draws exactly the same values in the same order,
rounds them to the dtype the builds use, and then widens them to float64."""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import zlib
from dataclasses import dataclass, field

import torch

TILE = 1 << 22  # elements drawn; a larger tensor repeats them (8 MiB in bf16: beyond any cache)
_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B1
_MIX = 0x45D9F3B  # < 2**27: a 32-bit value times it stays below 2**59, so int64 never wraps

# A test hook (with MPSUP_WORKER_TEST_HOOKS=1): this worker's drawn values are nudged, as a build whose casts or
# copies changed the inputs would, so the digest check has something real to catch.
PERTURB = os.environ.get("MPSUP_WORKER_TEST_HOOKS") == "1" and os.environ.get("MPSUP_TEST_PERTURB_VALUES") == "1"


CHUNK = 1 << 18  # hashed at a time: the int64 temporaries stay a few MiB whatever the tile


def _hash_range(start: int, end: int, seed: int) -> torch.Tensor:
    """The hashes of (seed, start..end-1)."""
    x = (torch.arange(start, end, dtype=torch.int64) + (seed * _GOLDEN) % (1 << 32)) & _MASK
    for _ in range(2):
        x = ((x ^ (x >> 16)) * _MIX) & _MASK
    return x ^ (x >> 16)


def uniform(n: int, seed: int, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """n float32 values in [low, high) on the CPU, the same in every torch."""
    out = torch.empty(n, dtype=torch.float32)
    for start in range(0, n, CHUNK):
        end = min(n, start + CHUNK)
        unit = (_hash_range(start, end, seed) >> 8).to(torch.float64) * 2.0**-24  # [0, 1), 24 bits: exact in float32
        out[start:end] = low + unit * (high - low)
    return out


def integers(n: int, seed: int, low: int, high: int) -> torch.Tensor:
    """n int64 values in [low, high] on the CPU."""
    span = max(1, high - low + 1)
    out = torch.empty(n, dtype=torch.int64)
    for start in range(0, n, CHUNK):
        end = min(n, start + CHUNK)
        out[start:end] = low + _hash_range(start, end, seed) % span
    return out


def bytes_of(t: torch.Tensor) -> bytes:
    """A contiguous CPU tensor's bytes, without numpy (which a measured environment may lack)."""
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


@dataclass
class Values:
    """The worker's draws since the last `reset` (one workload's build): a counter seeds each tensor in order,
    a name seeds a model's parameter, and every draw feeds the digest."""

    counter: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    on: bool = False  # the float64 reference: values as the builds round them, then widened to float64

    def reset(self) -> None:
        self.counter = 0
        self.digest = hashlib.sha256()

    def next_seed(self) -> int:
        self.counter += 1
        return self.counter

    def note(self, tile: torch.Tensor, label: str) -> None:
        self.digest.update(f"{label}:{tuple(tile.shape)}:{tile.dtype}|".encode())
        self.digest.update(bytes_of(tile))

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


TRUTH = Values()


def _tile_floats(n: int, seed: int, dtype: torch.dtype, low: float, high: float, label: str) -> torch.Tensor:
    """The first min(n, TILE) values of a float tensor, in its dtype, on the CPU (noted in the digest)."""
    tile = uniform(min(n, TILE), seed, low, high).to(dtype)
    if PERTURB and tile.numel():
        tile[0] = tile[0] * 1.5 + 0.25
    TRUTH.note(tile, label)
    return tile


def _spread(tile: torch.Tensor, n: int, out: torch.Tensor) -> torch.Tensor:
    """`out` (1-D, n elements, any device) filled by repeating the tile."""
    if n == 0:
        return out
    out[: tile.numel()].copy_(tile)
    filled = tile.numel()
    while filled < n:
        k = min(filled, n - filled)
        out[filled : filled + k].copy_(out[:k])
        filled += k
    return out


def floats(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    *,
    low: float = -1.0,
    high: float = 1.0,
    seed: int | None = None,
    label: str = "",
) -> torch.Tensor:
    """A float tensor from the stream, in `dtype` on `device`; in the reference, those values widened to float64
    on the CPU."""
    n = math.prod(shape)
    seed = TRUTH.next_seed() if seed is None else seed
    tile = _tile_floats(n, seed, dtype, low, high, label or str(seed))
    if TRUTH.on:
        return _spread(tile.to(torch.float64), n, torch.empty(n, dtype=torch.float64)).view(shape)
    return _spread(tile.to(device), n, torch.empty(n, dtype=dtype, device=device)).view(shape)


def ints(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, low: int, high: int, seed: int | None = None
) -> torch.Tensor:
    """An integer tensor from the stream with values in [low, high]."""
    n = math.prod(shape)
    seed = TRUTH.next_seed() if seed is None else seed
    tile = integers(min(n, TILE), seed, low, high).to(dtype)
    TRUTH.note(tile, str(seed))
    target = torch.device("cpu") if TRUTH.on else device
    return _spread(tile.to(target), n, torch.empty(n, dtype=dtype, device=target)).view(shape)


def bools(shape: tuple[int, ...], device: torch.device, share: float) -> torch.Tensor:
    """A boolean tensor, True at about `share` of its elements."""
    n = math.prod(shape)
    seed = TRUTH.next_seed()
    tile = uniform(min(n, TILE), seed, 0.0, 1.0) < share
    TRUTH.note(tile, str(seed))
    target = torch.device("cpu") if TRUTH.on else device
    return _spread(tile.to(target), n, torch.empty(n, dtype=torch.bool, device=target)).view(shape)


def name_seed(name: str) -> int:
    """A parameter's own stream, from its name: independent of the order a library builds its modules in."""
    return (zlib.crc32(name.encode()) << 8) | 0x5A


def _fan_in(shape: torch.Size) -> int:
    return max(1, math.prod(shape[1:])) if len(shape) >= 2 else 0


@torch.no_grad()
def fill_parameters(module: torch.nn.Module, value_dtype: torch.dtype) -> None:
    """Every parameter of a model built with random weights, from the stream: uniform with a standard deviation
    of 1/sqrt(fan-in) (activations keep their scale through the blocks, so the logits are not flat), 1-D ones
    (biases, gains the library draws) at a small scale. A parameter the library sets to one constant (a norm's
    ones, a bias's zeros) keeps it: a constant is exact in every version. Values are rounded to `value_dtype`,
    the dtype the builds compute in."""
    for name, p in module.named_parameters():
        if not p.dtype.is_floating_point or p.numel() == 0:
            continue
        flat = p.detach().reshape(-1)
        first = flat[:1]
        if bool((flat == first).all()):
            TRUTH.note(first.to("cpu", value_dtype), name)
            continue
        fan = _fan_in(p.shape)
        bound = math.sqrt(3.0 / fan) if fan else 0.02
        tile = _tile_floats(p.numel(), name_seed(name), value_dtype, -bound, bound, name)
        if p.is_contiguous():  # in place: a second copy of a GiB-sized embedding would double the build's peak
            _spread(tile.to(p.device, p.dtype), p.numel(), p.view(-1))
        else:
            p.copy_(_spread(tile.to(p.device, p.dtype), p.numel(), torch.empty_like(p).view(-1)).view(p.shape))


def note_parameters(module: torch.nn.Module) -> None:
    """A model's own weights (--real-weights) in the digest: each parameter's first tile, by name."""
    for name, p in module.named_parameters():
        TRUTH.note(p.detach().reshape(-1)[:TILE].to("cpu"), name)
