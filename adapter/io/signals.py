"""SIGTERM stops a client's ``with`` block as Ctrl-C does.

Python ends a process on SIGTERM at once: no ``finally``, no ``__exit__``, so a consumer
under an orchestrator (Kubernetes sends SIGTERM, then SIGKILL after the grace period) would
neither commit what it finished nor leave its group.  While a client's ``with`` block runs
on the main thread and nothing else handles SIGTERM, :class:`TerminateAsInterrupt` makes
SIGTERM raise :class:`KeyboardInterrupt` there, as SIGINT does: the block is left, the
client stops by its stop contract (docs/semantics.md §4.7), and a second SIGTERM or Ctrl-C
while it stops interrupts the stop itself.  An application that installed a SIGTERM
handler of its own keeps it; the previous handler is put back when the block is left.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Self

__all__ = ["StartsInWith", "TerminateAsInterrupt"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt


class TerminateAsInterrupt:
    """Install on :meth:`enter`, put back on :meth:`exit` (nested blocks: the outermost
    installs, the inner ones find a handler and leave it alone)."""

    __slots__ = ("_previous",)

    def __init__(self) -> None:
        self._previous: signal.Handlers | object | None = None

    def enter(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the application (or an outer block) handles SIGTERM
        self._previous = signal.signal(signal.SIGTERM, _interrupt)

    def exit(self) -> None:
        previous, self._previous = self._previous, None
        if previous is not None and signal.getsignal(signal.SIGTERM) is _interrupt:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


class StartsInWith:
    """``with client:`` runs ``start()`` and, when the block is left, ``shutdown()`` (the stop
    contract); inside the block SIGTERM is taken as Ctrl-C (:class:`TerminateAsInterrupt`).
    The clients that run a loop of their own mix this in."""

    _signals: TerminateAsInterrupt

    def start(self) -> Self:
        raise NotImplementedError

    def shutdown(self, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Self:
        started = self.start()
        self._signals.enter()  # SIGTERM leaves the block as Ctrl-C does
        return started

    def __exit__(self, *exc: object) -> None:
        try:
            self.shutdown()
        finally:
            self._signals.exit()
