"""The float64 reference's time (bench/numerics.py `judge`): the phases are always judged (they are the verdict),
the share of the run bounds what follows them, and where it runs out the pass says what judging the rest would
take (a group of calls priced as that many single ops) and the --reference-share that buys it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpsup.bench.numerics import NumericsCapture, Reference, Saved, judge
from mpsup.progress import ignore
from mpsup.workloads import Workload

LABELS = ["baseline", "candidate"]
# What the fake reference takes per workload kind, in seconds of the fake clock.
COST = {"model_phase": 30.0, "op_replay": 2.0, "op_group": 40.0}


def _capture(tmp_path: Path, workloads: list[Workload], share: float) -> NumericsCapture:
    capture = NumericsCapture(tmp_path, share)
    for w in workloads:
        for label in LABELS:
            path = tmp_path / f"{w.name.replace('/', '_')}-{label}.pt"
            path.write_bytes(b"saved")
            answer = {"saved": True, "digest": "d", "outputs": [{"name": "output"}]}
            capture.saved.setdefault(w.name, {}).setdefault(label, []).append(Saved(path, answer))
    return capture


def _reference(clock: list[float]) -> tuple[Reference, list[str]]:
    asked: list[str] = []

    def request(doc: dict[str, Any], _timeout: float) -> dict[str, Any]:
        kind = doc["workload"]["kind"]
        asked.append(doc["workload"]["name"])
        clock[0] += COST[kind]
        return {"type": "truth", "digest": "d", "outputs": [{"name": "output", "errors": {}}]}

    return Reference(request=request, facts=lambda: {"python": "py", "torch": "2.13.0"}), asked


def _workloads() -> list[Workload]:
    phases = [Workload(f"model/{p}", "model_phase", "phase", "bf16", {"phase": p}) for p in ("prefill", "decode")]
    ops = [Workload(f"model/op/mm/{i}", "op_replay", "op", "bf16", {"op_call": {}}) for i in range(10)]
    group = Workload("model/op/rest/prefill", "op_group", "op", "bf16", {"op_group": [{}] * 10})
    return [*phases, *ops, group]


def test_phases_are_judged_past_the_share_and_the_rest_is_priced(tmp_path: Path) -> None:
    workloads = _workloads()
    clock = [0.0]
    reference, asked = _reference(clock)
    entries = [{"name": w.name, "status": "ok"} for w in workloads]
    capture = _capture(tmp_path, workloads, share=0.25)
    # 20 s of run: the share's floor of 10 s, a third of one phase's 30 s truth.
    out = judge(capture, workloads, entries, LABELS, reference, elapsed_s=20.0, progress=ignore, clock=lambda: clock[0])
    assert asked[:2] == ["model/prefill", "model/decode"]  # both phases, 60 s, past the share
    assert [n for n in asked if "/op/" in n] == [f"model/op/mm/{i}" for i in range(6)]  # 2 s each, until past 10 s
    summary = capture.summary
    assert summary["phases_s"] == 60.0 and summary["spent_s"] == 12.0 and summary["skipped_for_share"] == 5
    # Four ops at their kind's 2 s, the group as ten single ops (20 s): not at a phase's 30 s.
    assert summary["skipped_estimate_s"] == 28.0
    assert summary["share_for_all"] == 2.0  # (12 + 28) / 20, rounded up to a tenth
    reasons = [d["reason"] for d in out.values() if d["status"] == "not_compared"]
    assert len(reasons) == 5 and all("28 s more would judge every workload (--reference-share 2)" in r for r in reasons)


def test_a_share_large_enough_judges_everything(tmp_path: Path) -> None:
    workloads = _workloads()
    clock = [0.0]
    reference, asked = _reference(clock)
    entries = [{"name": w.name, "status": "ok"} for w in workloads]
    capture = _capture(tmp_path, workloads, share=1.0)
    out = judge(
        capture, workloads, entries, LABELS, reference, elapsed_s=100.0, progress=ignore, clock=lambda: clock[0]
    )
    assert len(asked) == len(workloads) and all(d["status"] == "compared" for d in out.values())
    assert capture.summary["skipped_for_share"] == 0 and "share_for_all" not in capture.summary
