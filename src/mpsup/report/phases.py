"""The verdict when the model ran whole: one call per phase, said per phase, never one blended number.

A chat user's time is decode, a batch job's prefill, a diffusion user's the denoising step and the VAE
decode: a release that halves one and leaves the other alone is a mixed result for the model, and the
sentence names both. Where no phase ran, the figure is the layer estimate, labelled as such."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mpsup.model.coverage import coverage, scale_of, scaled_from
from mpsup.model.phases import phase_of
from mpsup.runs.schema import RunRecord
from mpsup.stats import PRACTICAL_THRESHOLD, Interval

CHANGE_WORDS = {
    "faster": "faster",
    "slower": "slower",
    "same": "no measurable change",
    "n/a": "n/a",
    "uncalled": "not called (two separate runs: an estimate)",  # --baseline/--candidate: no verdict is made
}


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    workload: str
    speedup: Interval | None
    change: str  # faster, slower, same, n/a (as the workload's call, floors and visit rule included)
    baseline_s: float | None  # per call of the whole model (scaled where only a prefix of blocks ran)
    candidate_s: float | None
    coverage: float | None
    scaled_from: str | None = None  # "8 of 32" blocks
    status: str = "ok"
    reason: str | None = None
    fallback: tuple[str, ...] = ()  # ops the baseline ran on the CPU
    fallback_candidate: tuple[str, ...] = ()
    # Called "same" with an interval wider than twice the threshold: it could not have seen a change, so
    # every surface says "too wide to tell", not "no measurable change" (set by with_width).
    too_wide: bool = False
    # Same answers? The phase's numerics verdict (report/numerics.py) and its clause (wording.numerics_clause);
    # other clauses of the phase's one sentence (energy) follow it.
    accuracy: str | None = None
    accuracy_clause: str | None = None
    clauses: tuple[str, ...] = ()

    @property
    def worse_answers(self) -> bool:
        return self.accuracy in WORSE_ANSWERS

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "speedup": self.speedup.estimate if self.speedup else None,
            "low": self.speedup.low if self.speedup and self.speedup.bounded else None,
            "high": self.speedup.high if self.speedup and self.speedup.bounded else None,
            "change": self.change,
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "workload": self.workload,
        }
        if self.scaled_from:
            doc["scaled_from_blocks"] = self.scaled_from
        if self.status != "ok":
            doc["status"] = self.status
            doc["reason"] = self.reason
        if self.fallback or self.fallback_candidate:
            doc["fallback_ops"] = {"baseline": list(self.fallback), "candidate": list(self.fallback_candidate)}
        return doc

    def text(self) -> str:
        if self.speedup is None or self.change == "n/a":
            why = self.reason or (f"{self.speedup.n} rounds; raise --budget" if self.speedup else self.status)
            return f"{self.phase} n/a ({why})"
        iv = self.speedup
        scaled = f", from {self.scaled_from} blocks" if self.scaled_from else ""
        words = "too wide to tell" if self.too_wide else CHANGE_WORDS[self.change]
        text = f"{self.phase} {iv.estimate:.2f}x (95% CI {iv.low:.2f}-{iv.high:.2f}x{scaled}), {words}"
        if self.accuracy_clause:
            # Faster but worse answers is a regression: the sentence says "but".
            joint = " but " if self.worse_answers and self.change == "faster" else ", "
            text += joint + self.accuracy_clause
        return text + "".join(f", {c}" for c in self.clauses)


# Numerics verdicts that make a phase a regression whatever its speed.
WORSE_ANSWERS = ("less accurate", "broken")


def with_width(phases: list[PhaseChange], threshold: float = PRACTICAL_THRESHOLD) -> list[PhaseChange]:
    """The phases, each "same" one whose interval is too wide to have seen a change marked so."""
    return [
        replace(p, too_wide=p.change == "same" and p.speedup is not None and p.speedup.rel_half_width > 2 * threshold)
        for p in phases
    ]


def phase_changes(record: RunRecord, changes_by_name: dict[str, Any], a: str, b: str) -> list[PhaseChange]:
    """Each phase workload's call (already made with every other workload's), in record order."""
    doc = record.to_json()
    out: list[PhaseChange] = []
    for w in doc.get("workloads", []):
        phase = phase_of(w) if w.get("part") == "phase" else None
        c = changes_by_name.get(w.get("name"))
        if phase is None or c is None:
            continue
        env_a, env_b = w.get("envs", {}).get(a, {}), w.get("envs", {}).get(b, {})
        scale = scale_of(env_a)
        out.append(
            PhaseChange(
                phase=phase,
                workload=str(w["name"]),
                speedup=c.speedup,
                change=c.change,
                baseline_s=c.baseline_s * scale if c.baseline_s else None,
                candidate_s=c.candidate_s * scale if c.candidate_s else None,
                coverage=coverage(doc, w, a),
                scaled_from=scaled_from(env_a),
                status=c.status,
                reason=w.get("reason"),
                fallback=tuple((env_a.get("phase") or {}).get("fallback_ops") or ()),
                fallback_candidate=tuple((env_b.get("phase") or {}).get("fallback_ops") or ()),
            )
        )
    return out


def phase_verdict(
    phases: list[PhaseChange], noise: list[str], vs: str, threshold: float = PRACTICAL_THRESHOLD
) -> tuple[str, str] | None:
    """The verdict and its sentence from the phases, or None when no phase was measured (layers decide)."""
    if not phases:
        return None
    # "No change" needs an interval narrow enough to have seen one: as wide as twice the threshold, it has not.
    phases = with_width(phases, threshold)
    wide = [p for p in phases if p.too_wide]
    called = [p for p in phases if p.speedup is not None and p.change != "n/a"]
    said = "; ".join(p.text() for p in phases)
    if not called:
        return "inconclusive", f"Inconclusive: no phase of the model could be bounded ({said}), {vs}."
    # A phase too wide to tell neither agrees nor disagrees with the others: it is said, and decides nothing.
    kinds = {p.change for p in called if not p.too_wide}
    runs_natively = [
        f"{p.phase} now runs {', '.join(sorted(set(p.fallback) - set(p.fallback_candidate)))} on the device"
        for p in phases
        if set(p.fallback) - set(p.fallback_candidate)
    ]
    native = f" {'; '.join(runs_natively)} (it fell back to the CPU before)." if runs_natively else ""
    worse = [p for p in phases if p.worse_answers]
    if worse:
        which = " and ".join(p.phase for p in worse)
        how = "broken" if any(p.accuracy == "broken" for p in worse) else "less accurate"
        return "regression", f"Regression: your model's {which} answers are {how} with {vs}: {said}.{native}"
    if kinds <= {"same"} and (noise or wide):
        why = ", ".join(noise) if noise else f"the {' and '.join(p.phase for p in wide)} interval is too wide"
        return "inconclusive", f"Inconclusive: too noisy to tell ({why}); {said}, {vs}.{native}"
    if len(kinds) > 1:
        return "mixed", f"Mixed, your model run whole with {vs}: {said}.{native}"
    only = kinds.pop()
    if only in ("faster", "slower") and wide:
        which = " and ".join(p.phase for p in called if not p.too_wide)
        unknown = " and ".join(p.phase for p in wide)
        head = "Upgrade" if only == "faster" else "Regression"
        verdict = "benefit" if only == "faster" else "regression"
        return verdict, f"{head}: {which} {only} with {vs}, {unknown} too wide to tell: {said}.{native}"
    if only == "faster":
        return "benefit", f"Upgrade: your model run whole is faster with {vs}: {said}.{native}"
    if only == "slower":
        return "regression", f"Regression: your model run whole is slower with {vs}: {said}.{native}"
    return "no-change", f"No measurable change in your model run whole with {vs}: {said}.{native}"


# --- torch against MLX: the same phases, said from MLX's side ---

MLX_CHANGE_WORDS = {"faster": "faster", "slower": "slower", "same": "no measurable difference"}


def _from_mlx(p: PhaseChange, mlx_is_candidate: bool) -> tuple[Interval, str] | None:
    """The phase's speedup as MLX's over torch (the record's is the candidate's over the baseline), and its word."""
    iv = p.speedup
    if iv is None or p.change == "n/a" or not iv.bounded or iv.estimate <= 0 or iv.low <= 0:
        return None
    change = p.change
    if not mlx_is_candidate:
        iv = Interval(1 / iv.estimate, 1 / iv.high, 1 / iv.low, iv.n)
        change = {"faster": "slower", "slower": "faster"}.get(change, change)
    word = "too wide to tell" if p.too_wide else MLX_CHANGE_WORDS.get(change, change)
    return iv, word


def stack_sentence(
    phases: list[PhaseChange],
    *,
    device: str,
    mlx_side: str,
    torch_side: str,
    mlx_is_candidate: bool,
    peaks: tuple[str, str],
    quantized: str = "",
) -> str:
    """One sentence for a torch-against-MLX run, in MLX's terms: how fast MLX runs each phase as a multiple of
    torch's speed (its interval and call), then each side's peak memory (MLX first)."""
    place = "this Mac" if device == "mps" else "this machine"
    parts: list[str] = []
    named = False
    for p in phases:
        got = _from_mlx(p, mlx_is_candidate)
        if got is None:
            parts.append(f"{p.phase} n/a ({p.reason or p.status})")
            continue
        iv, word = got
        than = "" if named else f" as fast as {torch_side}"
        named = True
        parts.append(f"{p.phase} {iv.estimate:.2f}x{than} (95% CI {iv.low:.2f}-{iv.high:.2f}x, {word})")
    said = ", ".join(parts) if parts else "no phase measured"
    if named:
        head = f"On {place}, {mlx_side} runs your model's {said}"
    else:
        head = f"On {place}, {mlx_side} against {torch_side}, no phase could be bounded: {said}"
    mem = f"; peak memory {peaks[0]} vs {peaks[1]}" if any(x != "-" for x in peaks) else ""
    return f"{head}{mem}.{quantized}"
