"""Finding the records a report is about, skipping (with a warning) what cannot be read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpsup.bench.record import find_record, list_record_paths, load_record
from mpsup.errors import UserError

Warn = Callable[[str], None]


def _try_load(path: Path, warn: Warn) -> dict[str, Any] | None:
    try:
        return load_record(path)
    except UserError as exc:
        warn(f"skipped {exc}")
        return None


def records_from_paths(paths: list[Path], warn: Warn) -> list[dict[str, Any]]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(x for x in p.rglob("*.json") if not x.name.startswith("."))
        elif p.exists():
            files.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    out = []
    for f in files:
        rec = _try_load(f, warn)
        if rec is None:
            continue
        if len(rec["environments"]) < 2:
            warn(f"skipped {f}: a single-environment run (pair two with --baseline ID --candidate ID)")
            continue
        out.append(rec)
    if not out:
        raise UserError("no usable paired run record among " + ", ".join(str(p) for p in paths))
    return out


def newest_paired(warn: Warn) -> dict[str, Any]:
    for path in reversed(list_record_paths()):
        rec = _try_load(path, warn)
        if rec is not None and len(rec["environments"]) >= 2:
            return rec
    raise UserError("no paired run stored yet: run `mpsup bench --candidate PATH` (or `--aa`) first")


def by_id(run_id: str, warn: Warn) -> dict[str, Any]:
    return load_record(find_record(run_id))


def stored_runs(warn: Warn) -> list[dict[str, Any]]:
    rows = []
    for path in list_record_paths():
        rec = _try_load(path, warn)
        if rec is None:
            continue
        envs = rec["environments"]
        rows.append({"id": rec["id"], "created_at": rec.get("created_at"), "mode": rec.get("mode"),
                     "device": rec["device"], "torch": [e.get("torch_version") for e in envs],
                     "workloads": len(rec["workloads"]), "partial": rec.get("partial", False),
                     "model": (rec.get("model") or {}).get("path"), "path": str(path)})
    return rows
