"""Flow-control limits (RocketMQ's ``pullThreshold*`` and max span) and where a group starts
reading (``ConsumeFromWhere``).  Pure.

The in-flight offsets themselves are tracked by the engines (:mod:`adapter.core.engine.tracking`).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from adapter.core.types import TP
from adapter.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """When a partition stops fetching (RocketMQ ``pullThreshold*`` and max span)."""

    max_count: int = 1000
    max_bytes: int = 100 * 1024 * 1024
    max_span: int = 2000

    def reason(self, count: int, nbytes: int, span: int) -> str | None:
        """Why a partition with ``count`` messages / ``nbytes`` bytes in flight over an
        offset span of ``span`` must pause, or ``None`` when it may fetch."""
        if count > self.max_count:
            return f"{count} messages in flight > {self.max_count}"
        if nbytes > self.max_bytes:
            return f"{nbytes} bytes in flight > {self.max_bytes}"
        if span > self.max_span:
            return f"in-flight offset span {span} > {self.max_span}"
        return None

    def below_half(self, count: int, nbytes: int, span: int) -> bool:
        """Whether a paused partition is down to half of every limit (where it resumes)."""
        return self.reason(2 * count, 2 * nbytes, 2 * span) is None


class ConsumeFromWhere(str, Enum):
    """Where a consumer group starts on a partition it has no committed offset for."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    """At the end: only messages sent from now on (RocketMQ's default).  The position is
    committed at once, so a restart resumes there instead of skipping what came meanwhile."""

    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    """At the first offset still retained."""

    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    """At the first message stored at or after ``consume_timestamp`` (default: 30 minutes
    before the consumer started), or at the end when there is none."""


class StartAt(str, Enum):
    BEGINNING = "BEGINNING"
    END = "END"
    TIMESTAMP = "TIMESTAMP"


def first_start(where: ConsumeFromWhere, *, retry_topic: bool) -> StartAt:
    """Where to start on a partition without a committed offset.  A group's retry topic is
    always read from its beginning: every record there is a retry owed to this group."""
    if retry_topic or where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return StartAt.BEGINNING
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return StartAt.TIMESTAMP
    return StartAt.END


def consume_from_where_of(
    value: ConsumeFromWhere | str | None, auto_offset_reset: object
) -> ConsumeFromWhere:
    """The start rule: ``value`` when given, else what a Kafka ``auto.offset.reset`` in the
    config asks for (``earliest``/``smallest``/``beginning`` → first offset), else the last
    offset.  Out-of-range offsets are a different matter: they always restart at the
    earliest retained offset (RocketMQ corrects an illegal offset to the minimum)."""
    if value is not None:
        try:
            return ConsumeFromWhere(value)
        except ValueError:
            raise ConfigError(
                "consume_from_where",
                value,
                f"expected one of {[w.value for w in ConsumeFromWhere]}",
            ) from None
    if str(auto_offset_reset).lower() in ("earliest", "smallest", "beginning"):
        return ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


#: RocketMQ's default for a new consumer's CONSUME_FROM_TIMESTAMP: half an hour back.
DEFAULT_TIMESTAMP_BACK_MS = 30 * 60 * 1000


def timestamp_ms(value: int | str | datetime) -> int:
    """``consume_timestamp`` in epoch ms: an int (epoch ms), a ``datetime`` (naive means
    UTC) or RocketMQ's ``yyyyMMddHHmmss`` text (UTC)."""
    if isinstance(value, bool):
        raise ConfigError("consume_timestamp", value, "expected epoch ms, a datetime or text")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError("consume_timestamp", value, "epoch milliseconds must be >= 0")
        return value
    if isinstance(value, datetime):
        return _datetime_ms(value)
    if isinstance(value, str):
        try:
            return _datetime_ms(datetime.strptime(value, "%Y%m%d%H%M%S"))  # noqa: DTZ007
        except ValueError:
            pass
    raise ConfigError(
        "consume_timestamp", value, "expected epoch ms, a datetime or 'yyyyMMddHHmmss' (UTC)"
    )


def _datetime_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def start_rule(
    value: ConsumeFromWhere | str | None,
    auto_offset_reset: object,
    consume_timestamp: int | str | datetime | None,
    now_ms: int,
) -> tuple[ConsumeFromWhere, int]:
    """A new member's start rule and the timestamp ``CONSUME_FROM_TIMESTAMP`` starts at (the
    one given, as :func:`timestamp_ms` reads it, else half an hour before ``now_ms``, as
    RocketMQ's consumer): what the push consumer and both SimpleConsumer backends start
    from."""
    where = consume_from_where_of(value, auto_offset_reset)
    if consume_timestamp is None:
        return where, now_ms - DEFAULT_TIMESTAMP_BACK_MS
    return where, timestamp_ms(consume_timestamp)


#: ``end_at_start``'s answer for a partition that did not exist when the member started.
FROM_BEGINNING = -2  # librdkafka's OFFSET_BEGINNING


def end_at_start(ends: Mapping[TP, int], unknown: Set[str], tp: TP) -> int | None:
    """Where a partition starts "at its end" for a member that noted ``ends`` (partition ->
    end offset) of its subscribed topics when it started: that end; the beginning
    (:data:`FROM_BEGINNING`) for a partition that did not exist then, so nothing sent after
    the start is skipped; ``None`` (look the end up now) for a topic in ``unknown``, whose
    ends could not be read.  Pure."""
    if tp[0] in unknown:
        return None
    return ends.get(tp, FROM_BEGINNING)
