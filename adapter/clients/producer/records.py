"""Building the Kafka record of a :class:`~adapter.core.message.Message`: the checks of
its fields, its headers (``UNIQ_KEY`` and the rest), and, for a delayed message, where it
is parked.  Pure: the Kafka topic, the message id and the time come in as values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from adapter.constants import PROPERTY_UNIQ_KEY
from adapter.core import naming
from adapter.core.codec import encode_message_headers, schedule_headers
from adapter.core.delay import DelayLevels, format_duration_ms
from adapter.core.message import Message
from adapter.core.schedule import Placement, place_delay_level, place_deliver_time
from adapter.errors import InvalidDelayLevelError, InvalidInputError
from adapter.io.config import check_int

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Record:
    """What goes to Kafka for one message."""

    topic: str  # Kafka topic
    logical_topic: str
    value: bytes
    key: bytes | str | None
    headers: Headers
    partition: int | None
    msg_id: str


def check_message(msg: object) -> None:
    """Raise the adapter's input error for a message that cannot be sent (before any
    broker call)."""
    if not isinstance(msg, Message):
        raise InvalidInputError("msg", msg, "expected adapter.Message")
    if not isinstance(msg.body, bytes | bytearray):
        raise InvalidInputError("body", msg.body, "must be bytes")
    level = msg.delay_time_level
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidDelayLevelError("delay_time_level", level, "must be an int")
    if level < 0:
        raise InvalidDelayLevelError("delay_time_level", level, "must be >= 0 (0 = no delay)")
    if msg.deliver_time_ms is not None:
        if level:
            raise InvalidInputError(
                "deliver_time_ms",
                msg.deliver_time_ms,
                "cannot be combined with delay_time_level",
            )
        check_int("deliver_time_ms", msg.deliver_time_ms, minimum=0)


_YEAR_MS = 365 * 86_400_000


def check_deliver_time(msg: Message, now_ms: int) -> None:
    """Refuse a ``deliver_time_ms`` given in seconds: more than a year in the past as
    milliseconds, yet within ten years of now as seconds."""
    deliver = msg.deliver_time_ms
    if (
        deliver is not None
        and deliver < now_ms - _YEAR_MS
        and abs(deliver * 1000 - now_ms) < 10 * _YEAR_MS
    ):
        raise InvalidInputError(
            "deliver_time_ms",
            deliver,
            "looks like seconds: it is milliseconds since the epoch (time.time() * 1000)",
        )


def delay_warning(msg: Message, now_ms: int, levels: DelayLevels) -> tuple[str, str] | None:
    """``(kind, text)`` of what a checked message's delay does that its sender may not expect:
    a level above the highest is clamped to it (as RocketMQ does), a delivery time in the past
    is delivered at once.  ``None`` when neither."""
    level = msg.delay_time_level
    if level > levels.max_level:
        top = levels.max_level
        return (
            "level",
            f"delay_time_level={level} is above the highest level {top} "
            f"({format_duration_ms(levels.delay_ms(top))}); clamped to {top}",
        )
    if msg.deliver_time_ms is not None and msg.deliver_time_ms <= now_ms:
        return (
            "past",
            f"deliver_time_ms={msg.deliver_time_ms} is {now_ms - msg.deliver_time_ms} ms in the "
            "past; delivered at once",
        )
    return None


def is_scheduled(msg: Message) -> bool:
    """Whether ``msg`` asks for a delay (a level or a delivery time): then placing it needs
    the time."""
    return msg.deliver_time_ms is not None or msg.delay_time_level > 0


def message_headers(msg: Message, msg_id: str) -> Headers:
    """The headers of a fresh message (what ``encode_message_headers`` makes, without its
    work when there is only ``UNIQ_KEY``)."""
    if not msg.properties and msg.tags is None and msg.keys is None:
        return [(PROPERTY_UNIQ_KEY, msg_id.encode())]
    return encode_message_headers(msg, msg_id)


def placement(msg: Message, now_ms: int, levels: DelayLevels) -> Placement | None:
    """Where a checked message is parked (``None``: sent to its own topic now)."""
    if msg.deliver_time_ms is not None:
        return place_deliver_time(msg.deliver_time_ms, now_ms, levels)
    if msg.delay_time_level > 0:
        return place_delay_level(msg.delay_time_level, now_ms, levels)
    return None


def plain_record(msg: Message, kafka_topic: str, msg_id: str, headers: Headers) -> Record:
    """The record of a message sent to its own topic."""
    return Record(
        kafka_topic, msg.topic, bytes(msg.body), msg.sharding_key, headers, msg.partition, msg_id
    )


def scheduled_record(
    msg: Message,
    msg_id: str,
    headers: Headers,
    place: Placement,
    *,
    now_ms: int,
    levels: DelayLevels,
    namespace: str | None,
    kafka_topic_of: Callable[[str], str],
) -> Record:
    """The record of a message parked on its delay-level topic until ``place.due_ms``
    (``kafka_topic_of``: the Kafka topic of a logical one)."""
    parked = schedule_headers(
        dict(headers),
        real_topic=msg.topic,
        real_queue_id=msg.partition,
        level=place.level,
        due_ms=place.due_ms,
        deliver_time_ms=msg.deliver_time_ms,
        born_ms=now_ms,
    )
    logical = naming.schedule_topic(place.level, levels, namespace)
    return Record(
        kafka_topic_of(logical), logical, bytes(msg.body), msg.sharding_key, parked, None, msg_id
    )
