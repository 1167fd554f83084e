"""Which run a report is about (never a guess), where it is written (never over a link, a device or a
folder), with what mode (the user's umask), and the JSON error document when --json fails."""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from mpsup.errors import UserError
from mpsup.report.command import ReportRequest, run_report
from mpsup.runs.store import find_record, save_record
from mpsup.safe_files import atomic_write_text, write_file_through
from tests.conftest import run_cli
from tests.synthetic import paired_record

IDS = ("20261202T100000Z-aaaa01", "20261202T110000Z-aaaa02", "20261202T120000Z-bbbb03")


@pytest.fixture
def three_runs(mpsup_home: Path) -> Path:
    runs = mpsup_home / "runs"
    for i, run_id in enumerate(IDS):
        save_record(paired_record(1.0 + i / 10, seed=i, count=3, rounds=8, run_id=run_id), runs)
    return runs


# --- item 12: --run never guesses -------------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_run_id_is_refused(three_runs: Path, blank: str):
    with pytest.raises(UserError, match="--run needs a run id"):
        find_record(blank, three_runs)  # before: the oldest run, silently


def test_an_ambiguous_prefix_lists_the_matches(three_runs: Path):
    with pytest.raises(UserError, match="ambiguous: 3 stored runs match") as exc:
        find_record("20261202T1", three_runs)  # before: the oldest of the three, silently
    assert all(run_id in str(exc.value) for run_id in IDS)
    assert find_record("20261202T12", three_runs).stem == IDS[2]


def test_an_exact_id_wins_over_longer_ids_it_prefixes(mpsup_home: Path):
    runs = mpsup_home / "runs"
    for run_id in ("20261202T100000Z-ab", "20261202T100000Z-abc"):
        save_record(paired_record(1.1, seed=1, count=2, rounds=6, run_id=run_id), runs)
    assert find_record("20261202T100000Z-ab", runs).stem == "20261202T100000Z-ab"


def test_cli_ambiguous_run_is_exit_2_with_a_json_error_document(three_runs: Path):
    res = run_cli("report", "--run", "2026", "--json")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "ambiguous" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and "ambiguous" in doc["message"]


# --- issue 16 item 3: --json always prints one JSON document ----------------------------------------


def test_report_json_with_no_runs_prints_an_error_document():
    res = run_cli("report", "--json")
    assert res.returncode == 2
    assert json.loads(res.stdout) == {"status": "error", "exit_code": 2, "message": json.loads(res.stdout)["message"]}
    assert "no paired run stored yet" in json.loads(res.stdout)["message"]  # before: stdout was empty
    assert res.stderr.startswith("mpsup: no paired run stored yet")


# --- item 13: -o writes the file the user named, as `>` would, atomically ---------------------------


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_get_the_umask_mode(tmp_path: Path, mask: int, mode: int):
    with _umask(mask):
        atomic_write_text(tmp_path / "a.txt", "x")  # before: 0600 whatever the umask
        write_file_through(tmp_path / "b.md", "x", "report")
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "b.md").stat().st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path: Path):
    for write in (atomic_write_text, lambda p, t: write_file_through(p, t, "report")):
        target = tmp_path / "kept.md"
        target.write_text("old")
        target.chmod(0o640)
        with _umask(0o022):
            write(target, "new")
        assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_symlink_is_written_through(tmp_path: Path):
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    assert write_file_through(link, "new", "report") == real.resolve()
    assert link.is_symlink() and real.read_text() == "new"  # before: the link was replaced by a file
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left behind


def test_a_dangling_symlink_creates_its_target(tmp_path: Path):
    link = tmp_path / "link.md"
    link.symlink_to(tmp_path / "new.md")
    write_file_through(link, "text", "report")
    assert link.is_symlink() and (tmp_path / "new.md").read_text() == "text"


def _special_targets(tmp_path: Path) -> list[tuple[Path, str]]:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    targets = [(tmp_path, "is a folder"), (fifo, "is not a regular file")]
    if os.geteuid() == 0:  # a private character device (the null device's numbers), in tmp only
        dev = tmp_path / "null"
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append((dev, "is not a regular file"))
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)
    targets.append((link, "is not a regular file"))
    return targets


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_folders_devices_and_fifos_are_refused_untouched(tmp_path: Path):
    for target, needle in _special_targets(tmp_path):
        kind = stat.S_IFMT(os.stat(target).st_mode)
        with pytest.raises(UserError, match=needle) as exc:
            write_file_through(target, "x", "report")
        assert str(exc.value).startswith(f"{target}: ")
        assert stat.S_IFMT(os.stat(target).st_mode) == kind  # before: replaced by a regular file


def test_unwritable_paths_are_one_line(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="cannot write the report there"):
        write_file_through(blocker / "sub" / "r.md", "x", "report")  # a file where a folder should be
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UserError, match="Permission denied"):
            write_file_through(locked / "r.md", "x", "report")


