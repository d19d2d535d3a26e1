"""Listener failures in the log: the first of each kind with its traceback, repeats summarised.

A listener that fails one message in a hundred at 100 000 messages a second would write a
thousand identical lines a second, and a line without a traceback does not say where the
failure came from.  So each *kind* of failure (the exception type and the line that raised it,
or the kind of bad answer) is logged once with its traceback; repeats of a kind are counted
and written as one summary line at most every ``every_s`` seconds.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Final

#: Kinds remembered at most (a listener raising from ever-new places must not grow memory).
MAX_KINDS: Final = 256


class FailureLog:
    """``report(problem, exc)`` for every failed batch; thread-safe enough for logging (a
    lost count under a race is harmless)."""

    __slots__ = ("_every_s", "_kinds", "_log", "_name", "_now")

    def __init__(
        self,
        logger: logging.Logger,
        name: str,
        now: Callable[[], float],
        *,
        every_s: float = 10.0,
    ) -> None:
        self._log = logger
        self._name = name
        self._now = now
        self._every_s = every_s
        #: kind -> [time of the last line written, repeats not written since]
        self._kinds: dict[tuple[str, str], list[float]] = {}

    def report(self, problem: str, exc: BaseException | None = None) -> None:
        kind = _kind(problem, exc)
        now = self._now()
        seen = self._kinds.get(kind)
        if seen is None:
            if len(self._kinds) >= MAX_KINDS:
                self._kinds.clear()
            self._kinds[kind] = [now, 0.0]
            self._log.warning(
                "%s: %s", self._name, problem, exc_info=exc if exc is not None else None
            )
            return
        seen[1] += 1
        if now - seen[0] >= self._every_s:
            others = int(seen[1]) - 1  # besides this one, since the last line
            self._log.warning(
                "%s: %s (%s; the first was logged with its traceback)",
                self._name,
                problem,
                f"and {others} more like it in the last {now - seen[0]:.0f} s"
                if others
                else "again",
            )
            seen[0], seen[1] = now, 0.0


def _kind(problem: str, exc: BaseException | None) -> tuple[str, str]:
    if exc is None:
        return ("answer", problem.split("=", 1)[0].split(":", 1)[0])
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return (type(exc).__qualname__, where)
