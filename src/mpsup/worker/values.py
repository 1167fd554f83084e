"""Input values that no torch version can change, and the float64 truth's view of them.

Both builds of a paired run, and the float64 reference that judges them, must compute on the same numbers. A
library's init or `manual_seed` + `randn` is not promised across versions, so values come from a counter-based
integer hash computed with int64 arithmetic that never overflows (exact in every torch, on every device): 24
random bits per element, scaled into the range asked for in float64 and rounded to float32 (exactly: 24 bits),
then to the tensor's dtype on the CPU, where rounding is IEEE round-to-nearest-even in every build.

Hashing costs: about 0.1 s per million elements on a laptop's CPU, which at one tile per weight was a minute of a
3B model's every build. So the hash makes one tile of TILE unit values per process, and every draw is that tile,
scaled once per (range, dtype) and rotated by an offset its seed gives: a draw costs a copy, not a hash, and any
slice of it (a row block of an output head) is as cheap to make alone. A larger tensor repeats its rotated tile
(the values' statistics do not change timing).

Every draw feeds a digest (its label, shape, dtype, the scaled tile's own digest and the offset), so a record
can show that both builds and the reference saw the same values. The reference (`TRUTH.on`) draws exactly the
same values in the same order, rounds them to the dtype the builds use, and then widens them to float64."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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

    def restart_counter(self) -> None:
        """Seeds count from the start again (the digest goes on): each call of a group draws as it would alone,
        which is how the accuracy repro script, computing that one call, draws it."""
        self.counter = 0

    def next_seed(self) -> int:
        self.counter += 1
        return self.counter

    def note(self, tile: torch.Tensor, label: str) -> None:
        self.digest.update(f"{label}:{tuple(tile.shape)}:{tile.dtype}|".encode())
        self.digest.update(bytes_of(tile))

    def note_draw(self, label: str, n: int, draw: Draw, tile_digest: str) -> None:
        """A float draw, by what fixes its values: the scaled tile's digest and where in it the draw starts."""
        self.digest.update(f"{label}:{n}:{draw.dtype}:{tile_digest}:{offset_of(draw.seed)}|".encode())

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[str]]:
        """Notes made inside go to a digest of their own, which then enters this one as one note (`absorb`): a
        model kept from one workload to the next re-enters its weights' notes without drawing them again."""
        outer, self.digest = self.digest, hashlib.sha256()
        got: list[str] = []
        try:
            yield got
        finally:
            inner, self.digest = self.digest.hexdigest(), outer
            got.append(inner)
            self.absorb(inner)

    def absorb(self, recorded: str) -> None:
        self.digest.update(f"recorded:{recorded}|".encode())


TRUTH = Values()


# The unit tile's seed: every float draw is a window of this one sequence, scaled to its range and rotated.
TILE_SEED = 0x7A11E
_TILES_KEPT = 16  # scaled tiles kept per process (and per device): a model's weights use a handful of ranges


@dataclass(frozen=True)
class Tile:
    """TILE stream values scaled into one range and rounded to one dtype, on the CPU, with their digest."""

    values: torch.Tensor
    digest: str


_UNIT: list[torch.Tensor] = []
_TILES: dict[tuple[float, float, torch.dtype], Tile] = {}
_ON_DEVICE: dict[tuple[float, float, torch.dtype, str], torch.Tensor] = {}


def unit_tile() -> torch.Tensor:
    """TILE values in [0, 1) in float64 (24 bits each, so exact), hashed once per process."""
    if not _UNIT:
        parts = [(_hash_range(s, min(TILE, s + CHUNK), TILE_SEED) >> 8) for s in range(0, TILE, CHUNK)]
        _UNIT.append(torch.cat(parts).to(torch.float64) * 2.0**-24)
    return _UNIT[0]


