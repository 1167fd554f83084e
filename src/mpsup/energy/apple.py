"""Apple silicon: IOReport's Energy Model through `zeus-apple-silicon` (an optional extra), no sudo.

These are the SoC's model-based estimates (from activity, frequency and voltage), not a meter on a rail.
zeus-apple-silicon reads every row in its own unit and sums a multi-die chip's dies; its cumulative figures
come here as rows under their IOReport names, in mJ, and go through the same exact-name classifier as raw
rows. Its CPU total is `CPU Energy`, never added to the clusters inside it."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from mpsup.energy.apple_rows import Rows, classify
from mpsup.energy.meter import Choice, CounterMeter, MeterError, MeterInfo

# zeus-apple-silicon's AppleEnergyMetrics fields (mJ) -> the IOReport row each one sums.
ZEUS_FIELDS = {"cpu_total_mj": "CPU Energy", "gpu_mj": "GPU Energy", "dram_mj": "DRAM", "ane_mj": "ANE"}
INSTALL = "pip install 'mpsup[energy-mac]'"


def zeus_rows(monitor: Any) -> Callable[[], Rows]:
    """Rows from an AppleEnergyMonitor: its cumulative figures, each under its row's name, in mJ."""

    def rows() -> Rows:
        metrics = monitor.get_cumulative_energy()
        out: dict[str, tuple[float, str]] = {}
        for attr, row in ZEUS_FIELDS.items():
            v = getattr(metrics, attr, None)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[row] = (float(v), "mJ")
        return out

    return rows


class AppleMeter(CounterMeter):
    _source = "IOReport"  # its extension raises RuntimeError

    def __init__(
        self, rows: Callable[[], Rows], clock: Callable[[], float] = time.perf_counter, main: str = "gpu"
    ) -> None:
        self._rows = rows
        self._clock = clock
        first = classify(rows())
        parts = tuple(p for p in ("cpu", "gpu", "dram", "ane") if p in first.joules)
        if not parts:
            raise MeterError("IOReport's Energy Model gave no CPU, GPU, DRAM or ANE row")
        notes = ["GPU SRAM, ISP, display and the rest of the SoC are left out", "a model-based estimate, not a meter"]
        if first.skipped:
            notes.append(f"rows of an unknown unit left out: {', '.join(first.skipped[:5])}")
        self._info = MeterInfo(
            name="apple-ioreport",
            reads="IOReport Energy Model: the SoC's estimates of CPU, GPU, DRAM and ANE energy",
            total="CPU Energy + GPU Energy + DRAM + ANE (CPU clusters are inside CPU Energy, not added)",
            parts=parts,
            total_parts=parts,
            stamped=("gpu",) if "gpu" in parts else (),
            main=main if main in parts else parts[0],
            notes=tuple(notes),
        )

    def _joules(self) -> dict[str, float]:
        got = classify(self._rows()).joules
        return {p: got.get(p, 0.0) for p in self._info.parts}

    def close(self) -> None:
        return None


def open_apple(main: str = "gpu") -> Choice:
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return Choice(None, "IOReport's Energy Model is on Apple-silicon Macs only")
    try:
        from zeus_apple_silicon import AppleEnergyMonitor
    except ImportError:
        return Choice(None, f"zeus-apple-silicon is not installed ({INSTALL})")
    try:
        return Choice(AppleMeter(zeus_rows(AppleEnergyMonitor()), main=main))
    except Exception as exc:
        return Choice(None, f"IOReport could not be read ({str(exc)[:200]})")
