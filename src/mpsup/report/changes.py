"""One workload's change between the two builds: its times, speedup interval, call and share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mpsup.report.wording import TIME_NOTE
from mpsup.stats import Interval, finite_or_none

# Workloads that are no layer of the model: a phase holds its layers, and an op replayed from a phase's census
# is a piece of a phase, not one more layer to add to them.
NOT_LAYERS = ("phase", "op")


@dataclass
class WorkloadChange:
    name: str
    part: str
    tags: list[str]
    count: int
    baseline_s: float | None
    candidate_s: float | None
    speedup: Interval | None
    # faster, slower, same; n/a (not measured in both, or too few rounds to bound); uncalled (two separate runs)
    change: str
    size: float  # flops (or bytes) per call, for plots
    share: float = 0.0  # of the baseline's estimated total time
    memory_ratio: float | None = None
    ratios: list[float] = field(default_factory=list)
    status: str = "ok"
    p_value: float | None = None
    units: int = 0  # independent units behind the interval (ABBA blocks, or rounds when few)
    candidate_measured_s: float | None = None  # the candidate's pooled median; candidate_s agrees with the speedup
    # Two separate runs: `ratios` holds bootstrap draws of the ratio of medians, not rounds.
    unpaired: bool = False
    reason: str | None = None  # why it was not measured, in the record's words
    budget_needed_s: float | None = None  # the --budget that would measure it, where bench estimated one

    @property
    def significant(self) -> bool:
        return self.change in ("faster", "slower")

    @property
    def share_text(self) -> str:
        """Its share of the layers' time; a phase is the whole model those layers sit in, no share of them."""
        return "whole" if self.part == "phase" else f"{self.share:.1%}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "part": self.part,
            "tags": self.tags,
            "count": self.count,
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "speedup": self.speedup.estimate if self.speedup else None,
            "low": finite_or_none(self.speedup.low) if self.speedup else None,
            "high": finite_or_none(self.speedup.high) if self.speedup else None,
            "significant": self.significant,
            "change": self.change,
            "share": None if self.part == "phase" else self.share,
            "memory_ratio": self.memory_ratio,
            "status": self.status,
            "p_value": self.p_value,
            "units": self.units,
            "rounds": 0 if self.unpaired else len(self.ratios),
            "bounded": bool(self.speedup and math.isfinite(self.speedup.low) and math.isfinite(self.speedup.high)),
            "candidate_measured_s": self.candidate_measured_s,
            "time_note": TIME_NOTE,
        }
