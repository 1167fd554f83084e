"""Energy paired with time: the parent reads the meter around each worker turn, so each turn's joules sit beside
its samples, round by round, in both builds.

A turn's reading after is the next turn's reading before when nothing ran between them (the two turns of a
round, and one round to the next): one read per turn. A workload whose turns are too short for that read to
cost under MAX_READ_SHARE of them is not read at all. Idle power is read with the workers up and waiting,
before the first workload."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpsup.bench.measurement import EnergyTurn, EnvMeasurement
from mpsup.energy.choose import choose_meter
from mpsup.energy.meter import Meter, MeterError, Reading
from mpsup.energy.probe import Calibration, calibrate

IDLE_S = 2.0  # the idle window: twenty steps of a 100 ms counter, one batch of a 2 s one
MAX_READ_SHARE = 0.10  # of a turn's time, one read at most
# A reading this recent is the next turn's start: what ran between (a median, a list append) is the parent's.
CHAIN_S = 0.005


@dataclass
class EnergyTurns:
    meter: Meter | None = None
    calibration: Calibration | None = None
    clock: Callable[[], float] = time.perf_counter
    failure: str | None = None
    reads: int = 0
    read_s: float = 0.0  # spent reading, over the run
    skipped_turns: int = 0  # too short to read within MAX_READ_SHARE
    windows_s: float = 0.0  # spent in energy windows (bench/energy_windows.py), over the run
    window_error: str | None = None  # a worker's error that ended a workload's windows (its timing stands)
    plans: dict[str, dict[str, object]] = field(default_factory=dict)  # each windowed workload's plan, by name
    _last: Reading | None = field(default=None, repr=False)

    def begin(self, expected_s: float) -> Reading | None:
        """The reading a turn starts from, or None where this turn is not read."""
        if self.meter is None or self.calibration is None or self.failure:
            return None
        if expected_s * MAX_READ_SHARE < self.calibration.read_s:
            self.skipped_turns += 1
            return None
        last = self._last
        if last is not None and self.clock() - last.stamp <= CHAIN_S:
            return last
        return self._read()

    def read(self) -> Reading | None:
        """One reading outside the turns (a window's edge), or None once the meter has failed."""
        if self.meter is None or self.failure:
            return None
        return self._read()

    def end(self, start: Reading | None, r: EnvMeasurement, calls: int, *, warmup: bool) -> None:
        """Called after every turn, read or not: the measuring turns are numbered so that a turn too short to
        read leaves a gap, never shifts the next one into another round."""
        number = None if warmup else r.measuring_turns
        if not warmup:
            r.measuring_turns += 1
        if start is None:
            return
        after = self._read()
        if after is None:
            return
        joules = {p: after.joules[p] - start.joules[p] for p in after.joules}
        r.energy.append(EnergyTurn(warmup, calls, after.stamp - start.stamp, joules, number))

    def _read(self) -> Reading | None:
        assert self.meter is not None
        t0 = self.clock()
        try:
            got = self.meter.read()
        except MeterError as exc:
            self.failure = str(exc)[:300]
            self._last = None
            return None
        self.read_s += self.clock() - t0
        self.reads += 1
        self._last = got
        return got

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()

    def summary(self) -> dict[str, Any]:
        """What reading cost the run; and why it stopped, where it did."""
        doc: dict[str, Any] = {
            "read_count": self.reads,
            "read_total_s": self.read_s,
            "skipped_turns": self.skipped_turns,
            "windows_total_s": self.windows_s,
        }
        if self.failure:
            doc["failure"] = self.failure
        if self.window_error:
            doc["window_error"] = self.window_error
        if self.plans:
            doc["windows"] = dict(self.plans)
        return doc


def start_energy(device: str, idle_s: float = IDLE_S) -> tuple[EnergyTurns, dict[str, Any]]:
    """The run's meter, calibrated while the workers idle, and the record's `energy_meter`; without a meter,
    turns that read nothing and the one reason."""
    choice = choose_meter(device)
    if choice.meter is None:
        return EnergyTurns(), {"name": None, "why": choice.why}
    meter = choice.meter
    try:
        cal = calibrate(meter, idle_s)
    except MeterError as exc:
        meter.close()
        return EnergyTurns(), {"name": None, "why": f"{meter.info.name} could not be read ({str(exc)[:200]})"}
    # "pairing": energy per call comes from windows (bench/energy_windows.py); the turns read beside them are kept
    # as raw data and not paired (a 100 ms counter cannot attribute a turn of a few ms).
    return EnergyTurns(meter, cal), {**meter.info.to_json(), **cal.to_json(), "pairing": "windows"}
