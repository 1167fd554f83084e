"""A bench clock made of the runner's timed sample blocks, so a test decides when a share runs out."""

from __future__ import annotations

from dataclasses import dataclass, field

from mpsup.bench.measurement import EnvMeasurement
from mpsup.bench.runner import EnvSession, Runner


@dataclass
class TurnClock:
    """Each timed block the runner asks a worker for moves this clock by `step_s`; setup and warmup take no
    time. When a paired loop stops then depends on the rounds taken, never on how busy the machine is.
    `discards`: the discarded blocks asked for with each timed one, in order."""

    step_s: float
    discards: list[int] = field(default_factory=list)

    def __call__(self) -> float:
        return len(self.discards) * self.step_s

    def watch(self, runner: Runner) -> None:
        """Count `runner`'s timed blocks: pass this clock to its BenchOptions, then call this before start()."""
        sample = runner._sample

        def counted(s: EnvSession, r: EnvMeasurement, count: int, *, warmup: bool, discard: int = 0) -> list[float]:
            if not warmup:
                self.discards.append(discard)
            return sample(s, r, count, warmup=warmup, discard=discard)

        runner._sample = counted  # type: ignore[method-assign]