def test_cli_output_refusals_are_exit_2(three_runs: Path, tmp_path: Path):
    res = run_cli("report", "--format", "markdown", "-o", str(tmp_path))
    assert (
        res.returncode == 2 and "is a folder" in res.stderr and "Traceback" not in res.stderr
    )  # before: IsADirectoryError
    res = run_cli("report", "--format", "markdown", "-o", "/proc/no/such/r.md")
    assert res.returncode == 2 and "cannot write the report there" in res.stderr and "Traceback" not in res.stderr


def test_report_output_through_a_link_says_where_it_went(three_runs: Path, tmp_path: Path):
    real = tmp_path / "real.json"
    (tmp_path / "link.json").symlink_to(real)
    err = Console(file=io.StringIO(), width=400)
    run_report(ReportRequest(fmt="json", output=tmp_path / "link.json"), Console(file=io.StringIO()), err)
    assert json.loads(real.read_text())["runs"] == [IDS[2]]
    assert f"-> {real}" in err.file.getvalue()  # type: ignore[attr-defined]


def test_a_report_never_replaces_the_records_it_reads(three_runs: Path, tmp_path: Path):
    record = three_runs / f"{IDS[0]}.json"
    before = record.read_bytes()
    res = run_cli("report", str(record), "--format", "json", "-o", str(record))
    assert res.returncode == 2 and "a record being reported" in res.stderr and "Traceback" not in res.stderr
    (tmp_path / "link.json").symlink_to(record)
    res = run_cli("report", str(record), "--format", "json", "-o", str(tmp_path / "link.json"))
    assert res.returncode == 2 and "a record being reported" in res.stderr
    res = run_cli("report", "--run", IDS[1], "--format", "markdown", "-o", str(three_runs / "r.md"))
    assert res.returncode == 2 and "inside mpsup's run records" in res.stderr
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.json").write_bytes(before)
    (folder / "sub").mkdir()  # a missing folder is refused on its own (issue 26)
    res = run_cli("report", str(folder), "--format", "json", "-o", str(folder / "sub" / "report.json"))
    assert res.returncode == 2 and "among the records being read" in res.stderr
    assert record.read_bytes() == before and (folder / "a.json").read_bytes() == before
    # A page beside the records it reads is fine: only .json files are read as records.
    res = run_cli("report", str(folder), "--format", "markdown", "-o", str(folder / "report.md"))
    assert res.returncode == 0, res.stderr
    assert (folder / "report.md").read_text().strip()


def test_links_and_loops_cannot_trick_report_into_replacing_a_record(three_runs: Path, tmp_path: Path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    record = real / "Run.json"
    record.write_bytes((three_runs / f"{IDS[0]}.json").read_bytes())
    before = record.read_bytes()
    (tmp_path / "link").symlink_to(real / "sub")
    res = run_cli("report", str(record), "--format", "json", "-o", str(tmp_path / "link" / ".." / "Run.json"))
    assert res.returncode == 2 and "a record being reported" in res.stderr
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "x.json").symlink_to(record)
    res = run_cli("report", str(folder), "--format", "json", "-o", str(record))
    assert res.returncode == 2 and "a record being reported" in res.stderr
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for args in ((str(loop), "-o", str(tmp_path / "r.md")), (str(record), "-o", str(loop))):
        res = run_cli("report", *args, "--format", "markdown")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert record.read_bytes() == before


def test_the_listed_id_is_the_one_run_takes_even_for_a_renamed_file(three_runs: Path):
    (three_runs / f"{IDS[1]}.json").rename(three_runs / "mine.json")
    res = run_cli("report", "--list", "--json")
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert "mine" in rows and rows["mine"]["record_id"] == IDS[1]  # before: listed as IDS[1], which --run refused
    res = run_cli("report", "--run", "mine", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["runs"] == [IDS[1]]


def test_a_missing_folder_is_refused_not_made(three_runs: Path, tmp_path: Path):
    """Issue 26: `-o a/b/c/r.html` with a/ missing made a/b/c; `>` refuses."""
    with pytest.raises(UserError, match=r"no such folder: .*a/b/c\)"):
        write_file_through(tmp_path / "a" / "b" / "c" / "r.html", "x", "report")
    res = run_cli("report", "--format", "html", "-o", str(tmp_path / "a" / "b" / "c" / "r.html"))
    assert res.returncode == 2 and "no such folder" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()


def test_a_trailing_slash_names_a_folder_and_is_refused(three_runs: Path, tmp_path: Path):
    """Issue 26: `-o new.html/` wrote new.html (pathlib drops the slash)."""
    res = run_cli("report", "--format", "html", "-o", f"{tmp_path}/new.html/")
    assert res.returncode == 2 and "names a folder" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "new.html").exists()
    res = run_cli("report", "--format", "html", "-o", f"{tmp_path}/new.html")
    assert res.returncode in (0, 1, 3) and (tmp_path / "new.html").is_file(), res.stderr[-2000:]
