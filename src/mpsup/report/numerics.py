"""Same answers? Each build's distance from float64, per workload, per phase and per op: kinds and numbers only
(report/wording.py words them).

The rule starts from PyTorch's own accuracy check (`torch._dynamo.utils.same` with an fp64 reference): the
candidate's error against float64 may be up to `MULTIPLIER` times the baseline's, plus a few units of its dtype's
precision relative to the truth's scale, before it is called less accurate; and the difference must exceed what
the same build gives twice (the run's own floor: each side's answers on its two visits). Errors are root mean
square errors relative to the truth's RMS (docs/reference/report.md, "Same answers?")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mpsup.model.coverage import scaled_from
from mpsup.model.op_replay import describe_call

NumericsVerdict = Literal["identical", "same accuracy", "less accurate", "more accurate", "broken", "not compared"]

# How far a candidate's error may exceed the baseline's: dynamo's multipliers (its half types get more room).
MULTIPLIER = {"float32": 2.0, "float64": 2.0}
HALF_MULTIPLIER = 3.0
# Units of precision (machine epsilon of the output's dtype) added to the allowed error, relative to the truth's
# scale: rounding the answer itself costs up to half of one.
TOLERANCE_EPS = 2.0
EPS = {
    "float64": 2.0**-52,
    "float32": 2.0**-23,
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
}
BROKEN_ERROR = 0.1  # relative RMS error past which an answer has stopped being the computation's
# ...and how many times the baseline's own error it must be as well: a deep half-precision model's baseline can sit
# near the line (a 32-layer bf16 prefill reads 0.098), where an equally accurate candidate would cross it by chance.
BROKEN_MULTIPLE = 10.0
# Worst first: the verdict of several outputs is the worst of theirs.
SEVERITY: dict[str, int] = {
    "broken": 5,
    "less accurate": 4,
    "not compared": 3,
    "more accurate": 2,
    "same accuracy": 1,
    "identical": 0,
}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _whole(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


@dataclass(frozen=True)
class OutputCall:
    """One output of one workload: each build's error against float64 and what it comes to."""

    name: str
    dtype: str
    verdict: NumericsVerdict
    is_float: bool
    baseline_error: float | None  # relative RMS error (float), or 1 - exact-match rate (integers)
    candidate_error: float | None
    baseline_max: float | None
    candidate_max: float | None
    between: float | None
    identical: bool
    floor: float | None
    baseline_nonfinite: int = 0
    candidate_nonfinite: int = 0
    truth_nonfinite: int = 0

    @property
    def ratio(self) -> float | None:
        return error_ratio(self.baseline_error, self.candidate_error)


def error_ratio(baseline: float | None, candidate: float | None) -> float | None:
    """candidate / baseline: above 1 is further from float64. None where the baseline's error is zero (the ratio
    says nothing: an exact baseline is reported as such) or unknown."""
    if baseline is None or candidate is None:
        return None
    if baseline == 0:
        return 1.0 if candidate == 0 else None
    return candidate / baseline


def allowed(dtype: str, baseline: float) -> float:
    """The most a candidate's relative error may be, given the baseline's, before it is called less accurate."""
    mult = MULTIPLIER.get(dtype, HALF_MULTIPLIER)
    return mult * baseline + TOLERANCE_EPS * EPS.get(dtype, EPS["float32"])


def _float_verdict(eb: float, ec: float, nb: int, nc: int, floor: float, dtype: str) -> NumericsVerdict:
    if nc > nb == 0 or ec > max(BROKEN_ERROR, BROKEN_MULTIPLE * eb):
        return "broken"
    if ec > allowed(dtype, eb) and ec - eb > floor:
        return "less accurate"
    if eb > allowed(dtype, ec) and eb - ec > floor:
        return "more accurate"
    return "same accuracy"


