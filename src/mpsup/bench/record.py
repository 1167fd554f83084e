"""Run records: the JSON document one bench writes, with every raw sample kept."""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Any

from mpsup import __version__, clock
from mpsup.errors import UserError
from mpsup.paths import runs_dir
from mpsup.store import DEFAULT_MAX_JSON_BYTES, atomic_write_json, read_json

RUN_SCHEMA = "mpsup.run/1"


def new_run_id() -> str:
    return clock.file_stamp() + "-" + secrets.token_hex(3)


def new_record(mode: str, device: str, environments: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
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


# Bounds well above what any bench writes (a workload keeps at most 2,000 rounds of a few samples each),
# so a hostile or damaged record cannot make the report's bootstraps run for hours.
MAX_ENVIRONMENTS = 16
MAX_WORKLOADS = 20_000
MAX_SAMPLES = 100_000
MAX_ROUNDS = 20_000
MAX_SMOKE = 1_000
MAX_TAGS = 64
MAX_COUNT = 10**9  # calls of one layer in one forward
MAX_SECONDS = 1e9
MAX_QUANTITY = 1e30  # FLOP, bytes: only compared and logged, never summed
MAX_RECORD_BYTES = DEFAULT_MAX_JSON_BYTES


class _Corrupt(Exception):
    """Where in the record a field is wrong; becomes one UserError naming the file."""


def _kind(value: Any) -> str:
    return (
        "null"
        if value is None
        else {bool: "a boolean", str: "text", list: "a list", dict: "an object"}.get(
            type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
        )
    )


def _check(ok: bool, where: str, expected: str, value: Any) -> None:
    if not ok:
        raise _Corrupt(f"{where}: expected {expected}, found {_kind(value)}")


def _obj(doc: Any, where: str, *, optional: bool = False) -> dict[str, Any]:
    if doc is None and optional:
        return {}
    _check(isinstance(doc, dict), where, "an object", doc)
    return doc  # type: ignore[no-any-return]


def _list(doc: Any, where: str, limit: int, *, optional: bool = False) -> list[Any]:
    if doc is None and optional:
        return []
    _check(isinstance(doc, list), where, "a list", doc)
    if len(doc) > limit:
        raise _Corrupt(f"{where}: {len(doc)} entries, more than the {limit} any run can have")
    return doc  # type: ignore[no-any-return]


def _text(doc: Any, where: str, *, optional: bool = True) -> None:
    _check(isinstance(doc, str) or (optional and doc is None), where, "text", doc)


def _number(doc: Any, where: str, *, low: float = 0.0, high: float = MAX_QUANTITY, optional: bool = True) -> None:
    if doc is None and optional:
        return
    # bool is an int in Python, but `true` is no measurement.
    _check(isinstance(doc, (int, float)) and not isinstance(doc, bool), where, "a number", doc)
    # Compared as they are: math.isfinite(10**400) would itself raise OverflowError.
    if (isinstance(doc, float) and not math.isfinite(doc)) or not low <= doc <= high:
        raise _Corrupt(f"{where}: {doc!r} is out of range")


def _check_measurement(env: Any, where: str) -> None:
    env = _obj(env, where)
    _text(env.get("status"), f"{where}.status")
    _text(env.get("reason"), f"{where}.reason")
    _number(env.get("median"), f"{where}.median", high=MAX_SECONDS)
    for key in ("flops_per_call", "bytes_per_call"):
        _number(env.get(key), f"{where}.{key}")
    for i, sample in enumerate(_list(env.get("samples"), f"{where}.samples", MAX_SAMPLES, optional=True)):
        _number(sample, f"{where}.samples[{i}]", high=MAX_SECONDS, optional=False)
    memory = _obj(env.get("memory"), f"{where}.memory", optional=True)
    for key in ("peak_allocated", "driver_allocated"):
        _number(memory.get(key), f"{where}.memory.{key}")


def _check_workload(w: Any, where: str) -> None:
    w = _obj(w, where)
    _text(w.get("name"), f"{where}.name", optional=False)
    for key in ("part", "status", "reason", "kind", "dtype", "source"):
        _text(w.get(key), f"{where}.{key}")
    for i, tag in enumerate(_list(w.get("tags"), f"{where}.tags", MAX_TAGS, optional=True)):
        _text(tag, f"{where}.tags[{i}]", optional=False)
    count = w.get("count", 1)
    _check(isinstance(count, int) and not isinstance(count, bool), f"{where}.count", "a whole number", count)
    if not 1 <= count <= MAX_COUNT:
        raise _Corrupt(f"{where}.count: {count} is out of range")
    for i, r in enumerate(_list(w.get("ratios"), f"{where}.ratios", MAX_ROUNDS, optional=True)):
        _number(r, f"{where}.ratios[{i}]", low=-MAX_QUANTITY)  # a ratio <= 0 is skipped, not fatal
    for label, env in _obj(w.get("envs", {}), f"{where}.envs").items():
        _check_measurement(env, f"{where}.envs.{label}")


def _check_smoke(s: Any, where: str) -> None:
    s = _obj(s, where)
    _text(s.get("feature"), f"{where}.feature", optional=False)
    for label, result in _obj(s.get("envs"), f"{where}.envs").items():
        result = _obj(result, f"{where}.envs.{label}")
        _text(result.get("status"), f"{where}.envs.{label}.status")
        _text(result.get("message"), f"{where}.envs.{label}.message")


def _check_body(doc: dict[str, Any]) -> None:
    for key in ("id", "device"):
        _text(doc.get(key), key, optional=False)
    for key in ("created_at", "mode", "mpsup_version"):
        _text(doc.get(key), key)
    _check(
        doc.get("partial") is None or isinstance(doc.get("partial"), bool),
        "partial",
        "true or false",
        doc.get("partial"),
    )
    for i, env in enumerate(_list(doc.get("environments"), "environments", MAX_ENVIRONMENTS)):
        env = _obj(env, f"environments[{i}]")
        _text(env.get("label"), f"environments[{i}].label", optional=False)
        for key in ("torch_version", "device_name", "python"):
            _text(env.get(key), f"environments[{i}].{key}")
    for i, w in enumerate(_list(doc.get("workloads"), "workloads", MAX_WORKLOADS)):
        _check_workload(w, f"workloads[{i}]")
    for i, s in enumerate(_list(doc.get("smoke"), "smoke", MAX_SMOKE, optional=True)):
        _check_smoke(s, f"smoke[{i}]")
    hygiene = _obj(doc.get("hygiene"), "hygiene", optional=True)
    for key in ("before", "after"):
        _obj(hygiene.get(key), f"hygiene.{key}", optional=True)
    for i, change in enumerate(_list(hygiene.get("changed"), "hygiene.changed", MAX_SMOKE, optional=True)):
        _text(change, f"hygiene.changed[{i}]", optional=False)
    model = _obj(doc.get("model"), "model", optional=True)
    for key in ("path", "fingerprint", "format"):
        _text(model.get(key), f"model.{key}")


def validate_record(doc: Any, path: Path) -> dict[str, Any]:
    """The whole record, checked against what the report reads: every field's type, finite numbers in
    range, bounded lists. A record that passes cannot make the report raise anything but UserError."""
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not a run record (top level is not an object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not (schema == RUN_SCHEMA or schema.startswith(RUN_SCHEMA + ".")):
        raise UserError(f"{path}: not an mpsup run record (schema {schema!r})")
    try:
        _check_body(doc)
    except _Corrupt as exc:
        raise UserError(f"{path}: corrupt run record ({exc})") from None
    return doc


def load_record(path: Path) -> dict[str, Any]:
    return validate_record(read_json(path, "run record", MAX_RECORD_BYTES), path)


def list_record_paths(directory: Path | None = None) -> list[Path]:
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
