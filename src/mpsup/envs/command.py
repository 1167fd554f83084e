"""`mpsup install-rc` as a few calls: which action the options ask for, then list, remove, roll back, plan or install.

The CLI asks for confirmation between plan and install (it owns the terminal); everything else lives here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from mpsup.envs.plan import InstallRequest, current_euid, is_root_refused
from mpsup.errors import UserError

# What the options ask for: one of these, checked by action().
Action = Literal["list", "remove", "rollback", "install"]


@dataclass(frozen=True)
class InstallRcRequest:
    install: InstallRequest  # the interpreter (already defaulted to the running one) and how to install
    list_envs: bool = False
    remove: str | None = None
    rollback: bool = False


@dataclass(frozen=True)
class ListResult:
    environments: list[dict[str, Any]]
    problems: list[str]
    exit_code: int = 0


@dataclass(frozen=True)
class RemoveResult:
    removed: list[dict[str, Any]]
    exit_code: int = 0


def action(req: InstallRcRequest) -> Action:
    """Which one thing the options ask for; contradictions and root on macOS are refused here."""
    chosen = [
        flag
        for flag, on in (("--list", req.list_envs), ("--remove", req.remove is not None), ("--rollback", req.rollback))
        if on
    ]
    if len(chosen) > 1:
        raise UserError(f"{' and '.join(chosen)} cannot be combined")
    if req.install.in_place and req.install.clone:
        raise UserError("--clone makes a new environment; it cannot be combined with --in-place")
    if req.list_envs:
        return "list"
    if req.remove is not None:
        return "remove"
    if is_root_refused(sys.platform, current_euid(), req.install.allow_root):
        raise UserError(
            "running as root on macOS would leave root-owned files in your environments; run as yourself, or pass "
            "--allow-root"
        )
    return "rollback" if req.rollback else "install"


def list_environments() -> ListResult:
    from mpsup.envs import records

    docs, problems = records.scan_environments()
    return ListResult(docs, problems)


def remove(key: str) -> RemoveResult:
    from mpsup.envs import records

    return RemoveResult(records.remove_environment(key))


def companions(text: str | None) -> tuple[str, ...]:
    """--with torchvision,torchaudio -> the names, blanks dropped."""
    return tuple(c.strip() for c in (text or "").split(",") if c.strip())
