"""Waits that say what they wait for: while a body runs past a few seconds, a line naming what it waits on, how
long so far and when it gives up, then again every so often. Every such wait has its own deadline; this module
only speaks. The CLI points the lines at stderr (set_notice); without that, waits are silent (library use)."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# The first line after this long: a step that is merely slow says nothing, a hang speaks within seconds.
NOTICE_S = 5.0
EVERY_S = 30.0  # then one line per this long, so a long wait shows it is still a wait, not a freeze

Notice = Callable[[str], None]
_notice: list[Notice] = []


def set_notice(notice: Notice | None) -> None:
    """Where the lines go (the CLI: one line each on stderr); None silences them."""
    _notice[:] = [notice] if notice is not None else []


def wait_line(what: str, waited_s: float, deadline_s: float) -> str:
    return f"waiting for {what}: {waited_s:.0f} s so far, giving up at {deadline_s:.0f} s"


@dataclass
class _Wait:
    what: str
    deadline_s: float
    notice: Notice
    t0: float
    due: float  # when its next line is said


class _Notifier:
    """One daemon thread for every wait of the process: arming and disarming a wait takes a lock and, at most,
    one wake-up, so a wait around each timed request starts no thread. Lines are said under the lock, so none
    is said for a wait once it is disarmed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waits: dict[int, _Wait] = {}
        self._ids = itertools.count()
        self._wake_at = math.inf  # when the thread next looks; an earlier wait wakes it
        self._thread: threading.Thread | None = None

    def arm(self, what: str, deadline_s: float, notice: Notice) -> int:
        t0 = time.monotonic()
        wait = _Wait(what, deadline_s, notice, t0, t0 + NOTICE_S)
        with self._cond:
            key = next(self._ids)
            self._waits[key] = wait
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mpsup-wait-notice", daemon=True)
                self._thread.start()
            elif wait.due < self._wake_at:
                self._cond.notify()
        return key

    def disarm(self, key: int) -> None:
        with self._cond:
            self._waits.pop(key, None)  # the thread finds nothing due when it next looks, and sleeps on

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for wait in self._waits.values():
                    if wait.due <= now:
                        wait.notice(wait_line(wait.what, now - wait.t0, wait.deadline_s))
                        wait.due = now + EVERY_S
                self._wake_at = min((w.due for w in self._waits.values()), default=math.inf)
                self._cond.wait(None if self._wake_at == math.inf else max(0.0, self._wake_at - now))

    def after_fork(self) -> None:
        # The child has none of the parent's threads, and its lock may have been held mid-fork.
        self.__init__()  # type: ignore[misc]


_notifier = _Notifier()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_notifier.after_fork)


@contextlib.contextmanager
def announced(what: str, deadline_s: float) -> Iterator[None]:
    """Say what the body waits for once it has run NOTICE_S, then every EVERY_S, until it returns or raises."""
    if not _notice:
        yield
        return
    key = _notifier.arm(what, deadline_s, _notice[0])
    try:
        yield
    finally:
        _notifier.disarm(key)
