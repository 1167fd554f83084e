"""Waits that say what they wait for: while a body runs past a few seconds, a line naming what it waits on, how
long so far and when it gives up, then again every so often. Every such wait has its own deadline; this module
only speaks. The CLI points the lines at stderr (set_notice); without that, waits are silent (library use)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

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


@contextlib.contextmanager
def announced(what: str, deadline_s: float) -> Iterator[None]:
    """Say what the body waits for once it has run NOTICE_S, then every EVERY_S, until it returns or raises."""
    if not _notice:
        yield
        return
    notice = _notice[0]
    stop = threading.Event()
    t0 = time.monotonic()
    first, every = NOTICE_S, EVERY_S

    def speak() -> None:
        delay = first
        while not stop.wait(delay):
            notice(wait_line(what, time.monotonic() - t0, deadline_s))
            delay = every

    thread = threading.Thread(target=speak, name="mpsup-wait-notice", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1.0)
