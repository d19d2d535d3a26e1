"""What happens to a consumed batch and to each failed message.  Pure.

This is RocketMQ's ``processConsumeResult`` (client) plus ``consumerSendMsgBack`` (broker):
``ack_index`` splits a batch into done and failed; each failed message either retries at a
delay level or goes to the dead-letter topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from adapter.core.delay import DelayLevels, resolve_max_reconsume_times
from adapter.errors import ListenerResultError


class ConsumeConcurrentlyStatus(str, Enum):
    """What a concurrent listener says about the batch it was handed."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    """Messages ``0..ack_index`` are done; the rest of the batch failed."""

    RECONSUME_LATER = "RECONSUME_LATER"
    """The whole batch failed: every message is sent back for a later retry."""


class MessageModel(str, Enum):
    """How a consumer group shares a topic."""

    CLUSTERING = "CLUSTERING"
    """Each message goes to one member; failures retry through ``%RETRY%<group>``."""

    BROADCASTING = "BROADCASTING"
    """Every member gets every message; failures are dropped with a warning (no retry)."""


class DeadLetterReason(str, Enum):
    """Why a message went to ``%DLQ%<group>`` (header ``RMQ_DLQ_REASON``)."""

    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    """``reconsume_times`` reached the maximum (group or per-message ``MAX_RECONSUME_TIMES``)."""

    LISTENER_REQUESTED = "LISTENER_REQUESTED"
    """The listener set ``delay_level_when_next_consume`` < 0: straight to the DLQ."""

    SEND_BACK_REFUSED = "SEND_BACK_REFUSED"
    """The broker refused the retry copy for good (e.g. too large once retry headers were
    added); the message goes to the DLQ instead of retrying for ever."""

    INVALID_SCHEDULE_ENTRY = "INVALID_SCHEDULE_ENTRY"
    """A delay-topic entry the ScheduleService cannot schedule or forward (no
    ``REAL_TOPIC``, a bad due time, a destination that refuses it for good)."""

    MAX_DELIVERY_ATTEMPTS = "MAX_DELIVERY_ATTEMPTS"
    """A SimpleConsumer message was not acknowledged within ``max_delivery_attempts``
    deliveries."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """Indices of a batch that are done and that failed."""

    succeeded: range
    failed: range


def split_batch(status: object, ack_index: int | None, size: int) -> BatchOutcome:
    """Split a batch of ``size`` by the listener's ``status`` and ``ack_index``.

    ``ack_index`` ``None`` means the last message; values past the end are clamped to it;
    ``-1`` (or less) marks none done.  ``RECONSUME_LATER`` fails the whole batch.  Anything
    that is not a status raises :class:`ListenerResultError` (the caller treats it as
    ``RECONSUME_LATER`` after logging it).
    """
    if size < 0:
        raise ListenerResultError("batch size", size, "must be >= 0")
    if not isinstance(status, ConsumeConcurrentlyStatus):
        raise ListenerResultError(
            "listener result",
            status,
            "expected ConsumeConcurrentlyStatus, counted as RECONSUME_LATER",
        )
    if status is ConsumeConcurrentlyStatus.RECONSUME_LATER:
        return BatchOutcome(range(0), range(size))
    last = size - 1 if ack_index is None else max(-1, min(ack_index, size - 1))
    return BatchOutcome(range(last + 1), range(last + 1, size))


def ack_index_clamped(ack_index: object, size: int) -> str | None:
    """What to warn about when ``ack_index`` lies outside ``-1 .. size - 1`` (it is clamped
    into that range, as RocketMQ clamps an index past the end); ``None`` when it is inside,
    unset, or not an int (that case is an error of its own)."""
    if not isinstance(ack_index, int) or isinstance(ack_index, bool) or -1 <= ack_index < size:
        return None
    clamped = size - 1 if ack_index >= size else -1
    return (
        f"context.ack_index={ack_index} is outside -1..{size - 1} for a batch of {size}; "
        f"clamped to {clamped}"
    )


@dataclass(frozen=True, slots=True)
class RetryLater:
    """Send the message to the delay topic of ``level``; it returns after ``delay_ms``."""

    level: int
    delay_ms: int
    reconsume_times: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Send the message to the group's DLQ, with ``reconsume_times`` in ``RECONSUME_TIME``."""

    reason: DeadLetterReason
    reconsume_times: int
    #: sent by the orderly path, as RocketMQ 4.9.7's ``ConsumeMessageOrderlyService``
    #: sends it back: its last hop is the DLQ itself (``REAL_TOPIC=%DLQ%<group>``), and
    #: ``reconsume_times`` is that of the last delivery (the concurrent path's is one more)
    orderly: bool = False
    #: written into the dead letter's ``MAX_RECONSUME_TIMES`` (the orderly path: the
    #: consumer's maximum); ``None``: the message's own header, if any, as it is
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class RetryNow:
    """Send the message straight to the group's retry topic: the wait already happened
    (a SimpleConsumer message whose invisible duration ran out)."""

    reconsume_times: int


Destination = RetryLater | DeadLetter | RetryNow


def route_failed(
    *,
    reconsume_times: int,
    max_reconsume_times: int,
    delay_level_when_next_consume: int,
    levels: DelayLevels,
    message_max_reconsume_times: int | None = None,
) -> RetryLater | DeadLetter:
    """Where a failed message goes (broker ``consumerSendMsgBack``).

    ``message_max_reconsume_times`` (header ``MAX_RECONSUME_TIMES``) overrides the group's
    maximum; ``-1`` there also means 16.
    """
    limit = resolve_max_reconsume_times(max_reconsume_times)
    if message_max_reconsume_times is not None:
        limit = resolve_max_reconsume_times(message_max_reconsume_times)
    next_times = reconsume_times + 1
    if delay_level_when_next_consume < 0:
        return DeadLetter(DeadLetterReason.LISTENER_REQUESTED, next_times)
    if reconsume_times >= limit:
        return DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, next_times)
    if delay_level_when_next_consume == 0:
        level = levels.retry_level(reconsume_times)
    else:
        level = levels.clamp(delay_level_when_next_consume)
    return RetryLater(level, levels.delay_ms(level), next_times)
