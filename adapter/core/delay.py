"""Delay levels: RocketMQ's ``messageDelayLevel`` table and the rules that pick a level.

Pure: no clients, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Final

from adapter.constants import (
    DEFAULT_MAX_RECONSUME_TIMES,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    RETRY_LEVEL_BASE,
)
from adapter.errors import ConfigError, InvalidDelayLevelError

#: Unit → milliseconds.  ``ms`` is an addition of ours for short test ladders.
UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TOKEN = re.compile(r"^([0-9]+)(ms|s|m|h|d)$")


def format_duration_ms(ms: int) -> str:
    """The shortest exact token for ``ms`` (``10000`` → ``"10s"``, ``250`` → ``"250ms"``)."""
    for unit in ("d", "h", "m", "s"):
        size = UNIT_MS[unit]
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class DelayLevels(Sequence[timedelta]):
    """An immutable delay table; levels are 1-based like RocketMQ's.

    >>> levels = DelayLevels.parse("1s 5s 10s")
    >>> len(levels), levels[3]
    (3, datetime.timedelta(seconds=10))
    """

    delays_ms: tuple[int, ...]
    DEFAULT: ClassVar[DelayLevels]

    def __post_init__(self) -> None:
        if not self.delays_ms:
            raise InvalidDelayLevelError(
                "messageDelayLevel", self.delays_ms, "needs at least one level"
            )
        for i, ms in enumerate(self.delays_ms, start=1):
            if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0:
                raise InvalidDelayLevelError(
                    f"messageDelayLevel[{i}]", ms, "delay must be a positive whole number of ms"
                )

    @classmethod
    def parse(cls, text: str) -> DelayLevels:
        """Parse ``"1s 5s 10s 30s 1m ..."`` (units ``ms s m h d``), naming a bad token."""
        if not isinstance(text, str):
            raise InvalidDelayLevelError(
                "messageDelayLevel", text, "must be a string like '1s 5s 10s'"
            )
        tokens = text.split()
        if not tokens:
            raise InvalidDelayLevelError("messageDelayLevel", text, "needs at least one level")
        out: list[int] = []
        for pos, token in enumerate(tokens, start=1):
            match = _TOKEN.match(token)
            if match is None:
                raise InvalidDelayLevelError(
                    f"messageDelayLevel token {pos}",
                    token,
                    "expected a whole number followed by one of the units ms, s, m, h, d",
                )
            value = int(match.group(1))
            if value <= 0:
                raise InvalidDelayLevelError(
                    f"messageDelayLevel token {pos}", token, "a delay must be greater than zero"
                )
            out.append(value * UNIT_MS[match.group(2)])
        return cls(tuple(out))

    @classmethod
    def coerce(cls, value: DelayLevels | str | Sequence[int] | None) -> DelayLevels:
        """Accept a table, its text form, or delays in ms; ``None`` gives the default."""
        if value is None:
            return cls.DEFAULT
        if isinstance(value, DelayLevels):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        return cls(tuple(value))

    # -- Sequence protocol, 1-based ----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.delays_ms)

    def __getitem__(self, level: int) -> timedelta:  # type: ignore[override]
        return timedelta(milliseconds=self.delay_ms(level))

    def __iter__(self) -> Iterator[timedelta]:
        return (timedelta(milliseconds=ms) for ms in self.delays_ms)

    def __reversed__(self) -> Iterator[timedelta]:
        return (timedelta(milliseconds=ms) for ms in reversed(self.delays_ms))

    def __contains__(self, value: object) -> bool:
        return isinstance(value, timedelta) and value in tuple(self)

    def index(self, value: object, start: int = 1, stop: int | None = None) -> int:
        """The first level (1-based) whose delay equals ``value``."""
        for level, delay in enumerate(self, start=1):
            if level >= start and (stop is None or level < stop) and delay == value:
                return level
        raise InvalidDelayLevelError("delay", value, "is not a delay of this table")

    def count(self, value: object) -> int:
        return sum(1 for delay in self if delay == value)

    def __str__(self) -> str:
        return " ".join(format_duration_ms(ms) for ms in self.delays_ms)

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def levels(self) -> range:
        return range(1, len(self.delays_ms) + 1)

    def delay_ms(self, level: int) -> int:
        """The delay of ``level`` (1..N) in ms; anything else is an error naming it."""
        self.check(level)
        return self.delays_ms[level - 1]

    def token(self, level: int) -> str:
        return format_duration_ms(self.delay_ms(level))

    def check(self, level: int, field: str = "delayLevel") -> int:
        if isinstance(level, bool) or not isinstance(level, int):
            raise InvalidDelayLevelError(field, level, "must be an int")
        if not 1 <= level <= len(self.delays_ms):
            raise InvalidDelayLevelError(
                field, level, f"levels of this table are 1..{len(self.delays_ms)}"
            )
        return level

    def clamp(self, level: int) -> int:
        """Levels above the highest are served at the highest (ScheduleMessageService)."""
        if isinstance(level, bool) or not isinstance(level, int):
            raise InvalidDelayLevelError("delayLevel", level, "must be an int")
        if level < 1:
            raise InvalidDelayLevelError("delayLevel", level, "must be at least 1 to clamp")
        return min(level, len(self.delays_ms))

    def retry_level(self, reconsume_times: int) -> int:
        """The level the broker picks when the listener says nothing: ``3 + reconsumeTimes``."""
        return self.clamp(RETRY_LEVEL_BASE + max(0, reconsume_times))

    def largest_level_within(self, remaining_ms: int) -> int | None:
        """The largest level whose delay does not exceed ``remaining_ms`` (None if none does).

        Delays are not required to be sorted; ties pick the higher level.
        """
        best: int | None = None
        best_ms = -1
        for level, ms in enumerate(self.delays_ms, start=1):
            if ms <= remaining_ms and ms >= best_ms:
                best, best_ms = level, ms
        return best


DelayLevels.DEFAULT = DelayLevels.parse(DEFAULT_MESSAGE_DELAY_LEVEL)


def resolve_max_reconsume_times(value: int) -> int:
    """``-1`` means the default of 16 (concurrent consumers); other negatives are errors."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError("max_reconsume_times", value, "must be an int")
    if value == -1:
        return DEFAULT_MAX_RECONSUME_TIMES
    if value < 0:
        raise ConfigError("max_reconsume_times", value, "must be >= 0, or -1 for the default (16)")
    return value