def judge_output(doc: Mapping[str, Any], a: str, b: str) -> OutputCall | None:
    """One compared output of a record's `numerics`, or None where it cannot be read."""
    errors = _map(doc.get("errors"))
    ea, eb_ = errors.get(a), errors.get(b)
    if not isinstance(ea, Mapping) or not isinstance(eb_, Mapping):
        return None
    between = _map(doc.get("between"))
    identical = between.get("identical") is True
    dtype = str(doc.get("dtype") or "float32")
    floor = _num(doc.get("floor")) or 0.0
    if "match" in ea or "match" in eb_:  # integers and booleans: exact-match rates, out of the float ranking
        ma, mb = _num(ea.get("match")), _num(eb_.get("match"))
        if ma is None or mb is None:
            return None
        verdict: NumericsVerdict = "identical" if identical else "same accuracy"
        if not identical and mb < ma - max(floor, 0.0) - 1e-9:
            verdict = "less accurate"
        elif not identical and ma < mb - max(floor, 0.0) - 1e-9:
            verdict = "more accurate"
        return OutputCall(str(doc.get("name")), dtype, verdict, False, 1 - ma, 1 - mb, None, None,
                          _num(1 - (_num(between.get("match")) or 0.0)), identical, floor)  # fmt: skip
    err_a, err_b = _num(ea.get("rmse")), _num(eb_.get("rmse"))
    if err_a is None or err_b is None:
        return None
    na, nb = _whole(ea.get("nonfinite")), _whole(eb_.get("nonfinite"))
    verdict = "identical" if identical else _float_verdict(err_a, err_b, na, nb, floor, dtype)
    return OutputCall(
        name=str(doc.get("name")),
        dtype=dtype,
        verdict=verdict,
        is_float=True,
        baseline_error=err_a,
        candidate_error=err_b,
        baseline_max=_num(ea.get("max_abs")),
        candidate_max=_num(eb_.get("max_abs")),
        between=_num(between.get("rmse")),
        identical=identical,
        floor=_num(doc.get("floor")),
        baseline_nonfinite=na,
        candidate_nonfinite=nb,
        truth_nonfinite=_whole(doc.get("truth_nonfinite")),
    )


@dataclass(frozen=True)
class WorkloadNumerics:
    """One workload's answers in both builds against float64."""

    workload: str
    verdict: NumericsVerdict
    reason: str | None = None  # why not compared
    outputs: tuple[OutputCall, ...] = ()
    reference: str = ""  # the torch that computed the truth

    @property
    def main(self) -> OutputCall | None:
        """The output the workload's figures are read from: its first float output, else its first."""
        return next((o for o in self.outputs if o.is_float), self.outputs[0] if self.outputs else None)

    def to_json(self) -> dict[str, Any]:
        m = self.main
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "baseline_error": m.baseline_error if m else None,
            "candidate_error": m.candidate_error if m else None,
            "error_ratio": m.ratio if m else None,
            "between_builds": m.between if m else None,
            "aa_floor": m.floor if m else None,
            "outputs": [
                {
                    "name": o.name,
                    "dtype": o.dtype,
                    "verdict": o.verdict,
                    "baseline_error": o.baseline_error,
                    "candidate_error": o.candidate_error,
                    "error_ratio": o.ratio,
                    "baseline_max_error": o.baseline_max,
                    "candidate_max_error": o.candidate_max,
                    "between_builds": o.between,
                    "identical": o.identical,
                    "aa_floor": o.floor,
                    "nonfinite": {
                        "baseline": o.baseline_nonfinite,
                        "candidate": o.candidate_nonfinite,
                        "truth": o.truth_nonfinite,
                    },
                }
                for o in self.outputs
            ],
        }


def judge(doc: Any, name: str, a: str, b: str) -> WorkloadNumerics | None:
    """A record entry's `numerics` as a verdict; None where the run did not look (no `numerics` key)."""
    if not isinstance(doc, Mapping):
        return None
    where = _map(doc.get("reference"))
    reference = str(where.get("torch") or "")
    if doc.get("status") != "compared":
        return WorkloadNumerics(name, "not compared", str(doc.get("reason") or "not compared"), (), reference)
    calls = [c for o in doc.get("outputs") or [] if isinstance(o, Mapping) for c in [judge_output(o, a, b)] if c]
    if not calls:
        return WorkloadNumerics(name, "not compared", "no output could be read", (), reference)
    verdict = max((c.verdict for c in calls), key=lambda v: SEVERITY[v])
    if all(c.identical for c in calls):
        verdict = "identical"
    return WorkloadNumerics(name, verdict, None, tuple(calls), reference)


