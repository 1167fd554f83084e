"""The doctor as one call: snapshot -> facts -> findings -> report value."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mpsup.doctor import wheels
from mpsup.doctor.checks import Finding, Status, run_checks
from mpsup.host.facts import HostFacts, _version_tuple, facts_from_snapshot
from mpsup.host.snapshot import Snapshot

INSTALL_RC_HINT = "no candidate environment recorded: `mpsup install-rc` puts the next PyTorch beside this one"


@dataclass(frozen=True)
class DoctorReport:
    findings: list[Finding]
    captured_at: str
    # install-rc's candidate environments with a note each; None: the snapshot did not record them
    environments: list[dict[str, Any]] | None = field(default=None)

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)

    @property
    def ready(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        counts = Counter(f.status for f in self.findings)
        head = "Not ready" if self.failed else "Ready, with warnings" if counts[Status.WARN] else "Ready"
        parts = [f"{counts[s]} {s.value}" for s in Status if counts[s]]
        return f"{head}: {', '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "mpsup.doctor/1",
            "ready": self.ready,
            "summary": self.summary(),
            "captured_at": self.captured_at,
            "findings": [f.to_json() for f in self.findings],
            "environments": self.environments,
            "suggestion": INSTALL_RC_HINT if self.environments == [] else None,
        }


def environment_note(env: dict[str, Any], facts: HostFacts) -> str | None:
    """What stands in a candidate's way on this Mac, judged like the installed torch; None: nothing known."""
    if env.get("python_present") is False:
        return f"its interpreter is gone: `mpsup install-rc --remove {env.get('name', 'NAME')}`, then install again"
    floor = wheels.mps_macos_floor(_version_tuple(str(env.get("torch_version") or "")))
    if floor and facts.macos_version and _version_tuple(facts.macos_version) < floor:
        return f"its MPS needs macOS {wheels.show(floor)}; this Mac runs {facts.macos_version}"
    if env.get("mps_available") is False:
        return "MPS was not available when it was installed"
    return None


def diagnose(snapshot: Snapshot) -> DoctorReport:
    facts = facts_from_snapshot(snapshot)
    envs = None
    if facts.environments is not None:
        envs = [{**e, "note": environment_note(e, facts)} for e in facts.environments]
    return DoctorReport(run_checks(facts), snapshot.captured_at, envs)
