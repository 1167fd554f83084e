"""What a bisect reports as it goes, one frozen dataclass per event: bisect/render.py turns each into a line, and
an event it has no line for is an error its tests catch."""

from __future__ import annotations

from mpsup.bisect.results import Step
from mpsup.progress import Event


class Resumed(Event):
    """A bisect continued from its journal, with the steps it holds."""

    steps: int
    journal: str


class StepStarted(Event):
    """A paired run of the good environment against environment `index` begins."""

    number: int  # counted from 1 over the whole bisect, resumed steps included
    index: int
    attempt: int  # 2: the same environment again at twice the budget
    budget_s: float
    environment: str
    good: str
    torch: str | None
    planned: int  # the steps a bisect of this many environments takes when every call is clear


class StepFinished(Event):
    """A paired run ended and was called: its figures and verdict."""

    step: Step
    environment: str
    number: int


class NightliesListed(Event):
    """--nightlies: the builds the bisect runs over, listed once when it starts."""

    builds: int
    first: str
    last: str
    index_url: str
    skipped: int  # builds in the range without a wheel for this Python
    folder: str
    at_most: int  # installs when every call is clear


class Installing(Event):
    version: str
    prefix: str
    size: int | None  # the wheel's bytes, where the index says
    installer: str


class Installed(Event):
    version: str
    prefix: str
    seconds: float


class Reused(Event):
    """A build found installed by an earlier run of the same bisect."""

    version: str
    prefix: str


class Released(Event):
    """A build removed once its step was called: the bisect never asks for it again."""

    version: str
    prefix: str


class ThrowawaysRemoved(Event):
    """After a failed step or install: the throwaway environments removed."""

    removed: int
    folder: str
