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
    if len(paths) == 1 and not paths[0].is_dir() and paths[0].exists():
        # The one record asked for: its own problem is the error, not a warning before a vaguer one.
        named = load_record(paths[0])
        if len(named["environments"]) < 2:
            raise UserError(f"{paths[0]}: a single-environment run; pair two with --baseline ID --candidate ID")
        return [named]
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


def _recover(warn: Warn) -> None:
    from mpsup.bench.journal import recover_journals

    recover_journals(warn)  # a run that died (SIGKILL, full disk) left a journal: report it as a partial record


def newest_paired(warn: Warn, note: Warn | None = None) -> dict[str, Any]:
    """The newest run that pairs two environments; `note` hears which one and what newer single runs exist."""
    _recover(warn)
    skipped = 0
    newer_single: list[dict[str, Any]] = []
    for path in reversed(list_record_paths()):
        rec = _try_load(path, warn)
        skipped += rec is None
        if rec is not None and len(rec["environments"]) >= 2:
            if note is not None:
                for line in choice_lines(rec, newer_single):
                    note(line)
            return rec
        if rec is not None:
            newer_single.append(rec)
    unreadable = f" ({skipped} unreadable record(s) skipped, see the warnings)" if skipped else ""
    singles = (
        f"; {len(newer_single)} single run(s) stored: pair two with --baseline ID --candidate ID"
        if newer_single
        else ""
    )
    raise UserError(
        f"no paired run stored yet{unreadable}{singles}: run `mpsup bench --candidate PATH` (or `--aa`) first"
    )


def _describe(rec: dict[str, Any]) -> str:
    torch = " vs ".join(str(e.get("torch_version")) for e in rec["environments"])
    what = (rec.get("model") or {}).get("path") or f"{len(rec['workloads'])} workloads"
    return f"{rec['id']} ({rec.get('mode')}, {rec['device']}, torch {torch}, {what})"


def choice_lines(chosen: dict[str, Any], newer_single: list[dict[str, Any]]) -> list[str]:
    """Why `report` without arguments shows this run, and what to do with the newer runs it passed over."""
    lines = [f"Reporting run {_describe(chosen)}: the newest run that pairs two environments."]
    if not newer_single:
        return lines
    lines.append(f"{len(newer_single)} newer single-environment run(s), not in this report:")
    lines += [f"  {_describe(r)}" for r in newer_single[:5]]
    if len(newer_single) > 5:
        lines.append(f"  ... {len(newer_single) - 5} more (mpsup report --list)")
    older, newer = (
        (newer_single[1]["id"], newer_single[0]["id"])
        if len(newer_single) > 1
        else ("BASELINE_ID", newer_single[0]["id"])
    )
    lines.append(f"To compare two of them: mpsup report --baseline {older} --candidate {newer}")
    lines.append("Or measure both torches in one run: mpsup bench --candidate VERSION")
    return lines


def by_id(run_id: str, warn: Warn) -> dict[str, Any]:
    _recover(warn)  # the run asked for may be one that was interrupted and exists only as a journal
    return load_record(find_record(run_id))


def stored_aa_runs(warn: Warn) -> list[dict[str, Any]]:
    """Every readable `--aa` run, oldest first: the noise floors a report may lean on."""
    found = []
    for path in list_record_paths():
        rec = _try_load(path, lambda _msg: None)  # the chosen run's own loading already warned about bad files
        if rec is not None and rec.get("mode") == "aa":
            found.append(rec)
    return found


def stored_runs(warn: Warn) -> list[dict[str, Any]]:
    _recover(warn)
    rows = []
    for path in list_record_paths():
        rec = _try_load(path, warn)
        if rec is None:
            continue
        envs = rec["environments"]
        rows.append(
            {
                "id": rec["id"],
                "created_at": rec.get("created_at"),
                "mode": rec.get("mode"),
                "device": rec["device"],
                "torch": [e.get("torch_version") for e in envs],
                "workloads": len(rec["workloads"]),
                "partial": rec.get("partial", False),
                "model": (rec.get("model") or {}).get("path"),
                "path": str(path),
            }
        )
    return rows
