"""A bisect's journal is input like any other: a real interrupted one (four interpreter wrappers, the third and
fourth computing F.linear twice; Ctrl-C as step 2 started, so step 1 is journaled with its run record) made
hostile field by field. Its key never decides where mpsup writes, its arguments are type-checked, one too large
to be rewritten is refused before anything is measured, and two bisects of the same arguments never run at once.

The fixture was written by `mpsup bisect` itself (tests/fixtures/journals/bisect-interrupted-in-step-2*.json);
its wrappers' folder is `{ROOT}`, made again here, and its key is what mpsup computes for the new paths."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mpsup.bisect import command
from mpsup.bisect import journal as jr
from mpsup.errors import UserError
from tests.conftest import run_cli
from tests.test_bisect import _wrapper

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "journals"
JOURNAL = FIXTURES / "bisect-interrupted-in-step-2.json"
RUN = FIXTURES / "bisect-interrupted-in-step-2.step-1-run.json"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="interpreter wrappers are shell scripts")


def _interrupted(tmp_path: Path, home: Path) -> tuple[Path, dict[str, Any], list[str]]:
    """The fixture as the bisect of these wrappers would have left it: its journal and its step's run record."""
    root = tmp_path / "wrappers"
    root.mkdir()
    envs = [str(_wrapper(root, i, bad=i >= 3)) for i in (1, 2, 3, 4)]
    doc = json.loads(JOURNAL.read_text().replace("{ROOT}", str(root)))
    doc["key"] = jr.journal_key(doc["args"])
    path = jr.save_journal(doc)
    record = json.loads(RUN.read_text().replace("{ROOT}", str(root)))
    runs = home / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    (runs / f"{record['id']}.json").write_text(json.dumps(record))
    return path, doc, envs


def _rekeyed(path: Path, doc: dict[str, Any], args: dict[str, Any]) -> Path:
    """The journal with other arguments under the key they give, as a hand that recomputes the digest leaves it."""
    path.unlink(missing_ok=True)
    key = jr.journal_key(args)
    new = path.with_name(f"{key}.json")
    new.write_text(json.dumps({**doc, "args": args, "key": key}))
    return new


def _args(envs: list[str]) -> list[str]:
    return ["bisect", *envs, "--device", "cpu", "--only", "linear/896x896/t16", "--budget", "0.05"]


def _request(envs: list[str]) -> command.BisectRequest:
    return command.BisectRequest(environments=tuple(envs), only="linear/896x896/t16", device="cpu", budget=0.05)


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def test_the_fixture_is_a_journal_mpsup_continues(tmp_path: Path, mpsup_home: Path) -> None:
    path, doc, envs = _interrupted(tmp_path, mpsup_home)
    assert jr.load_journal(path)["steps"] == doc["steps"]
    assert jr.newest_unfinished() == path
    assert command.check(command.BisectRequest(resume=True)).environments == tuple(envs)
    # the same command finds it by its arguments (the key is theirs) and would continue from step 2
    assert jr.journal_path(jr.journal_key(command._args(_request(envs), [Path(e) for e in envs], "cpu"))) == path


@pytest.mark.parametrize("key", ["../../../escaped", "ABSOLUTE", "0123456789abcdef", "4c98a6272a777480/../x"])
def test_a_key_that_is_not_the_files_own_name_decides_nothing(tmp_path: Path, mpsup_home: Path, key: str) -> None:
    path, doc, envs = _interrupted(tmp_path, mpsup_home)
    elsewhere = tmp_path / "elsewhere" / "x"
    doc["key"] = str(elsewhere) if key == "ABSOLUTE" else key
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    # the same command: one line naming the file and the key, nothing measured or written
    with pytest.raises(UserError, match=r"its key .* is not this file's name .*rerun with --fresh"):
        command.run(_request(envs))
    # --resume alone passes over it, and says why in its one line
    with pytest.raises(UserError, match=r"no interrupted bisect to continue .*passed over 1 unreadable: .*its key"):
        command.check(command.BisectRequest(resume=True))
    assert path.read_bytes() == before
    assert not (tmp_path / "elsewhere").exists() and not (mpsup_home.parent / "escaped.json").exists()
    assert [p.name for p in (mpsup_home / "bisect").iterdir()] == [path.name]  # the lock went with the refusal
    # a journal written with a key that names no file of ours is refused before anything is written
    with pytest.raises(UserError, match="not a bisect journal's key"):
        jr.save_journal({**doc, "key": "../../../escaped"})


