"""Which op did it: a whole-model phase's change laid at its ops' door. Pure numbers; the words are elsewhere.

Each op workload (model/op_replay.py) was timed alone in both environments and names how many times each phase
called it in each. Per phase: an op's time in the phase is its count x its time per call (the candidate's per
call agrees with the paired speedup), its change is candidate minus baseline, and its share of the change is
that over the phase's own change. The replayed sum against the whole phase is the coverage; what the replay
does not explain (launch gaps, fusion, synchronisation, Python between ops, ops not replayed) is the remainder,
kept as its own figure, never spread over the ops."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from mpsup.model.op_replay import GROUP_KIND, OP_PART, call_key, is_view
from mpsup.model.phases import phase_of
from mpsup.stats import PRACTICAL_THRESHOLD, Interval, chi2_sf, classify_change, finite_or_none

# A phase whose share of the change is explained by ops summing to less than this is said to be unexplained by
# any one op: report --upstream then times the phase itself.
HALF = 0.5

# Whether a change is spread over the op kinds alike (spread_of): at least this many kinds with an interval
# each, since two kinds alike are as likely one kernel and its neighbour as a cause every call shares; and the
# level of the heterogeneity test (Cochran's Q against chi-square with kinds - 1 degrees of freedom).
SPREAD_MIN_KINDS = 3
SPREAD_ALPHA = 0.05
# Kinds that did not move the phase's way may stand beside a spread change while together they hold under this
# share of the timed kinds' time: fewer threads leave an op too small to split over threads as it was, or a
# little faster without the pool's overhead (a norm's mean, 1.01-1.06x), and that says nothing against a cause
# most calls share; kinds that did not move with more of the time do.
SPREAD_STILL_SHARE = 0.1
# A 95% interval is this many standard errors either side of its estimate (normal, on the log scale).
Z95 = 1.959963984540054


CHANGED = frozenset({"faster", "slower"})  # a phase's call that has a change to share out among its ops


class _Change(Protocol):
    baseline_s: float | None
    candidate_s: float | None
    speedup: Interval | None
    change: str


@dataclass(frozen=True)
class OpShare:
    name: str  # the op workload's name
    op: str
    shapes: str
    dtypes: str
    overload: str
    count_baseline: int
    count_candidate: int
    baseline_s: float | None  # count x time per call, in one call of the phase
    candidate_s: float | None
    speedup: Interval | None
    change: str  # the op workload's own call: faster, slower, same, n/a
    change_s: float | None
    share_of_change: float | None
    view: bool
    op_call: dict[str, Any] = field(default_factory=dict)  # the census entry, for the upstream repro
    # The phase's other calls, replayed together (model/op_replay.rest_of_phases): a line of the table and of
    # the coverage, never named as the op that did it.
    together: bool = False

    def to_json(self) -> dict[str, Any]:
        sp = self.speedup
        bounded = bool(sp and math.isfinite(sp.low) and math.isfinite(sp.high))
        return {
            "op": self.op,
            "shapes": self.shapes,
            "dtypes": self.dtypes,
            "count_baseline": self.count_baseline,
            "count_candidate": self.count_candidate,
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "speedup": sp.estimate if sp else None,
            "low": sp.low if sp and bounded else None,
            "high": sp.high if sp and bounded else None,
            "change_s": self.change_s,
            "share_of_change": self.share_of_change,
            **({"together": True} if self.together else {}),
        }


@dataclass(frozen=True)
class PhaseAttribution:
    phase: str
    workload: str
    baseline_s: float | None  # one call of the phase as it ran (the built blocks), not scaled
    candidate_s: float | None
    change_s: float | None  # candidate minus baseline
    ops: tuple[OpShare, ...]
    coverage_baseline: float | None  # replayed sum / whole phase
    coverage_candidate: float | None
    explained_change: float | None  # sum of the ops' change_s / the phase's change_s
    unexplained_s: float | None  # the phase's change the ops do not account for
    census_calls: dict[str, int] = field(default_factory=dict)  # each side's aten calls in one call of the phase
    not_replayed_calls: dict[str, int] = field(default_factory=dict)  # of them, in no timed op workload
    not_timed: tuple[str, ...] = ()  # op workloads of this phase without a time in both environments
    phase_changed: bool = True  # called faster or slower: otherwise no op gets a share of its (noise) difference
    ops_change_s: float | None = None  # the timed ops' changes summed

    def to_json(self) -> dict[str, Any]:
        spread = self.spread
        return {
            "coverage": {"baseline": self.coverage_baseline, "candidate": self.coverage_candidate},
            "explained_change": self.explained_change,
            "phase_changed": self.phase_changed,
            "ops_change_s": self.ops_change_s,
            "ops": [o.to_json() for o in self.ops],
            "spread": spread.to_json() if spread else None,
        }

    def remainder_json(self) -> dict[str, Any]:
        return {
            "phase_change_s": self.change_s,
            "unexplained_s": self.unexplained_s,
            "census_calls": self.census_calls,
            "not_replayed_calls": self.not_replayed_calls,
            "not_timed": list(self.not_timed),
        }

    def movers(self, least: float = 0.2) -> list[OpShare]:
        """The ops that carry at least `least` of the change, in the change's own direction, largest first."""
        return [o for o in self.ops if not o.together and o.share_of_change is not None and o.share_of_change >= least]

    @property
    def together(self) -> OpShare | None:
        """The line of the phase's other calls, replayed together, if the run timed one."""
        return next((o for o in self.ops if o.together), None)

    @property
    def spread(self) -> Spread | None:
        """The op kinds' common move where the change is spread over them alike (spread_of), else None."""
        return spread_of(self)

    @property
    def top_explains_half(self) -> bool:
        """Whether one op (all its shapes together) carries at least half of the change."""
        top = op_classes(self)[:1]
        return bool(top and top[0].share_of_change is not None and top[0].share_of_change >= HALF)


