"""Consume traces: one event per message outcome (RocketMQ's message-trace idea).  Pure.

The consumer emits one :class:`TraceEvent` per message each time its consumption ends
(success, retry, dead letter, or dropped in broadcasting), the ScheduleService one per
forwarded entry.  :mod:`adapter.io.trace_sink` encodes them with the Avro schema in
``schemas/consume_trace.avsc`` and packs many into one record
(``schemas/consume_trace_batch.avsc``); Spark jobs read both back.

Two things here keep tracing off the consumer's hot path:

* :data:`Pending` / :func:`consumer_event`: a sink that can take it (the Kafka sink) is
  handed a plain tuple of what the consumer already holds (the message view, the outcome,
  the clock reading); the 25 fields of the event -- most of them read from the message's
  headers, which an untraced consumer never decodes -- are derived later, on the sink's
  own thread;
* :func:`plan_packs`: where a run of encoded events is cut into packed records (at most
  ``max_events`` events or ``max_bytes`` bytes each, whichever comes first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from adapter.constants import PROPERTY_ORIGIN_MESSAGE_ID
from adapter.core.routing import DeadLetter, RetryLater
from adapter.errors import ConfigError

if TYPE_CHECKING:
    from adapter.core.codec import Failure
    from adapter.core.message import MessageExt


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

#: What a consumer hands a deferring sink instead of a :class:`TraceEvent` (a plain tuple:
#: building it costs one allocation on the consume path): ``(group, event_time_ms, msg,
#: status, info, failure, dest, consume_timestamp_ms)``.  ``info`` is the engine's
#: ``TraceInfo`` (``batch_size, batch_index, ack_index, rt_ms``) or ``None`` for a batch
#: of one; ``consume_timestamp_ms`` is read when the outcome happens, because the stamp
#: of a message may be shared with messages handed to the listener later.
Pending = tuple[str, int, "MessageExt", TraceStatus, Any, "Failure | None", Any, "int | None"]

#: The first element of a :data:`PendingRun` (a :data:`Pending` starts with the group).
RUN: Any = object()

#: The successes of one listener batch, handed to a deferring sink as one tuple (one per
#: batch, not per message: the consume path's cost of tracing a batch does not grow with
#: its size): ``(RUN, group, event_time_ms, batch, indices, ack_index, rt_ms,
#: consume_timestamp_ms)``, where ``indices`` are the positions in ``batch`` (a list the
#: listener never sees) of the messages that succeeded.
PendingRun = tuple[
    Any, str, int, "list[MessageExt]", Sequence[int], "int | None", "float | None", "int | None"
]

_NO_INFO: tuple[int, int, int | None, float | None] = (1, 0, None, None)


def consumer_fields(pending: Pending) -> tuple[Any, ...]:
    """The fields of the consumer :class:`TraceEvent` of one :data:`Pending` outcome, as a
    plain tuple in the event's field order (what the compiled Avro writer unpacks; building
    the named tuple would cost as much again).

    Reads the message's attributes (decoding its headers if nothing did yet), so it runs
    where its cost does not slow consuming: on a deferring sink's own thread.
    """
    group, now_ms, msg, status, info, failure, dest, started = pending
    batch_size, batch_index, ack_index, rt_ms = info or _NO_INFO
    hdr = msg.decoded()  # the headers, decoded once: id, tags, keys, properties, retries
    born = msg.born_timestamp
    return (
        now_ms,
        "consumer",
        group,
        msg.topic,
        msg.queue_id,
        msg.queue_offset,
        hdr.msg_id,
        hdr.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or hdr.msg_id,  # origin_message_id
        status,
        hdr.reconsume_times,
        hdr.tags,
        hdr.keys,
        batch_size,
        batch_index,
        ack_index,
        None if dest is None else (dest.level if isinstance(dest, RetryLater) else None),
        rt_ms,
        born,
        born,  # origin_born_timestamp: the born timestamp is already the first delivery's
        msg.store_timestamp,
        started,
        None,  # lateness_ms: the ScheduleService's
        None if failure is None else failure.type,
        None if failure is None else failure.truncated(),
        None if dest is None else (dest.reason.value if isinstance(dest, DeadLetter) else None),
    )


def run_fields(run: PendingRun) -> list[tuple[Any, ...]]:
    """The fields of the SUCCESS events of one :data:`PendingRun` (as
    :func:`consumer_fields`, one tuple per traced message, in batch order)."""
    _, group, now_ms, batch, indices, ack_index, rt_ms, started = run
    size = len(batch)
    success = TraceStatus.SUCCESS
    out = []
    for i in indices:
        msg = batch[i]
        hdr = msg.decoded()
        born = msg.born_timestamp
        out.append(
            (
                now_ms, "consumer", group, msg.topic, msg.queue_id, msg.queue_offset,
                hdr.msg_id, hdr.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or hdr.msg_id,
                success, hdr.reconsume_times, hdr.tags, hdr.keys, size, i, ack_index, None,
                rt_ms, born, born, msg.store_timestamp, started, None, None, None, None,
            )
        )  # fmt: skip
    return out


def consumer_event(pending: Pending) -> TraceEvent:
    """The consumer :class:`TraceEvent` of one :data:`Pending` outcome
    (:func:`consumer_fields` as an event)."""
    return TraceEvent._make(consumer_fields(pending))


def plan_packs(sizes: Sequence[int], max_events: int, max_bytes: int) -> list[int]:
    """Where to cut a run of encoded events into packed records: the end index of each
    pack, in order (the last is ``len(sizes)``).

    A pack holds at most ``max_events`` events and at most ``max_bytes`` bytes of them,
    except that an event larger than ``max_bytes`` on its own still makes a pack of one (the
    producer, not the packer, decides whether a record is too large).
    """
    if max_events < 1 or max_bytes < 1:
        raise ConfigError("max_events/max_bytes", (max_events, max_bytes), "must be >= 1")
    ends: list[int] = []
    count = size = 0
    for i, n in enumerate(sizes):
        if count and (count >= max_events or size + n > max_bytes):
            ends.append(i)
            count = size = 0
        count += 1
        size += n
    if count:
        ends.append(len(sizes))
    return ends
