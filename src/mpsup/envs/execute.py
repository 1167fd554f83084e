"""Carrying out an install plan, and rolling an in-place upgrade back.

The rules: check space before downloading; install only a hash-checked wheel (or, under
--allow-unhashed, one whose computed hash is recorded); a side-by-side environment is built and
verified under a temporary name, its paths are pointed at the final name while it is still there,
one rename puts it in place, and its record is written last. So whatever stops an install (an
error, Ctrl-C, a power cut), the final name holds either nothing, or a folder without a record that
no plan calls installed and the next install replaces, or the complete, recorded environment.
An in-place upgrade saves the environment's `pip freeze` first and puts it back by itself when the
upgrade fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from mpsup.envs import events as ev
from mpsup.envs import installer as inst
from mpsup.envs.download import FetchedWheel, fetch_wheel
from mpsup.envs.plan import InstallPlan
from mpsup.envs.records import (
    ENV_RECORD,
    EnvRecord,
    env_slug,
    latest_rollback,
    now_iso,
    read_rollback,
    save_rollback,
    write_record,
)
from mpsup.envs.venvs import commit_move, create_venv, is_ours, mark_as_ours, point_at, remove_tree, venv_python
from mpsup.errors import OperationFailed, UserError
from mpsup.paths import envs_dir, tmp_dir
from mpsup.probe import run_interpreter_probe
from mpsup.progress import Progress, ignore
from mpsup.syscmd import pip_command, run_command

_MIB = 1 << 20
# Without a size from the index, assume a torch wheel of this size.
_ASSUMED_WHEEL_BYTES = 250 * _MIB


def space_needed(plan: InstallPlan) -> int:
    """The download (unless the wheel is already local), then an unpacked torch at ~4x the wheel,
    plus room for its dependencies and a venv."""
    wheel = plan.wheel.size or _ASSUMED_WHEEL_BYTES
    download = 0 if plan.wheel_path.is_file() else wheel
    return download + 4 * wheel + 300 * _MIB


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_space(plan: InstallPlan, free_bytes: Callable[[Path], int] | None = None) -> None:
    free_bytes = free_bytes or (lambda p: shutil.disk_usage(p).free)
    where = _existing_parent(plan.prefix)
    free, needed = free_bytes(where), space_needed(plan)
    if free < needed:
        raise OperationFailed(
            f"{where}: {free / 2**30:.1f} GiB free, the install needs about {needed / 2**30:.1f} GiB; nothing was "
            "changed"
        )


def _run_installer(argv: list[str], what: str) -> None:
    res = run_command(argv, timeout=inst.INSTALL_TIMEOUT_S)
    if not res.ok:
        lines = [ln for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
        reason = next(
            (ln.strip() for ln in reversed(lines) if ln.lstrip().startswith("ERROR")),
            lines[-1].strip() if lines else "",
        )
        raise OperationFailed(f"{what} failed: {reason or 'exit ' + str(res.returncode)}")


def _package_versions(python: Path, names: tuple[str, ...]) -> dict[str, str]:
    if not names:
        return {}
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))"
    )
    res = run_command([python, "-c", code, *names], timeout=60)
    try:
        return json.loads(res.stdout) if res.ok else {}
    except json.JSONDecodeError:
        return {}


def verify(plan: InstallPlan, python: Path, probe: Callable[[Path], dict[str, Any] | None]) -> dict[str, Any]:
    """The torch there is the one asked for, MPS is built, and on a Mac available."""
    facts = probe(python)
    if facts is None:
        raise OperationFailed(f"{python}: the new environment's Python does not run")
    torch_facts = facts.get("torch")
    if not torch_facts:
        raise OperationFailed(
            f"torch does not import in the new environment: {facts.get('torch_error', 'unknown error')}"
        )
    if Version(torch_facts["version"]).public != Version(plan.to_version).public:
        raise OperationFailed(f"the new environment has torch {torch_facts['version']}, not {plan.to_version}")
    if plan.target_platform == "darwin":
        if not torch_facts.get("mps_built"):
            raise OperationFailed(f"torch {plan.to_version} in the new environment was built without MPS")
        if not torch_facts.get("mps_available"):
            raise OperationFailed(
                f"torch {plan.to_version} imports but MPS is not available (run `mpsup doctor --python {python}`)"
            )
    versions = _package_versions(python, plan.companions)
    missing = [n for n in plan.companions if not versions.get(n)]
    if missing:
        raise OperationFailed(f"the new environment lacks {', '.join(missing)}")
    return {**facts, "companions": versions}


def _record(plan: InstallPlan, facts: dict[str, Any], fetched: FetchedWheel, prefix: Path, python: Path) -> EnvRecord:
    torch_facts = facts["torch"]
    return EnvRecord(
        name=prefix.name if plan.mode == "side-by-side" else f"inplace-{env_slug(python)}",
        mode=plan.mode,
        prefix=str(prefix),
        python=str(python),
        python_version=str(facts.get("version")),
        torch_version=str(torch_facts["version"]),
        torch_version_full=str(torch_facts.get("version_full", torch_facts["version"])),
        channel=plan.channel,
        index_url=plan.index_url,
        installer=plan.installer,
        created_at=now_iso(),
        baseline_python=str(plan.baseline_python),
        baseline_torch=plan.baseline_torch,
        wheel={
            "filename": plan.wheel.filename,
            "url": plan.wheel.url,
            "sha256": fetched.sha256,
            "sha256_from": fetched.sha256_from,
            "size": plan.wheel.size,
            "upload_time": plan.wheel.upload_time,
            "seen_at": plan.wheel.seen_at,
        },
        companions=dict(facts.get("companions") or {}),
        mps_built=bool(torch_facts.get("mps_built")),
        mps_available=bool(torch_facts.get("mps_available")),
        cloned_packages=len(plan.clone_lines),
    )


def _install(plan: InstallPlan, python: Path, wheel: Path, clone_file: Path | None) -> None:
    """The checked wheel goes into a folder of its own, so the installer can take nothing else for it."""
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=tmp_dir()) as folder:
        link = Path(folder) / plan.wheel.filename  # validated when planned; pip matches the pin by this name
        link.symlink_to(wheel.resolve())
        for argv in inst.install_commands(plan.installer, python, plan.install_args(Path(folder), clone_file), plan.uv):
            _run_installer(argv, f"{plan.installer} install")


def _fetch(plan: InstallPlan, progress: Progress) -> FetchedWheel:
    progress(ev.Fetching(plan.wheel.filename))
    return fetch_wheel(
        plan.wheel.url,
        plan.wheel.filename,
        plan.wheel.sha256,
        # The plan's folder: install-rc's is downloads/, a bisect's throwaway wheels go with its environments.
        plan.wheel_path.parent,
        cafile=plan.cafile,
        progress=progress,
        allow_unhashed=plan.allow_unhashed,
        size=plan.wheel.size,
    )


def _clear_leftover(prefix: Path) -> None:
    """An interrupted install's folder (ours, no record) is removed; anything else at the final name is refused."""
    if not (prefix.exists() or prefix.is_symlink()):
        return
    if (prefix / ENV_RECORD).is_file():
        raise UserError(f"{prefix} is already installed (another mpsup finished it meanwhile); nothing was changed")
    if prefix.is_symlink() or not is_ours(prefix):
        raise UserError(f"{prefix} exists but holds no mpsup record; move it away or remove it first")
    remove_tree(prefix)


