"""From what the user asked to a plan: which torch, from which index, into which environment, how.

Nothing here changes anything on disk; it reads the target interpreter (probe, pip settings,
freeze) and the index, and returns a plan or the reason there is nothing to do.
"""

from __future__ import annotations

import json
import os
import shlex
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from mpsup.envs import installer as inst
from mpsup.envs.discover import pick_wheel
from mpsup.envs.download import head_size, wheel_file_name
from mpsup.envs.index import (
    Fetcher,
    IndexUnreachable,
    check_index_url,
    check_link,
    default_fetcher,
    list_project_files,
    local_path,
)
from mpsup.envs.records import ENV_RECORD, now_iso, read_env_record
from mpsup.envs.tags import Target, target_from_probe
from mpsup.envs.venvs import is_ours, venv_python
from mpsup.errors import OperationFailed, UserError
from mpsup.host.facts import is_compat_version
from mpsup.host.parsers import parse_sw_vers
from mpsup.paths import downloads_dir, envs_dir
from mpsup.probe import run_interpreter_probe
from mpsup.syscmd import pip_command, run_command

CHANNEL_INDEX = {
    "test": "https://download.pytorch.org/whl/test/cpu",
    "nightly": "https://download.pytorch.org/whl/nightly/cpu",
}
ProbeFn = Callable[[Path], dict[str, Any] | None]
HostMacosFn = Callable[[], str | None]


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
    allow_unhashed: bool = False
    # How the user asked, only so that a retry suggestion repeats it (a dry run stays a dry run).
    dry_run: bool = False
    yes: bool = False
    as_json: bool = False
    allow_root: bool = False

    def retry_command(self) -> str:
        """The command the user ran, to run again later (e.g. once back online), with the interpreter made explicit."""
        parts = ["mpsup", "install-rc", "--channel", self.channel]
        if self.index_url:
            parts += ["--index-url", self.index_url]
        if self.version:
            parts += ["--version", self.version]
        if self.companions:
            parts += ["--with", ",".join(self.companions)]
        parts += ["--in-place"] if self.in_place else (["--clone"] if self.clone else [])
        if self.installer != "auto":
            parts += ["--installer", self.installer]
        parts += ["--python", str(self.python)]
        flags = (
            ("--allow-unhashed", self.allow_unhashed),
            ("--allow-root", self.allow_root),
            ("--dry-run", self.dry_run),
            ("--json", self.as_json),
            ("--yes", self.yes),
        )
        return shlex.join([*parts, *(flag for flag, on in flags if on)])


@dataclass(frozen=True)
class PlannedWheel:
    filename: str
    url: str
    sha256: str | None  # from the index; None only under --allow-unhashed
    size: int | None
    upload_time: str | None = None  # the index's (PEP 700), where given
    seen_at: str | None = None  # when mpsup read the listing


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
    allow_unhashed: bool = False
    replaces_leftover: bool = False  # an interrupted install left the prefix without a record: removed first
    supersedes: dict[str, Any] | None = None  # the recorded environment of the same version but another build

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
            cmds.append(
                [str(self.baseline_python), "-m", "venv", str(self.prefix)]
                + (["--without-pip"] if self.installer == "uv" else [])
            )
        clone_file = Path("<clone-requirements.txt>") if self.clone_lines else None
        cmds += inst.install_commands(
            self.installer, self.python, self.install_args(Path("<folder-with-the-checked-wheel>"), clone_file), self.uv
        )
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
        return {
            "status": "nothing-to-do",
            "message": self.message,
            "baseline_torch": self.baseline_torch,
            "newest": self.newest,
        }


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
    res = run_command(
        pip_command(
            python, "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", "-", requirement
        ),
        timeout=300,
    )
    if res.returncode is None and "not found" not in res.stderr:
        raise IndexUnreachable(f"pip did not answer: {res.stderr.strip()}")
    if not res.ok:
        tail = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        if any("No module named pip" in ln for ln in tail):
            raise UserError(f"{python} has no pip to ask which stable torch it would pick; pass --index-url")
        reason = next((ln for ln in tail if "ERROR" in ln), tail[-1] if tail else f"exit {res.returncode}")
        if any(
            s in res.stderr
            for s in ("NewConnectionError", "Failed to establish", "Temporary failure in name resolution")
        ):
            raise IndexUnreachable(f"pip could not reach its index: {reason}")
        raise OperationFailed(f"pip found no installable {requirement} for {python}: {reason.removeprefix('ERROR: ')}")
    try:
        picks = [p for p in inst.parse_pip_report(res.stdout) if p.name.lower() == "torch"]
    except (json.JSONDecodeError, AttributeError):
        raise OperationFailed(
            f"{python}: pip is too old for --report (needs pip 22.2+); upgrade pip or pass --index-url"
        ) from None
    if not picks:
        raise OperationFailed(f"pip would install no torch for {python}")
    pick = picks[0]
    filename = urllib.parse.unquote(urllib.parse.urlsplit(pick.url).path.rsplit("/", 1)[-1])
    return pick.version, PlannedWheel(
        wheel_file_name(filename, "torch", "pip's pick"), pick.url, pick.sha256, None, None, now_iso()
    )


