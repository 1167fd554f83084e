"""The seam every energy meter sits behind: what it reads, what its total means, and cumulative joules per part.

A part is one of PARTS. A meter's total is the sum of its `total_parts` only: a CPU total is never added
to its clusters, nor a RAPL package to the cores inside it. A part is `stamped` when its counter is current
at the moment it is read (NVML, Apple's GPU row, RAPL); the others may move in batches (Apple's CPU, DRAM
and ANE rows on recent macOS), so only a run's total says anything of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

PARTS = ("package", "cpu", "gpu", "dram", "ane")


class MeterError(Exception):
    """A read that failed after the meter was chosen (a driver gone, a file made unreadable)."""


@dataclass(frozen=True)
class MeterInfo:
    name: str  # "apple-ioreport", "nvml", "rapl"
    reads: str  # what it reads, in words
    total: str  # what its total is, in words
    parts: tuple[str, ...]  # which of PARTS it gives
    total_parts: tuple[str, ...]  # the parts that add up to its total, none inside another
    stamped: tuple[str, ...]  # the parts current when read, as far as the meter knows before probing
    main: str  # the part a sentence names ("GPU 11.2 W"): the one the measured work draws on
    notes: tuple[str, ...] = ()  # what it leaves out

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "reads": self.reads,
            "total": self.total,
            "parts": list(self.parts),
            "total_parts": list(self.total_parts),
            "stamped": list(self.stamped),
            "main": self.main,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Reading:
    stamp: float  # perf_counter seconds, halfway through the read
    joules: Mapping[str, float] = field(default_factory=dict)  # cumulative, per part; never decreasing


class Meter(Protocol):
    @property
    def info(self) -> MeterInfo: ...

    def read(self) -> Reading: ...

    def close(self) -> None: ...


class CounterMeter:
    """What every meter shares: its info, and a read stamped halfway through `_joules`, whose failure (any of
    `_failures`) ends reading with one MeterError naming `_source`, never the run."""

    _info: MeterInfo
    _clock: Callable[[], float]
    _source = "meter"
    _failures: tuple[type[BaseException], ...] = (Exception,)

    @property
    def info(self) -> MeterInfo:
        return self._info

    def read(self) -> Reading:
        t0 = self._clock()
        try:
            joules = self._joules()
        except self._failures as exc:
            raise MeterError(f"{self._source} read failed: {exc}") from exc
        t1 = self._clock()
        return Reading((t0 + t1) / 2, joules)

    def _joules(self) -> dict[str, float]:
        raise NotImplementedError


@dataclass(frozen=True)
class Choice:
    """The meter a device gets, or why it gets none (one clause, for a line of its own)."""

    meter: Meter | None
    why: str | None = None