def _clean_stale_builds() -> None:
    """Builds whose process died (power cut, kill -9) left `.building-*` folders; nothing else uses them."""
    base = envs_dir()
    for stale in base.glob(".building-*") if base.is_dir() else []:
        pid = stale.name.rsplit("-", 1)[-1]
        alive = pid.isdigit() and _pid_alive(int(pid))
        if not alive:
            remove_tree(stale)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class InstallResult:
    record: EnvRecord
    record_path: Path
    elapsed_s: float
    rollback_path: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "installed",
            "environment": self.record.to_json(),
            "record": str(self.record_path),
            "elapsed_s": round(self.elapsed_s, 1),
            "rollback": str(self.rollback_path) if self.rollback_path else None,
        }


@dataclass(frozen=True)
class Seams:
    """What an install calls out to besides pip, each replaceable in a test: where its progress goes, how an
    interpreter is probed, how free disk space is read (None: the disk's own figure)."""

    progress: Progress = ignore
    probe: Callable[[Path], dict[str, Any] | None] = run_interpreter_probe
    free_bytes: Callable[[Path], int] | None = None


def install_side_by_side(plan: InstallPlan, seams: Seams = Seams()) -> InstallResult:
    started = time.monotonic()
    progress, probe = seams.progress, seams.probe
    _clear_leftover(plan.prefix)
    _clean_stale_builds()
    check_space(plan, seams.free_bytes)
    fetched = _fetch(plan, progress)
    building = plan.prefix.with_name(f".building-{plan.name}-{os.getpid()}")
    moving = recorded = False
    clone_file: Path | None = None
    try:
        progress(ev.CreatingVenv(plan.baseline_python))
        remove_tree(building)  # an earlier attempt of this same process, interrupted without its cleanup
        create_venv(plan.baseline_python, building, with_pip=plan.installer == "pip")
        mark_as_ours(building)
        tmp_python = venv_python(building)
        if plan.clone_lines:
            clone_file = _write_temp_lines(plan.clone_lines)
        progress(ev.Installing(plan.to_version, plan.installer, len(plan.clone_lines)))
        _install(plan, tmp_python, fetched.path, clone_file)
        progress(ev.Verifying(in_place=False))
        facts = verify(plan, tmp_python, probe)
        progress(ev.MovingIntoPlace(plan.prefix.name))
        point_at(building, plan.prefix)
        moving = True  # from here the environment may be at its final name, even if the rename itself is interrupted
        commit_move(building, plan.prefix)
        # The paths were rewritten for the new place; make sure the interpreter still finds its torch there.
        if probe(venv_python(plan.prefix)) is None:
            raise OperationFailed(f"{plan.prefix}: the environment did not survive the move into place")
        record = _record(plan, facts, fetched, plan.prefix, venv_python(plan.prefix))
        record_path = write_record(plan.prefix, record)
        recorded = True
    except BaseException:
        if not recorded:
            remove_tree(building)
            if moving and is_ours(plan.prefix):  # the prefix was free when we started: what is there is this build
                remove_tree(plan.prefix)
        raise
    finally:
        if clone_file is not None:
            clone_file.unlink(missing_ok=True)
    return InstallResult(record, record_path, time.monotonic() - started)