def _counts(doc: dict[str, Any], workload: str, label: str) -> int:
    per = (doc.get("op_phases") or {}).get(workload) or {}
    n = per.get(label, 0) if isinstance(per, dict) else 0
    return n if type(n) is int and n >= 0 else 0


def _finite(x: Any) -> float | None:
    """A record's figure as a finite float, else None (text, a flag, nan, inf)."""
    return finite_or_none(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def attribute(record: dict[str, Any], changes: dict[str, _Change], a: str, b: str) -> dict[str, PhaseAttribution]:
    """{phase: its attribution} for every phase of the record that some op workload names."""
    ops = [w for w in record.get("workloads", []) if w.get("part") == OP_PART and isinstance(w.get("op_phases"), dict)]
    if not ops:
        return {}
    out: dict[str, PhaseAttribution] = {}
    for w in record.get("workloads", []):
        phase = phase_of(w) if w.get("part") == "phase" else None
        if phase is None:
            continue
        name = str(w.get("name"))
        mine = [o for o in ops if name in o["op_phases"]]
        if not mine:
            continue
        pc = changes.get(name)
        base = _finite(pc.baseline_s) if pc else None
        cand = _finite(pc.candidate_s) if pc else None
        delta = cand - base if base is not None and cand is not None else None
        # A phase not called changed has no change to share out: its difference is noise, and a share of noise
        # reads as anything (an 8B A/A's ops "explained -2492%" of it). The ops' sum is still given.
        changed = pc is not None and pc.change in CHANGED
        whole = delta if changed else None
        shares, not_timed, timed_keys = _op_shares(mine, changes, name, (a, b), whole)
        shares.sort(key=lambda s: -abs(s.change_s) if s.change_s is not None else math.inf)
        sum_b = sum(s.baseline_s for s in shares if s.baseline_s is not None and s.name not in not_timed)
        sum_c = sum(s.candidate_s for s in shares if s.candidate_s is not None and s.name not in not_timed)
        explained = sum(s.change_s for s in shares if s.change_s is not None)
        calls, missing = _census_calls(w, timed_keys)
        out[phase] = PhaseAttribution(
            phase=phase,
            workload=name,
            baseline_s=base,
            candidate_s=cand,
            change_s=delta,
            ops=tuple(shares),
            coverage_baseline=sum_b / base if base else None,
            coverage_candidate=sum_c / cand if cand else None,
            explained_change=explained / whole if whole else None,
            unexplained_s=delta - explained if delta is not None else None,
            phase_changed=changed,
            ops_change_s=explained,
            census_calls=calls,
            not_replayed_calls=missing,
            not_timed=tuple(not_timed),
        )
    return out


def _op_shares(
    mine: list[dict[str, Any]], changes: dict[str, _Change], name: str, labels: tuple[str, str], whole: float | None
) -> tuple[list[OpShare], list[str], set[str]]:
    """The phase's op workloads as shares of its change (`whole`: None where it has none to share out), the op
    workloads without a time in both environments, and the census calls the timed ones replay."""
    a, b = labels
    shares: list[OpShare] = []
    not_timed: list[str] = []
    timed_keys: set[str] = set()
    for o in mine:
        c = changes.get(str(o.get("name")))
        nb, nc = _counts(o, name, a), _counts(o, name, b)
        per_b = _finite(c.baseline_s) if c else None
        per_c = _finite(c.candidate_s) if c else None
        tb = nb * per_b if per_b is not None else (0.0 if nb == 0 else None)
        tc = nc * per_c if per_c is not None else (0.0 if nc == 0 else None)
        together = o.get("kind") == GROUP_KIND
        if per_b is None or per_c is None:
            not_timed.append(str(o.get("name")))
        else:
            group = o.get("op_group") if together else [o.get("op_call")]
            timed_keys.update(call_key(c) for c in group or [] if isinstance(c, dict))
        ch = tc - tb if tb is not None and tc is not None else None
        overload = str((o.get("op_call") or {}).get("overload") or "")
        shares.append(
            OpShare(
                name=str(o.get("name")),
                op=str(o.get("op") or overload),
                shapes=str(o.get("shapes") or ""),
                dtypes=str(o.get("dtypes") or ""),
                overload=overload,
                count_baseline=nb,
                count_candidate=nc,
                baseline_s=tb,
                candidate_s=tc,
                speedup=c.speedup if c else None,
                change=c.change if c else "n/a",
                change_s=ch,
                share_of_change=ch / whole if ch is not None and whole else None,
                view=is_view(overload),
                op_call=dict(o.get("op_call") or {}),
                together=together,
            )
        )
    return shares, not_timed, timed_keys


def _census_calls(phase_doc: dict[str, Any], timed: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Per environment: the aten calls one call of the phase made, and how many of them no timed op replays."""
    calls: dict[str, int] = {}
    missing: dict[str, int] = {}
    for label, env in (phase_doc.get("envs") or {}).items():
        census = (env.get("phase") or {}).get("census") if isinstance(env, dict) else None
        if not isinstance(census, dict) or type(census.get("calls")) is not int:
            continue
        calls[label] = census["calls"]
        replayed = sum(
            e["count"]
            for e in census.get("replay") or []
            if isinstance(e, dict) and type(e.get("count")) is int and call_key(e) in timed
        )
        missing[label] = max(0, census["calls"] - replayed)
    return calls, missing


@dataclass(frozen=True)
class OpClass:
    """Every distinct call of one op in a phase, added up: a kernel change moves all its shapes together."""

    op: str
    calls: tuple[OpShare, ...]  # largest |change| first
    change_s: float | None
    share_of_change: float | None

    @property
    def count_baseline(self) -> int:
        return sum(c.count_baseline for c in self.calls)

    @property
    def count_candidate(self) -> int:
        return sum(c.count_candidate for c in self.calls)


def op_classes(attr: PhaseAttribution) -> list[OpClass]:
    """The phase's ops by name (all shapes of `group_norm` together), ranked by their share of the change; the
    calls replayed together are no op's and not among them."""
    groups: dict[str, list[OpShare]] = {}
    for o in attr.ops:
        if not o.together:
            groups.setdefault(o.op, []).append(o)
    out = []
    for op, calls in groups.items():
        changes = [c.change_s for c in calls if c.change_s is not None]
        change = sum(changes) if changes else None
        share = change / attr.change_s if change is not None and attr.change_s else None
        out.append(OpClass(op, tuple(calls), change, share))
    out.sort(key=lambda c: -(c.share_of_change if c.share_of_change is not None else -math.inf))
    return out


def grouped_views(attr: PhaseAttribution, least: float = 0.05) -> tuple[list[OpShare], list[OpShare]]:
    """(ops shown one by one, views folded into one line): the views together moving under `least` of the
    phase's change and taking under `least` of its time are one line; otherwise each is shown."""
    views = [o for o in attr.ops if o.view]
    change = sum(o.change_s or 0.0 for o in views)
    time_b = sum(o.baseline_s or 0.0 for o in views)
    small_change = not attr.change_s or abs(change) < least * abs(attr.change_s)
    small_time = not attr.baseline_s or time_b < least * attr.baseline_s
    if len(views) > 1 and small_change and small_time:
        return [o for o in attr.ops if not o.view], views
    return list(attr.ops), []


@dataclass(frozen=True)
class KindRatio:
    """One op kind's speedup over all its timed calls: their logs averaged by each call's time in the phase, with
    a standard error from their 95% intervals (each call's rounds are its own, so the calls are independent)."""

    op: str
    log_speedup: float
    se: float
    time_s: float = 0.0  # the kind's timed calls' time in the phase

    @property
    def interval(self) -> Interval:
        half = Z95 * self.se
        return Interval(
            math.exp(self.log_speedup), math.exp(self.log_speedup - half), math.exp(self.log_speedup + half)
        )


def kind_ratios(attr: PhaseAttribution) -> list[KindRatio]:
    """Each op kind of the phase (op_classes) with at least one call that has a bounded interval and a time in
    the phase. Views are left out: they launch no kernel, so a change in what kernels share never reaches them."""
    out = []
    for cls in op_classes(attr):
        weighted = []
        for c in cls.calls:
            sp = c.speedup
            weight = c.baseline_s or c.candidate_s  # an op only the candidate calls weighs by its own time there
            if c.view or sp is None or not sp.bounded or not 0 < sp.low <= sp.estimate <= sp.high or not weight:
                continue
            se = (math.log(sp.high) - math.log(sp.low)) / (2 * Z95)
            weighted.append((weight, math.log(sp.estimate), se))
        total = sum(w for w, _, _ in weighted)
        if weighted and total > 0:
            log_speedup = sum(w * y for w, y, _ in weighted) / total
            se = math.sqrt(sum((w * e) ** 2 for w, _, e in weighted)) / total
            out.append(KindRatio(cls.op, log_speedup, se, total))
    return out


@dataclass(frozen=True)
class Spread:
    """A phase's change that its op kinds took: how many kinds moved, the lowest and highest of their speedups
    (estimates), whether they took it alike (one ratio fits all) or unalike with none apart from the rest, and
    the kinds that did not move the phase's way: (op, share of the timed kinds' time, its call, "same" or the
    other way)."""

    op_kinds: int
    low: float
    high: float
    alike: bool = True
    others: tuple[tuple[str, float, str], ...] = ()

    @property
    def sharers(self) -> str:
        """Who shares the cause: every call, or most where some kinds did not move the phase's way."""
        return "most calls share" if self.others else "every call shares"

    def to_json(self) -> dict[str, Any]:
        others = [{"op": op, "share_of_time": share, "change": call} for op, share, call in self.others]
        return {"op_kinds": self.op_kinds, "low": self.low, "high": self.high, "alike": self.alike, "others": others}


def heterogeneity_p(kinds: list[KindRatio], tolerance: float = PRACTICAL_THRESHOLD) -> float:
    """Cochran's Q over the kinds' log speedups, each kind's variance widened by log(1 + tolerance) squared (a
    between-kind spread that small is no difference, as the practical threshold is no change), against
    chi-square with kinds - 1 degrees of freedom: the chance of kinds this far apart were they alike."""
    tau2 = math.log1p(tolerance) ** 2
    weights = [1.0 / (k.se**2 + tau2) for k in kinds]
    mean = sum(w * k.log_speedup for w, k in zip(weights, kinds, strict=True)) / sum(weights)
    q = sum(w * (k.log_speedup - mean) ** 2 for w, k in zip(weights, kinds, strict=True))
    return chi2_sf(q, len(kinds) - 1)


def common_band(kinds: list[KindRatio], tolerance: float = PRACTICAL_THRESHOLD) -> bool:
    """Whether one speedup lies inside every kind's 95% interval, each widened by the tolerance as in
    heterogeneity_p: Q adds its evidence over the kinds, so one kind far off beside several that agree can pass
    it on few degrees of freedom where that kind's interval misses all the others'."""
    tau2 = math.log1p(tolerance) ** 2
    halves = [Z95 * math.sqrt(k.se**2 + tau2) for k in kinds]
    return max(k.log_speedup - h for k, h in zip(kinds, halves, strict=True)) <= min(
        k.log_speedup + h for k, h in zip(kinds, halves, strict=True)
    )


def kind_apart(kinds: list[KindRatio], direction: str, tolerance: float = PRACTICAL_THRESHOLD) -> KindRatio | None:
    """The kind that moved most, where it stands apart: its 95% interval, widened as in heterogeneity_p, clear of
    every other kind's; else None. That is one kernel's change beside smaller moves elsewhere (0.5x beside 0.91x)."""
    tau2 = math.log1p(tolerance) ** 2
    sign = 1.0 if direction == "faster" else -1.0
    ranked = sorted(kinds, key=lambda k: -sign * k.log_speedup)
    first, second = ranked[0], ranked[1]
    gap = sign * (first.log_speedup - second.log_speedup)
    apart = gap > Z95 * (math.sqrt(first.se**2 + tau2) + math.sqrt(second.se**2 + tau2))
    return first if apart else None


def standout(attr: PhaseAttribution, threshold: float = PRACTICAL_THRESHOLD) -> KindRatio | None:
    """The op kind that moved most, where it stands apart from every other kind (kind_apart) and is itself
    called changed the phase's way, else None: a kernel that moved far more than the rest, whatever its share of
    the time (attention at 0.40x with 13% of the change beside linear at 0.86x with 21%)."""
    if not attr.change_s:
        return None
    kinds = kind_ratios(attr)
    if len(kinds) < 2:
        return None
    direction = "slower" if attr.change_s > 0 else "faster"
    first = kind_apart(kinds, direction, threshold)
    return first if first is not None and classify_change(first.interval, threshold) == direction else None


def spread_of(attr: PhaseAttribution, threshold: float = PRACTICAL_THRESHOLD) -> Spread | None:
    """The change spread over the op kinds, or None. Spread needs at least SPREAD_MIN_KINDS kinds with an
    interval called changed in the phase's direction (its interval clear of 1x and its estimate past the practical
    threshold); the other kinds (not called changed, or changed the other way) veto it where together they hold
    SPREAD_STILL_SHARE of the time or more (one kernel's change beside kinds that did not move). Then the moved
    kinds are alike when there is no heterogeneity beyond the threshold (heterogeneity_p at least SPREAD_ALPHA)
    and a common band (common_band); unalike kinds are still spread when the one that moved most does not stand
    apart (kind_apart): a cost added to every call moves short calls more in ratio than long ones, so its kinds
    differ without one leading. One kind at 0.5x beside others at 0.91x stands apart; one at 0.08x beside others
    at 1x that hold most of the time is vetoed by them."""
    if not attr.change_s:
        return None
    kinds = kind_ratios(attr)
    direction = "slower" if attr.change_s > 0 else "faster"
    calls = {k.op: classify_change(k.interval, threshold) for k in kinds}
    moved = [k for k in kinds if calls[k.op] == direction]
    others = [k for k in kinds if calls[k.op] != direction]
    total = sum(k.time_s for k in kinds)
    if len(moved) < SPREAD_MIN_KINDS or total <= 0 or sum(k.time_s for k in others) >= SPREAD_STILL_SHARE * total:
        return None
    alike = heterogeneity_p(moved, threshold) >= SPREAD_ALPHA and common_band(moved, threshold)
    if not alike and kind_apart(moved, direction, threshold) is not None:
        return None
    speeds = [math.exp(k.log_speedup) for k in moved]
    said = tuple((k.op, k.time_s / total, calls[k.op]) for k in others)
    return Spread(len(moved), min(speeds), max(speeds), alike, said)
