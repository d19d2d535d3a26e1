"""Times given to the admin commands: ISO-8601 instants, epoch milliseconds and look-back
durations.  Pure (the current time is passed in)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

from adapter.core.control import format_epoch_ms
from adapter.core.delay import UNIT_MS
from adapter.errors import InvalidInputError

__all__ = ["InvalidTimeError", "format_epoch_ms", "format_time", "parse_since", "parse_time"]

_DURATION: Final = re.compile(r"^([0-9]{1,12})(ms|s|m|h|d)$")
_EPOCH_MS: Final = re.compile(r"^[0-9]{1,19}$")
_MAX_EPOCH_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidTimeError(InvalidInputError):
    """A time or duration given to a command cannot be read."""


def parse_time(text: str, field: str = "time") -> int:
    """Epoch milliseconds of an ISO-8601 instant with a UTC offset
    (``2026-11-23T10:00:00Z``, ``2026-11-23T12:00:00.250+02:00``) or of an epoch-ms number.

    A time without an offset is refused: on a reset, guessing the time zone would move a
    group's offsets by hours.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidTimeError(field, text, "expected an ISO-8601 time such as 2026-11-23T10:00Z")
    raw = text.strip()
    if _EPOCH_MS.match(raw):
        return _in_range(field, text, int(raw))
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidTimeError(
            field,
            text,
            "not an ISO-8601 time; expected e.g. 2026-11-23T10:00:00Z or "
            "2026-11-23T12:00:00+02:00 (or epoch milliseconds)",
        ) from None
    if moment.utcoffset() is None:  # a naive time: utcoffset() is None without a tzinfo
        raise InvalidTimeError(
            field, text, "no UTC offset: add 'Z' (UTC) or the zone's offset such as '+02:00'"
        )
    return _in_range(field, text, (moment - _EPOCH) // timedelta(milliseconds=1))


def parse_since(text: str, now_ms: int, field: str = "--since") -> int:
    """The start of a look-back window: a duration before ``now_ms`` (``24h``, ``90m``,
    ``7d``, ``30s``, ``500ms``) or a time :func:`parse_time` reads."""
    if isinstance(text, str):
        match = _DURATION.match(text.strip())
        if match is not None:
            span = int(match.group(1)) * UNIT_MS[match.group(2)]
            return max(0, now_ms - span)
        if text.strip() and not text.strip()[0].isdigit():
            raise InvalidTimeError(
                field, text, "expected a duration such as 24h, 90m, 7d or an ISO-8601 time"
            )
    try:
        return parse_time(text, field)
    except InvalidTimeError as exc:
        raise InvalidTimeError(
            field, text, f"{exc.reason}; or a duration such as 24h, 90m, 7d"
        ) from None


def format_time(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds, or ``-`` when unknown."""
    return "-" if ms is None else format_epoch_ms(ms)


def _in_range(field: str, text: str, ms: int) -> int:
    if not 0 <= ms <= _MAX_EPOCH_MS:
        raise InvalidTimeError(field, text, "out of range (1970 to 9999)")
    return ms
