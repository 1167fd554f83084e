"""Stored runs: one JSON file per run under the runs folder, claimed without ever overwriting another."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

from mpsup import __version__, clock
from mpsup.errors import UserError
from mpsup.paths import runs_dir
from mpsup.runs.schema import SCHEMA, RunRecord
from mpsup.safe_files import DEFAULT_MAX_JSON_BYTES, atomic_write_json, read_json

MAX_RECORD_BYTES = DEFAULT_MAX_JSON_BYTES


def new_run_id() -> str:
    return clock.file_stamp() + "-" + secrets.token_hex(3)


def new_record(mode: str, device: str, environments: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    """The document a bench fills in as it measures (and journals line by line); read back as a RunRecord."""
    return {
        "schema": SCHEMA,
        "id": new_run_id(),
        "created_at": clock.iso_now(),
        "mpsup_version": __version__,
        "mode": mode,  # single, paired, aa
        "device": device,
        "partial": False,
        "environments": environments,
        "options": options,
        "hygiene": {},
        "model": None,
        "workloads": [],
        "smoke": [],
    }


SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def save_record(record: dict[str, Any] | RunRecord, directory: Path | None = None) -> Path:
    """Each run gets its own file. The name is claimed with a hard link, which fails if the name is
    taken: two benches at once (even with the same id) never overwrite each other's record. A document
    gets a fresh id in place when its own is taken; the returned path always names the saved one."""
    doc = record.to_json() if isinstance(record, RunRecord) else record
    if not SAFE_ID.fullmatch(str(doc.get("id", ""))):
        # The id names the file: one from a damaged or hostile journal (`../x`) gets a fresh one.
        doc["id"] = new_run_id()
    d = directory or runs_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{doc['id']}.{secrets.token_hex(4)}.tmp"
    atomic_write_json(tmp, doc)
    try:
        while True:
            path = d / f"{doc['id']}.json"
            try:
                os.link(tmp, path)
                break
            except FileExistsError:
                doc["id"] = new_run_id()
                atomic_write_json(tmp, doc)
            except OSError:
                # A filesystem without hard links: fall back to a checked rename.
                if path.exists():
                    doc["id"] = new_run_id()
                    atomic_write_json(tmp, doc)
                    continue
                os.replace(tmp, path)
                break
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_record(path: Path) -> RunRecord:
    return RunRecord.from_json(read_json(path, "run record", MAX_RECORD_BYTES), path)


def list_record_paths(directory: Path | None = None) -> list[Path]:
    """Stored records, oldest first (by modification time, then name)."""
    d = directory or runs_dir()
    if not d.is_dir():
        return []
    dated = []
    for p in d.glob("*.json"):
        if p.name.startswith("."):
            continue
        try:
            dated.append((p.stat().st_mtime, p.name, p))
        except OSError:  # a dangling link, or a file removed meanwhile: load_record would say so for a named one
            dated.append((0.0, p.name, p))
    return [p for _, _, p in sorted(dated)]


def find_record(run_id: str, directory: Path | None = None) -> Path:
    """The stored run with this id, or the only one whose id starts with it; never a guess."""
    if not run_id.strip():
        raise UserError("--run needs a run id (see `mpsup report --list`)")
    paths = list_record_paths(directory)
    exact = [p for p in paths if p.stem == run_id]
    if exact:
        return exact[0]
    matches = [p for p in paths if p.stem.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UserError(f"no stored run with id {run_id!r} (see `mpsup report --list`)")
    shown = ", ".join(p.stem for p in matches[:10]) + (f" and {len(matches) - 10} more" if len(matches) > 10 else "")
    raise UserError(f"run id {run_id!r} is ambiguous: {len(matches)} stored runs match ({shown}); give more of the id")
