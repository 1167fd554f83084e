"""Energy per call and per token, paired like time: what each build drew for the same work, from the meter
readings bench took around each worker turn (pure: records in, figures and clauses out).

Per phase (or workload) the candidate / baseline ratio of energy above idle per call, with a 95% interval
over blocks of paired rounds; each block spans MIN_STEPS steps of the meter's counter, since a window of one
step is mostly rounding. Parts that move in batches (Apple's CPU, DRAM and ANE rows on recent macOS) cannot
be split between two builds that take turns faster than the batches come: they are given as the run's total,
both builds together, without an interval."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpsup.model.coverage import scale_of
from mpsup.model.phases import phase_of
from mpsup.runs.schema import RunRecord, WorkloadRun
from mpsup.stats import median_ci

PARTS = ("package", "cpu", "gpu", "dram", "ane")
MIN_STEPS = 10  # counter steps a block spans at least: one step's rounding is then a tenth of it or less
TOKEN_PHASES = ("prefill", "decode")  # a causal LM's: prefill's call is its tokens, decode's one token
PART_NAMES = {"gpu": "GPU", "package": "CPU package", "cpu": "CPU", "dram": "DRAM", "ane": "ANE"}


# One read turn as the record keeps it: laid out like envs/mlx_env.py's MlxEnvResult by chance, sharing no field.
@dataclass(frozen=True)
class _Turn:
    warmup: bool
    calls: int
    s: float
    j: Mapping[str, float]
    round: int | None = None


@dataclass(frozen=True)
class EnergyFigures:
    meter: str | None  # the meter's name; None: no meter (why says so)
    why: str | None = None
    model_energy: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # by phase
    energy: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # by workload (not phases)

    @property
    def line(self) -> str | None:
        """The one line a run without a meter shows."""
        return None if self.meter else f"no energy meter on this machine ({self.why or 'not known why'})"

    def to_json(self) -> dict[str, Any]:
        return {"energy_meter": self.meter, "model_energy": self.model_energy, "energy": self.energy}


def _turns(doc: object) -> list[_Turn]:
    if not isinstance(doc, list):
        return []
    return [_Turn(t["warmup"], t["calls"], float(t["s"]), t["j"], t.get("round")) for t in doc if isinstance(t, dict)]


def _by_round(ta: Sequence[_Turn], tb: Sequence[_Turn], rounds: int) -> tuple[list[_Turn], list[_Turn]]:
    """The turns of the rounds both builds had read, in round order: a round's two turns side by side."""
    a = {t.round: t for t in ta if t.round is not None and t.round < rounds}
    b = {t.round: t for t in tb if t.round is not None and t.round < rounds}
    both = sorted(set(a) & set(b))
    return [a[k] for k in both], [b[k] for k in both]


def _per_call(turns: Sequence[_Turn], parts: Sequence[str], idle_w: float = 0.0) -> float | None:
    calls = sum(t.calls for t in turns)
    if not calls:
        return None
    return sum(sum(t.j.get(p, 0.0) for p in parts) - idle_w * t.s for t in turns) / calls


def _blocks(ta: Sequence[_Turn], tb: Sequence[_Turn], span_s: float) -> list[tuple[list[_Turn], list[_Turn]]]:
    """Consecutive rounds gathered until each build's turns span `span_s`, always an even number of rounds
    (an A-first and a B-first round together, as the time ratio's blocks)."""
    out: list[tuple[list[_Turn], list[_Turn]]] = []
    ga: list[_Turn] = []
    gb: list[_Turn] = []
    for x, y in zip(ta, tb, strict=False):
        ga.append(x)
        gb.append(y)
        if len(ga) % 2 == 0 and min(sum(t.s for t in ga), sum(t.s for t in gb)) >= span_s:
            out.append((ga, gb))
            ga, gb = [], []
    return out


@dataclass(frozen=True)
class _Window:
    env: str
    calls: int
    s: float  # between its edge readings: its work and the idle gap after it
    work_s: float
    j: Mapping[str, float]