def test_cli_resume_and_rerun_refuse_a_hostile_key_in_one_line(tmp_path: Path, mpsup_home: Path) -> None:
    path, doc, envs = _interrupted(tmp_path, mpsup_home)
    doc["key"] = str(tmp_path / "elsewhere" / "x")
    path.write_text(json.dumps(doc))
    rerun = run_cli(*_args(envs))
    assert rerun.returncode == 2 and "its key" in _one_line(rerun.stderr) and str(path) in rerun.stderr
    resume = run_cli("bisect", "--resume", "--json")
    assert resume.returncode == 2 and "its key" in _one_line(resume.stderr)
    assert json.loads(resume.stdout)["exit_code"] == 2
    assert "continuing from the journal" not in rerun.stderr + resume.stderr
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("only", ["linear/*"], "args.only must be a string or null, found list"),
        ("threads", "2", "args.threads must be an integer or null, found str"),
        ("threads", True, "args.threads must be an integer or null, found bool"),
        ("budget", "0.05", "args.budget must be a number, found str"),
        ("model", {"path": "/x"}, "args.model must be a string or null, found dict"),
        ("pythons", "/usr/bin/python3", "args.pythons must be a list of strings"),
        ("nightlies", {"good": 1}, r"args.nightlies must be an object of strings \(good, bad, index_url, python\)"),
    ],
)
def test_journal_arguments_of_the_wrong_type_are_one_line(
    tmp_path: Path, mpsup_home: Path, field: str, value: Any, says: str
) -> None:
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    doc["args"][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=f"{path}: {says}; rerun with --fresh"):
        jr.load_journal(path)
    with pytest.raises(UserError, match=says):
        command.check(command.BisectRequest(resume=True))


def test_cli_resume_with_only_a_list_and_threads_a_string_exits_2(tmp_path: Path, mpsup_home: Path) -> None:
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    for field, value in (("only", ["linear/*"]), ("threads", "2")):
        path.write_text(json.dumps({**doc, "args": {**doc["args"], field: value}}))
        res = run_cli("bisect", "--resume")
        assert res.returncode == 2 and f"args.{field} must be" in _one_line(res.stderr)


def test_journal_values_that_pass_the_types_are_checked_as_if_typed(tmp_path: Path, mpsup_home: Path) -> None:
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    for field, value, says in (("budget", -1.0, "--budget"), ("threshold", 7.0, "--threshold 7")):
        path = _rekeyed(path, doc, {**doc["args"], field: value})
        with pytest.raises(UserError, match=f"{path}: {says}.*rerun with --fresh"):
            command.check(command.BisectRequest(resume=True))


