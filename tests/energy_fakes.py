"""Fakes behind the energy seam, built from public dumps.

- IOReport Energy Model rows of an M1 Ultra (names and units): lablup/all-smi pull request #424 ("verify IOReport
  energy channels and SMC keys on an M1 Ultra"): `DIE_0_CPU Energy` and `DIE_1_CPU Energy` in mJ, per-die
  `GPU0_0`, `ANE0_0`/`ANE0_1`, `DRAM0_0`/`DRAM0_1` in mJ, PCIe rows in uJ, `GPU Energy` in nJ.
- Exact matching and the 2 s batches: lablup/all-smi pull request #412 and issue #415 (substring matching summed
  334 channels into CPU power; mJ counters publish in batches 2.03-2.23 s apart; `GPU Energy` stamped when read
  and exactly 0 at idle).
- A row stuck at zero: vladkens/macmon issue #76 (`CPU Energy` stalled at 0 on a macOS 27 beta).
- M1-M4 and M5 names: ml-energy/zeus-apple-silicon's README table (`ECPU`, `PCPU`, `MCPU0`, `PACC_0`, `CPU Energy`,
  `GPU Energy`, `GPU SRAM`, `DRAM`, `ANE`); its test mocker (tests/mocker, tests/tests_python/test_monitor.py)
  pushes samples as {channel: (value, unit)}, the shape `Samples` replays here, units from nJ to kJ.
- zeus-apple-silicon's Python API (`AppleEnergyMonitor.get_cumulative_energy()` -> `AppleEnergyMetrics` with
  `cpu_total_mj`, `gpu_mj`, `dram_mj`, `ane_mj`...): its 1.1.0 macOS wheel, checked by
  tests/test_energy_meters.py against tests/fixtures/energy/zeus_apple_silicon_api.json."""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mpsup.energy.apple_rows import Rows
from mpsup.energy.meter import MeterInfo, Reading

M1_ULTRA_ROWS: dict[str, tuple[float, str]] = {
    "DIE_0_CPU Energy": (1200, "mJ"),
    "DIE_1_CPU Energy": (800, "mJ"),
    "DIE_0_ECPU": (300, "mJ"),  # inside DIE_0_CPU Energy: counted there, never again
    "DIE_0_PCPU": (700, "mJ"),
    "PCPU1DTL2b": (5, "mJ"),
    "GPU0_0": (4000, "mJ"),  # the same GPU energy as `GPU Energy`, per die
    "GPU SRAM0_0": (90, "mJ"),
    "ANE0_0": (10, "mJ"),
    "ANE0_1": (20, "mJ"),
    "ISP0_0": (50, "mJ"),
    "DRAM0_0": (600, "mJ"),
    "DRAM0_1": (400, "mJ"),
    "AMCC0_0": (30, "mJ"),
    "apciec2 Energy": (7000, "uJ"),
    "PCIe Port 0 Energy": (9000, "uJ"),
    "GPU Energy": (4_000_000_000, "nJ"),
}
M5_MAX_ROWS: dict[str, tuple[float, str]] = {
    "CPU Energy": (3000, "mJ"),
    "MCPU0": (400, "mJ"),
    "MCPU1": (500, "mJ"),
    "MCPU0_0": (100, "mJ"),
    "PACC_0": (200, "mJ"),
    "PCPU": (1800, "mJ"),
    "MCPM0": (10, "mJ"),
    "PCPM": (20, "mJ"),
    "DRAM": (900, "mJ"),
    "GPU Energy": (2_500_000_000, "nJ"),
    "ANE": (0, "mJ"),
}


@dataclass
class Samples:
    """A row source replaying samples in order, as zeus-apple-silicon's Mocker does; the last one repeats."""

    samples: list[dict[str, tuple[float, str]]]
    taken: int = 0

    def __call__(self) -> Rows:
        s = self.samples[min(self.taken, len(self.samples) - 1)]
        self.taken += 1
        return s


@dataclass
class FakeAppleEnergyMetrics:
    """zeus-apple-silicon's AppleEnergyMetrics: every field in mJ, None where the chip has no such row."""

    cpu_total_mj: int | None = None
    efficiency_cores_mj: list[int] | None = None
    performance_cores_mj: list[int] | None = None
    efficiency_cluster_mj: list[int] | None = None
    performance_cluster_mj: list[int] | None = None
    efficiency_core_manager_mj: int | None = None
    performance_core_manager_mj: int | None = None
    dram_mj: int | None = None
    gpu_mj: int | None = None
    gpu_sram_mj: int | None = None
    ane_mj: int | None = None