def _windows(doc: object) -> list[_Window]:
    if not isinstance(doc, list):
        return []
    return [
        _Window(str(x["env"]), int(x["calls"]), float(x["s"]), float(x["work_s"]), x["j"])
        for x in doc
        if isinstance(x, dict)
    ]


@dataclass(frozen=True)
class _Frame:
    """What every figure of one workload shares: the parts, idle power, the scale to joules per token or call."""

    doc: dict[str, Any]  # the figure with nothing measured yet
    parts: list[str]
    stamped: list[str]
    timed: list[str]  # in the meter's total and stamped: the parts a window's (or turn's) reading means something for
    idle: dict[str, float]
    div: float  # joules per call of the blocks that ran -> per token or call of the whole model


def _frame(meter: Mapping[str, Any], w: WorkloadRun, a: str) -> _Frame:
    parts = [p for p in meter.get("parts") or [] if p in PARTS]
    stamped = [p for p in meter.get("stamped") or [] if p in parts]
    total = [p for p in meter.get("total_parts") or parts if p in parts]
    idle = {p: float(v) for p, v in (meter.get("idle_w") or {}).items() if isinstance(v, int | float)}
    env_a = w.env(a).to_json()
    scale = scale_of(env_a)  # joules of the blocks that ran -> the whole model's, as the phase's time is scaled
    phase = phase_of(w.to_json()) if w.part == "phase" else None
    items = env_a.get("items_per_call")
    per_token = phase is not None and phase.split("/")[0] in TOKEN_PHASES and isinstance(items, int | float) and items
    doc: dict[str, Any] = {
        "meter": meter.get("name"),
        "per": "token" if per_token else "call",
        "baseline_j": None,
        "candidate_j": None,
        "energy_ratio": None,
        "low": None,
        "high": None,
        "blocks": 0,
        "total_ratio": None,
        "baseline_w": None,
        "candidate_w": None,
        "idle_w": None,
        "parts": dict.fromkeys(PARTS),
    }
    div = scale / (float(items) if per_token and isinstance(items, int | float) else 1.0)
    return _Frame(doc, parts, stamped, [p for p in total if p in stamped], idle, div)


def workload_energy(meter: Mapping[str, Any], w: WorkloadRun, a: str, b: str) -> dict[str, Any] | None:
    """One workload's figure (the JSON's `model_energy[phase]` or `energy[name]`), or None where not read.

    From its energy windows where it has them. A record that pairs energy by windows (`pairing: windows`) gives a
    workload without windows no figure: its turns, kept in the record, are too short for a counter that moves
    every 100 ms (docs/explanation/energy.md). A record without that key pairs its turns."""
    wins = _windows(w.extra.get("energy_windows"))
    if wins:
        return window_energy(meter, w, a, b, wins)
    if meter.get("pairing") == "windows":
        return None
    return turn_energy(meter, w, a, b)


