"""Talking to the installer (pip or uv): commands as argument lists, the user's pip settings, freezes.

mpsup never rewrites the user's installer configuration: mirrors, certificates and extra indexes
in pip.conf or PIP_* variables reach pip untouched, and the channel's index is only ever *added*.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from mpsup.syscmd import pip_command, run_command

INSTALL_TIMEOUT_S = 3600.0
# Never carried into a clone: a pinned torchvision built for the baseline torch would drag it back.
TORCH_FAMILY = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "torchao",
        "torchcodec",
        "triton",
        "pytorch-triton",
        "pytorch-triton-rocm",
        "pytorch-triton-xpu",
    }
)


def is_torch_family(name: str) -> bool:
    canon = canonicalize_name(name)
    return canon in TORCH_FAMILY or canon.startswith("nvidia-")


_PIP_INDEX_OPTIONS = ("index-url", "extra-index-url", "find-links")
_UV_INDEX_VARS = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")


def uv_configured() -> bool:
    """Whether the user told uv where to find packages (variables or a user uv.toml)."""
    if any(os.environ.get(v) for v in _UV_INDEX_VARS):
        return True
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return (config_home / "uv" / "uv.toml").is_file()


def choose_installer(requested: str, probe: dict, pip_settings: dict[str, str]) -> tuple[str, str | None]:
    """auto: uv when present, unless the user's pip is pointed at a mirror that uv would not read.

    Returns the installer and, when auto passed over uv, why.
    """
    if requested in ("pip", "uv"):
        return requested, None
    if not (probe.get("uv") or shutil.which("uv")):
        return "pip", None
    pip_indexes = [o for o in _PIP_INDEX_OPTIONS if pip_settings.get(o)]
    if pip_indexes and probe.get("pip") and not uv_configured():
        return (
            "pip",
            f"pip chosen over uv: your pip configuration sets {', '.join(pip_indexes)}, which uv does not read",
        )
    return "uv", None


def uv_executable(probe: dict) -> str:
    return str(probe.get("uv") or shutil.which("uv") or "uv")


@dataclass(frozen=True)
class InstallArgs:
    """What to put into one environment."""

    pin: str  # e.g. "torch==2.16.0rc1"
    wheel_dir: Path  # a folder holding just the hash-checked wheel for `pin`
    requirements: tuple[str, ...] = ()  # companions by name: the resolver matches them to the pinned torch
    requirements_file: Path | None = None  # a clone's freeze
    extra_index_url: str | None = None  # the channel's index; the user's own stays primary
    prereleases: bool = False
    upgrade: bool = False


def _base(installer: str, python: Path, uv: str) -> list[str]:
    if installer == "uv":
        return [uv, "pip", "install", "--python", str(python)]
    return pip_command(python, "install")


def install_commands(installer: str, python: Path, args: InstallArgs, uv: str = "uv") -> list[list[str]]:
    """Two steps: the checked wheel alone, offline; then its dependencies and companions from the indexes.

    Installing the wheel by name from a folder (not by path) keeps `pip freeze` saying
    `torch==X` rather than `torch @ file:///...cache...`, so freezes and clones stay portable.
    """
    wheel_only = [
        *_base(installer, python, uv),
        "--no-index",
        "--no-deps",
        "--find-links",
        str(args.wheel_dir),
        args.pin,
    ]
    rest = [*_base(installer, python, uv), args.pin, *args.requirements]
    if args.requirements_file is not None:
        rest += ["-r", str(args.requirements_file)]
    if args.upgrade:
        rest.append("--upgrade")
    if args.prereleases:
        rest += ["--prerelease", "allow"] if installer == "uv" else ["--pre"]
    if args.extra_index_url:
        rest += ["--extra-index-url", args.extra_index_url]
    return [wheel_only, rest]


def parse_pip_config_list(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.cert='/x'`, `:env:.index-url='...'`) -> {option: value}.

    Environment entries win over files, as they do in pip.
    """
    found: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        match = re.match(r"^([^=\s]+)\.([a-z0-9-]+)='(.*)'$", line.strip())
        if not match:
            continue
        section, option, value = match.groups()
        rank = 2 if section == ":env:" else 1 if section == "install" else 0
        if option not in found or rank >= found[option][0]:
            found[option] = (rank, value)
    return {k: v for k, (_, v) in found.items()}


def pip_settings(python: Path) -> dict[str, str]:
    """The user's pip settings as the target's pip sees them; empty when it has no pip."""
    res = run_command(pip_command(python, "config", "list"), timeout=60)
    settings = parse_pip_config_list(res.stdout) if res.ok else {}
    for option in ("cert", "index-url"):
        env_value = os.environ.get("PIP_" + option.upper().replace("-", "_"))
        if env_value:
            settings[option] = env_value
    return settings


@dataclass(frozen=True)
class PipPick:
    name: str
    version: str
    url: str
    sha256: str | None


def parse_pip_report(text: str) -> list[PipPick]:
    """pip's `--report` JSON (pip >= 22.2): what it would install, from where, with which hash."""
    doc = json.loads(text)
    picks = []
    for item in doc.get("install", []):
        meta = item.get("metadata") or {}
        info = item.get("download_info") or {}
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha = (
            hashes.get("sha256") or ((info.get("archive_info") or {}).get("hash") or "").removeprefix("sha256=") or None
        )
        if meta.get("name") and meta.get("version") and info.get("url"):
            picks.append(PipPick(meta["name"], meta["version"], info["url"], sha))
    return picks


def freeze(python: Path) -> list[str] | None:
    """The environment's `pip freeze`, comments dropped; None when pip cannot run there."""
    res = run_command(pip_command(python, "freeze"), timeout=120)
    if not res.ok:
        return None
    return [ln.strip() for ln in res.stdout.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def requirement_name(line: str) -> str | None:
    """The project a freeze line pins; None for lines we cannot name (editable VCS checkouts)."""
    if line.startswith("-"):
        match = re.search(r"#egg=([A-Za-z0-9_.-]+)", line)
        return canonicalize_name(match.group(1)) if match else None
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None


def clone_lines(frozen: list[str]) -> list[str]:
    """The baseline's packages to carry into a side-by-side environment: all but the torch family."""
    return [ln for ln in frozen if not ((name := requirement_name(ln)) and is_torch_family(name))]
