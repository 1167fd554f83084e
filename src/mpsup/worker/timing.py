"""Timed blocks and calls-per-sample calibration. The clock is injectable for tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Clock = Callable[[], float]


@dataclass
class BlockTime:
    host_s: float  # wall time of n back-to-back calls, synchronized at both ends
    device_s: float | None  # the same span by device events, where they exist


def time_block(
    fn: Callable[[], Any],
    calls: int,
    synchronize: Callable[[], None],
    clock: Clock = time.perf_counter,
    events: tuple[Any, Any] | None = None,
    after: Callable[[], None] | None = None,
) -> BlockTime:
    # Sync before reading the clock: device work is asynchronous, and a timer that forgets it
    # measures how fast work is queued, not how fast it runs.
    if after is None:
        # A Device's synchronize brings its own after-block hook (memory reads), so every caller
        # that times with a device gets them, outside the timed span.
        after = getattr(getattr(synchronize, "__self__", None), "after_block", None)
    synchronize()
    start = clock()
    if events is not None:
        events[0].record()
    for _ in range(calls):
        fn()
    if events is not None:
        events[1].record()
    synchronize()
    host = clock() - start
    if after is not None:
        after()
    device = None
    if events is not None:
        try:
            device = events[0].elapsed_time(events[1]) / 1000.0
        except Exception:
            device = None
    return BlockTime(host, device)


def calibrate_calls(
    fn: Callable[[], Any],
    synchronize: Callable[[], None],
    target_sample_s: float,
    clock: Clock = time.perf_counter,
    max_calls: int = 1 << 16,
) -> tuple[int, float]:
    """Calls per sample so that a sample lasts about `target_sample_s`: long against the clock's
    resolution and the per-sample sync, short enough to take many samples.

    Returns (calls, estimated seconds per call)."""
    calls = 1
    while True:
        elapsed = time_block(fn, calls, synchronize, clock).host_s
        if elapsed >= target_sample_s / 4 or calls >= max_calls:
            break
        calls *= 4 if elapsed < target_sample_s / 64 else 2
    per_call = max(elapsed / calls, 1e-9)
    return max(1, min(max_calls, round(target_sample_s / per_call))), per_call