def window_energy(
    meter: Mapping[str, Any], w: WorkloadRun, a: str, b: str, wins: Sequence[_Window] | None = None
) -> dict[str, Any] | None:
    """From energy windows: per call, each window's joules less idle power over its edges' span, over its calls;
    a ratio per A-B pair of windows (taken back to back, A B then B A), median and 95% interval over the pairs."""
    wins = list(wins if wins is not None else _windows(w.extra.get("energy_windows")))
    wa, wb = [x for x in wins if x.env == a], [x for x in wins if x.env == b]
    if not wa or not wb:
        return None
    f = _frame(meter, w, a)
    doc, timed = f.doc, f.timed
    doc["pairing"] = "windows"
    idle_timed = sum(f.idle.get(p, 0.0) for p in timed)

    def above(xs: Sequence[_Window]) -> float | None:
        calls = sum(x.calls for x in xs)
        return sum(sum(x.j.get(p, 0.0) for p in timed) - idle_timed * x.s for x in xs) / calls if calls else None

    def working(xs: Sequence[_Window], parts: Sequence[str]) -> float | None:
        """Per call with idle while working, the idle gaps' idle left out: what a call draws, idle included."""
        calls = sum(x.calls for x in xs)
        gap = sum(f.idle.get(p, 0.0) for p in parts)
        return sum(sum(x.j.get(p, 0.0) for p in parts) - gap * (x.s - x.work_s) for x in xs) / calls if calls else None

    ja, jb = working(wa, timed), working(wb, timed)
    if timed and ja is not None and jb is not None:
        doc["baseline_j"], doc["candidate_j"] = ja * f.div, jb * f.div
        doc["total_ratio"] = jb / ja if ja > 0 else None
        ratios = []
        for first, second in zip(wins[0::2], wins[1::2], strict=False):
            pair = {first.env: first, second.env: second}
            if set(pair) != {a, b}:
                continue
            ea, eb = above([pair[a]]), above([pair[b]])
            if ea is not None and eb is not None and ea > 0 and eb > 0:
                ratios.append(eb / ea)
        if ratios:
            ci = median_ci(ratios)
            doc["energy_ratio"], doc["blocks"] = ci.estimate, len(ratios)
            if ci.bounded:
                doc["low"], doc["high"] = ci.low, ci.high
    main = str(meter.get("main"))
    if main in f.stamped:
        for key, xs in (("baseline_w", wa), ("candidate_w", wb)):
            busy = sum(x.work_s for x in xs)
            gap = f.idle.get(main, 0.0) * sum(x.s - x.work_s for x in xs)
            doc[key] = (sum(x.j.get(main, 0.0) for x in xs) - gap) / busy if busy > 0 else None
        doc["idle_w"] = f.idle.get(main)
        doc["main"] = main
    for p in f.parts:
        whole = sum(x.j.get(p, 0.0) for x in wins)
        if whole == 0.0:
            doc["parts"][p] = {"read_zero": True}
        elif p in f.stamped:
            pa, pb = working(wa, [p]), working(wb, [p])
            doc["parts"][p] = {
                "baseline_j": pa * f.div if pa is not None else None,
                "candidate_j": pb * f.div if pb is not None else None,
            }
        else:
            doc["parts"][p] = {"run_j": whole, "batched": True}
    return doc


def turn_energy(meter: Mapping[str, Any], w: WorkloadRun, a: str, b: str) -> dict[str, Any] | None:
    """From the meter read around each worker turn: a record's figure before energy windows (kept for those
    records, and to show what the turns say beside the windows: benchmarks/energy_gpu.py)."""
    all_a, all_b = _turns(w.env(a).extra.get("energy")), _turns(w.env(b).extra.get("energy"))
    ta, tb = [t for t in all_a if not t.warmup], [t for t in all_b if not t.warmup]
    if not ta or not tb:
        return None
    f = _frame(meter, w, a)
    doc, timed, stamped, idle, div = f.doc, f.timed, f.stamped, f.idle, f.div
    parts = f.parts
    idle_timed = sum(idle.get(p, 0.0) for p in timed)
    ja, jb = _per_call(ta, timed), _per_call(tb, timed)
    if timed and ja is not None and jb is not None:
        doc["baseline_j"], doc["candidate_j"] = ja * div, jb * div
        doc["total_ratio"] = jb / ja if ja > 0 else None
        above_a, above_b = _per_call(ta, timed, idle_timed), _per_call(tb, timed, idle_timed)
        steps = meter.get("cadence_s") or {}
        cadence = max((c for p in timed if isinstance(c := steps.get(p), int | float)), default=0.0)
        span = MIN_STEPS * max(float(cadence), float(meter.get("read_s") or 0.0))
        ratios = []
        for ga, gb in _blocks(*_by_round(ta, tb, len(w.ratios)), span):
            ea, eb = _per_call(ga, timed, idle_timed), _per_call(gb, timed, idle_timed)
            if ea and eb and ea > 0 and eb > 0:
                ratios.append(eb / ea)
        if len(ratios) >= 1:
            ci = median_ci(ratios)
            doc["energy_ratio"], doc["blocks"] = ci.estimate, len(ratios)
            if ci.bounded:
                doc["low"], doc["high"] = ci.low, ci.high
        elif above_a and above_b and above_a > 0 and above_b > 0:
            doc["energy_ratio"] = above_b / above_a  # the run's totals: no interval
    main = str(meter.get("main"))
    if main in stamped:
        doc["baseline_w"] = _watts(ta, main)
        doc["candidate_w"] = _watts(tb, main)
        doc["idle_w"] = idle.get(main)
        doc["main"] = main
    for p in parts:
        whole = sum(t.j.get(p, 0.0) for t in all_a + all_b)
        if whole == 0.0:
            doc["parts"][p] = {"read_zero": True}  # a stalled counter, or a part the work never woke: no figure
        elif p in stamped:
            pa, pb = _per_call(ta, [p]), _per_call(tb, [p])
            doc["parts"][p] = {
                "baseline_j": pa * div if pa is not None else None,
                "candidate_j": pb * div if pb is not None else None,
            }
        else:
            doc["parts"][p] = {"run_j": whole, "batched": True}
    return doc


