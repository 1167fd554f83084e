"""The doctor as one call: snapshot -> facts -> findings -> report value."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from mpsup.doctor.checks import Finding, Status, run_checks
from mpsup.host.facts import facts_from_snapshot
from mpsup.host.snapshot import Snapshot


@dataclass(frozen=True)
class DoctorReport:
    findings: list[Finding]
    captured_at: str

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)

    def summary(self) -> str:
        counts = Counter(f.status for f in self.findings)
        head = "Not ready" if self.failed else "Ready, with warnings" if counts[Status.WARN] else "Ready"
        parts = [f"{counts[s]} {s.value}" for s in Status if counts[s]]
        return f"{head}: {', '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "mpsup.doctor/1",
            "ready": not self.failed,
            "summary": self.summary(),
            "captured_at": self.captured_at,
            "findings": [f.to_json() for f in self.findings],
        }


def diagnose(snapshot: Snapshot) -> DoctorReport:
    return DoctorReport(run_checks(facts_from_snapshot(snapshot)), snapshot.captured_at)