@dataclass(frozen=True)
class OpNumerics:
    """One op of a phase, replayed alone in both builds: its errors against float64."""

    workload: str
    op: str
    shapes: str
    dtypes: str
    numerics: WorkloadNumerics
    op_call: Mapping[str, Any] | None = None  # the census call, where it came from a group of calls

    def to_json(self) -> dict[str, Any]:
        m = self.numerics.main
        return {
            "op": self.op,
            "shapes": self.shapes,
            "dtypes": self.dtypes,
            "workload": self.workload,
            "verdict": self.numerics.verdict,
            "baseline_error": m.baseline_error if m else None,
            "candidate_error": m.candidate_error if m else None,
            "error_ratio": m.ratio if m else None,
        }


@dataclass(frozen=True)
class PhaseNumerics:
    """A phase's answers (its own workload's) and its ops ranked by how much further from float64 the candidate
    is than the baseline."""

    phase: str
    numerics: WorkloadNumerics
    ops: tuple[OpNumerics, ...] = ()
    libraries: tuple[str, str] | None = None  # the model code each side ran, where they differ
    top1_agreement: float | None = None
    kl_mean: float | None = None
    greedy_diverges_at: int | None = None
    random_weights: bool = True  # nearly flat logits: top-1 and KL say little, the errors decide
    blocks: str | None = None  # "8 of 32": the prefix of the model the builds ran, and the truth with them

    @property
    def verdict(self) -> NumericsVerdict:
        return self.numerics.verdict

    @property
    def top_op(self) -> OpNumerics | None:
        """The op that changed the numbers: named where the phase is less accurate, broken or not identical."""
        if self.verdict in ("identical", "not compared"):
            return None
        ranked = [o for o in self.ops if o.numerics.main is not None and o.numerics.main.ratio is not None]
        if not ranked:
            return None
        top = ranked[0]
        ratio = top.numerics.main.ratio if top.numerics.main else None
        return top if ratio is not None and top.numerics.verdict in ("less accurate", "broken") else None

    def to_json(self) -> dict[str, Any]:
        m = self.numerics.main
        doc = {
            "verdict": self.verdict,
            "reason": self.numerics.reason,
            "baseline_error": m.baseline_error if m else None,
            "candidate_error": m.candidate_error if m else None,
            "error_ratio": m.ratio if m else None,
            "between_builds": m.between if m else None,
            "aa_floor": m.floor if m else None,
            "top1_agreement": self.top1_agreement,
            "kl_mean": self.kl_mean,
            "greedy_diverges_at": self.greedy_diverges_at,
            "weights": "random" if self.random_weights else "real",
            "blocks": self.blocks,
            "model_code": list(self.libraries) if self.libraries else None,
            # The op that changed the numbers, or null: none of the ops compared alone moved (the change came
            # from calls replayed only together, or from what the phase carries over, such as a decode's cache).
            "top_op": self.top_op.to_json() if self.top_op else None,
            "ops": [o.to_json() for o in self.ops],
        }
        return doc


def _rank_key(o: OpNumerics) -> tuple[int, float]:
    m = o.numerics.main
    ratio = m.ratio if m and m.ratio is not None else -1.0
    return (-SEVERITY[o.numerics.verdict], -ratio)


def _library(entry: Mapping[str, Any], label: str) -> str:
    env = _map(entry.get("envs")).get(label)
    phase = env.get("phase") if isinstance(env, Mapping) else None
    if not isinstance(phase, Mapping):
        return ""
    return f"{phase.get('library') or ''} {phase.get('library_version') or ''}".strip()