def _index_pick(
    request: InstallRequest, index: str, target: Target, fetch: Fetcher
) -> tuple[str, PlannedWheel, tuple[str, ...]]:
    files = list_project_files(index, "torch", fetch)
    seen_at = now_iso()
    result = pick_wheel(
        files, target, version=request.version, allow_prereleases=request.channel != "stable", where=index
    )
    if result.wheel is None:
        raise OperationFailed(result.message or "no wheel fits")
    f = result.wheel.file
    return (
        str(result.wheel.version),
        PlannedWheel(f.filename, f.url, f.sha256, f.size, f.upload_time, seen_at),
        result.notes,
    )


def read_host_macos(run: Callable[..., Any] = run_command) -> str | None:
    """This Mac's real macOS version: sw_vers, else the kernel's; None off macOS or when both give an alias.

    Both are read by programs built against the current SDK, so they are not shown the 10.16 alias
    (unless SYSTEM_VERSION_COMPAT=1 forces it on everyone, which is what the alias check is for).
    """
    res = run(["sw_vers"], timeout=10)
    version = parse_sw_vers(res.stdout).version if res.ok else None
    if version and not is_compat_version(version):
        return version
    res = run(["sysctl", "-n", "kern.osproductversion"], timeout=10)
    version = res.stdout.strip() if res.ok else None
    return version if version and not is_compat_version(version) else None


def _target(facts: dict[str, Any], host_macos: HostMacosFn) -> Target:
    """The interpreter's tags target; a 10.16 / 16.0 macOS alias is replaced by the host's real version."""
    if facts.get("platform") == "darwin" and is_compat_version(str(facts.get("mac_ver") or "")):
        return target_from_probe(facts, host_macos())
    return target_from_probe(facts)


def _listed(wheel: dict[str, Any]) -> str:
    when = wheel.get("upload_time") or wheel.get("seen_at")
    return f", listed {str(when)[:10]}" if isinstance(when, str) and when else ""


def _supersede_note(
    rec: dict[str, Any], version: str, wheel: PlannedWheel, label: str, channel: str, prefix: Path
) -> str:
    """Same version, another build: a release candidate carries the final version, so only the hash tells them apart."""
    old = rec.get("wheel") or {}
    old_channel = str(rec.get("channel") or "unknown")
    was = (
        f"the installed torch {version} ({rec['name']}: {old_channel} channel, sha256 "
        f"{str(old.get('sha256'))[:12]}...{_listed(old)})"
    )
    sha = f"sha256 {str(wheel.sha256)[:12]}..."
    if old_channel == "test" and channel != "test":
        what = f"{was} was a release candidate: {label} now lists {version} as another build ({sha}), the final release"
    elif old_channel == "test":
        what = (
            f"{was} was an earlier candidate: {label} now lists another build of {version} ({sha}), a later "
            "candidate or the final"
        )
    else:
        what = f"{was} is not the build {label} lists now ({sha})"
    return (
        f"{what}. This plan installs it beside the old one as {prefix.name}; remove the old one with: mpsup "
        f"install-rc --remove {rec['name']}"
    )


