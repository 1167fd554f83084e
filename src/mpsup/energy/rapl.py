"""Linux RAPL through powercap (`/sys/class/powercap/intel-rapl:*`): package, core and DRAM counters in uJ.

A package zone holds its cores (and uncore) subzones: the total is the packages plus DRAM, never a core
beside its package, nor the `psys` platform zone that holds the packages. Each counter wraps at its
`max_energy_range_uj`; a read below the last one has wrapped once (a read happens far oftener than the
minutes one wrap takes). Since 2020 `energy_uj` is readable by root only on most kernels."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mpsup.energy.meter import Choice, CounterMeter, MeterInfo

POWERCAP = Path("/sys/class/powercap")
_NAMES = {"core": "cpu", "dram": "dram"}  # subzones counted as parts; uncore (an iGPU) is left inside its package


@dataclass
class _Zone:
    path: Path
    part: str
    max_uj: int
    last_uj: int
    wrapped_uj: int = 0  # what the wraps so far add

    def read_uj(self) -> int:
        """Cumulative uJ since the counter's start: each wrap adds the range the counter ran through."""
        now = int((self.path / "energy_uj").read_text().strip())
        if now < self.last_uj:
            self.wrapped_uj += self.max_uj
        self.last_uj = now
        return self.wrapped_uj + now


def _zones(root: Path) -> list[tuple[Path, str]]:
    """(zone folder, part) for each package and its core/DRAM subzones; psys and uncore left out."""
    out: list[tuple[Path, str]] = []
    for top in sorted(root.glob("intel-rapl:*")):
        if top.name.count(":") != 1:
            continue
        name = _name(top)
        if name is None or not name.startswith("package"):
            continue  # psys holds the packages: adding it would count them twice
        out.append((top, "package"))
        for sub in sorted(top.glob(f"{top.name}:*")):
            part = _NAMES.get(_name(sub) or "")
            if part:
                out.append((sub, part))
    return out


def _name(zone: Path) -> str | None:
    try:
        return (zone / "name").read_text().strip()
    except OSError:
        return None


class RaplMeter(CounterMeter):
    _source = "RAPL"
    _failures = (OSError, ValueError)

    def __init__(self, zones: list[_Zone], clock: Callable[[], float] = time.perf_counter) -> None:
        self._zones = zones
        self._clock = clock
        parts = tuple(p for p in ("package", "cpu", "dram") if any(z.part == p for z in zones))
        self._info = MeterInfo(
            name="rapl",
            reads="Linux RAPL (powercap): the CPU package's, its cores' and DRAM's energy counters",
            total="the packages (cores and uncore inside) + DRAM",
            parts=parts,
            total_parts=tuple(p for p in ("package", "dram") if p in parts),
            stamped=parts,
            main="package",
            notes=("a discrete GPU and the rest of the machine are left out",),
        )

    def _joules(self) -> dict[str, float]:
        joules: dict[str, float] = dict.fromkeys(self._info.parts, 0.0)
        for z in self._zones:
            joules[z.part] += z.read_uj() / 1e6
        return joules

    def close(self) -> None:
        return None


def open_rapl(root: Path = POWERCAP) -> Choice:
    if not root.is_dir():
        return Choice(None, f"no RAPL here ({root} is absent)")
    found = _zones(root)
    if not found:
        return Choice(None, f"no RAPL package zone under {root}")
    zones: list[_Zone] = []
    for path, part in found:
        try:
            now = int((path / "energy_uj").read_text().strip())
            top = int((path / "max_energy_range_uj").read_text().strip())
        except PermissionError:
            return Choice(None, f"RAPL is readable by root only ({path / 'energy_uj'})")
        except (OSError, ValueError) as exc:
            return Choice(None, f"RAPL could not be read ({path.name}: {exc})")
        zones.append(_Zone(path, part, top, now))
    return Choice(RaplMeter(zones))