def model_numerics(
    record: Mapping[str, Any], phase_workloads: Mapping[str, str], a: str, b: str
) -> dict[str, PhaseNumerics]:
    """{phase: its numerics} for each phase (name -> workload) whose entry has `numerics`, with the op replays
    that name it (their `op_phases`), ranked worst first."""
    entries = [w for w in record.get("workloads") or [] if isinstance(w, Mapping)]
    by_name = {str(w.get("name")): w for w in entries}
    out: dict[str, PhaseNumerics] = {}
    for phase, workload in phase_workloads.items():
        entry = by_name.get(workload)
        verdict = judge(entry.get("numerics"), workload, a, b) if entry else None
        if entry is None or verdict is None:
            continue
        ops = []
        for w in entries:
            phases = w.get("op_phases")
            if w.get("kind") != "op_replay" or not isinstance(phases, Mapping) or workload not in phases:
                continue
            n = judge(w.get("numerics"), str(w.get("name")), a, b)
            if n is None or n.verdict == "not compared":
                continue
            ops.append(OpNumerics(str(w.get("name")), str(w.get("op") or ""), str(w.get("shapes") or ""),
                                  str(w.get("dtypes") or ""), n))  # fmt: skip
        ops += group_numerics(entries, workload, a, b)
        ops.sort(key=_rank_key)
        libs = (_library(entry, a), _library(entry, b))
        lang = _map(_map(entry.get("numerics")).get("language"))
        greedy = lang.get("greedy_diverges_at")
        out[phase] = PhaseNumerics(
            phase,
            verdict,
            tuple(ops),
            libs if libs[0] != libs[1] else None,
            top1_agreement=_num(lang.get("top1_agreement")),
            kl_mean=_num(lang.get("kl_mean")),
            greedy_diverges_at=greedy if isinstance(greedy, int) and not isinstance(greedy, bool) else None,
            random_weights=str(entry.get("weights") or "random") != "real",
            blocks=next(filter(None, (scaled_from(env) for env in _map(entry.get("envs")).values())), None),
        )
    return out


def group_numerics(entries: list[Mapping[str, Any]], phase: str, a: str, b: str) -> list[OpNumerics]:
    """Each call of the phase's groups of other calls (replayed only together, timed as one), judged alone."""
    out: list[OpNumerics] = []
    for w in entries:
        phases, doc = w.get("op_phases"), _map(w.get("numerics"))
        calls = w.get("op_group")
        if w.get("kind") != "op_group" or not isinstance(phases, Mapping) or phase not in phases:
            continue
        if doc.get("status") != "compared" or not isinstance(calls, list):
            continue
        for entry in doc.get("calls") or []:
            i = _map(entry).get("call")
            call = calls[i] if isinstance(i, int) and 0 <= i < len(calls) else None
            if not isinstance(call, Mapping):
                continue
            one = {"status": "compared", "outputs": _map(entry).get("outputs"), "reference": doc.get("reference")}
            n = judge(one, f"{w.get('name')}#{i}", a, b)
            if n is None or n.verdict == "not compared":
                continue
            seen = describe_call(dict(call))
            out.append(OpNumerics(f"{w.get('name')}#{i}", seen["op"], seen["shapes"], seen["dtypes"], n, call))
    return out


def _e(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def numerics_lines(model: Mapping[str, PhaseNumerics]) -> list[str]:
    """Each phase's answers in one line, for every format: the errors behind its verdict, the floor, the top op
    and, for a language model, what its logits and greedy tokens say."""
    lines = []
    for phase, pn in model.items():
        if phase.split("/")[0] == "train_step":
            from mpsup.report.training import training_line  # it reads this module's kinds: imported where used

            lines.append(training_line(phase, pn, "the baseline"))
            continue
        m = pn.numerics.main
        if pn.verdict == "not compared" or m is None:
            lines.append(f"{phase} answers: not compared ({pn.numerics.reason})")
            continue
        ratio = f" ({m.ratio:.3g}x)" if m.ratio is not None and not m.identical else ""
        on = f" (on the {pn.blocks} blocks the builds ran)" if pn.blocks else ""
        text = (
            f"{phase} answers{on}: {pn.verdict}; error against float64 {_e(m.baseline_error)} -> "
            f"{_e(m.candidate_error)}{ratio}, between builds {_e(m.between)}, floor {_e(m.floor)}"
        )
        top = pn.top_op
        if top is not None and top.numerics.main is not None:
            text += f"; top op {top.op} {top.shapes} ({top.dtypes}) {_e(top.numerics.main.ratio)}x"
        if pn.top1_agreement is not None:
            weights = " (random weights: these say little, the errors decide)" if pn.random_weights else ""
            diverges = "never" if pn.greedy_diverges_at is None else f"at token {pn.greedy_diverges_at}"
            text += (
                f"; top-1 agreement {pn.top1_agreement:.1%}, mean KL {_e(pn.kl_mean)}, greedy tokens part "
                f"{diverges}{weights}"
            )
        lines.append(text)
    return lines
