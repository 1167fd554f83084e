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
