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


def _whole(doc: Any, where: str, *, high: float = MAX_COUNT, optional: bool = True) -> Any:
    """A count: a whole number (`true` is none) from 0 to `high`."""
    if doc is None and optional:
        return None
    _check(isinstance(doc, int) and not isinstance(doc, bool), where, "a whole number", doc)
    if not 0 <= doc <= high:
        raise Corrupt(f"{where}: {doc} is out of range")
    return doc


# --- energy (bench/energy_turns.py): the meter a run read, and each environment's read turns ---

ENERGY_PARTS = ("package", "cpu", "gpu", "dram", "ane")
MAX_JOULES = 1e12  # a turn's joules: far above any machine's hour
MAX_TURNS = 100_000  # read turns of one environment in one workload (warmup, visits and rounds together)


def _energy_entries(doc: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Each entry of an energy list with where it is; every entry's `calls`, seconds `s` and joules `j` checked."""
    out = []
    for i, x in enumerate(_list(doc, where, MAX_TURNS)):
        at = f"{where}[{i}]"
        entry = _obj(x, at)
        _whole(entry.get("calls"), f"{at}.calls", optional=False)
        _number(entry.get("s"), f"{at}.s", high=MAX_SECONDS, optional=False)
        _check_joules(entry.get("j"), f"{at}.j")
        out.append((at, entry))
    return out


def check_energy_turns(doc: Any, where: str) -> None:
    """envs[label].energy: a list of turns, each {warmup, calls, s, round, j: {part: joules}}."""
    if doc is None:
        return
    for at, turn in _energy_entries(doc, where):
        _check(isinstance(turn.get("warmup"), bool), f"{at}.warmup", "true or false", turn.get("warmup"))
        _whole(turn.get("round"), f"{at}.round", high=MAX_TURNS)


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
    for at, win in _energy_entries(doc, where):
        _check(isinstance(win.get("env"), str), f"{at}.env", "a label", win.get("env"))
        _number(win.get("work_s"), f"{at}.work_s", high=MAX_SECONDS, optional=False)


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


# --- the machine's state at each visit (bench/visit_watch.py) and the readers a run had ---

MAX_VISITS = 1_000  # visits of one workload: two passes and leftover time take a handful
MAX_READING_KEYS = 64
MAX_READING_TEXT = 200  # a level's word, a reason's name: a few dozen characters at most
MAX_READING_LIST = 32


def check_reading(doc: Any, where: str) -> None:
    """One reading: {name: null, true/false, a finite number, short text, or a short list of short text}."""
    d = _obj(doc, where)
    if len(d) > MAX_READING_KEYS:
        raise Corrupt(f"{where}: {len(d)} figures, more than the {MAX_READING_KEYS} a reading has")
    for k, v in d.items():
        at = f"{where}.{k}"
        if len(k) > MAX_READING_TEXT:
            raise Corrupt(f"{where}: a name of {len(k):,} characters")
        if v is None or isinstance(v, bool):
            continue
        if isinstance(v, str):
            _short(v, at)
        elif isinstance(v, list):
            for i, x in enumerate(_list(v, at, MAX_READING_LIST)):
                _check(isinstance(x, str), f"{at}[{i}]", "text", x)
                _short(x, f"{at}[{i}]")
        else:
            _number(v, at, low=-MAX_QUANTITY, optional=False)


def _short(text: str, where: str) -> None:
    if len(text) > MAX_READING_TEXT:
        raise Corrupt(f"{where}: text of {len(text):,} characters, more than the {MAX_READING_TEXT} a reading holds")


def check_visit_states(doc: Any, where: str) -> None:
    """workloads[i].visit_states: each visit's {visit, t0, t1, start, end, read_s, medians: {label: {median, n,
    low, high}}}."""
    if doc is None:
        return
    for i, x in enumerate(_list(doc, where, MAX_VISITS)):
        at = f"{where}[{i}]"
        v = _obj(x, at)
        _whole(v.get("visit"), f"{at}.visit", high=MAX_VISITS, optional=False)
        for k in ("t0", "t1"):
            _number(v.get(k), f"{at}.{k}", high=MAX_SECONDS, optional=False)
        _number(v.get("read_s"), f"{at}.read_s", high=MAX_SECONDS)
        for k in ("start", "end"):
            if v.get(k) is not None:
                check_reading(v[k], f"{at}.{k}")
        for label, m in _obj(v.get("medians"), f"{at}.medians", optional=True).items():
            mm = _obj(m, f"{at}.medians.{label}")
            _number(mm.get("median"), f"{at}.medians.{label}.median", high=MAX_SECONDS, optional=False)
            _whole(mm.get("n"), f"{at}.medians.{label}.n")
            for k in ("low", "high"):
                _number(mm.get(k), f"{at}.medians.{label}.{k}", high=MAX_SECONDS)


def check_machine_state(doc: Any, where: str = "machine_state") -> None:
    """The record's machine_state: {reads: [text], absent: {what: why}, read_s: {visits, median, max, total,
    share_of_run}}."""
    if doc is None:
        return
    d = _obj(doc, where)
    for i, x in enumerate(_list(d.get("reads"), f"{where}.reads", MAX_READING_LIST, optional=True)):
        _text(x, f"{where}.reads[{i}]", optional=False)
    absent = _obj(d.get("absent"), f"{where}.absent", optional=True)
    if len(absent) > MAX_READING_KEYS:
        raise Corrupt(f"{where}.absent: {len(absent)} entries")
    for k, v in absent.items():
        _text(v, f"{where}.absent.{k}", optional=False)
    for k, v in _obj(d.get("read_s"), f"{where}.read_s", optional=True).items():
        _number(v, f"{where}.read_s.{k}", high=MAX_SECONDS)
