"""Consume traces: one event per message outcome (RocketMQ's message-trace idea).  Pure.

The consumer emits one :class:`TraceEvent` per message each time its consumption ends
(success, retry, dead letter, or dropped in broadcasting), the ScheduleService one per
forwarded entry.  :mod:`adapter.analytics` encodes them with the Avro schema in
``schemas/consume_trace.avsc``; Spark jobs read them back.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, NamedTuple


class TraceStatus(str, Enum):
    """How one consumption (or forward) of a message ended."""

    SUCCESS = "SUCCESS"
    """The listener acknowledged the message."""

    RETRY = "RETRY"
    """The message failed and was sent back to a delay level."""

    DLQ = "DLQ"
    """The message failed and was sent to the dead-letter topic."""

    DROPPED = "DROPPED"
    """Broadcasting: the message failed and was dropped (no retry)."""

    FORWARDED = "FORWARDED"
    """ScheduleService: a due delay-topic entry was forwarded to its real topic."""


class TraceEvent(NamedTuple):
    """One trace record.  Times are epoch milliseconds; topics are logical names.

    Immutable.  A named tuple rather than a frozen dataclass: the consumer builds one per
    message on its hot path, and a named tuple is built in about half the time.
    """

    event_time_ms: int
    source: str  # "consumer" | "schedule-service"
    group: str
    topic: str
    partition: int
    offset: int
    msg_id: str
    origin_msg_id: str
    status: TraceStatus
    reconsume_times: int
    tags: str | None = None
    keys: str | None = None
    batch_size: int = 1
    batch_index: int = 0
    ack_index: int | None = None
    delay_level: int | None = None
    consume_rt_ms: float | None = None
    born_timestamp_ms: int | None = None
    origin_born_timestamp_ms: int | None = None
    store_timestamp_ms: int | None = None
    consume_timestamp_ms: int | None = None
    lateness_ms: int | None = None
    failure_type: str | None = None
    failure_message: str | None = None
    dlq_reason: str | None = None

    def to_record(self) -> dict[str, Any]:
        out = self._asdict()
        out["status"] = self.status.value
        return out


#: Where the consumer and the service hand their events (``None``: tracing off).
TraceSink = Callable[[TraceEvent], None]
