"""Which CPUs the workers run on (`bench --affinity`), as pyperf's `--affinity` does.

Why pin at all: a GPU layer of 15-30 us is bound by the host issuing it, and two worker processes of
the same torch left to the scheduler can issue at persistently different speeds for the life of the
processes (measured: docs/evidence/history.md, "Pinning the workers"). Both environments pinned to the same CPU
take turns on the same core, so that difference cannot lean one way.

macOS has no CPU affinity interface (threads only get QoS classes), so there `auto` means "not pinned"
and a list is refused."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from mpsup.errors import UserError

AUTO, NONE = "auto", "none"
MAX_CPU = 1 << 16  # far above any machine; bounds what a hostile list may ask the kernel for
_NUMBER = re.compile(r"[0-9]{1,6}")


@dataclass(frozen=True)
class Affinity:
    cpus: tuple[int, ...] | None  # None: not pinned
    why: str  # for the record and the plan notes
    # CPU workloads: the workers' intra-op threads, one per CPU in this order (OpenMP places), the
    # calling thread on the first; the same in every worker. None: left to the scheduler.
    threads_on: tuple[int, ...] | None = None


def allowed_cpus() -> tuple[int, ...] | None:
    """The CPUs this process may run on, or None where the system cannot say (macOS)."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    return tuple(sorted(get(0)))


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """`3`, `2,3` or `0-3,8`: what taskset -c and pyperf --affinity take."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        # ASCII digits only, and few of them: str.isdigit() takes superscripts and other scripts' digits.
        if not _NUMBER.fullmatch(lo) or (sep and not _NUMBER.fullmatch(hi)):
            raise UserError(f"--affinity {text!r}: expected auto, none, or CPUs such as 3, 2,3 or 0-3")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first > last or last >= MAX_CPU:
            raise UserError(f"--affinity {text!r}: {part} is not a CPU range")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def choose(text: str | None, device: str) -> Affinity:
    """`auto` (the default) pins CUDA workers to one CPU, the last this process may use (CPU 0 takes
    most interrupts): a GPU launch is single-threaded. CPU workers keep every core, but each intra-op
    thread is bound to one of them, the calling thread to the last, in both environments alike: left to
    the scheduler, a worker's two threads share one CPU or spread over two for the life of a layer's
    measurement, and which of the two a worker gets leans a CPU A/A run one way (measured:
    docs/evidence/cpu-aa-bias.md)."""
    choice = (AUTO if text is None else text).strip().lower()
    allowed = allowed_cpus()
    if choice == NONE:
        return Affinity(None, "not pinned (--affinity none)")
    if choice == AUTO:
        if allowed is None:
            return Affinity(None, "not pinned (this system has no CPU affinity interface)")
        if device == "cpu" and len(allowed) > 1:
            order = (allowed[-1], *allowed[:-1])
            return Affinity(
                None,
                f"not pinned; each worker's threads one per CPU ({','.join(map(str, order))}), "
                "the same in every worker (--affinity auto)",
                threads_on=order,
            )
        if device != "cuda":
            return Affinity(None, f"not pinned (--device {device} uses every core)")
        return Affinity((allowed[-1],), f"every worker on CPU {allowed[-1]} (--affinity auto)")
    cpus = parse_cpu_list(choice)
    if allowed is None:
        raise UserError(f"--affinity {text!r}: this system has no CPU affinity interface; use auto or none")
    outside = sorted(set(cpus) - set(allowed))
    if outside:
        raise UserError(f"--affinity {text}: CPU {outside[0]} is not one this process may use ({_ranges(allowed)})")
    return Affinity(cpus, f"every worker on CPU {_ranges(cpus)} (--affinity)")


def _ranges(cpus: tuple[int, ...]) -> str:
    out: list[str] = []
    start = prev = cpus[0]
    for c in (*cpus[1:], None):
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)
