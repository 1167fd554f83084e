"""The bisection itself, as pure functions of the steps taken so far: which environment to measure next,
what a step's figures say, and the answer once nothing is left to measure.

Environments are indexed 0..n-1 in the order the user gave them; 0 is good and n-1 bad by the user's word.
Every step is a paired comparison of environment 0 against one other. The first step checks the ends
(0 against n-1): the bisect only goes on when that regression shows on this machine, at this budget, and
its size per workload is the yardstick the later steps are judged against."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GOOD, BAD, INCONCLUSIVE = "good", "bad", "inconclusive"
MAX_ATTEMPTS = 2  # a first measurement, then one more at twice the budget


@dataclass(frozen=True)
class Figure:
    """One workload's paired figures in one step: speedup = good's time / this environment's time."""

    name: str
    change: str  # analysis's call: faster, slower, same, n/a
    speedup: float | None
    low: float | None
    high: float | None
    accuracy: str | None = None  # bisect --numerics: the workload's answers against float64 (report/numerics.py)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "name": self.name,
            "change": self.change,
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
        }
        if self.accuracy is not None:
            doc["accuracy"] = self.accuracy
        return doc


@dataclass(frozen=True)
class Outcome:
    """A finished step: environment `index` against environment 0, measured for the `attempt`th time."""

    index: int
    attempt: int
    verdict: str  # good, bad, inconclusive


@dataclass(frozen=True)
class Measure:
    index: int
    attempt: int  # 2: the same environment again at twice the budget


@dataclass(frozen=True)
class Done:
    """status: found (first_bad named), inconclusive (a range of more than one build remains),
    no-regression (the ends measure alike), ends-inconclusive (the ends could not be told apart)."""

    status: str
    last_good: int
    first_bad: int
    unresolved: tuple[int, ...] = ()  # environments measured twice without a call, inside the range


def max_paired_runs(n: int) -> int:
    """What a bisect of n environments takes when no step needs a second measurement: the ends, then a
    halving of the n-2 environments between them: within log2(n) + 2, the most a bisect should take."""
    return 1 + (math.ceil(math.log2(n - 1)) if n > 2 else 0)


def _final(outcomes: Sequence[Outcome]) -> dict[int, str]:
    """Each environment's verdict from its latest attempt."""
    verdicts: dict[int, str] = {}
    for o in outcomes:
        verdicts[o.index] = o.verdict
    return verdicts


def next_action(n: int, outcomes: Sequence[Outcome]) -> Measure | Done:
    """What to do after `outcomes` (in the order they were measured): measure an environment, or stop."""
    if n < 2:
        raise ValueError("a bisect needs at least two environments")
    last = n - 1
    if outcomes:
        o = outcomes[-1]
        if o.verdict == INCONCLUSIVE and o.attempt < MAX_ATTEMPTS:
            return Measure(o.index, o.attempt + 1)
    verdicts = _final(outcomes)
    ends = verdicts.get(last)
    if ends is None:
        return Measure(last, 1)
    if ends == GOOD:
        return Done("no-regression", 0, last)
    if ends == INCONCLUSIVE:
        return Done("ends-inconclusive", 0, last, (last,))
    lo = max((i for i, v in verdicts.items() if v == GOOD), default=0)
    hi = min((i for i, v in verdicts.items() if v == BAD and i > lo), default=last)
    unresolved = tuple(sorted(i for i, v in verdicts.items() if v == INCONCLUSIVE and lo < i < hi))
    open_ = [i for i in range(lo + 1, hi) if i not in verdicts]
    if not open_:
        return Done("found" if hi == lo + 1 else "inconclusive", lo, hi, unresolved)
    middle = (lo + hi) / 2
    return Measure(min(open_, key=lambda i: (abs(i - middle), i)), 1)


WORSE_ANSWERS = ("less accurate", "broken")
JUDGED = ("identical", "same accuracy", "more accurate", *WORSE_ANSWERS)


def classify_numerics(figures: Sequence[Figure]) -> str:
    """A step's verdict from its workloads' answers (bisect --numerics): bad where any got less accurate or broke
    against the good build, good where every one was judged and none did, inconclusive where some answer could
    not be compared (values that differ, no float64 reference)."""
    if not figures:
        return INCONCLUSIVE
    if any(f.accuracy in WORSE_ANSWERS for f in figures):
        return BAD
    return GOOD if all(f.accuracy in JUDGED for f in figures) else INCONCLUSIVE


def classify(
    figures: Sequence[Figure],
    threshold: float,
    reference: Mapping[str, float] | None = None,
) -> str:
    """A step's verdict from its workloads' calls.

    bad: any workload called slower. good: every workload called same or faster, with its interval clear
    of a regression: above the geometric middle between 1x and what the ends measured for that workload
    (`reference`), so closer to the good build than to the bad one; before the ends are known (the ends
    step itself), an estimate that does not point at a practical slowdown. inconclusive otherwise: n/a
    (too few rounds to bound), or 'same' while leaning towards the regression."""
    if not figures:
        return INCONCLUSIVE
    if any(f.change == "slower" for f in figures):
        return BAD
    for f in figures:
        if f.change not in ("same", "faster") or f.speedup is None:
            return INCONCLUSIVE
        if f.change == "faster":
            continue
        if reference is None or f.name not in reference:
            if f.speedup <= 1.0 / (1.0 + threshold):
                return INCONCLUSIVE
            continue
        middle = math.sqrt(reference[f.name])
        if f.low is None or not math.isfinite(f.low) or f.low < middle:
            return INCONCLUSIVE
    return GOOD
