"""Did the machine move? host/moved.py on synthetic records whose visits, readings and visit medians are
known: what it must say (a CPU hog from the second pass on, the Mac's thermal pressure rising, NVML's slowdown
reasons, a power source that changed) and what it must not (a quiet run, one build alone moving, a move inside
the intervals or under the floor)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mpsup.errors import UserError
from mpsup.host.moved import DRIFT_FLOOR, PRESSURE_STEP, run_conditions
from mpsup.report.analysis import analyze
from mpsup.runs.schema import RunRecord
from mpsup.runs.select import merge_single_runs
from tests.synthetic import paired_record

LABELS = ("baseline", "candidate")


def _median(m: float, width: float = 0.02) -> dict[str, Any]:
    return {"median": m, "n": 12, "low": m * (1 - width), "high": m * (1 + width)}


def with_visits(
    doc: dict[str, Any],
    times: list[dict[str, float]],
    readings: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
    *,
    workloads: int | None = None,
    span: float = 1.0,
) -> dict[str, Any]:
    """`doc` with each of its first `workloads` workloads visited once per entry of `times` (each build's median of
    that visit, relative to the workload's own time), the visits of one pass before the next, each `span` seconds,
    and `readings[k]` the (start, end) readings of the k-th visit of every workload."""
    doc = copy.deepcopy(doc)
    ws = doc["workloads"][: workloads or len(doc["workloads"])]
    t = 0.0
    for k, by_label in enumerate(times):
        for w in ws:
            base = w["envs"]["baseline"]["median"]
            start, end = readings[k] if readings else ({}, {})
            w.setdefault("visit_states", []).append(
                {
                    "visit": k + 1,
                    "t0": t,
                    "t1": t + span,
                    "start": start,
                    "end": end,
                    "read_s": 0.0002,
                    "medians": {label: _median(base * f) for label, f in by_label.items()},
                }
            )
            t += span
    return doc


def _psi(share: float, visit: int, span: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """A visit's (start, end) readings whose CPU pressure grew by `share` of its time."""
    start = 10_000_000 * (visit + 1)
    return {"cpu_pressure_us": start, "load1": 1.0}, {"cpu_pressure_us": start + int(share * span * 1e6)}


def _cond(doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    return run_conditions(RunRecord.from_json(doc, "synthetic"))


def test_a_quiet_run_says_nothing() -> None:
    doc = with_visits(
        paired_record(1.0, count=4),
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.01, "candidate": 0.99}],
        [_psi(0.05, 0), _psi(0.08, 1)],
    )
    c = _cond(doc)
    assert not c.moved and c.line is None and c.considered == 4 and c.visits == 8
    assert c.to_json()["moved"] is False and c.to_json()["line"] is None


def test_a_cpu_hog_from_the_second_pass_is_said_and_the_ratio_stands() -> None:
    cpu = paired_record(1.0, count=4)
    cpu["device"] = "cpu"
    doc = with_visits(
        cpu,
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.4, "candidate": 1.4}],
        [_psi(0.05, 0), _psi(0.5, 1)],
    )
    c = _cond(doc)
    assert c.moved and c.times_moved and [p.key for p in c.pressures] == ["cpu_pressure_us"]
    assert c.line == (
        "The machine's CPU pressure (time a task waited for a CPU) rose from 5% to 50% of the visits' time during the "
        "run; both builds' times rose 40% (median of 4 workloads) from the first visits to the last: the ratio "
        "stands, the times do not."
    )
    doc_json = c.to_json()
    assert doc_json["pressures"] == [{"what": "cpu_pressure_us", "early": 0.05, "late": 0.5}]
    assert doc_json["times_moved"] and len(doc_json["drift"]) == 4
    assert {round(d["change"], 6) for d in doc_json["drift"]} == {0.4}
    # The paired verdict is about the ratio, which the hog hit alike: it is no reason to call a change.
    a = analyze(doc)
    assert a.conditions.line == c.line and a.to_json()["conditions"]["moved"] is True
    assert a.verdict != "regression" and a.verdict != "benefit"