def _write_temp_lines(lines: tuple[str, ...] | list[str]) -> Path:
    fd, name = tempfile.mkstemp(prefix="requirements-", suffix=".txt", dir=tmp_dir())
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return Path(name)


def install_in_place(plan: InstallPlan, seams: Seams = Seams()) -> InstallResult:
    started = time.monotonic()
    progress, probe = seams.progress, seams.probe
    check_space(plan, seams.free_bytes)
    frozen = inst.freeze(plan.python)
    if frozen is None:
        raise OperationFailed(
            f"{plan.python}: pip freeze failed, so the environment could not be saved; nothing was changed"
        )
    fetched = _fetch(plan, progress)
    saved = save_rollback(plan.python, frozen, plan.baseline_torch, plan.index_url)
    progress(ev.SavedPackages(len(frozen), saved))
    try:
        progress(ev.Upgrading(plan.python, plan.to_version, plan.installer))
        _install(plan, plan.python, fetched.path, None)
        progress(ev.Verifying(in_place=True))
        facts = verify(plan, plan.python, probe)
    except BaseException as exc:
        progress(ev.RestoringSaved())
        try:
            restore(plan.python, saved)
            _mark_restored(saved)
        except OperationFailed as restore_exc:
            raise OperationFailed(
                f"{exc}; restoring the saved set also failed ({restore_exc}); "
                f"run `mpsup install-rc --rollback --python {plan.python}`"
            ) from None
        raise
    record = _record(plan, facts, fetched, plan.prefix, plan.python)
    folder = envs_dir() / record.name
    path = write_record(folder, record)
    return InstallResult(record, path, time.monotonic() - started, saved)


@dataclass(frozen=True)
class RollbackResult:
    python: Path
    saved: Path
    reinstalled: tuple[str, ...]
    removed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "rolled-back",
            "python": str(self.python),
            "saved": str(self.saved),
            "reinstalled": list(self.reinstalled),
            "removed": list(self.removed),
        }


def restore(python: Path, saved_path: Path) -> RollbackResult:
    """Make the environment's packages equal the saved freeze again: reinstall what changed, remove what was added."""
    doc = read_rollback(saved_path)
    saved: list[str] = doc["freeze"]
    current = inst.freeze(python)
    if current is None:
        raise OperationFailed(f"{python}: pip freeze failed; cannot compare with the saved set")
    saved_names = {inst.requirement_name(ln) for ln in saved} - {None}
    to_install = [ln for ln in saved if ln not in set(current)]
    to_remove = sorted({n for ln in current if (n := inst.requirement_name(ln)) and n not in saved_names})
    if to_install:
        req_file = _write_temp_lines(to_install)
        try:
            argv = pip_command(python, "install", "--no-deps", "-r", str(req_file))
            if doc.get("index_url"):
                argv += ["--extra-index-url", doc["index_url"]]
            _run_installer(argv, "reinstalling the saved packages")
        finally:
            req_file.unlink(missing_ok=True)
    if to_remove:
        _run_installer(pip_command(python, "uninstall", "-y", *to_remove), "removing added packages")
    after = inst.freeze(python)
    if after is None or set(after) != set(saved):
        diff = sorted(set(after or []) ^ set(saved))[:5]
        raise OperationFailed(f"{python}: after restoring, packages still differ from the saved set: {', '.join(diff)}")
    return RollbackResult(python, saved_path, tuple(to_install), tuple(to_remove))


def _mark_restored(saved: Path) -> None:
    """A set already put back is kept for the record and not offered to --rollback again."""
    saved.rename(saved.with_suffix(".restored"))


def saved_set(python: Path) -> tuple[Path, dict[str, Any]]:
    """The newest package set saved for `python`, or one line saying there is none."""
    found = latest_rollback(python)
    if found is None:
        raise UserError(f"--rollback: no saved package set for {python} (an --in-place install saves one first)")
    return found


def rollback(python: Path) -> RollbackResult:
    path, _doc = saved_set(python)
    result = restore(python, path)
    _mark_restored(path)
    for rec in envs_dir().glob(f"inplace-{env_slug(python)}/mpsup-env.json"):
        remove_tree(rec.parent)
    return result
