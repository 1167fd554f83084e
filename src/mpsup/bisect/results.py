"""What a bisect knows: each environment's facts, each step's figures and verdict, and the answer, with the JSON
each is journaled and reported as."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpsup.bisect.logic import BAD, GOOD, INCONCLUSIVE, Done, Figure, max_paired_runs

if TYPE_CHECKING:  # nightlies pulls in install-rc's planner: imported when --nightlies runs
    from mpsup.bisect.nightlies import Throwaway

VERDICTS = (GOOD, BAD, INCONCLUSIVE)
COMPARE_URL = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"


def _str(v: Any) -> str | None:
    return str(v) if isinstance(v, (str, int, float)) and str(v) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class EnvFacts:
    """What the interpreter probe says of one environment (None where it could not tell); journaled by field."""

    python: str | None = None
    torch: str | None = None
    git_version: str | None = None
    platform: str | None = None
    machine: str | None = None

    @classmethod
    def from_probe(cls, doc: dict[str, Any] | None) -> EnvFacts:
        if not doc:
            return cls()
        t = doc.get("torch") if isinstance(doc.get("torch"), dict) else {}
        assert isinstance(t, dict)
        return cls(
            python=_str(doc.get("version")),
            torch=_str(t.get("version_full")),
            git_version=_str(t.get("git_version")),
            platform=_str(doc.get("platform")),
            machine=_str(doc.get("machine")),
        )

    @classmethod
    def from_json(cls, doc: Any) -> EnvFacts:
        d = doc if isinstance(doc, dict) else {}
        return cls(**{f.name: _str(d.get(f.name)) for f in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Step:
    """One finished paired run of environment 0 against environment `index`; journaled by field."""

    index: int
    attempt: int
    budget_s: float
    run_id: str | None
    verdict: str
    figures: tuple[Figure, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "figures": [f.to_json() for f in self.figures]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Step:
        figs = tuple(
            Figure(
                str(f.get("name")),
                str(f.get("change")),
                _num(f.get("speedup")),
                _num(f.get("low")),
                _num(f.get("high")),
                str(f["accuracy"]) if isinstance(f.get("accuracy"), str) else None,
            )
            for f in d.get("figures", [])
            if isinstance(f, dict)
        )
        return cls(
            index=int(d["index"]),
            attempt=int(d.get("attempt", 1)),
            budget_s=float(d.get("budget_s", 0.0)),
            run_id=_str(d.get("run_id")),
            verdict=str(d.get("verdict")),
            figures=figs,
            seconds=float(d.get("seconds", 0.0)),
        )


@dataclass(frozen=True)
class BisectResult:
    environments: tuple[str, ...]  # as the user typed them, in order
    pythons: tuple[str, ...]  # the interpreters they resolved to
    device: str
    workloads: tuple[str, ...]  # what --only selected
    targets: tuple[str, ...]  # of those, what the ends step called slower: what the later steps follow
    budget_s: float
    threshold: float
    steps: tuple[Step, ...]
    facts: dict[int, EnvFacts]
    done: Done | None
    journal: Path
    resumed_steps: int  # steps taken from the journal rather than measured by this call
    elapsed_s: float  # every session of this bisect together
    interrupted: str | None = None  # the signal's name
    exit_code: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    throwaway: Throwaway | None = None  # --nightlies: what was installed, and whether it is still there

    @property
    def paired_runs(self) -> int:
        return len(self.steps)

    def compare_url(self) -> str | None:
        if self.done is None or self.done.status != "found":
            return None
        good, bad = self.facts.get(self.done.last_good), self.facts.get(self.done.first_bad)
        if not (good and bad and good.git_version and bad.git_version) or good.git_version == bad.git_version:
            return None  # nothing to compare (the note says why)
        return COMPARE_URL.format(good=good.git_version, bad=bad.git_version)

    def to_json(self) -> dict[str, Any]:
        def env(i: int) -> dict[str, Any]:
            return {"index": i, "environment": self.environments[i], **self.facts.get(i, EnvFacts()).to_json()}

        d = self.done
        return {
            "schema": "mpsup.bisect-result/1",
            "status": d.status if d else ("interrupted" if self.interrupted else "running"),
            "environments": list(self.environments),
            "device": self.device,
            "workloads": list(self.workloads),
            "targets": list(self.targets),
            "budget_s": self.budget_s,
            "threshold": self.threshold,
            "last_good": env(d.last_good) if d else None,
            "first_bad": env(d.first_bad) if d and d.status == "found" else None,
            "range": [d.last_good, d.first_bad] if d else None,
            "unresolved": list(d.unresolved) if d else [],
            "compare_url": self.compare_url(),
            "paired_runs": self.paired_runs,
            "max_paired_runs_if_clear": max_paired_runs(len(self.environments)),
            "minutes": round(self.elapsed_s / 60.0, 2),
            "resumed_steps": self.resumed_steps,
            "interrupted": self.interrupted,
            "journal": str(self.journal),
            "steps": [
                {**s.to_json(), "environment": self.environments[s.index], "torch": self._torch(s.index)}
                for s in self.steps
            ],
            "notes": list(self.notes),
            "nightlies": self.throwaway.to_json() if self.throwaway else None,
            "exit_code": self.exit_code,
        }

    def _torch(self, i: int) -> str | None:
        f = self.facts.get(i)
        return f.torch if f else None


def exit_code(done: Done | None, interrupted: str | None) -> int:
    """128 + the signal when stopped; 3 inconclusive or unfinished; 1 no regression; 0 found."""
    if interrupted:
        return 128 + signal.Signals[interrupted].value if interrupted in signal.Signals.__members__ else 130
    if done is None or done.status in ("inconclusive", "ends-inconclusive"):
        return 3
    if done.status == "no-regression":
        return 1
    return 0


def notes(done: Done, facts: dict[int, EnvFacts], names: tuple[str, ...]) -> list[str]:
    """What the answer alone does not say: why there is no compare link, what is left to settle."""
    found = []
    if done.status == "found":
        good, bad = facts.get(done.last_good), facts.get(done.first_bad)
        if good and bad and good.git_version and good.git_version == bad.git_version:
            found.append(
                "Both builds report the same git revision: the change is not in torch's source between them "
                "(look at what else differs: the environment's variables, libraries, settings)."
            )
        elif not (good and bad and good.git_version and bad.git_version):
            found.append("A build did not report its git revision (torch.version.git_version): no compare link.")
    elif done.status == "inconclusive":
        found.append(
            f"The first bad build lies after {names[done.last_good]} and at or before {names[done.first_bad]}; "
            f"{len(done.unresolved)} environment(s) between them measured twice without a call. "
            "Rerun with a larger --budget (a new bisect) to settle them."
        )
    elif done.status == "no-regression":
        found.append(
            f"{names[-1]} measured like {names[0]} on the chosen workload(s): nothing to bisect at this budget."
        )
    elif done.status == "ends-inconclusive":
        found.append(
            f"{names[0]} and {names[-1]} could not be told apart twice (the second time at twice the budget): "
            "rerun with a larger --budget."
        )
    return found