def _kept(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _TILES_KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


def scaled_tile(low: float, high: float, dtype: torch.dtype) -> Tile:
    """The unit tile in [low, high), computed in float64, rounded to float32 and then to `dtype`: exactly
    `uniform(TILE, TILE_SEED, low, high).to(dtype)`, made once per range and dtype."""
    key = (float(low), float(high), dtype)
    tile = _TILES.get(key)
    if tile is None:
        scaled = (low + unit_tile() * (high - low)).to(torch.float32).to(dtype)
        if PERTURB:
            scaled[0] = scaled[0] * 1.5 + 0.25
        tile = _kept(_TILES, key, Tile(scaled, hashlib.sha256(bytes_of(scaled)).hexdigest()))
    return tile


def _tile_on(low: float, high: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The scaled tile on `device`, copied there once per process."""
    tile = scaled_tile(low, high, dtype).values
    if device.type == "cpu":
        return tile
    key = (float(low), float(high), dtype, str(device))
    there = _ON_DEVICE.get(key)
    return there if there is not None else _kept(_ON_DEVICE, key, tile.to(device))


def offset_of(seed: int) -> int:
    """Where a seed's draw starts in the tile: a 64-bit mix of the seed in Python integers (the same everywhere)."""
    x = (seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 32)) % TILE


def _window(tile: torch.Tensor, start: int, n: int) -> torch.Tensor:
    """n <= TILE values of the tile from `start`, wrapping round its end."""
    end = start + n
    if end <= tile.numel():
        return tile[start:end]
    return torch.cat([tile[start:], tile[: end - tile.numel()]])


@dataclass(frozen=True)
class Draw:
    """One float tensor's values: element i is the (low, high, dtype) tile's element (offset + i) mod TILE."""

    seed: int
    low: float
    high: float
    dtype: torch.dtype  # the builds' dtype: what the values are rounded to

    def slice(self, start: int, count: int, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Elements [start, start + count) of any tensor drawn so, as `dtype` (default: the draw's) on `device`."""
        out = torch.empty(count, dtype=dtype or self.dtype, device=device)
        return self.fill(out, start)

    def fill(self, out: torch.Tensor, start: int = 0) -> torch.Tensor:
        """`out` (contiguous, any dtype and device) holding elements [start, start + out.numel())."""
        n = out.numel()
        if n == 0:
            return out
        tile = _tile_on(self.low, self.high, self.dtype, out.device)
        window = _window(tile, (offset_of(self.seed) + start) % TILE, min(n, TILE))
        return _spread(window.to(out.dtype), n, out.view(-1)).view(out.shape)


def _draw(n: int, seed: int, dtype: torch.dtype, low: float, high: float, label: str) -> Draw:
    """A float tensor's draw of n values, noted in the digest."""
    draw = Draw(seed, float(low), float(high), dtype)
    TRUTH.note_draw(label, n, draw, scaled_tile(low, high, dtype).digest)
    return draw


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
    draw = _draw(n, seed, dtype, low, high, label or str(seed))
    # A tensor of its own, not a view of a flat one: torch 2.13's CPU bf16 linear took 10 s instead of 0.1 s
    # against a 128256x8192 weight that was a view.
    out = torch.empty(shape, dtype=torch.float64) if TRUTH.on else torch.empty(shape, dtype=dtype, device=device)
    draw.fill(out)
    return out


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


@dataclass(frozen=True)
class ParamValues:
    """How one parameter gets its values: drawn from the stream by its name, or the one constant the library set
    (a norm's ones, a bias's zeros: exact in every version)."""

    name: str
    draw: Draw | None
    constant: float | None = None


def plan_parameters(module: torch.nn.Module, value_dtype: torch.dtype) -> list[tuple[torch.nn.Parameter, ParamValues]]:
    """Every float parameter of a model built with random weights, and how its values come, noted in the digest
    in the model's own order: uniform with a standard deviation of 1/sqrt(fan-in) (activations keep their scale
    through the blocks, so the logits are not flat), 1-D ones (biases, gains the library draws) at a small scale.
    A parameter that holds values (not built on the meta device) and holds one constant keeps it. Values are
    rounded to `value_dtype`, the dtype the builds compute in. A parameter shared by two modules (a tied output
    head) is planned once, under the name the module walk meets first."""
    plans: list[tuple[torch.nn.Parameter, ParamValues]] = []
    for name, p in module.named_parameters():
        if not p.dtype.is_floating_point or p.numel() == 0:
            continue
        if not p.is_meta:
            flat = p.detach().reshape(-1)
            first = flat[:1]
            if bool((flat == first).all()):
                TRUTH.note(first.to("cpu", value_dtype), name)
                plans.append((p, ParamValues(name, None, float(first.to("cpu", torch.float64)))))
                continue
        fan = _fan_in(p.shape)
        bound = math.sqrt(3.0 / fan) if fan else 0.02
        plans.append((p, ParamValues(name, _draw(p.numel(), name_seed(name), value_dtype, -bound, bound, name))))
    return plans


@torch.no_grad()
def fill(p: torch.Tensor, plan: ParamValues) -> None:
    """A parameter's drawn values written into it (a constant one is left as it is)."""
    if plan.draw is None:
        return
    if p.is_contiguous():  # in place: a second copy of a GiB-sized embedding would double the build's peak
        plan.draw.fill(p.view(-1))
    else:
        p.copy_(plan.draw.fill(torch.empty(p.numel(), dtype=p.dtype, device=p.device)).view(p.shape))


def fill_parameters(module: torch.nn.Module, value_dtype: torch.dtype) -> None:
    """Every parameter of a model whose parameters hold memory, filled as `plan_parameters` says."""
    for p, plan in plan_parameters(module, value_dtype):
        fill(p, plan)


def note_parameters(module: torch.nn.Module) -> None:
    """A model's own weights (--real-weights) in the digest: each parameter's first tile, by name."""
    for name, p in module.named_parameters():
        TRUTH.note(p.detach().reshape(-1)[:TILE].to("cpu"), name)
