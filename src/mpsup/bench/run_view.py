"""A finished run as bench's screen reads it: the one value its sections (bench/screen.py) and its tables
(bench/tables.py) take."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpsup.runs.schema import RunRecord


@dataclass(frozen=True)
class RunView:
    """A finished run as the screen reads it: the typed record, the document it was read from (the figures of
    bench/figures.py and the phase table read that), and how many workloads the run set out to measure."""

    run: RunRecord
    doc: Mapping[str, Any]
    selected: int | None = None

    @property
    def first(self) -> str:
        """The first environment's label: a single run's only one, a paired run's baseline."""
        return self.run.environments[0].label

    @property
    def paired(self) -> bool:
        return len(self.run.environments) > 1

    @property
    def single_suite(self) -> bool:
        """One environment timing the suite (not a model): the run the roofline and precision lines are about."""
        return self.run.mode == "single" and self.run.model is None