def test_the_issue_s_sentence_for_a_mac_that_heats_up() -> None:
    doc = paired_record(1.0, count=1)
    doc["workloads"][0]["name"] = "model/decode"
    doc = with_visits(
        doc,
        [
            {"baseline": 1.0, "candidate": 1.0},
            {"baseline": 1.1, "candidate": 1.1},
            {"baseline": 1.18, "candidate": 1.18},
        ],
        [
            ({"thermal_pressure": "nominal"}, {"thermal_pressure": "nominal"}),
            ({"thermal_pressure": "moderate"}, {"thermal_pressure": "heavy"}),
            ({"thermal_pressure": "heavy"}, {"thermal_pressure": "moderate"}),
        ],
    )
    assert _cond(doc).line == (
        "The Mac's thermal pressure rose from nominal to heavy during the run; both builds' model/decode times rose "
        "18% from the first visits to the last: the ratio stands, the times do not."
    )


def test_one_build_alone_moving_is_not_the_machine() -> None:
    doc = with_visits(
        paired_record(1.0, count=3), [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.5, "candidate": 1.0}]
    )
    assert not _cond(doc).moved


@pytest.mark.parametrize(
    ("late", "width"),
    [
        (1 + DRIFT_FLOOR / 2, 0.001),  # past the intervals, under the floor
        (1.3, 0.2),  # over the floor, inside the intervals
    ],
)
def test_a_move_under_the_floor_or_inside_the_intervals_is_not_said(late: float, width: float) -> None:
    doc = with_visits(
        paired_record(1.0, count=2), [{"baseline": 1.0, "candidate": 1.0}, {"baseline": late, "candidate": late}]
    )
    for w in doc["workloads"]:
        for v in w["visit_states"]:
            for m in v["medians"].values():
                m["low"], m["high"] = m["median"] * (1 - width), m["median"] * (1 + width)
    assert not _cond(doc).moved


def test_times_that_moved_in_a_minority_of_workloads_are_not_the_machine() -> None:
    doc = with_visits(
        paired_record(1.0, count=4), [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.0, "candidate": 1.0}]
    )
    first = doc["workloads"][0]["visit_states"][1]["medians"]
    for label in LABELS:
        first[label] = _median(first[label]["median"] * 1.5)
    c = _cond(doc)
    assert len(c.drifts) == 1 and not c.times_moved and not c.moved


def test_a_pressure_step_under_the_threshold_is_not_said() -> None:
    doc = with_visits(
        paired_record(1.0, count=2),
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.0, "candidate": 1.0}],
        [_psi(0.10, 0), _psi(0.10 + PRESSURE_STEP * 0.9, 1)],
    )
    assert not _cond(doc).moved


def test_the_gpu_slowing_itself_and_another_process_on_it_are_said() -> None:
    doc = with_visits(
        paired_record(1.0, count=1),
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.0, "candidate": 1.0}],
        [
            ({"gpu_events": ["idle"], "gpu_processes": 2}, {"gpu_events": ["idle"], "gpu_processes": 2}),
            ({"gpu_events": ["power cap"], "gpu_processes": 3}, {"gpu_events": [], "gpu_processes": 3}),
        ],
    )
    line = _cond(doc).line
    assert line is not None
    assert "NVML showed the GPU slowing itself (power cap)" in line
    assert "the processes on the GPU rose from 2 to 3" in line
    assert line.endswith("both builds' times stayed within their intervals from the first visits to the last.")


def test_visits_too_short_for_an_interval_claim_nothing_about_the_times() -> None:
    # An H100 run at --budget 0.15 with a matmul loop on the GPU from its second pass: a visit held three calls a
    # build, no interval, and the times tripled; the line must not say they stayed within their intervals.
    doc = with_visits(
        paired_record(1.0, count=1),
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 3.4, "candidate": 3.4}],
        [({"gpu_processes": 2}, {"gpu_processes": 2}), ({"gpu_processes": 3}, {"gpu_processes": 3})],
    )
    for w in doc["workloads"]:
        for v in w["visit_states"]:
            for m in v["medians"].values():
                m.update(n=3, low=None, high=None)
    c = _cond(doc)
    assert c.considered == 0 and not c.times_moved
    assert c.line == "The processes on the GPU rose from 2 to 3 during the run."


def test_the_power_source_and_energy_mode_changing_between_start_and_end_are_said() -> None:
    hyg = {
        "before": {"on_battery": False, "energy_mode": "automatic"},
        "after": {"on_battery": True, "energy_mode": "low"},
        "changed": ["power source changed from mains to battery", "energy mode changed from automatic to low"],
    }
    c = _cond(paired_record(1.0, count=1, hygiene=hyg))
    assert c.line == (
        "The power source changed from mains to battery; the energy mode changed from automatic to low during the run."
    )
    # Said once: the moved line covers what changed, the conditions line keeps what was noisy at the ends.
    assert c.shown_noise == ("on battery",)
    assert "on battery" in analyze(paired_record(1.0, count=1, hygiene=hyg)).noise


