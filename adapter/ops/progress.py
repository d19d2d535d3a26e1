"""Progress of long scans and redrives, on stderr: a bar redrawn in place when the stream is
a terminal, otherwise one plain line every ``every`` items (so logs stay readable)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from adapter.io.clock import SYSTEM_CLOCK

ProgressCallback = Callable[[int, int | None], None]
"""``callback(done, total)``; ``total`` is ``None`` when unknown."""


def render_bar(label: str, done: int, total: int | None, width: int = 30) -> str:
    """``label [#########.....................]  30% 300/1000``.  Pure."""
    if not total:
        return f"{label} {done}"
    done = max(0, min(done, total))
    filled = width * done // total
    return (
        f"{label} [{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}% {done}/{total}"
    )


class ProgressReporter:
    """A :data:`ProgressCallback` that writes to ``stream`` (default: stderr).

    On a terminal the bar is redrawn at most every ``min_interval_s``; elsewhere a line is
    written each time ``done`` passes a multiple of ``every``.  :meth:`close` ends the bar.
    """

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        *,
        every: int = 100_000,
        tty: bool | None = None,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every = max(1, every)
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last_draw = float("-inf")
        self._next_line = self.every
        self._drawn = False
        self._last: tuple[int, int | None] = (0, None)

    def __call__(self, done: int, total: int | None) -> None:
        self._last = (done, total)
        if self.tty:
            now = self._clock()
            if now - self._last_draw >= self.min_interval_s or (total and done >= total):
                self._last_draw = now
                self.stream.write("\r" + render_bar(self.label, done, total))
                self.stream.flush()
                self._drawn = True
            return
        if done >= self._next_line:
            of = f"/{total}" if total else ""
            self.stream.write(f"{self.label}: {done}{of}\n")
            self.stream.flush()
            self._next_line = (done // self.every + 1) * self.every

    def close(self) -> None:
        """Finish the bar line (terminal only)."""
        if self.tty and self._drawn:
            self.stream.write("\r" + render_bar(self.label, *self._last) + "\n")
            self.stream.flush()
            self._drawn = False
