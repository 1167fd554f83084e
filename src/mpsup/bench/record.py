"""Run records: the JSON document one bench writes, with every raw sample kept."""

from __future__ import annotations

import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mpsup import __version__
from mpsup.errors import UserError
from mpsup.paths import runs_dir
from mpsup.store import atomic_write_json

RUN_SCHEMA = "mpsup.run/1"


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def new_record(mode: str, device: str, environments: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "id": new_run_id(),
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
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


def save_record(record: dict[str, Any], directory: Path | None = None) -> Path:
    """Each run gets its own file. The name is claimed with a hard link, which fails if the name is
    taken: two benches at once (even with the same id) never overwrite each other's record."""
    d = directory or runs_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{record['id']}.{secrets.token_hex(4)}.tmp"
    atomic_write_json(tmp, record)
    try:
        while True:
            path = d / f"{record['id']}.json"
            try:
                os.link(tmp, path)
                break
            except FileExistsError:
                record["id"] = new_run_id()
                atomic_write_json(tmp, record)
            except OSError:
                # A filesystem without hard links: fall back to a checked rename.
                if path.exists():
                    record["id"] = new_run_id()
                    atomic_write_json(tmp, record)
                    continue
                os.replace(tmp, path)
                break
    finally:
        tmp.unlink(missing_ok=True)
    return path


def validate_record(doc: Any, path: Path) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not a run record (top level is not an object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not (schema == RUN_SCHEMA or schema.startswith(RUN_SCHEMA + ".")):
        raise UserError(f"{path}: not an mpsup run record (schema {schema!r})")
    for key, typ in (("id", str), ("workloads", list), ("environments", list), ("device", str)):
        if not isinstance(doc.get(key), typ):
            raise UserError(f"{path}: corrupt run record ('{key}' missing or of the wrong type)")
    for w in doc["workloads"]:
        if not isinstance(w, dict) or not isinstance(w.get("name"), str) or not isinstance(w.get("envs", {}), dict):
            raise UserError(f"{path}: corrupt run record (a workload entry is malformed)")
    return doc


def load_record(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return validate_record(doc, path)


def list_record_paths(directory: Path | None = None) -> list[Path]:
    d = directory or runs_dir()
    if not d.is_dir():
        return []
    paths = [p for p in d.glob("*.json") if not p.name.startswith(".")]
    return sorted(paths, key=lambda p: (p.stat().st_mtime, p.name))


def find_record(run_id: str, directory: Path | None = None) -> Path:
    for p in list_record_paths(directory):
        if p.stem == run_id or p.stem.startswith(run_id):
            return p
    raise UserError(f"no stored run with id {run_id!r} (see `mpsup report --list`)")


