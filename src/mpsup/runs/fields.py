"""The checks every field of a run record goes through: each returns the value it accepted, so a loader reads and
checks in one expression, and a wrong value raises Corrupt naming where it is."""

from __future__ import annotations

import math
from typing import Any

MAX_TEXT = 8_192  # characters in one text field of a record
MAX_COUNT = 10**9  # calls of one layer in one forward
MAX_SECONDS = 1e9
MAX_QUANTITY = 1e30  # FLOP, bytes: only compared and logged, never summed


class Corrupt(Exception):
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
        raise Corrupt(f"{where}: expected {expected}, found {_kind(value)}")


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
        raise Corrupt(f"{where}: {len(doc)} entries, more than the {limit} any run can have")
    return doc  # type: ignore[no-any-return]


def _text(doc: Any, where: str, *, optional: bool = True) -> str | None:
    _check(isinstance(doc, str) or (optional and doc is None), where, "text", doc)
    # Wrapping one unbroken line costs the terminal renderer time that grows with its square: 100,000
    # characters never finish. mpsup writes nothing this long (error tails are cut to a few thousand).
    if isinstance(doc, str) and len(doc) > MAX_TEXT:
        raise Corrupt(f"{where}: text of {len(doc):,} characters, more than the {MAX_TEXT:,} a record holds")
    return doc  # type: ignore[no-any-return]


def _required_text(doc: Any, where: str) -> str:
    _text(doc, where, optional=False)
    return str(doc)


def _number(doc: Any, where: str, *, low: float = 0.0, high: float = MAX_QUANTITY, optional: bool = True) -> Any:
    if doc is None and optional:
        return None
    # bool is an int in Python, but `true` is no measurement.
    _check(isinstance(doc, (int, float)) and not isinstance(doc, bool), where, "a number", doc)
    # Compared as they are: math.isfinite(10**400) would itself raise OverflowError.
    if (isinstance(doc, float) and not math.isfinite(doc)) or not low <= doc <= high:
        raise Corrupt(f"{where}: {doc!r} is out of range")
    return doc


# --- energy (bench/energy_turns.py): the meter a run read, and each environment's read turns ---

ENERGY_PARTS = ("package", "cpu", "gpu", "dram", "ane")
MAX_JOULES = 1e12  # a turn's joules: far above any machine's hour
MAX_TURNS = 100_000  # read turns of one environment in one workload (warmup, visits and rounds together)


def check_energy_turns(doc: Any, where: str) -> None:
    """envs[label].energy: a list of turns, each {warmup, calls, s, j: {part: joules}}."""
    if doc is None:
        return
    for i, t in enumerate(_list(doc, where, MAX_TURNS)):
        at = f"{where}[{i}]"
        turn = _obj(t, at)
        _check(isinstance(turn.get("warmup"), bool), f"{at}.warmup", "true or false", turn.get("warmup"))
        calls = turn.get("calls")
        if not isinstance(calls, int) or isinstance(calls, bool):
            raise Corrupt(f"{at}.calls: expected a whole number, found {_kind(calls)}")
        if not 0 <= calls <= MAX_COUNT:
            raise Corrupt(f"{at}.calls: {calls} is out of range")
        _number(turn.get("s"), f"{at}.s", high=MAX_SECONDS, optional=False)
        number = turn.get("round")
        if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 0):
            raise Corrupt(f"{at}.round: expected a whole number, found {_kind(number)}")
        _check_joules(turn.get("j"), f"{at}.j")


def _check_joules(doc: Any, where: str) -> None:
    """{part: joules}: parts of ENERGY_PARTS, each a finite number."""
    for part, j in _obj(doc, where).items():
        _check(part in ENERGY_PARTS, where, f"parts of {', '.join(ENERGY_PARTS)}", part)
        # A counter read twice can step back by its own rounding: a small negative is a reading, not damage.
        _number(j, f"{where}.{part}", low=-MAX_JOULES, high=MAX_JOULES, optional=False)


def check_energy_windows(doc: Any, where: str) -> None:
    """workloads[i].energy_windows (bench/energy_windows.py): a list, each {env, calls, s, work_s, j: {part: J}}."""
    if doc is None:
        return
    for i, x in enumerate(_list(doc, where, MAX_TURNS)):
        at = f"{where}[{i}]"
        win = _obj(x, at)
        _check(isinstance(win.get("env"), str), f"{at}.env", "a label", win.get("env"))
        calls = win.get("calls")
        if not isinstance(calls, int) or isinstance(calls, bool) or not 0 <= calls <= MAX_COUNT:
            raise Corrupt(f"{at}.calls: expected a whole number in range, found {_kind(calls)}")
        _number(win.get("s"), f"{at}.s", high=MAX_SECONDS, optional=False)
        _number(win.get("work_s"), f"{at}.work_s", high=MAX_SECONDS, optional=False)
        _check_joules(win.get("j"), f"{at}.j")


def check_energy_meter(doc: Any, where: str = "energy_meter") -> None:
    """The record's energy_meter: {name: null, why} without a meter; else what it reads and its probe."""
    if doc is None:
        return
    d = _obj(doc, where)
    name = _text(d.get("name"), f"{where}.name")
    _text(d.get("why"), f"{where}.why")
    if name is None:
        return
    for k in ("reads", "total", "main"):
        _text(d.get(k), f"{where}.{k}")
    for k in ("parts", "total_parts", "stamped"):
        for i, part in enumerate(_list(d.get(k), f"{where}.{k}", len(ENERGY_PARTS), optional=True)):
            _check(part in ENERGY_PARTS, f"{where}.{k}[{i}]", f"one of {', '.join(ENERGY_PARTS)}", part)
    for k in ("read_s", "window_s", "read_total_s", "windows_total_s"):
        _number(d.get(k), f"{where}.{k}", high=MAX_SECONDS)
    for k in ("read_count", "skipped_turns"):
        _number(d.get(k), f"{where}.{k}", high=MAX_COUNT)
    _text(d.get("failure"), f"{where}.failure")
    for k in ("cadence_s", "idle_w"):
        for part, v in _obj(d.get(k), f"{where}.{k}", optional=True).items():
            _check(part in ENERGY_PARTS, f"{where}.{k}", f"parts of {', '.join(ENERGY_PARTS)}", part)
            _number(v, f"{where}.{k}.{part}", low=-MAX_JOULES, high=MAX_JOULES)