def _side_by_side_prefix(
    version: str,
    wheel: PlannedWheel,
    target: Target,
    label: str,
    channel: str,
    baseline_torch: str | None,
    root: Path | None = None,
) -> tuple[Path, tuple[str, ...], bool, dict[str, Any] | None] | NothingToDo:
    """Where the new environment goes: (prefix, notes, replaces a leftover, superseded record), or why nothing is to do.

    Only a folder with its record is an installed environment: the record is written last, so a
    folder without one is what an interrupted install left, never "already installed".
    """
    prefix = (root or envs_dir()) / f"torch-{version}-{target.python_tag}"
    notes: list[str] = []
    superseded: dict[str, Any] | None = None
    if (prefix / ENV_RECORD).is_file():
        rec = read_env_record(prefix / ENV_RECORD)
        old_sha = (rec.get("wheel") or {}).get("sha256")
        if not old_sha or not wheel.sha256 or str(old_sha).lower() == wheel.sha256.lower():
            return NothingToDo(
                f"torch {version} is already installed beside your environment in {prefix}; "
                f"compare with: mpsup bench --candidate {prefix.name}",
                baseline_torch,
                version,
            )
        superseded = {"name": rec["name"], "prefix": str(prefix), "channel": rec.get("channel"), "sha256": old_sha}
        prefix = prefix.with_name(f"{prefix.name}-{wheel.sha256[:8].lower()}")
        if (prefix / ENV_RECORD).is_file():
            return NothingToDo(
                f"torch {version} (sha256 {wheel.sha256[:12]}...) is already installed beside your environment in "
                f"{prefix}; compare with: mpsup bench --candidate {prefix.name}",
                baseline_torch,
                version,
            )
        notes.append(_supersede_note(rec, version, wheel, label, channel, prefix))
    leftover = prefix.exists() or prefix.is_symlink()
    if leftover:
        if prefix.is_symlink() or not is_ours(prefix):
            raise UserError(f"{prefix} exists but holds no mpsup record; move it away or remove it first")
        notes.append(
            f"an interrupted install left {prefix} without its record (not a usable environment); it will be replaced"
        )
    return prefix, tuple(notes), leftover, superseded


@dataclass(frozen=True)
class _Baseline:
    """The user's interpreter as the plan needs it: its probe, its tags target and its torch."""

    facts: dict[str, Any]
    target: Target
    torch: str | None


@dataclass(frozen=True)
class _Pick:
    """The wheel chosen and where it was listed (`label` names that place in messages)."""

    index: str | None  # None: the installer's own configured index, asked through pip
    label: str
    version: str
    wheel: PlannedWheel
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Place:
    """Where the torch goes: the environment's prefix and interpreter, and what the plan replaces there."""

    prefix: Path
    python: Path
    notes: tuple[str, ...] = ()
    leftover: bool = False
    superseded: dict[str, Any] | None = None


def plan_install(
    request: InstallRequest,
    *,
    fetch: Fetcher | None = None,
    probe: ProbeFn = run_interpreter_probe,
    host_macos: HostMacosFn = read_host_macos,
    envs_root: Path | None = None,
) -> InstallPlan | NothingToDo:
    """`envs_root`: where a side-by-side environment goes instead of the data dir's envs/ (bisect's throwaway
    environments, which install-rc's records and --list must not show)."""
    _check_request(request)
    base = _read_baseline(request, probe, host_macos)
    settings = inst.pip_settings(request.python) if base.facts.get("pip") else {}
    installer, why_installer = inst.choose_installer(request.installer, base.facts, settings)
    if installer == "pip" and not base.facts.get("pip"):
        raise UserError(f"{request.python} has no pip; pass --installer uv (with uv installed) or install pip there")
    cafile = settings.get("cert")
    pick = _pick(request, base.target, settings, fetch or default_fetcher(cafile))
    nothing = _nothing_newer(request, pick, base.torch)
    if nothing is not None:
        return nothing
    place = _place(request, base, pick, envs_root)
    if isinstance(place, NothingToDo):
        return place
    notes = (*place.notes, *pick.notes)
    clone_lines = _clone_lines(request)
    wheel = _sized(pick.wheel, cafile)
    if wheel.sha256 is None:
        notes = (
            *notes,
            "the index gives no sha256 for this wheel; accepted by --allow-unhashed: its sha256 is computed "
            "from the download and recorded",
        )
    return InstallPlan(
        mode="in-place" if request.in_place else "side-by-side",
        channel=request.channel,
        index_url=pick.index,
        index_label=pick.label,
        baseline_python=request.python,
        baseline_torch=base.torch,
        target=base.target.describe(),
        target_platform=base.target.platform,
        to_version=pick.version,
        wheel=wheel,
        companions=request.companions,
        installer=installer,
        uv=inst.uv_executable(base.facts),
        prefix=place.prefix,
        python=place.python,
        wheel_path=local_path(wheel.url) or (downloads_dir() / wheel.filename),
        clone_lines=clone_lines,
        prereleases=request.channel in ("test", "nightly"),
        notes=(*notes, why_installer) if why_installer else notes,
        cafile=cafile,
        allow_unhashed=request.allow_unhashed,
        replaces_leftover=place.leftover,
        supersedes=place.superseded,
    )


def _check_request(request: InstallRequest) -> None:
    """What can be refused before any interpreter or index is asked."""
    if request.index_url:
        check_index_url(request.index_url)
    if request.version is not None and _version(request.version) is None:
        raise UserError(f"--version {request.version!r}: not a PEP 440 version (e.g. 2.16.0rc1)")