@dataclass
class FakeAppleEnergyMonitor:
    """zeus-apple-silicon's AppleEnergyMonitor, replaying cumulative metrics."""

    metrics: list[FakeAppleEnergyMetrics]
    taken: int = 0
    windows: dict[str, FakeAppleEnergyMetrics] = field(default_factory=dict)

    def get_cumulative_energy(self) -> FakeAppleEnergyMetrics:
        m = self.metrics[min(self.taken, len(self.metrics) - 1)]
        self.taken += 1
        return m

    def begin_window(self, label: str, restart: bool = False) -> None:
        if label in self.windows and not restart:
            raise RuntimeError(f"window {label} is already running")
        self.windows[label] = self.get_cumulative_energy()

    def end_window(self, label: str) -> FakeAppleEnergyMetrics:
        if label not in self.windows:
            raise RuntimeError(f"no window {label}")
        start, end = self.windows.pop(label), self.get_cumulative_energy()
        return FakeAppleEnergyMetrics(
            **{
                k: (getattr(end, k) - getattr(start, k))
                if isinstance(getattr(end, k), int) and isinstance(getattr(start, k), int)
                else None
                for k in ("cpu_total_mj", "dram_mj", "gpu_mj", "gpu_sram_mj", "ane_mj")
            }
        )


class FakeClock:
    """A clock that moves only when told: each read of a fake meter costs `read_s`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@dataclass
class StepMeter:
    """A meter whose parts move in steps: `step_s` apart per part (0.1 s like NVML, 2 s like Apple's batched rows),
    at `watts` per part; None for a part that never moves (a row reading zero)."""

    clock: FakeClock
    watts: dict[str, float]
    step_s: dict[str, float | None]
    stamped: tuple[str, ...] = ("gpu",)
    read_s: float = 0.004

    @property
    def info(self) -> MeterInfo:
        parts = tuple(self.watts)
        return MeterInfo("fake-steps", "steps", "sum", parts, parts, self.stamped, parts[0])

    def read(self) -> Reading:
        self.clock.now += self.read_s
        t = self.clock.now
        joules = {}
        for p, w in self.watts.items():
            step = self.step_s[p]
            joules[p] = 0.0 if step is None else w * step * int(t / step)
        return Reading(t, joules)

    def close(self) -> None:
        return None


def _children_cpu_s() -> float:
    """User + system seconds of this process's live children (the workers), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


@dataclass
class WorkerCpuMeter:
    """For a real bench: a "GPU" drawing 20 W idle plus 30 W per CPU second the workers spend (so energy follows
    the work, not the clock), and a "cpu" part published in batches 1.5 s apart, like Apple's rows."""

    clock: Callable[[], float] = time.perf_counter
    t0: float = field(default_factory=time.perf_counter)
    cpu0: float = field(default_factory=_children_cpu_s)

    @property
    def info(self) -> MeterInfo:
        return MeterInfo(
            "fake-worker-cpu", "the workers' CPU time", "gpu + cpu", ("gpu", "cpu"), ("gpu", "cpu"), ("gpu",), "gpu"
        )

    def read(self) -> Reading:
        t = self.clock()
        wall = t - self.t0
        busy = _children_cpu_s() - self.cpu0
        batch = 1.5 * int(wall / 1.5)
        return Reading(t, {"gpu": 20.0 * wall + 30.0 * busy, "cpu": 5.0 * batch})

    def close(self) -> None:
        return None


@dataclass
class LaggingStepMeter:
    """NVML's counter as an H100 showed it (docs/explanation/energy.md; /work/.device/3 in the issue's run): the
    value moves only every `step_s` (100 ms), what it publishes at a move is the energy of `lag_s` before it (up
    to one step late), and a read costs `read_s` (2.6 ms) of the caller's time. The energy underneath is
    WorkerCpuMeter's (20 W, plus 30 W per CPU second the workers spend), sampled every `sample_s` by a thread so
    the value of any moment in the past can be looked up: a lagging counter publishes the past."""

    step_s: float = 0.1
    lag_s: float = 0.1
    read_s: float = 0.0026
    sample_s: float = 0.005
    truth: WorkerCpuMeter = field(default_factory=WorkerCpuMeter)
    _history: list[tuple[float, float]] = field(default_factory=list, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._history.append((self.truth.clock(), self.truth.read().joules["gpu"]))
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.sample_s):
            r = self.truth.read()
            self._history.append((r.stamp, r.joules["gpu"]))

    @property
    def info(self) -> MeterInfo:
        return MeterInfo("fake-nvml-lag", "the workers' CPU time, as NVML", "gpu", ("gpu",), ("gpu",), ("gpu",), "gpu")

    def at(self, t: float) -> float:
        """The true cumulative joules at `t`, interpolated between the thread's samples."""
        h = self._history
        i = bisect.bisect_right(h, t, key=lambda x: x[0])
        if i == 0:
            return h[0][1]
        if i == len(h):
            return h[-1][1]
        (t0, j0), (t1, j1) = h[i - 1], h[i]
        return j0 + (j1 - j0) * (t - t0) / (t1 - t0) if t1 > t0 else j1

    def read(self) -> Reading:
        start = self.truth.clock()
        time.sleep(self.read_s)  # the driver call's cost, paid by the caller
        moved = self.step_s * math.floor(start / self.step_s)  # the counter's last move before the read
        return Reading(start + self.read_s / 2, {"gpu": self.at(moved - self.lag_s)})

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
