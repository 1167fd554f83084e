"""`mpsup doctor` as one call: read this machine (or a saved snapshot), run the checks, say the exit code."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mpsup.doctor.run import DoctorReport, diagnose
from mpsup.errors import UserError
from mpsup.safe_files import stat_input


@dataclass(frozen=True)
class DoctorRequest:
    python: Path | None = None
    save_snapshot: Path | None = None
    from_snapshot: Path | None = None


@dataclass(frozen=True)
class DoctorResult:
    report: DoctorReport
    snapshot_written: Path | None
    exit_code: int


def run(
    req: DoctorRequest, busy: Callable[[str], AbstractContextManager[object]] = lambda _msg: nullcontext()
) -> DoctorResult:
    """`busy(message)` wraps the slow part (reading the machine), e.g. a spinner."""
    from mpsup.host.snapshot import capture, load_snapshot, save_snapshot

    if req.from_snapshot is not None and req.python is not None:
        raise UserError("--from-snapshot and --python cannot be combined: a snapshot already names its Python")
    if req.from_snapshot is not None:
        snapshot = load_snapshot(req.from_snapshot)
    else:
        if req.python is not None and stat_input(req.python, "interpreter") is None:
            raise UserError(f"{req.python}: no such interpreter")
        with busy("Reading this machine and its Python..."):
            snapshot = capture(req.python)
    if req.save_snapshot is not None:
        save_snapshot(snapshot, req.save_snapshot)
    report = diagnose(snapshot)
    return DoctorResult(report, req.save_snapshot, 1 if report.failed else 0)
