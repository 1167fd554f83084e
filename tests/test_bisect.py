"""mpsup bisect: the pure bisection over fake step outcomes (clear, inconclusive, resumed from a journal),
and one real bisect over four interpreter wrappers through the CLI."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path

import pytest

from mpsup.bisect.logic import (
    BAD,
    GOOD,
    INCONCLUSIVE,
    Done,
    Figure,
    Measure,
    Outcome,
    classify,
    max_paired_runs,
    next_action,
)
from tests.conftest import run_cli
from tests.pkgindex import slow_linear


def simulate(n: int, first_bad: int, flaky: dict[int, list[str]] | None = None) -> tuple[Done, list[Outcome]]:
    """Drive next_action with a fake measurer: environments from `first_bad` on are bad; `flaky` gives an
    environment's verdicts attempt by attempt before the truth (inconclusive ones)."""
    flaky = {k: list(v) for k, v in (flaky or {}).items()}
    outcomes: list[Outcome] = []
    for _ in range(100):
        action = next_action(n, outcomes)
        if isinstance(action, Done):
            return action, outcomes
        queued = flaky.get(action.index)
        verdict = queued.pop(0) if queued else (BAD if action.index >= first_bad else GOOD)
        outcomes.append(Outcome(action.index, action.attempt, verdict))
    raise AssertionError("the bisect did not end")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16, 33])
def test_every_first_bad_is_found_within_the_bound(n: int) -> None:
    for first_bad in range(1, n):
        done, outcomes = simulate(n, first_bad)
        assert (done.status, done.first_bad, done.last_good) == ("found", first_bad, first_bad - 1)
        assert len(outcomes) <= max_paired_runs(n) <= math.log2(n) + 2
        assert outcomes[0] == Outcome(n - 1, 1, BAD)  # the ends come first


def test_eight_environments_change_at_the_fifth_takes_four_runs() -> None:
    done, outcomes = simulate(8, 4)
    assert [o.index for o in outcomes] == [7, 3, 5, 4]
    assert (done.last_good, done.first_bad) == (3, 4)


def test_an_inconclusive_step_is_measured_once_more_then_the_bisect_goes_on() -> None:
    done, outcomes = simulate(8, 4, flaky={5: [INCONCLUSIVE]})
    assert [(o.index, o.attempt) for o in outcomes] == [(7, 1), (3, 1), (5, 1), (5, 2), (4, 1)]
    assert (done.status, done.first_bad) == ("found", 4)


def test_twice_inconclusive_is_stated_with_the_range_that_remains() -> None:
    # The change is at 4; 4 never gives a call: the answer is a range, 3 good and 5 bad, 4 unresolved.
    done, outcomes = simulate(8, 4, flaky={4: [INCONCLUSIVE, INCONCLUSIVE]})
    assert done == Done("inconclusive", 3, 5, (4,))
    assert [(o.index, o.attempt) for o in outcomes if o.index == 4] == [(4, 1), (4, 2)]


def test_an_unresolved_environment_is_skipped_for_its_neighbours() -> None:
    # 3 (the first midpoint) never gives a call: the bisect tries the others and still names 5.
    done, _ = simulate(8, 5, flaky={3: [INCONCLUSIVE, INCONCLUSIVE]})
    assert (done.status, done.last_good, done.first_bad) == ("found", 4, 5)


def test_ends_alike_or_untold() -> None:
    assert next_action(5, [Outcome(4, 1, GOOD)]) == Done("no-regression", 0, 4)
    assert next_action(5, [Outcome(4, 1, INCONCLUSIVE)]) == Measure(4, 2)
    assert next_action(5, [Outcome(4, 1, INCONCLUSIVE), Outcome(4, 2, INCONCLUSIVE)]) == Done(
        "ends-inconclusive", 0, 4, (4,)
    )
    with pytest.raises(ValueError):
        next_action(1, [])


def test_resume_from_a_journal_prefix_continues_identically() -> None:
    """Whatever step a bisect is stopped after, the outcomes so far (what the journal holds) lead to the
    same next steps and the same answer as an uninterrupted bisect."""
    done, outcomes = simulate(16, 11, flaky={7: [INCONCLUSIVE]})
    for cut in range(len(outcomes) + 1):
        prefix = list(outcomes[:cut])
        rest: list[Outcome] = []
        while not isinstance(action := next_action(16, prefix + rest), Done):
            rest.append(outcomes[cut + len(rest)])
            assert (rest[-1].index, rest[-1].attempt) == (action.index, action.attempt)
        assert action == done