def _watts(turns: Sequence[_Turn], part: str) -> float | None:
    s = sum(t.s for t in turns)
    return sum(t.j.get(part, 0.0) for t in turns) / s if s > 0 else None


def energy_figures(record: RunRecord, a: str, b: str) -> EnergyFigures | None:
    """None for a record written before energy was read (it says nothing either way)."""
    meter = record.extra.get("energy_meter")
    if not isinstance(meter, dict):
        return None
    if not meter.get("name"):
        why = meter.get("why")
        phases: dict[str, dict[str, Any] | None] = {
            p: None for w in record.workloads if w.part == "phase" and (p := phase_of(w.to_json()))
        }
        return EnergyFigures(None, why if isinstance(why, str) else None, phases, {})
    model: dict[str, dict[str, Any] | None] = {}
    other: dict[str, dict[str, Any] | None] = {}
    for w in record.workloads:
        fig = workload_energy(meter, w, a, b)
        phase = phase_of(w.to_json()) if w.part == "phase" else None
        if phase:
            model[phase] = fig
        else:
            other[w.name] = fig
    return EnergyFigures(str(meter["name"]), None, model, other)


def energy_clause(fig: Mapping[str, Any] | None) -> str | None:
    """The phase sentence's energy clause: "0.92x the energy per token (95% CI 0.90-0.94x); GPU 11.2 W -> 12.4 W"."""
    if not fig or fig.get("energy_ratio") is None:
        return None
    r, low, high = fig["energy_ratio"], fig.get("low"), fig.get("high")
    if low is not None and high is not None:
        ci = f" (95% CI {low:.2f}-{high:.2f}x)"
    else:
        n = fig.get("blocks") or 0
        unit = "pair" if fig.get("pairing") == "windows" else "block"
        what = " of energy windows" if unit == "pair" else " of paired rounds"
        ci = f" (no interval: {n} {unit}{'' if n == 1 else 's'}{what})" if n else " (run totals, no interval)"
    bw, cw = fig.get("baseline_w"), fig.get("candidate_w")
    name = PART_NAMES.get(str(fig.get("main")), str(fig.get("main")))
    watts = f"; {name} {bw:.1f} W -> {cw:.1f} W" if _finite(bw) and _finite(cw) else ""
    return f"{r:.2f}x the energy per {fig.get('per') or 'call'}{ci}{watts}"


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def energy_lines(figures: EnergyFigures | None) -> list[str]:
    """The report's energy lines: each phase's clause, or the one line saying there is no meter."""
    if figures is None:
        return []
    if figures.line:
        return [figures.line]
    clauses = ((phase, energy_clause(fig)) for phase, fig in figures.model_energy.items())
    return [f"{phase} energy: {clause}" for phase, clause in clauses if clause]
