"""Progress of long work, as typed events: one frozen dataclass per event, subclassing `Event`, and one
`Progress` type for every command that reports any. Renderers dispatch on the event's type, so an event
no renderer knows is a programming error a test catches, never a message dropped in silence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """The base of every progress event."""


Progress = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """A Progress for callers that show nothing (tests, --json without a terminal)."""