def test_classify_reads_a_step_against_the_ends() -> None:
    slow = Figure("w", "slower", 0.5, 0.45, 0.55)
    assert classify([slow], 0.03) == BAD
    assert classify([Figure("w", "same", 1.0, 0.97, 1.03)], 0.03, {"w": 0.5}) == GOOD
    assert classify([Figure("w", "faster", 1.2, 1.1, 1.3)], 0.03, {"w": 0.5}) == GOOD
    # 'same' but reaching down towards the bad build's 0.5x: leaning, not called
    assert classify([Figure("w", "same", 0.8, 0.6, 1.1)], 0.03, {"w": 0.5}) == INCONCLUSIVE
    assert classify([Figure("w", "n/a", 0.5, None, None)], 0.03, {"w": 0.5}) == INCONCLUSIVE
    assert classify([], 0.03) == INCONCLUSIVE
    # the ends step: no yardstick yet, an estimate pointing at a practical slowdown is not 'good'
    assert classify([Figure("w", "same", 0.9, 0.5, 1.4)], 0.03) == INCONCLUSIVE
    assert classify([Figure("w", "same", 0.99, 0.9, 1.1)], 0.03) == GOOD


# --- one real bisect ---------------------------------------------------------------------------------------


def _wrapper(folder: Path, i: int, bad: bool) -> Path:
    """An 'environment': this interpreter behind a shell script. The bad ones put a folder on PYTHONPATH whose
    sitecustomize makes torch.nn.functional.linear compute its product twice (tests/pkgindex.py: slow_linear):
    a bf16 linear about twice as slow on any CPU or GPU, which an instruction-set switch is not."""
    p = folder / f"env{i}"
    change = ""
    if bad:
        hook = folder / "slow-linear"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text("import torch\n\n" + slow_linear("torch"))
        change = f'export PYTHONPATH="{hook}"\n'
    p.write_text(f'#!/bin/sh\n{change}exec "{sys.executable}" "$@"\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


@pytest.mark.skipif(os.name != "posix", reason="interpreter wrappers are shell scripts")
def test_cli_bisect_over_four_wrappers_names_the_second_and_resumes(tmp_path: Path, mpsup_home: Path) -> None:
    envs = [str(_wrapper(tmp_path, i, bad=i >= 2)) for i in (1, 2, 3, 4)]
    args = ["bisect", *envs, "--device", "cpu", "--only", "linear/896x896/t16", "--budget", "0.05", "--json"]
    res = run_cli(*args)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["schema"] == "mpsup.bisect-result/1"
    assert doc["paired_runs"] == len(doc["steps"]) >= 1
    assert doc["steps"][0]["index"] == 3  # the ends first
    for step in doc["steps"]:
        assert step["run_id"] and (mpsup_home / "runs" / f"{step['run_id']}.json").is_file()
        assert step["verdict"] in ("good", "bad", "inconclusive")
    if res.returncode == 0:
        # the change is at the second; the measurement named it
        assert doc["status"] == "found" and doc["first_bad"]["index"] == 1 and doc["last_good"]["index"] == 0
        # one torch behind every wrapper: the same revision twice, so no compare link, and the note says why
        assert doc["first_bad"]["git_version"] == doc["last_good"]["git_version"] and doc["compare_url"] is None
        assert any("same git revision" in n for n in doc["notes"])
        assert doc["paired_runs"] <= 2 + 2  # the ends, then the second; at most a second look at each
    journal = Path(doc["journal"])
    saved = json.loads(journal.read_text())
    assert saved["status"] == "done" and len(saved["steps"]) == doc["paired_runs"]
    # The same command again: the journal answers, nothing is measured.
    again = run_cli(*args)
    assert again.returncode == res.returncode
    redo = json.loads(again.stdout)
    assert redo["resumed_steps"] == doc["paired_runs"] and redo["steps"] == doc["steps"]


def test_cli_bisect_bad_input_is_one_line(tmp_path: Path) -> None:
    one = run_cli("bisect", sys.executable, "--only", "x")
    assert one.returncode == 2 and "at least two environments" in one.stderr and "Traceback" not in one.stderr
    missing = run_cli("bisect", sys.executable, str(tmp_path / "nope"), "--only", "linear/*")
    assert missing.returncode == 2 and "environment 2" in missing.stderr and "Traceback" not in missing.stderr
    same = run_cli("bisect", sys.executable, sys.executable, "--only", "linear/*", "--device", "cpu")
    assert same.returncode == 2 and "environment 2" in same.stderr and "the good environment itself" in same.stderr
    other = tmp_path / "other-python"
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    none = run_cli("bisect", sys.executable, str(other), "--only", "no-such-workload", "--device", "cpu")
    assert none.returncode == 2 and "matches no workload" in none.stderr
    resume = run_cli("bisect", "--resume")
    assert resume.returncode == 2 and "no interrupted bisect" in resume.stderr


def test_resume_alone_takes_the_last_interrupted_journal_and_a_damaged_one_is_one_line(mpsup_home: Path) -> None:
    from mpsup.bisect import command
    from mpsup.bisect import journal as jr
    from mpsup.errors import UserError

    args = {"only": "linear/*", "device": "cpu", "budget": 0.1, "threshold": 0.03, "pythons": []}
    # Each under the key its arguments give, as mpsup writes them.
    a, b, c = args, {**args, "budget": 0.2}, {**args, "budget": 0.3}
    older = jr.new_journal(jr.journal_key(a), a, ["old1", "old2"], "2026-12-01T00:00:00Z")
    newer = jr.new_journal(jr.journal_key(b), b, ["new1", "new2", "new3"], "2026-12-02T00:00:00Z")
    done = {**jr.new_journal(jr.journal_key(c), c, ["x", "y"], "2026-12-03T00:00:00Z"), "status": "done"}
    for doc in (older, newer, done):
        jr.save_journal(doc)
    req = command.check(command.BisectRequest(resume=True))
    assert req.environments == ("new1", "new2", "new3") and req.budget == 0.2 and req.only == "linear/*"
    assert [d["key"] for d in jr.finished_journals()] == [jr.journal_key(c)]
    jr.journal_path(jr.journal_key(b)).write_text("{not json")
    with pytest.raises(UserError, match="--fresh"):
        jr.load_journal(jr.journal_path(jr.journal_key(b)))
    jr.journal_path(jr.journal_key(b)).write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(UserError, match="--fresh"):
        jr.load_journal(jr.journal_path(jr.journal_key(b)))
    # the damaged one is passed over: --resume now finds the older
    assert command.check(command.BisectRequest(resume=True)).environments == ("old1", "old2")


def test_a_journal_whose_steps_name_no_environment_is_refused_not_bisected_on(mpsup_home: Path, tmp_path: Path) -> None:
    from mpsup.bisect import command
    from mpsup.bisect import journal as jr
    from mpsup.errors import UserError

    other = tmp_path / "other-python"  # a second environment: the good one twice is refused before any journal
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    req = command.BisectRequest(
        environments=(sys.executable, str(other)), only="linear/384x384/t1", device="cpu", budget=0.1
    )
    args = command._args(req, [Path(sys.executable), other], "cpu")
    key = jr.journal_key(args)
    doc = jr.new_journal(key, args, list(req.environments), "2026-12-04T00:00:00Z")
    doc["steps"] = [{"index": 7, "attempt": 1, "verdict": "bad", "figures": []}]
    jr.save_journal(doc)
    with pytest.raises(UserError, match="names no environment"):
        command.run(req)
    doc["steps"] = [{"index": 1, "attempt": "x", "verdict": "bad"}]
    jr.save_journal(doc)
    with pytest.raises(UserError, match="step 1: attempt must be an integer"):
        command.run(req)


def test_resume_alone_works_from_any_folder_and_refuses_fresh(mpsup_home: Path, tmp_path: Path) -> None:
    from mpsup.bisect import command
    from mpsup.bisect import journal as jr
    from mpsup.errors import UserError

    args = {"only": "linear/*", "device": "cpu", "budget": 0.1, "threshold": 0.03, "pythons": ["/abs/a", "/abs/b"]}
    key = jr.journal_key(args)
    jr.save_journal(jr.new_journal(key, args, ["envs/a", "envs/b"], "2026-12-02T00:00:00Z"))
    # the interpreters as resolved then: a relative name typed elsewhere still finds this journal
    assert command.check(command.BisectRequest(resume=True)).environments == ("/abs/a", "/abs/b")
    with pytest.raises(UserError, match="contradict"):
        command.check(command.BisectRequest(resume=True, fresh=True))
    jr.save_journal({**jr.new_journal(key, {**args, "budget": "x"}, ["a", "b"], "2026-12-02T00:00:00Z")})
    with pytest.raises(UserError, match=r"args\.budget must be a number, found str; rerun with --fresh"):
        command.check(command.BisectRequest(resume=True))