@pytest.mark.parametrize(
    ("field", "value"),
    [("tokens", "1,x"), ("dtype", "../../x"), ("affinity", "9999"), ("threads", 10**30)],
)
def test_cli_resume_refuses_journal_values_bench_refuses_as_the_journal_s_fields(
    tmp_path: Path, mpsup_home: Path, field: str, value: Any
) -> None:
    """Values of the right type that bench's own checks refuse: the line names the journal file and the field,
    not an option the user never typed."""
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    path = _rekeyed(path, doc, {**doc["args"], field: value})
    res = run_cli("bisect", "--resume")
    line = _one_line(res.stderr)
    assert res.returncode == 2, res.stderr
    assert line.startswith(f"mpsup: {path}: args.{field} "), line
    assert f"--{field}" not in line and line.endswith("rerun with --fresh to start over"), line


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("elapsed_s", "soon", "elapsed_s must be a number of seconds"),
        ("elapsed_s", -5, "elapsed_s must be a number of seconds"),
        ("status", "paused", "status must be 'running' or 'done'"),
        ("facts", {"0": {"torch": 2}}, "each environment's facts must be strings or null"),
        ("steps", [{"index": 3, "verdict": "bad", "seconds": "x"}], "step 1: seconds must be a number"),
        ("steps", [{"index": 3, "verdict": "weird"}], "step 1: verdict 'weird' is not good, bad or inconclusive"),
        (
            "steps",
            [{"index": 3, "verdict": "bad", "figures": [{"name": "w", "change": "slower", "low": "0.5"}]}],
            "low",
        ),
        ("result", {"status": "found", "last_good": "1", "first_bad": 2}, "result must be an object"),
    ],
)
def test_every_journal_field_is_checked_on_read(
    tmp_path: Path, mpsup_home: Path, field: str, value: Any, says: str
) -> None:
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    path.write_text(json.dumps({**doc, field: value}))
    with pytest.raises(UserError, match=f"{path}: .*{says}"):
        jr.load_journal(path)


def test_report_upstream_passes_over_a_journal_with_elapsed_soon(tmp_path: Path, mpsup_home: Path) -> None:
    """A finished bisect's journal is quoted by report --upstream; `"elapsed_s": "soon"` once raised ValueError."""
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    done = {**doc, "status": "done", "result": {"status": "found", "last_good": 1, "first_bad": 2, "unresolved": []}}
    path.write_text(json.dumps(done))
    quoted = run_cli("report", "--upstream")
    assert quoted.returncode == 0, quoted.stderr[-2000:]
    assert "#### Bisect" in quoted.stdout  # the journal is the record's bisect: quoted
    path.write_text(json.dumps({**done, "elapsed_s": "soon"}))
    passed = run_cli("report", "--upstream")
    assert passed.returncode == 0 and "Traceback" not in passed.stderr, passed.stderr[-2000:]
    assert "#### Bisect" not in passed.stdout and jr.finished_journals() == []


def test_a_journal_too_large_to_rewrite_is_refused_before_resuming(tmp_path: Path, mpsup_home: Path) -> None:
    """Read within the limit (written compactly), but rewritten larger than mpsup reads back: continuing it
    would measure on and lose the resumable state at its next save. Refused first, the file left as it was."""
    path, doc, envs = _interrupted(tmp_path, mpsup_home)
    step = doc["steps"][0]
    doc["steps"] = [step] * 50_000
    path.write_text(json.dumps(doc, separators=(",", ":")))
    assert path.stat().st_size < jr.MAX_JOURNAL_BYTES < jr.rewritten_bytes(doc)  # the case of the campaign
    before = path.stat()
    with pytest.raises(UserError, match=r"50000 steps, 1\d\.\d MiB when rewritten, too close to the 16 MiB"):
        command.run(_request(envs))
    with pytest.raises(UserError, match="too close to the 16 MiB"):
        command.run(command.BisectRequest(resume=True))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    # and nothing over the limit is ever written: the last good journal stays on disk
    from mpsup.errors import OperationFailed

    with pytest.raises(OperationFailed, match="would pass 16 MiB"):
        jr.save_journal(doc)
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def test_two_bisects_of_the_same_arguments_never_run_at_once(tmp_path: Path, mpsup_home: Path) -> None:
    path, doc, envs = _interrupted(tmp_path, mpsup_home)
    with jr.locked(doc["key"]):
        with pytest.raises(UserError, match=rf"this bisect is running in another mpsup \(process {os.getpid()}\)"):
            command.run(_request(envs))
        res = run_cli(*_args(envs))
        assert res.returncode == 2 and "running in another mpsup" in _one_line(res.stderr)
        # another bisect (other arguments) is not held up by it
        with jr.locked("f" * 16):
            pass
    assert json.loads(path.read_text())["steps"] == doc["steps"]  # the second one wrote nothing
    # a lock file planted as a link elsewhere is not followed
    planted = path.with_name("e" * 16 + ".lock")
    planted.symlink_to(tmp_path / "target")
    with pytest.raises(UserError, match="cannot lock this bisect"), jr.locked("e" * 16):
        pass
    assert not (tmp_path / "target").exists()