def _read_baseline(request: InstallRequest, probe: ProbeFn, host_macos: HostMacosFn) -> _Baseline:
    facts = probe_baseline(request.python, probe)
    target = _target(facts, host_macos)
    if request.in_place and facts.get("externally_managed"):
        raise UserError(
            f"{request.python}: this Python is managed by the system (PEP 668); --in-place would modify it. "
            "Install side by side instead (drop --in-place)"
        )
    return _Baseline(facts, target, (facts.get("torch") or {}).get("version"))


def _pick(request: InstallRequest, target: Target, settings: dict[str, Any], fetch: Fetcher) -> _Pick:
    """The wheel to install, checked: its name, its link's scheme, and a sha256 unless --allow-unhashed."""
    notes: tuple[str, ...] = ()
    index = request.index_url or CHANNEL_INDEX.get(request.channel)
    try:
        if index is None:
            version, wheel = _stable_pick(request.python, request.version)
            configured = [
                settings.get("index-url") or "https://pypi.org/simple",
                *settings.get("extra-index-url", "").split(),
            ]
            label = f"the installer's configured index ({' + '.join(configured)})"
        else:
            version, wheel, notes = _index_pick(request, index, target, fetch)
            label = index
    except IndexUnreachable as exc:
        raise OperationFailed(
            f"cannot read the package index ({exc}); nothing was changed. When online, run: {request.retry_command()}"
        ) from None
    if index is not None:
        # An https page may still link a wheel over plain http: the same rule applies to the file itself
        # (and to every redirect on the way, in open_url).
        check_link(wheel.url, index)
    wheel_file_name(wheel.filename, "torch", label)
    if wheel.sha256 is None and not request.allow_unhashed:
        raise UserError(
            f"{label} gives no sha256 for {wheel.url}; refusing to install an unchecked wheel "
            "(--allow-unhashed accepts it: its sha256 is then computed from the download and recorded)"
        )
    if target.macos_note():
        notes = (*notes, str(target.macos_note()))
    return _Pick(index, label, version, wheel, notes)


def _nothing_newer(request: InstallRequest, pick: _Pick, baseline_torch: str | None) -> NothingToDo | None:
    """Nothing to do when the index has nothing newer than the installed torch (or in place, the same one)."""
    newest, installed = _version(pick.version), _version(baseline_torch)
    if installed is None or newest is None:
        return None
    # Compared as versions: `.public` is a string, and "2.12.0" <= "2.7.1" as strings.
    if request.version is None and Version(newest.public) <= Version(installed.public):
        kind = {"test": "release candidate", "nightly": "nightly build"}.get(request.channel, "stable release")
        return NothingToDo(
            f"no {kind} newer than {baseline_torch} is published on {pick.label}; the newest there is {pick.version}",
            baseline_torch,
            pick.version,
        )
    if request.in_place and newest.public == installed.public:
        return NothingToDo(
            f"torch {baseline_torch} is already installed in {request.python}", baseline_torch, pick.version
        )
    return None


def _place(request: InstallRequest, base: _Baseline, pick: _Pick, envs_root: Path | None) -> _Place | NothingToDo:
    if request.in_place:
        return _Place(Path(str(base.facts.get("executable") or request.python)).parent.parent, request.python)
    placed = _side_by_side_prefix(
        pick.version, pick.wheel, base.target, pick.label, request.channel, base.torch, envs_root
    )
    if isinstance(placed, NothingToDo):
        return placed
    prefix, notes, leftover, superseded = placed
    return _Place(prefix, venv_python(prefix), notes, leftover, superseded)


def _clone_lines(request: InstallRequest) -> tuple[str, ...]:
    """--clone: the user's packages, the torch family left out; nothing for an in-place upgrade."""
    if not request.clone or request.in_place:
        return ()
    frozen = inst.freeze(request.python)
    if frozen is None:
        raise UserError(f"--clone: could not read the packages of {request.python} (pip freeze failed)")
    return tuple(inst.clone_lines(frozen))


def _sized(wheel: PlannedWheel, cafile: str | None) -> PlannedWheel:
    """The wheel with its size: the index's, else the server's Content-Length (None when neither says)."""
    size = wheel.size if wheel.size is not None else head_size(wheel.url, cafile)
    return PlannedWheel(wheel.filename, wheel.url, wheel.sha256, size, wheel.upload_time, wheel.seen_at)


def is_root_refused(platform: str, euid: int, allow_root: bool) -> bool:
    """On macOS a root-owned venv or site-packages breaks the user's later, unprivileged installs."""
    return platform == "darwin" and euid == 0 and not allow_root


def current_euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1
