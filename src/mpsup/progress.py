"""Progress of long work, as typed events: one frozen dataclass per event, subclassing `Event`, and one
`Progress` type for every command that reports any. Renderers dispatch on the event's type, so an event
no renderer knows is a programming error a test catches, never a message dropped in silence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, dataclass_transform


@dataclass_transform(frozen_default=True)
@dataclass(frozen=True)
class Event:
    """The base of every progress event: each subclass becomes a frozen dataclass of the fields it declares, so
    an event module holds only its events' fields and docstrings."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True)(cls)


Progress = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A Progress for callers that show nothing (tests, --json without a terminal)."""
