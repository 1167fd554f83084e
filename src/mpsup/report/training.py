"""A training step's answers, read as a fine-tuner reads them: the loss, each trainable parameter group's gradient
and its weights after one optimizer step, each against float64 (worker/training.py names them `loss`,
`grad.<group>` and `weights.<group>`), judged by the rules every answer is (report/numerics.py). The step's verdict
is its worst group's, and that group is named: "q_proj gradients are 1,400x further from float64 than in 2.13.0".
Kinds and numbers here; the clause is the one sentence piece this module words, as wording.numerics_clause does
for the other phases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpsup.report.numerics import SEVERITY, OutputCall, PhaseNumerics

PHASE = "train_step"
WHAT = {"loss": "loss", "grad": "gradients", "weights": "weights after one optimizer step"}


def is_training(phase: str) -> bool:
    return phase.split("/")[0] == PHASE


@dataclass(frozen=True)
class GroupCall:
    """One answer of a training step: what it is (loss, grad, weights), its group, and its judgement."""

    what: str  # loss, grad or weights
    group: str  # q_proj, mlp[0-7], ... ("" for the loss)
    call: OutputCall

    @property
    def label(self) -> str:
        """ "q_proj gradients", "mlp[0-7] weights after one optimizer step", "the loss"."""
        if self.what == "loss":
            return "the loss"
        group = self.group.replace("[", " (blocks ").replace("]", ")") if "[" in self.group else self.group
        return f"{group} {WHAT[self.what]}"

    def to_json(self) -> dict[str, Any]:
        c = self.call
        return {
            "output": c.name,
            "what": self.what,
            "group": self.group or None,
            "verdict": c.verdict,
            "baseline_error": c.baseline_error,
            "candidate_error": c.candidate_error,
            "error_ratio": c.ratio,
            "nonfinite": {"baseline": c.baseline_nonfinite, "candidate": c.candidate_nonfinite},
        }


def group_calls(pn: PhaseNumerics) -> list[GroupCall]:
    """The step's answers in the order the worker wrote them; an output of another name is left out."""
    out = []
    for c in pn.numerics.outputs:
        what, _, group = c.name.partition(".")
        if c.name == "loss" or (what in ("grad", "weights") and group):
            out.append(GroupCall("loss" if c.name == "loss" else what, group, c))
    return out


def worst(pn: PhaseNumerics) -> GroupCall | None:
    """The answer that decides the step's verdict: the most severe verdict, then the largest error ratio, a
    gradient before the weights it moved (the cause before its effect) at equal verdicts and ratios."""
    calls = [g for g in group_calls(pn) if g.call.verdict not in ("identical", "not compared")]
    if not calls:
        return None
    order = {"grad": 0, "loss": 1, "weights": 2}
    return min(
        calls,
        key=lambda g: (-SEVERITY[g.call.verdict], -(g.call.ratio or 0.0), order.get(g.what, 3)),
    )


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def training_clause(pn: PhaseNumerics, baseline_torch: str) -> str:
    """The step's answers in a few words: "identical gradients"; "less accurate: q_proj gradients are 1,400x
    further from float64 than in 2.13.0 (op: mm (backward) 512x64, 64x64 (float32), 900x)"."""
    n = pn.numerics
    code = f"; the model code differs too ({pn.libraries[0]} vs {pn.libraries[1]})" if pn.libraries else ""
    if n.verdict == "not compared":
        return f"gradients not compared ({n.reason})"
    if n.verdict == "identical":
        return "identical loss, gradients and weights after one step" + code
    if n.verdict == "same accuracy":
        return "gradients of the same accuracy" + code
    top = pn.top_op
    op = ""
    if top is not None and top.numerics.main is not None and top.numerics.main.ratio is not None:
        op = f" (op: {top.op} {top.shapes} ({top.dtypes}), {_times(top.numerics.main.ratio)})"
    w = worst(pn)
    if w is None:
        return f"{n.verdict}{op}{code}"
    c = w.call
    if n.verdict == "broken":
        if c.candidate_nonfinite > c.baseline_nonfinite:
            what = f"{c.candidate_nonfinite} NaN or Inf in {w.label} where float64 has none"
        else:
            error = f"{c.candidate_error:.0%} of their scale" if c.candidate_error is not None else "far"
            what = f"{w.label} {error} from float64"
        return f"broken: {what}{op}{code}"
    if n.verdict == "more accurate" and c.ratio:
        return f"more accurate: {w.label} {_times(1 / c.ratio)} closer to float64 than in {baseline_torch}{code}"
    if c.ratio is not None:
        verb = "is" if w.what == "loss" else "are"
        far = f"{_times(c.ratio)} further from float64 than in {baseline_torch}"
        return f"{n.verdict}: {w.label} {verb} {far}{op}{code}"
    return f"{n.verdict}: {w.label}{op}{code}"


def training_json(pn: PhaseNumerics) -> dict[str, Any]:
    """What a training step adds to its phase's `model_numerics` entry: the worst answer (which decides the
    verdict) and every group's figures."""
    w = worst(pn)
    return {"worst": w.to_json() if w else None, "answers": [g.to_json() for g in group_calls(pn)]}


def training_line(phase: str, pn: PhaseNumerics, baseline_torch: str) -> str:
    """The step's numerics line for every format: its clause and the loss's error."""
    loss = next((g.call for g in group_calls(pn) if g.what == "loss"), None)
    tail = ""
    if loss is not None and loss.baseline_error is not None and loss.candidate_error is not None:
        tail = f"; loss error against float64 {loss.baseline_error:.2g} -> {loss.candidate_error:.2g}"
    return f"{phase} answers: {training_clause(pn, baseline_torch)}{tail}"


def phase_doc(pn: PhaseNumerics | None) -> dict[str, Any] | None:
    """A phase's `model_numerics` entry; a training step's with its answers by group and the worst of them."""
    if pn is None:
        return None
    doc = pn.to_json()
    if is_training(pn.phase):
        doc["training"] = training_json(pn)
    return doc
