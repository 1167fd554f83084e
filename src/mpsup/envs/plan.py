"""From what the user asked to a plan: which torch, from which index, into which environment, how.

Nothing here changes anything on disk; it reads the target interpreter (probe, pip settings,
freeze) and the index, and returns a plan or the reason there is nothing to do.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from mpsup.envs import installer as inst
from mpsup.envs.discover import pick_wheel
from mpsup.envs.download import head_size
from mpsup.envs.index import Fetcher, IndexUnreachable, check_index_url, default_fetcher, list_project_files, local_path
from mpsup.envs.records import ENV_RECORD
from mpsup.envs.tags import Target, target_from_probe
from mpsup.envs.venvs import venv_python
from mpsup.errors import OperationFailed, UserError
from mpsup.paths import data_dir, envs_dir
from mpsup.probe import run_interpreter_probe
from mpsup.syscmd import run_command

CHANNEL_INDEX = {
    "test": "https://download.pytorch.org/whl/test/cpu",
    "nightly": "https://download.pytorch.org/whl/nightly/cpu",
}
ProbeFn = Callable[[Path], dict[str, Any] | None]


@dataclass(frozen=True)
class InstallRequest:
    python: Path
    channel: str = "test"
    index_url: str | None = None
    version: str | None = None
    companions: tuple[str, ...] = ()
    in_place: bool = False
    clone: bool = False
    installer: str = "auto"

    def retry_command(self) -> str:
        """The command to run later, e.g. once back online."""
        parts = ["mpsup", "install-rc", "--channel", self.channel]
        if self.index_url:
            parts += ["--index-url", self.index_url]
        if self.version:
            parts += ["--version", self.version]
        if self.companions:
            parts += ["--with", ",".join(self.companions)]
        parts += ["--in-place"] if self.in_place else (["--clone"] if self.clone else [])
        return " ".join([*parts, "--python", str(self.python), "--yes"])


@dataclass(frozen=True)
class PlannedWheel:
    filename: str
    url: str
    sha256: str | None
    size: int | None


@dataclass(frozen=True)
class InstallPlan:
    mode: str  # "side-by-side" | "in-place"
    channel: str
    index_url: str | None  # None: the installer's own configuration decides
    index_label: str
    baseline_python: Path
    baseline_torch: str | None
    target: str  # e.g. "cp311 on macOS 15.1 arm64"
    target_platform: str
    to_version: str
    wheel: PlannedWheel
    companions: tuple[str, ...]
    installer: str
    uv: str
    prefix: Path  # the environment that will hold the candidate
    python: Path  # its interpreter
    wheel_path: Path  # where the verified wheel will be
    clone_lines: tuple[str, ...] = ()
    prereleases: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    cafile: str | None = None

    @property
    def name(self) -> str:
        return self.prefix.name

    def install_args(self, wheel_dir: Path, clone_file: Path | None = None) -> inst.InstallArgs:
        return inst.InstallArgs(
            pin=f"torch=={self.to_version}",
            wheel_dir=wheel_dir,
            requirements=self.companions,
            requirements_file=clone_file,
            extra_index_url=self.index_url,
            prereleases=self.prereleases and bool(self.companions),
            upgrade=self.mode == "in-place" and bool(self.companions),
        )

    def commands(self) -> list[list[str]]:
        """Exactly what will run (side-by-side builds under a temporary name, then moves here)."""
        cmds = []
        if self.mode == "side-by-side":
            cmds.append([str(self.baseline_python), "-m", "venv", str(self.prefix)] + (["--without-pip"] if self.installer == "uv" else []))
        clone_file = Path("<clone-requirements.txt>") if self.clone_lines else None
        cmds += inst.install_commands(self.installer, self.python, self.install_args(Path("<folder-with-the-checked-wheel>"), clone_file), self.uv)
        return cmds

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for key in ("baseline_python", "prefix", "python", "wheel_path"):
            doc[key] = str(doc[key])
        doc["clone_packages"] = len(self.clone_lines)
        doc.pop("clone_lines")
        doc.pop("uv")
        doc["commands"] = self.commands()
        return doc


@dataclass(frozen=True)
class NothingToDo:
    message: str
    baseline_torch: str | None
    newest: str | None

    def to_json(self) -> dict[str, Any]:
        return {"status": "nothing-to-do", "message": self.message, "baseline_torch": self.baseline_torch, "newest": self.newest}


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def probe_baseline(python: Path, probe: ProbeFn) -> dict[str, Any]:
    if not python.exists():
        raise UserError(f"{python}: no such interpreter")
    doc = probe(python)
    if doc is None:
        raise UserError(f"{python}: could not run this interpreter (is it a Python?)")
    return doc


def _stable_pick(python: Path, version: str | None) -> tuple[str, PlannedWheel]:
    """Ask the user's own pip, with the user's own configuration, what it would install."""
    requirement = f"torch=={version}" if version else "torch"
    res = run_command([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet",
                       "--disable-pip-version-check", "--report", "-", requirement], timeout=300)
    if res.returncode is None and "not found" not in res.stderr:
        raise IndexUnreachable(f"pip did not answer: {res.stderr.strip()}")
    if not res.ok:
        tail = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        if any("No module named pip" in ln for ln in tail):
            raise UserError(f"{python} has no pip to ask which stable torch it would pick; pass --index-url")
        reason = next((ln for ln in tail if "ERROR" in ln), tail[-1] if tail else f"exit {res.returncode}")
        if any(s in res.stderr for s in ("NewConnectionError", "Failed to establish", "Temporary failure in name resolution")):
            raise IndexUnreachable(f"pip could not reach its index: {reason}")
        raise OperationFailed(f"pip found no installable {requirement} for {python}: {reason.removeprefix('ERROR: ')}")
    try:
        picks = [p for p in inst.parse_pip_report(res.stdout) if p.name.lower() == "torch"]
    except (json.JSONDecodeError, AttributeError):
        raise OperationFailed(f"{python}: pip is too old for --report (needs pip 22.2+); upgrade pip or pass --index-url") from None
    if not picks:
        raise OperationFailed(f"pip would install no torch for {python}")
    pick = picks[0]
    filename = urllib.parse.unquote(urllib.parse.urlsplit(pick.url).path.rsplit("/", 1)[-1])
    return pick.version, PlannedWheel(filename, pick.url, pick.sha256, None)


def _index_pick(request: InstallRequest, index: str, target: Target, fetch: Fetcher) -> tuple[str, PlannedWheel, tuple[str, ...]]:
    files = list_project_files(index, "torch", fetch)
    result = pick_wheel(files, target, version=request.version, allow_prereleases=request.channel != "stable", where=index)
    if result.wheel is None:
        raise OperationFailed(result.message or "no wheel fits")
    f = result.wheel.file
    return str(result.wheel.version), PlannedWheel(f.filename, f.url, f.sha256, f.size), result.notes


def plan_install(request: InstallRequest, *, fetch: Fetcher | None = None, probe: ProbeFn = run_interpreter_probe) -> InstallPlan | NothingToDo:
    if request.index_url:
        check_index_url(request.index_url)
    if request.version is not None and _version(request.version) is None:
        raise UserError(f"--version {request.version!r}: not a PEP 440 version (e.g. 2.16.0rc1)")
    facts = probe_baseline(request.python, probe)
    target = target_from_probe(facts)
    torch_facts = facts.get("torch") or {}
    baseline_torch = torch_facts.get("version")
    if request.in_place and facts.get("externally_managed"):
        raise UserError(f"{request.python}: this Python is managed by the system (PEP 668); --in-place would modify it. "
                        "Install side by side instead (drop --in-place)")
    settings = inst.pip_settings(request.python) if facts.get("pip") else {}
    installer, why_installer = inst.choose_installer(request.installer, facts, settings)
    if installer == "pip" and not facts.get("pip"):
        raise UserError(f"{request.python} has no pip; pass --installer uv (with uv installed) or install pip there")
    cafile = settings.get("cert")
    notes: tuple[str, ...] = ()
    index = request.index_url or CHANNEL_INDEX.get(request.channel)
    try:
        if index is None:
            version, wheel = _stable_pick(request.python, request.version)
            configured = [settings.get("index-url") or "https://pypi.org/simple", *settings.get("extra-index-url", "").split()]
            label = f"the installer's configured index ({' + '.join(configured)})"
        else:
            version, wheel, notes = _index_pick(request, index, target, fetch or default_fetcher(cafile))
            label = index
    except IndexUnreachable as exc:
        raise OperationFailed(f"cannot read the package index ({exc}); nothing was changed. When online, run: {request.retry_command()}") from None
    if index is not None:
        # An https page may still link a wheel over plain http: the same rule applies to the file itself.
        # (For stable, the user's own pip settings, trusted-host included, already decided.)
        check_index_url(wheel.url, "the index links the wheel at")
    newest, installed = _version(version), _version(baseline_torch)
    if request.version is None and installed is not None and newest is not None and newest.public <= installed.public:
        kind = {"test": "release candidate", "nightly": "nightly build"}.get(request.channel, "stable release")
        return NothingToDo(f"no {kind} newer than {baseline_torch} is published on {label}; the newest there is {version}",
                           baseline_torch, version)
    if request.in_place and installed is not None and newest is not None and newest.public == installed.public:
        return NothingToDo(f"torch {baseline_torch} is already installed in {request.python}", baseline_torch, version)
    if request.in_place:
        prefix = Path(str(facts.get("executable") or request.python)).parent.parent
        python = request.python
    else:
        prefix = envs_dir() / f"torch-{version}-{target.python_tag}"
        python = venv_python(prefix)
        if (prefix / ENV_RECORD).is_file():
            return NothingToDo(f"torch {version} is already installed beside your environment in {prefix}; "
                               f"compare with: mpsup bench --candidate {prefix.name}", baseline_torch, version)
    clone_lines: tuple[str, ...] = ()
    if request.clone and not request.in_place:
        frozen = inst.freeze(request.python)
        if frozen is None:
            raise UserError(f"--clone: could not read the packages of {request.python} (pip freeze failed)")
        clone_lines = tuple(inst.clone_lines(frozen))
    size = wheel.size if wheel.size is not None else head_size(wheel.url, cafile)
    wheel = PlannedWheel(wheel.filename, wheel.url, wheel.sha256, size)
    wheel_path = local_path(wheel.url) or (data_dir() / "cache" / "wheels" / wheel.filename)
    return InstallPlan(
        mode="in-place" if request.in_place else "side-by-side",
        channel=request.channel,
        index_url=index,
        index_label=label,
        baseline_python=request.python,
        baseline_torch=baseline_torch,
        target=target.describe(),
        target_platform=target.platform,
        to_version=version,
        wheel=wheel,
        companions=request.companions,
        installer=installer,
        uv=inst.uv_executable(facts),
        prefix=prefix,
        python=python,
        wheel_path=wheel_path,
        clone_lines=clone_lines,
        prereleases=request.channel in ("test", "nightly"),
        notes=(*notes, why_installer) if why_installer else notes,
        cafile=cafile,
    )


def is_root_refused(platform: str, euid: int, allow_root: bool) -> bool:
    """On macOS a root-owned venv or site-packages breaks the user's later, unprivileged installs."""
    return platform == "darwin" and euid == 0 and not allow_root


def current_euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1
