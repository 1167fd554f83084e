"""Issue 15 item 10 (a mark only for what was checked), issue 10 item 5 (user text shown verbatim,
never as markup) and the guarded snapshot reader (a bad snapshot is one line, exit 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mpsup.doctor.checks import Status
from mpsup.doctor.render import render_doctor
from mpsup.doctor.run import diagnose
from mpsup.errors import UserError
from mpsup.host.snapshot import load_snapshot, snapshot_from_json
from tests import snapshots
from tests.conftest import run_cli

# What a tick would claim about the Mac: a check whose title names one of these ticks only on a Mac.
MAC_WORDS = ("macOS", "arm64", "Apple", "Mac")


def _report(doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    return diagnose(snapshot_from_json(doc, Path("snap.json")))


def _off_mac() -> dict[str, Any]:
    """This machine as a snapshot: Linux x86_64, a good CPython 3.11 with torch."""
    s = snapshots.empty()
    s["commands"]["uname -a"] = {"returncode": 0, "stdout": "Linux box 6.1.0 #1 SMP x86_64 GNU/Linux\n", "stderr": ""}
    s["interpreter"] = {
        "version": "3.11.7",
        "implementation": "cpython",
        "machine": "x86_64",
        "bits": 64,
        "platform": "linux",
        "in_venv": True,
        "pip": True,
        "proc_translated": None,
        "torch": {"version": "2.13.0", "mps_built": False, "mps_available": False},
    }
    return s


def test_off_a_mac_nothing_about_the_mac_is_ticked():
    report = _report(_off_mac())
    f = {x.name: x for x in report.findings}
    ticked = [x.title for x in report.findings if x.status is Status.OK]
    assert not [t for t in ticked if any(w in t for w in MAC_WORDS)], ticked
    assert f["python"].status is Status.OK and "arm64" not in f["python"].title
    assert f["python-arch"].status is Status.FAIL and "not a Mac" in f["python-arch"].summary
    assert f["torch-wheels"].status is Status.UNKNOWN and "not a Mac" in f["torch-wheels"].summary
    assert f["apple-silicon"].status is Status.FAIL


def test_arm64_linux_python_is_not_a_mac_either():
    s = _off_mac()
    s["interpreter"]["machine"] = "aarch64"
    f = {x.name: x for x in _report(s).findings}
    assert f["python-arch"].status is Status.FAIL and "aarch64 Python on Linux" in f["python-arch"].summary


def test_x86_64_python_on_a_mac_is_no_tick_for_wheels():
    s = snapshots.healthy()
    s["interpreter"]["machine"] = "x86_64"
    f = {x.name: x for x in _report(s).findings}
    assert f["python-arch"].status is Status.FAIL
    assert f["torch-wheels"].status is Status.FAIL and "x86_64" in f["torch-wheels"].summary


@pytest.mark.parametrize(
    ("drop", "check"),
    [("bits", "python"), ("implementation", "python"), ("machine", "python-arch"), ("platform", "torch-wheels")],
)
def test_a_fact_not_read_is_not_ticked(drop: str, check: str):
    s = snapshots.healthy()
    del s["interpreter"][drop]
    if drop == "platform":
        del s["commands"]["uname -a"]
    f = {x.name: x for x in _report(s).findings}
    assert f[check].status is Status.UNKNOWN, f[check]


def _render(doc: dict[str, Any], *, verbose: bool = False) -> str:
    console = Console(record=True, width=400, color_system=None)
    render_doctor(_report(doc), console, verbose=verbose)
    return console.export_text()


def test_user_text_is_shown_verbatim_not_as_markup():
    s = snapshots.healthy()
    s["env"] = {"PYTORCH_MPS_FAST_MATH": "[/x]", "PYTORCH_MPS_PREFER_METAL": "models/[old] llama"}
    s["interpreter"]["executable"] = "/Users/me/[old] venv/bin/python"
    text = _render(s, verbose=True)
    assert "PYTORCH_MPS_FAST_MATH=[/x]" in text
    assert "PYTORCH_MPS_PREFER_METAL=models/[old] llama" in text
    assert "/Users/me/[old] venv/bin/python" in text


def test_torch_messages_are_shown_verbatim():
    s = snapshots.mps_unavailable(snapshots.healthy(), "2.15.0", "[bold]boom[/bold] [/x]")
    assert "torch says: [bold]boom[/bold] [/x]" in _render(s)
    s = snapshots.healthy()
    s["interpreter"]["torch"] = None
    s["interpreter"]["torch_error"] = "ImportError: /Users/me/[old] env/[/x]"
    assert "ImportError: /Users/me/[old] env/[/x]" in _render(s)


def test_markup_in_the_cli_and_in_a_snapshot_path(tmp_path: Path):
    s = snapshots.healthy()
    s["env"] = {"PYTORCH_MPS_FAST_MATH": "[/x]"}
    folder = tmp_path / "[old] snaps"
    folder.mkdir()
    src = folder / "in.json"
    src.write_text(json.dumps(s))
    out = folder / "[/x].json"
    res = run_cli("doctor", "--from-snapshot", str(src), "--save-snapshot", str(out), env={"COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "PYTORCH_MPS_FAST_MATH=[/x]" in res.stdout
    assert f"snapshot written to {out}" in res.stderr
    assert json.loads(out.read_text())["env"] == {"PYTORCH_MPS_FAST_MATH": "[/x]"}


def _bad_snapshots(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    def write(name: str, data: bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(data)
        return p

    healthy = snapshots.healthy()

    def variant(name: str, change: Any) -> Path:
        doc = snapshots.healthy()
        change(doc)
        return write(name, json.dumps(doc).encode())

    cases = {
        "not utf-8": (write("latin1.json", b"\xff\xfe{}"), "not UTF-8 text"),
        "deep": (write("deep.json", b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
        "huge int": (
            write("bigint.json", b'{"schema": "mpsup.snapshot/1", "captured_at": ' + b"9" * 5000 + b"}"),
            "not valid JSON",
        ),
        "NaN": (write("nan.json", json.dumps(healthy).replace('"bits": 64', '"bits": NaN').encode()), "not valid JSON"),
        "folder": (tmp_path, "folder"),
        "mac_ver": (
            variant("macver.json", lambda d: d["interpreter"].update(mac_ver=5)),
            "interpreter.mac_ver has the wrong type",
        ),
        "loadavg": (
            variant("load.json", lambda d: d["interpreter"].update(loadavg=["high"])),
            "interpreter.loadavg must be a list of numbers",
        ),
        "bits bool": (
            variant("bits.json", lambda d: d["interpreter"].update(bits=True)),
            "interpreter.bits has the wrong type",
        ),
        "torch field": (
            variant("torch.json", lambda d: d["interpreter"]["torch"].update(mps_available="yes")),
            "interpreter.torch.mps_available has the wrong type",
        ),
        "environments": (
            variant("envs.json", lambda d: d.update(environments={"a": 1})),
            "'environments' must be a list",
        ),
    }
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.json"
        os.mkfifo(fifo)
        cases["fifo"] = (fifo, "not a regular file")
    return cases


def test_bad_snapshots_are_refused_naming_the_file(tmp_path: Path):
    for label, (path, needle) in _bad_snapshots(tmp_path).items():
        with pytest.raises(UserError) as caught:
            load_snapshot(path)
        message = str(caught.value)
        assert len(message.splitlines()) == 1 and str(path) in message and needle in message, (label, message)


@pytest.mark.parametrize("label", ["fifo", "deep", "mac_ver"])
def test_bad_snapshot_through_the_cli_is_one_line_exit_2(tmp_path: Path, label: str):
    cases = _bad_snapshots(tmp_path)
    if label not in cases:
        pytest.skip(f"{label}: not available on this platform")
    path, needle = cases[label]
    res = run_cli("doctor", "--from-snapshot", str(path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], lines
    assert res.stdout == ""