def test_a_record_from_before_visit_states_reads_as_before() -> None:
    hyg = {
        "before": {"on_battery": False},
        "after": {"on_battery": False},
        "changed": ["swap use grew by 1.0 GiB during the run"],
    }
    c = _cond(paired_record(1.0, count=2, hygiene=hyg))
    assert c.visits == 0 and c.considered == 0
    assert c.line == "Swap use grew by 1.0 GiB during the run."


def test_two_single_runs_of_other_macos_builds_are_kept_apart_and_said() -> None:
    def single(run_id: str, build: str) -> RunRecord:
        doc = paired_record(1.0, count=2, run_id=run_id)
        doc["mode"] = "single"
        doc["environments"] = doc["environments"][:1]
        for w in doc["workloads"]:
            w["envs"] = {"baseline": w["envs"]["baseline"]}
            w["ratios"] = []
        doc["hygiene"] = {"before": {"os_build": build, "energy_mode": "automatic"}, "after": {"os_build": build}}
        return RunRecord.from_json(with_visits(doc, [{"baseline": 1.0}, {"baseline": 1.5}]), run_id)

    merged = merge_single_runs(single("a", "24D60"), single("b", "24E248"))
    c = run_conditions(merged)
    assert c.kept_apart == ("OS build 24D60 vs 24E248",)
    # One run's start and the other's end are no run's change: nothing "moved during the run".
    assert not c.moved and c.visits == 0
    assert "the two runs ran under other conditions (OS build 24D60 vs 24E248)" in analyze(merged).noise
    assert "visit_states" not in merged.workloads[0].to_json()


def test_a_visit_state_of_the_wrong_shape_is_one_line() -> None:
    doc = with_visits(paired_record(1.0, count=1), [{"baseline": 1.0, "candidate": 1.0}])
    doc["workloads"][0]["visit_states"][0]["medians"]["baseline"]["median"] = "fast"
    with pytest.raises(UserError, match=r"visit_states\[0\]\.medians\.baseline\.median: expected a number"):
        RunRecord.from_json(doc, "bad.json")
    doc["workloads"][0]["visit_states"][0]["medians"]["baseline"]["median"] = 1.0
    doc["workloads"][0]["visit_states"][0]["start"] = {"thermal_pressure": "x" * 10_000}
    with pytest.raises(UserError, match=r"start\.thermal_pressure: text of 10,000 characters"):
        RunRecord.from_json(doc, "bad.json")


def test_a_reading_s_value_is_cut_short_in_the_line() -> None:
    doc = with_visits(
        paired_record(1.0, count=1),
        [{"baseline": 1.0, "candidate": 1.0}, {"baseline": 1.0, "candidate": 1.0}],
        [({"thermal_pressure": "nominal"}, {}), ({"thermal_pressure": "y" * 200}, {})],
    )
    line = _cond(doc).line
    assert line is not None and "y" * 40 in line and "y" * 41 not in line


def test_an_a_a_run_of_another_os_build_is_not_this_run_s_noise_floor() -> None:
    from mpsup.report.analysis import matching_aa

    def run(run_id: str, mode: str, build: str) -> RunRecord:
        doc = paired_record(1.0, count=2, run_id=run_id, mode=mode)
        if mode == "aa":
            doc["environments"][1]["torch_version"] = doc["environments"][0]["torch_version"]
        doc["hygiene"] = {"before": {"os_build": build, "energy_mode": "automatic"}, "after": {}, "changed": []}
        return RunRecord.from_json(doc, run_id)

    record = run("paired", "paired", "24D60")
    same, other = run("aa-same", "aa", "24D60"), run("aa-other", "aa", "24E248")
    passed: list[str] = []
    assert matching_aa(record, [same, other], passed) is same  # the newer one is passed over, and said
    assert passed == [
        "A/A run aa-other not used as this run's noise floor: it ran under other conditions (OS build 24D60 vs 24E248)"
    ]
    passed.clear()
    assert matching_aa(record, [other], passed) is None and len(passed) == 1
