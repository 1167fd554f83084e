"""`mpsup install-rc` top to bottom: which action the options ask for, then list, remove, roll back, plan or install.

Every path ends in a frozen result that carries its exit code. The terminal work between the steps (a spinner
while the index is read, the plan shown before the question, the question itself, the install's progress) is
done through `Hooks`, so this module never prints and tests can answer the question without a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mpsup.envs.plan import InstallPlan, InstallRequest, NothingToDo, current_euid, is_root_refused
from mpsup.errors import UserError
from mpsup.progress import Progress, ignore

if TYPE_CHECKING:  # execute pulls in the installer and the probe: imported when an install or rollback runs
    from mpsup.envs.execute import InstallResult, RollbackResult

# What the options ask for: one of these, checked by action().
Action = Literal["list", "remove", "rollback", "install"]


@dataclass(frozen=True)
class InstallRcRequest:
    install: InstallRequest  # the interpreter (already defaulted to the running one) and how to install
    list_envs: bool = False
    remove: str | None = None
    rollback: bool = False


@dataclass(frozen=True)
class Hooks:
    """What the terminal does between the steps; the defaults show nothing and answer every question with no."""

    busy: Callable[[str], AbstractContextManager[object]] = lambda _message: nullcontext()
    show_plan: Callable[[InstallPlan], None] = lambda _plan: None
    ask: Callable[[str], bool] = lambda _question: False  # plain text: the renderer escapes it
    # The install's events (mpsup.envs.events) go to the Progress this context yields.
    progress: Callable[[], AbstractContextManager[Progress]] = lambda: nullcontext(ignore)


@dataclass(frozen=True)
class ListResult:
    environments: list[dict[str, Any]]
    problems: list[str]
    exit_code: int = 0

    def to_json(self) -> Any:
        return self.environments


@dataclass(frozen=True)
class RemoveResult:
    removed: list[dict[str, Any]]
    exit_code: int = 0

    def to_json(self) -> Any:
        return {"status": "removed", "environments": self.removed}


@dataclass(frozen=True)
class RolledBack:
    target: Path
    result: RollbackResult
    exit_code: int = 0

    def to_json(self) -> Any:
        return self.result.to_json()


@dataclass(frozen=True)
class Declined:
    """The user said no: nothing was changed, and a script that asked must not read it as success."""

    exit_code: int = 1

    def to_json(self) -> Any:
        return None  # stdout stays empty, as it always has when the user says no


@dataclass(frozen=True)
class NothingNew:
    nothing: NothingToDo
    exit_code: int = 0

    def to_json(self) -> Any:
        return self.nothing.to_json()


@dataclass(frozen=True)
class Planned:
    """--dry-run: the plan was shown, nothing installed."""

    plan: InstallPlan
    exit_code: int = 0

    def to_json(self) -> Any:
        return {"status": "planned", "dry_run": True, "plan": self.plan.to_json()}


@dataclass(frozen=True)
class Installed:
    plan: InstallPlan
    result: InstallResult
    next_command: str  # side-by-side: the bench command that compares; in place: the command that undoes
    exit_code: int = 0

    def to_json(self) -> Any:
        return {**self.result.to_json(), "plan": self.plan.to_json()}


InstallRcResult = ListResult | RemoveResult | RolledBack | Declined | NothingNew | Planned | Installed


def run(req: InstallRcRequest, hooks: Hooks | None = None) -> InstallRcResult:
    hooks = hooks or Hooks()
    chosen = action(req)
    if chosen == "list":
        return list_environments()
    if chosen == "remove":
        assert req.remove is not None  # action() said so
        return remove(req.remove)
    if chosen == "rollback":
        return rollback(req.install.python, req.install.yes, hooks)
    return install(req.install, hooks)


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


def rollback(target: Path, yes: bool, hooks: Hooks) -> RolledBack | Declined:
    from mpsup.envs import execute

    execute.saved_set(target)  # before the question: a "yes" to putting back a set never saved could only fail
    if not _confirmed(yes, f"Put back the packages saved for {target}?", hooks):
        return Declined()
    return RolledBack(target, execute.rollback(target))


def install(request: InstallRequest, hooks: Hooks) -> NothingNew | Planned | Declined | Installed:
    from mpsup.envs import execute
    from mpsup.envs.plan import plan_install

    with hooks.busy(f"Looking for torch on the {request.channel} channel..."):
        plan = plan_install(request)
    if isinstance(plan, NothingToDo):
        return NothingNew(plan)
    hooks.show_plan(plan)
    if request.dry_run:
        return Planned(plan)
    if not _confirmed(request.yes, f"Install torch {plan.to_version} into {plan.prefix}?", hooks):
        return Declined()
    do_install = execute.install_in_place if plan.mode == "in-place" else execute.install_side_by_side
    with hooks.progress() as progress:
        result = do_install(plan, execute.Seams(progress=progress))
    return Installed(plan, result, next_command(result))


def next_command(result: InstallResult) -> str:
    """What to run next: compare a new environment with the user's, or undo an in-place upgrade."""
    rec = result.record
    if rec.mode != "side-by-side":
        return f"mpsup install-rc --rollback --python {rec.python}"
    # bench's baseline defaults to mpsup's own Python: name the user's when it is another one.
    same = Path(rec.baseline_python).absolute() == Path(sys.executable).absolute()
    baseline = "" if same else f"--baseline {rec.baseline_python} "
    return f"mpsup bench {baseline}--candidate {rec.name}"


def _confirmed(yes: bool, question: str, hooks: Hooks) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UserError("there is no terminal to ask for confirmation; pass --yes (or --dry-run to see the plan only)")
    return hooks.ask(question)


def companions(text: str | None) -> tuple[str, ...]:
    """--with torchvision,torchaudio -> the names, blanks dropped."""
    return tuple(c.strip() for c in (text or "").split(",") if c.strip())
