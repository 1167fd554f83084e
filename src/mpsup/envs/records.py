"""Records of installed candidate environments and of saved in-place sets, under the data dir.

A side-by-side environment carries its record inside (`envs/NAME/mpsup-env.json`), so the folder
and the record appear and disappear together. An in-place upgrade keeps its record in
`envs/inplace-SLUG/` (the user's own environment is elsewhere and is never deleted by mpsup), and
the `pip freeze` saved before it in `rollback/`.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpsup.clock import file_stamp, iso_now
from mpsup.errors import UserError
from mpsup.paths import envs_dir, rollback_dir
from mpsup.safe_files import atomic_write_json, read_json_object

# A record is a few kB; anything much larger is not one of ours.
_MAX_RECORD_BYTES = 1 << 20
# Keys a record must carry with these types to be usable (older records carry these too).
_REQUIRED: dict[str, type] = {"python": str}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "mode": str,
    "prefix": str,
    "torch_version": str,
    "channel": str,
    "created_at": str,
    "python_version": str,
    "index_url": (str, type(None)),
    "wheel": dict,
    "companions": dict,
}

ENV_RECORD = "mpsup-env.json"
ENV_SCHEMA = 1


@dataclass(frozen=True)
class EnvRecord:
    name: str
    mode: str  # "side-by-side" | "in-place"
    prefix: str  # the environment's folder
    python: str  # its interpreter: what `bench --candidate NAME|VERSION` runs
    python_version: str
    torch_version: str
    torch_version_full: str
    channel: str
    index_url: str | None  # None: the installer's own configuration
    installer: str
    created_at: str
    baseline_python: str
    baseline_torch: str | None
    # filename, url, sha256 (checked against the index's, or computed from the download: sha256_from),
    # size, and when it was listed: the index's upload time where given, and when mpsup read the listing.
    # A release candidate carries the final version (torch-2.8.0-... on the test channel), so the
    # hash and channel are what later tell a candidate from the final build of the same version.
    wheel: dict[str, Any] = field(default_factory=dict)
    companions: dict[str, str] = field(default_factory=dict)
    mps_built: bool = False
    mps_available: bool = False
    cloned_packages: int = 0
    schema: int = ENV_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def now_iso() -> str:
    return iso_now()


def env_slug(python: Path) -> str:
    """A stable folder name for an environment we do not own.

    Named by the environment's folder, not the interpreter's file, so that `bin/python` and
    `bin/python3` of one venv find the same saved sets.
    """
    return hashlib.sha256(str(python.absolute().parent.parent).encode()).hexdigest()[:12]


def _record_problem(doc: Any) -> str | None:
    """Why a parsed record cannot be used, or None."""
    if not isinstance(doc, dict):
        return f"expected a JSON object, found {type(doc).__name__}"
    for key, kind in _REQUIRED.items():
        if not isinstance(doc.get(key), kind):
            return f"'{key}' is missing or not a {kind.__name__}"
    for key, kinds in _OPTIONAL.items():
        if key in doc and not isinstance(doc[key], kinds):
            return f"'{key}' has the wrong type ({type(doc[key]).__name__})"
    return None


def read_env_record(path: Path) -> dict[str, Any]:
    """One environment record, validated; UserError naming the file otherwise."""
    doc = read_json_object(path, "record file", _MAX_RECORD_BYTES)
    problem = _record_problem(doc)
    if problem:
        raise UserError(f"{path}: not a usable environment record ({problem})")
    doc.setdefault("name", path.parent.name)
    doc.setdefault("mode", "side-by-side")
    doc["record_dir"] = str(path.parent)
    return doc


def scan_environments() -> tuple[list[dict[str, Any]], list[str]]:
    """The usable records, and one line for each record that was skipped (unreadable, a FIFO, wrong types)."""
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    base = envs_dir()
    if not base.is_dir():
        return out, problems
    for rec in sorted(base.glob(f"*/{ENV_RECORD}")):
        try:
            out.append(read_env_record(rec))
        except UserError as exc:
            problems.append(str(exc))
    return out, problems


def recorded_environments() -> list[dict[str, Any]]:
    """The usable records; a bad record among them is skipped (scan_environments says which)."""
    return scan_environments()[0]


def write_record(folder: Path, record: EnvRecord) -> Path:
    path = folder / ENV_RECORD
    atomic_write_json(path, record.to_json())
    return path


def find_environments(key: str) -> list[dict[str, Any]]:
    """Records whose name or torch version is `key`."""
    return [d for d in recorded_environments() if key in (d.get("name"), d.get("torch_version"))]


def remove_environment(key: str) -> list[dict[str, Any]]:
    """Delete a side-by-side environment (folder and record); for in-place ones only the record."""
    matches = find_environments(key)
    if not matches:
        known = ", ".join(sorted(str(d.get("name")) for d in recorded_environments())) or "none"
        raise UserError(f"--remove {key}: no recorded environment by that name or torch version (recorded: {known})")
    if len(matches) > 1:
        names = ", ".join(sorted(str(d["name"]) for d in matches))
        raise UserError(f"--remove {key}: several environments match ({names}); name one of them")
    doc = matches[0]
    record_dir = Path(doc["record_dir"])
    if record_dir.resolve().parent != envs_dir().resolve():
        raise UserError(f"--remove {key}: its record lies outside {envs_dir()}; not deleting anything")
    # A side-by-side environment is the record's own folder; an in-place record's folder holds only it.
    shutil.rmtree(record_dir)
    return matches


def save_rollback(python: Path, frozen: list[str], torch_version: str | None, index_url: str | None) -> Path:
    stamp = file_stamp(micro=True)
    path = rollback_dir() / env_slug(python) / f"{stamp}.json"
    atomic_write_json(
        path,
        {
            "schema": 1,
            "python": str(python.absolute()),
            "created_at": now_iso(),
            "torch_version": torch_version,
            "index_url": index_url,
            "freeze": frozen,
        },
    )
    return path


def latest_rollback(python: Path) -> tuple[Path, dict[str, Any]] | None:
    folder = rollback_dir() / env_slug(python)
    for path in sorted(folder.glob("*.json"), reverse=True):
        return path, read_rollback(path)
    return None


def read_rollback(path: Path) -> dict[str, Any]:
    """A saved package set: an object whose 'freeze' is a list of strings; UserError naming the file otherwise."""
    doc = read_json_object(path, "rollback record", 16 * _MAX_RECORD_BYTES)
    freeze = doc.get("freeze")
    if not isinstance(freeze, list) or not all(isinstance(ln, str) for ln in freeze):
        raise UserError(f"{path}: not a rollback record (no 'freeze' list of requirement lines)")
    if not isinstance(doc.get("index_url"), (str, type(None))):
        raise UserError(f"{path}: not a rollback record ('index_url' is not a string)")
    return doc
