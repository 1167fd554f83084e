"""Did the machine move during the run? A pure function of the record: its conditions before and after
(`hygiene`), the machine read at each visit's start and end, and each build's median of each visit, in time order
(`workloads[i].visit_states`). The answer is one line for every surface and the JSON `conditions` object.

Two kinds of move. A condition changed: a level (thermal pressure, thermal state, memory pressure) rose or fell,
a flag turned (Low Power Mode), the power source or energy mode changed, NVML showed the GPU slowing itself or
another process joined it, or the share of the visits' time in which tasks waited for a CPU (PSI) grew by
PRESSURE_STEP. Or the times moved: the builds' medians of their last visit lie past the interval of their first,
all builds the same way and by more than DRIFT_FLOOR, in at least half the workloads visited more than once. A
paired ratio cancels what hits both builds alike, so the line says the ratio stands where the times do not.
Quiet and loaded runs measured against both: docs/evidence/machine-moved.md."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from mpsup.console import one_line
from mpsup.host.hygiene import LABELS as HYGIENE_LABELS
from mpsup.host.hygiene import noisy_conditions, shown
from mpsup.host.machine_state import FIELDS, ORDER
from mpsup.host.nvml_state import SLOWDOWN_REASONS
from mpsup.runs.apart import conditions_differ
from mpsup.runs.schema import RunRecord

# The share of a visit's time in which a task waited for a CPU (PSI `some`), late visits against early ones: quiet
# A/A runs on a 2-vCPU VM shared with another job moved it by up to 10 points between visits, so 15 keeps them
# silent (docs/evidence/machine-moved.md).
PRESSURE_STEP = 0.15
# A move of both builds' visit medians past their intervals must also pass this: fresh worker processes alone
# disagree by up to the report's 2% between-process floor, and 5% is over twice that.
DRIFT_FLOOR = 0.05
MAX_SHOWN = 40  # characters of a record's value in the line: a level's word, a reason's name
# The readings' keys whose change says the machine moved.
DISCRETE = ("thermal_pressure", "thermal_state", "memory_pressure", "low_power_mode", "thermal_warning", "on_battery",
            "energy_mode", "os_build", "gpu_events", "gpu_processes")  # fmt: skip
PRESSURES = {"cpu_pressure_us": "CPU pressure (time a task waited for a CPU)", "memory_pressure_us": "memory stall"}
MAC_KEYS = frozenset({"thermal_pressure", "thermal_state", "low_power_mode", "energy_mode", "on_battery"})


@dataclass(frozen=True)
class Change:
    key: str
    first: str
    to: str
    how: str  # "rose", "fell", "changed", "turned", "showed"

    def clause(self, machine: str) -> str:
        label = _label(self.key)
        if self.how == "turned":
            return f"{label} turned {self.to}"
        if self.how == "showed":
            return f"NVML showed the GPU slowing itself ({self.to})"
        if self.key == "gpu_processes":
            return f"the processes on the GPU rose from {self.first} to {self.to}"
        owner = f"{machine} " if self.key in ("thermal_pressure", "thermal_state", "memory_pressure") else "the "
        return f"{owner}{label} {self.how} from {self.first} to {self.to}"

    def to_json(self) -> dict[str, str]:
        return {"what": self.key, "from": self.first, "to": self.to, "how": self.how}


@dataclass(frozen=True)
class Pressure:
    key: str
    early: float  # share of the early visits' time (their median)
    late: float

    def clause(self, machine: str) -> str:
        how = "rose" if self.late > self.early else "fell"
        return f"{machine} {PRESSURES[self.key]} {how} from {self.early:.0%} to {self.late:.0%} of the visits' time"

    def to_json(self) -> dict[str, Any]:
        return {"what": self.key, "early": self.early, "late": self.late}


@dataclass(frozen=True)
class Drift:
    workload: str
    change: float  # last visit / first visit - 1, over the builds (geometric mean)
    builds: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "change": self.change, "builds": dict(self.builds)}


@dataclass(frozen=True)
class RunConditions:
    noted: tuple[str, ...] = ()  # conditions that were noisy at the start or the end
    changed: tuple[str, ...] = ()  # the bench's own before/after comparison (hygiene.changed)
    changes: tuple[Change, ...] = ()
    pressures: tuple[Pressure, ...] = ()
    extra_changes: tuple[str, ...] = ()  # the bench's before/after changes no reading shows (swap growth)
    drifts: tuple[Drift, ...] = ()  # the workloads whose times moved together, in the direction most took
    considered: int = 0  # workloads visited more than once by every build
    visits: int = 0
    machine: str = "the machine's"
    builds: int = 2
    read_s: Mapping[str, Any] | None = None
    readers: Mapping[str, Any] | None = None
    kept_apart: tuple[str, ...] = field(default=())

    @property
    def times_moved(self) -> bool:
        return bool(self.drifts) and 2 * len(self.drifts) >= self.considered

    @property
    def moved(self) -> bool:
        return bool(self.changes or self.pressures or self.extra_changes) or self.times_moved

    @property
    def line(self) -> str | None:
        """One sentence: what moved, and what it means for the times and the ratio; None where nothing moved."""
        if not self.moved:
            return None
        clauses = [c.clause(self.machine) for c in self.changes]
        clauses += [p.clause(self.machine) for p in self.pressures] + list(self.extra_changes)
        said = "; ".join(clauses) + " during the run" if clauses else ""
        both = "both builds'" if self.builds > 1 else "the"
        if self.times_moved:
            change = median(d.change for d in self.drifts)
            what = f" {one_line(self.drifts[0].workload, 80)}" if len(self.drifts) == 1 else ""
            over = f" (median of {len(self.drifts)} workloads)" if len(self.drifts) > 1 else ""
            times = (
                f"{both}{what} times {'rose' if change > 0 else 'fell'} {abs(change):.0%}{over} from the first "
                f"visits to the last"
            )
            close = ": the ratio stands, the times do not" if self.builds > 1 else ": the times do not stand"
            if not said:
                return _sentence(f"{times}, with no reader showing why{close}")
            return _sentence(f"{said}; {times}{close}")
        if self.considered:
            return _sentence(f"{said}; {both} times stayed within their intervals from the first visits to the last")
        return _sentence(said)

    @property
    def shown_noise(self) -> tuple[str, ...]:
        """What a `Conditions:` line shows: the noisy conditions, and what changed where no moved line says it."""
        return self.noted if self.moved else tuple(sorted({*self.noted, *self.changed}))

    def to_json(self) -> dict[str, Any]:
        return {
            "moved": self.moved,
            "line": self.line,
            "noted": list(self.noted),
            "changed": list(self.changed),
            "changes": [c.to_json() for c in self.changes] + [{"what": "other", "text": t} for t in self.extra_changes],
            "pressures": [p.to_json() for p in self.pressures],
            "times_moved": self.times_moved,
            "drift": [d.to_json() for d in self.drifts],
            "workloads_revisited": self.considered,
            "visits": self.visits,
            "read_s": dict(self.read_s) if self.read_s else None,
            "readers": dict(self.readers) if self.readers else None,
            "kept_apart": list(self.kept_apart),
        }


def _sentence(text: str) -> str:
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _label(key: str) -> str:
    return HYGIENE_LABELS.get(key) or (FIELDS[key].label if key in FIELDS else key)


def _value(key: str, v: Any) -> str:
    """A reading's value in words, on one line and cut short: it comes from a record, so it is data however it
    reads (each surface escapes the line as a whole)."""
    return one_line(shown(key, v), MAX_SHOWN)


# --- the readings in time order ---


@dataclass(frozen=True)
class _Visit:
    workload: str
    visit: int
    t0: float
    t1: float
    start: Mapping[str, Any]
    end: Mapping[str, Any]
    medians: Mapping[str, Mapping[str, Any]]


def _visits(record: RunRecord) -> list[_Visit]:
    out = []
    for w in record.workloads:
        for v in w.extra.get("visit_states") or []:
            # The schema checked the shape (runs/fields.py: check_visit_states); values stay data.
            out.append(
                _Visit(
                    w.name,
                    int(v["visit"]),
                    float(v["t0"]),
                    float(v["t1"]),
                    v.get("start") or {},
                    v.get("end") or {},
                    v.get("medians") or {},
                )
            )
    return sorted(out, key=lambda v: (v.t0, v.t1))


def _rank(key: str, value: Any) -> int | None:
    order = ORDER.get(key)
    return order.index(value) if order and value in order else None


def _discrete_change(key: str, values: list[Any]) -> Change | None:
    """How a condition moved over readings in time order (None where not known are left out)."""
    # A list is a set of names (NVML's reasons); anywhere else it is damage, and left out as not known.
    known = [v for v in values if v is not None and (key == "gpu_events") == isinstance(v, list)]
    if len(known) < 2:
        return None
    first, later = known[0], known[1:]
    if key == "gpu_events":
        before = set(first) if isinstance(first, list) else set()
        new = sorted({r for v in later if isinstance(v, list) for r in v if r in SLOWDOWN_REASONS} - before)
        return Change(key, "", ", ".join(new)[: MAX_SHOWN * 3], "showed") if new else None
    if key == "gpu_processes":
        top = max((v for v in later if _is_number(v)), default=None)
        if _is_number(first) and top is not None and top > first:
            return Change(key, str(first), str(top), "rose")
        return None
    if all(v == first for v in later):
        return None
    if isinstance(first, bool) and key != "on_battery":
        last = later[-1]
        return Change(key, _value(key, first), _value(key, last), "turned") if last != first else None
    r0 = _rank(key, first)
    ranks = [r for v in later if (r := _rank(key, v)) is not None]
    if r0 is not None and ranks and len(ranks) == len(later):
        worst = max(ranks)
        if worst > r0:
            return Change(key, _value(key, first), _value(key, ORDER[key][worst]), "rose")
        return Change(key, _value(key, first), _value(key, later[-1]), "fell")
    other = next(v for v in later if v != first)
    return Change(key, _value(key, first), _value(key, other), "changed")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _share(v: _Visit, key: str) -> float | None:
    a: Any = v.start.get(key)
    b: Any = v.end.get(key)
    span = v.t1 - v.t0
    if not (_is_number(a) and _is_number(b)) or span <= 0:
        return None
    grew = float(b) - float(a)
    return min(1.0, grew / 1e6 / span) if grew >= 0 else None  # a counter that went back was reset: not known


def _pressures(visits: list[_Visit]) -> list[Pressure]:
    out = []
    for key in PRESSURES:
        shares = [s for v in visits if (s := _share(v, key)) is not None]
        half = len(shares) // 2
        if half < 1:
            continue
        early, late = median(shares[:half]), median(shares[-half:])
        if abs(late - early) >= PRESSURE_STEP:
            out.append(Pressure(key, early, late))
    return out


BOUNDS = ("low", "high")


def _drifts(visits: list[_Visit]) -> tuple[list[Drift], int]:
    """The workloads whose every build's last visit median lies past its first visit's interval, the same way and
    by more than DRIFT_FLOOR (those that went the way most went), and how many workloads could show it."""
    by_workload: dict[str, list[_Visit]] = {}
    for v in visits:
        if v.medians:
            by_workload.setdefault(v.workload, []).append(v)
    moved: dict[int, list[Drift]] = {1: [], -1: []}
    considered = 0
    for name, vs in by_workload.items():
        first, last = vs[0], vs[-1]
        labels = sorted(set(first.medians) & set(last.medians))
        if len(vs) < 2 or not labels or set(first.medians) != set(last.medians):
            continue
        if not all(_is_number(v.medians[label].get(end)) for v in (first, last) for label in labels for end in BOUNDS):
            continue  # a visit too short for an interval shows neither a drift nor its absence
        considered += 1
        ways, changes = set(), {}
        for label in labels:
            a, b = first.medians[label], last.medians[label]
            if not (a["median"] > 0 and b["median"] > 0):
                ways.add(0)
                continue
            changes[label] = b["median"] / a["median"] - 1
            if _is_number(b.get("low")) and _is_number(a.get("high")) and b["low"] > a["high"]:
                ways.add(1)
            elif _is_number(b.get("high")) and _is_number(a.get("low")) and b["high"] < a["low"]:
                ways.add(-1)
            else:
                ways.add(0)
        together = math.exp(sum(math.log1p(c) for c in changes.values()) / len(changes)) - 1 if changes else 0.0
        if len(ways) == 1 and (way := ways.pop()) != 0 and abs(together) > DRIFT_FLOOR:
            moved[way].append(Drift(name, together, changes))
    most = max(moved.values(), key=len)
    return most, considered


def _kept_apart(record: RunRecord) -> tuple[str, ...]:
    """Two runs merged into one comparison (`report --baseline A --candidate B`) that ran under other conditions."""
    runs = record.hygiene.extra.get("runs")
    if not isinstance(runs, Mapping):
        return ()
    sides = [r.get("before") if isinstance(r, Mapping) else None for r in runs.values()]
    if len(sides) != 2 or not all(isinstance(s, Mapping) for s in sides):
        return ()
    return tuple(conditions_differ(sides[0], sides[1]))  # type: ignore[arg-type]


def run_conditions(record: RunRecord) -> RunConditions:
    hyg = record.hygiene
    before, after = dict(hyg.before), dict(hyg.after)
    noted = tuple(sorted(set(noisy_conditions(before) + noisy_conditions(after))))
    # Two single runs merged (`report --baseline A --candidate B`): one run's start and the other's end are no
    # run's change; what differs between them is said as kept apart.
    merged = record.mode == "unpaired"
    visits = [] if merged else _visits(record)
    inside = [r for v in visits for r in (v.start, v.end)]
    readings: list[Mapping[str, Any]] = [] if merged else [before, *inside, after]
    changes = [c for key in DISCRETE if (c := _discrete_change(key, [r.get(key) for r in readings])) is not None]
    # The bench's own before/after list names what no reading here holds: swap that grew over the run.
    extra = tuple(c[:200].removesuffix(" during the run") for c in hyg.changed if c.startswith("swap use grew"))
    drifts, considered = _drifts(visits)
    state = record.extra.get("machine_state") if isinstance(record.extra.get("machine_state"), Mapping) else None
    mac = record.device == "mps" or any(r.get(k) is not None for r in readings for k in MAC_KEYS - {"on_battery"})
    return RunConditions(
        noted=noted,
        changed=tuple(hyg.changed),
        changes=tuple(changes),
        pressures=tuple(_pressures(visits)),
        extra_changes=extra,
        drifts=tuple(drifts),
        considered=considered,
        visits=len(visits),
        machine="the Mac's" if mac else "the machine's",
        builds=max(1, len(record.environments)),
        read_s=state.get("read_s") if state else None,
        readers={k: state[k] for k in ("reads", "absent") if k in state} if state else None,
        kept_apart=_kept_apart(record),
    )