def test_resume_lists_what_abandoned_bisects_left_with_the_command_that_removes_it(
    tmp_path: Path, mpsup_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folders of nightly builds under bisect-envs/ that the bisect being resumed does not own: one interrupted
    bisect never resumed, one whose journal is gone. Each is named with `rm -rf` and what it belongs to."""
    _, doc, _ = _interrupted(tmp_path, mpsup_home)
    key = jr.journal_key({"only": "x"})  # a key its arguments give, as every journal mpsup writes
    other = jr.new_journal(key, {"only": "x"}, ["2.16.0.dev20261101", "2.16.0.dev20261109"], "2026-12-01T00:00:00Z")
    other["steps"] = [doc["steps"][0]]
    jr.save_journal(other)
    # the older interrupted bisect: --resume takes the newest (the fixture), the other is abandoned
    envs_dir = mpsup_home / "bisect-envs"
    for name in (key, "orphan"):
        env = envs_dir / name / "torch-2.16.0.dev20261101-cp311"
        env.mkdir(parents=True)
        (env / "mpsup-env.json").write_text("{}")

    def stop(self: Any, action: Any) -> str | None:
        raise KeyboardInterrupt  # Ctrl-C as the step starts: nothing measured

    monkeypatch.setattr(command._Session, "measure", stop)
    warned: list[str] = []
    result = command.run(command.BisectRequest(resume=True), warn=warned.append)
    assert result.interrupted == "SIGINT" and result.resumed_steps == 1
    assert warned == [
        f"{envs_dir / key}: 1 nightly build(s) installed by an interrupted bisect of 2.16.0.dev20261101 to "
        f"2.16.0.dev20261109 (1 step(s) done), not the bisect being resumed; remove it with: "
        f"rm -rf {envs_dir / key}",
        f"{envs_dir / 'orphan'}: 1 nightly build(s) installed by a bisect whose journal is gone, not the bisect "
        f"being resumed; remove it with: rm -rf {envs_dir / 'orphan'}",
    ]
    # with nothing to resume, the one line still names them
    for p in (mpsup_home / "bisect").glob("*.json"):
        p.unlink()
    with pytest.raises(UserError, match=rf"2 folder\(s\) of nightly builds are left: remove with rm -rf {envs_dir}/"):
        command.check(command.BisectRequest(resume=True))


def test_a_journal_whose_arguments_were_changed_runs_nothing(tmp_path: Path, mpsup_home: Path) -> None:
    """Interpreters swapped into an unfinished journal's arguments no longer give its key: refused, nothing run."""
    path, doc, _ = _interrupted(tmp_path, mpsup_home)
    evil = tmp_path / "evil.sh"
    marker = tmp_path / "ran"
    evil.write_text(f'#!/bin/sh\ntouch {marker}\nexec {sys.executable} "$@"\n')
    evil.chmod(0o755)
    swapped = {**doc["args"], "pythons": [str(evil), *doc["args"]["pythons"][1:]]}
    path.write_text(json.dumps({**doc, "args": swapped, "environments": [str(evil), *doc["environments"][1:]]}))
    res = run_cli("bisect", "--resume")
    assert res.returncode == 2 and "do not give its key" in _one_line(res.stderr)
    assert not marker.exists()
