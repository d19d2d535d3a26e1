"""Consume traces: one event per message outcome (RocketMQ's message-trace idea).  Pure.

The consumer emits one :class:`TraceEvent` per message each time its consumption ends
(success, retry, dead letter, or dropped in broadcasting), the ScheduleService one per
forwarded entry.  :mod:`adapter.io.trace_sink` encodes them with the Avro schema in
``schemas/consume_trace.avsc`` and packs many into one record
(``schemas/consume_trace_batch.avsc``); Spark jobs read both back.

What here keeps tracing off the consumer's hot path:

* :data:`Pending` / :func:`consumer_event`: a sink that can take it (the Kafka sink) is
  handed a plain tuple of what the consumer already holds (the message view, the outcome,
  the clock reading); the 25 fields of the event -- most of them read from the message's
  headers, which an untraced consumer never decodes -- are derived later, on the sink's
  own thread;
* :class:`RunBuilder` / :func:`expand_run`: the successes of consecutive listener batches
  of one partition whose records carry no headers, or only headers a run holds as text
  columns (``UNIQ_KEY``, ``TAGS``, ``KEYS``: what our producer writes), are written as one
  *run* (a ``ConsumeTraceRun`` of ``consume_trace_batch.avsc``): what the batches share
  once, what differs per event (offset, batch index, Kafka timestamp, message id, tags,
  keys) as columns built with C-level operations on whole batches (text, packed int64s),
  so no Python code runs per event; readers expand a run back into the events it stands
  for.  :data:`PendingBatches` hands
  a fetched run's whole batches over at once;
* :func:`plan_packs`: where a run of encoded events is cut into packed records (at most
  ``max_events`` events or ``max_bytes`` bytes each, whichever comes first).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from adapter.constants import PROPERTY_ORIGIN_MESSAGE_ID
from adapter.core.routing import DeadLetter, RetryLater
from adapter.errors import ConfigError, InvalidInputError

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

#: The first element of a :data:`PendingBatches`.
BATCHES: Any = object()

#: Consecutive whole listener batches that all succeeded, handed to a deferring sink as one
#: tuple (one per fetched run the consumer ran inline, whatever the batch size):
#: ``(BATCHES, group, event_time_ms, msgs, batch_size, rt_ms, consume_timestamp_ms)``,
#: where ``msgs`` is a list of ``k * batch_size`` messages, batch ``j`` being
#: ``msgs[j * batch_size : (j + 1) * batch_size]``, all started together.
PendingBatches = tuple[Any, str, int, "list[MessageExt]", int, "float | None", "int | None"]

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


def batches_fields(item: PendingBatches) -> list[tuple[Any, ...]]:
    """The fields of the SUCCESS events of a :data:`PendingBatches` (as :func:`run_fields`
    of each of its batches, in order)."""
    _, group, now_ms, msgs, size, rt_ms, started = item
    out: list[tuple[Any, ...]] = []
    for k in range(0, len(msgs), size):
        out += run_fields((RUN, group, now_ms, msgs[k : k + size], range(size), None, rt_ms,
                           started))  # fmt: skip
    return out


def consumer_event(pending: Pending) -> TraceEvent:
    """The consumer :class:`TraceEvent` of one :data:`Pending` outcome
    (:func:`consumer_fields` as an event)."""
    return TraceEvent._make(consumer_fields(pending))


_LITTLE = sys.byteorder == "little"

#: Kafka timestamp types (librdkafka's): none, create time, log-append time.
TS_NONE = 0
TS_CREATE = 1
TS_LOG_APPEND = 2

#: The fields of a ``ConsumeTraceRun`` record, in the schema's order (what the compiled
#: writer unpacks).
RUN_FIELDS = (
    "event_time_ms",
    "source",
    "group",
    "topic",
    "kafka_topic",
    "partition",
    "status",
    "count",
    "first_offset",
    "offsets",
    "batch_size",
    "batch_indices",
    "ack_index",
    "consume_rt_ms",
    "consume_timestamp_ms",
    "timestamp_type",
    "timestamps",
    "msg_ids",
    "tags",
    "keys",
)

#: Between the values of a run's text columns (``msg_ids``, ``tags``, ``keys``): U+001E,
#: the ASCII record separator (a run is not made of records whose values contain it).
SEPARATOR = "\x1e"

#: Packers a :class:`RunBuilder` keeps (one per batch length seen).
_MAX_PACKERS = 64

#: The run key's last element when a run's records carry none of the headers a run can
#: hold as columns (which of ``msg_ids``, ``tags``, ``keys`` it has).
NO_TEXT: tuple[bool, bool, bool] = (False, False, False)


class RunBuilder:
    """Joins the successes of consecutive listener batches into runs (one
    ``ConsumeTraceRun`` record each): a batch continues the open run when it shares every
    per-batch value with it (group, event time, topic, partition, batch size, ack index,
    listener time, consume start, timestamp type), both are whole batches with
    consecutive offsets, and the run stays within ``max_events``; otherwise the open run
    is closed (returned as its record's fields) and the batch opens the next one.

    One instance per sink thread; no clock, no I/O.  The per-event columns stay parts
    (a batch's timestamps packed in one ``struct`` call, its text values) until the run
    closes, then each is one ``join`` (C code, no Python frame per event)."""

    __slots__ = (
        "_count", "_first", "_full", "_indices", "_key", "_max", "_offsets", "_packers",
        "_text", "_ts",
    )  # fmt: skip

    def __init__(self, max_events: int) -> None:
        if max_events < 1:
            raise ConfigError("max_events", max_events, "must be >= 1")
        self._max = max_events
        self._key: tuple[Any, ...] | None = None
        self._first = 0
        self._count = 0
        self._full = False  # whole batches, consecutive offsets: the run may grow
        self._offsets: Sequence[int] | None = None
        self._indices: Sequence[int] | None = None
        #: the timestamps column, packed per batch (big-endian int64s, joined on close)
        self._ts: list[bytes] = []
        #: ``struct.Struct`` packers by value count: one C call packs a batch's timestamps
        #: (``array.extend`` converts a tuple item by item through the generic iterable path)
        self._packers: dict[int, Callable[..., bytes]] = {}
        #: the text columns' parts (one list per column, one part per batch), or ``None``
        self._text: tuple[list[str], ...] | None = None

    def add(  # noqa: PLR0917 - one call per listener batch, positional is cheapest
        self,
        key: tuple[Any, ...],
        first_offset: int,
        count: int,
        offsets: Sequence[int] | None,
        indices: Sequence[int] | None,
        timestamps: Sequence[int],
        text: tuple[str | None, str | None, str | None] | None = None,
    ) -> tuple[Any, ...] | None:
        """One batch's successes: ``key`` = ``(group, event_time_ms, topic, kafka_topic,
        partition, batch_size, ack_index, consume_rt_ms, consume_timestamp_ms,
        timestamp_type, has_text)``; ``offsets`` ``None`` when they are ``first_offset ..
        first_offset + count - 1``, ``indices`` ``None`` when every message of the batch
        succeeded (in order), ``timestamps`` the records' Kafka timestamps (ignored for
        timestamp type 0); ``text`` the batch's ``msg_ids``, ``tags`` and ``keys`` columns
        (each its values joined with :data:`SEPARATOR`, ``None`` when the records lack that
        header), ``None`` for records without any (``has_text``, the key's last element,
        says which are set: :data:`NO_TEXT` for none).  Returns the run this batch closed,
        if any."""
        full = offsets is None and indices is None
        if (
            full
            and self._full
            and key == self._key
            and first_offset == self._first + self._count
            and self._count + count <= self._max
        ):
            self._count += count
            self._ts.append(self._pack(timestamps))
            parts = self._text
            if parts is not None and text is not None:
                for part, value in zip(parts, text, strict=True):
                    if value is not None:
                        part.append(value)
            return None
        closed = self.close()
        self._key = key
        self._first = first_offset
        self._count = count
        self._full = full
        self._offsets = offsets
        self._indices = indices
        self._ts = [self._pack(timestamps)]
        self._text = None if text is None else tuple([] if v is None else [v] for v in text)
        return closed

    @property
    def count(self) -> int:
        """Events in the open run (0: none open)."""
        return 0 if self._key is None else self._count

    def close(self) -> tuple[Any, ...] | None:
        """The open run's record fields (:data:`RUN_FIELDS` order), or ``None``; no run is
        open afterwards."""
        key = self._key
        if key is None:
            return None
        self._key = None
        group, now_ms, topic, kafka_topic, partition, size, ack, rt_ms, started, ts_type, has = key
        offsets, indices, text = self._offsets, self._indices, self._text
        if text is None:
            msg_ids = tags = keys = None
        else:
            msg_ids, tags, keys = (
                SEPARATOR.join(part) if on else None for part, on in zip(text, has, strict=True)
            )
        return (
            now_ms, "consumer", group, topic, kafka_topic, partition, TraceStatus.SUCCESS.value,
            self._count, self._first, "" if offsets is None else ",".join(map(str, offsets)),
            size, "" if indices is None else ",".join(map(str, indices)), ack, rt_ms, started,
            ts_type, b"".join(self._ts) if ts_type != TS_NONE else b"", msg_ids, tags, keys,
        )  # fmt: skip

    def _pack(self, values: Sequence[int]) -> bytes:
        """``values`` as big-endian int64s, 8 bytes each (one C call)."""
        n = len(values)
        pack = self._packers.get(n)
        if pack is None:
            if len(self._packers) >= _MAX_PACKERS:
                self._packers.clear()
            pack = self._packers[n] = struct.Struct(f">{n}q").pack
        return pack(*values)


def _from_int64s(data: bytes) -> array[int]:
    values = array("q")
    values.frombytes(data)
    if _LITTLE:
        values.byteswap()
    return values


def _column(text: str) -> list[int]:
    return [int(x) for x in text.split(",")] if text else []


def _texts(text: str | None, count: int) -> list[str] | list[None]:
    """A text column's values (``None`` each when the column is absent)."""
    if text is None:
        return [None] * count
    values = text.split(SEPARATOR)
    if len(values) != count:
        raise InvalidInputError("run", len(values), f"values in a text column of {count} events")
    return values


def expand_run(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``ConsumeTrace`` records (field name -> value, status as its symbol) a decoded
    ``ConsumeTraceRun`` stands for, in order: what the events would have been, written one
    by one (the Spark job's ``decode_traces`` does the same in SQL).  A run without text
    columns (written before they existed, or by records without those headers) has the
    ids ``<kafka_topic>:<partition>:<offset>`` and no tags or keys."""
    count = run["count"]
    first = run["first_offset"]
    offsets = _column(run["offsets"]) or range(first, first + count)
    size = run["batch_size"]
    indices = _column(run["batch_indices"]) or [i % size for i in range(count)]
    ts_type = run["timestamp_type"]
    stamps: list[int | None] = [*_from_int64s(run["timestamps"])] or [None] * count
    kafka_topic, partition = run["kafka_topic"], run["partition"]
    # written by the previous schema version, or read with it: no text columns
    ids = _texts(run.get("msg_ids"), count)
    tags = _texts(run.get("tags"), count)
    keys = _texts(run.get("keys"), count)
    out = []
    for offset, index, stamp, uniq, tag, key in zip(
        offsets, indices, stamps, ids, tags, keys, strict=True
    ):
        msg_id = uniq or f"{kafka_topic}:{partition}:{offset}"
        born = stamp if ts_type == TS_CREATE else None
        out.append(
            {
                "event_time_ms": run["event_time_ms"],
                "source": run["source"],
                "group": run["group"],
                "topic": run["topic"],
                "partition": partition,
                "offset": offset,
                "msg_id": msg_id,
                "origin_msg_id": msg_id,
                "status": run["status"],
                "reconsume_times": 0,
                "tags": tag,
                "keys": key,
                "batch_size": size,
                "batch_index": index,
                "ack_index": run["ack_index"],
                "delay_level": None,
                "consume_rt_ms": run["consume_rt_ms"],
                "born_timestamp_ms": born,
                "origin_born_timestamp_ms": born,
                "store_timestamp_ms": stamp if ts_type in (TS_CREATE, TS_LOG_APPEND) else None,
                "consume_timestamp_ms": run["consume_timestamp_ms"],
                "lateness_ms": None,
                "failure_type": None,
                "failure_message": None,
                "dlq_reason": None,
            }
        )
    return out


def plan_packs(
    sizes: Sequence[int], max_events: int, max_bytes: int, counts: Sequence[int] | None = None
) -> list[int]:
    """Where to cut a run of encoded items into packed records: the end index of each
    pack, in order (the last is ``len(sizes)``).  An item is one event, or ``counts[i]``
    events (a run).

    A pack holds at most ``max_events`` events and at most ``max_bytes`` bytes of them,
    except that an item larger than either cap on its own still makes a pack of one (the
    producer, not the packer, decides whether a record is too large).
    """
    if max_events < 1 or max_bytes < 1:
        raise ConfigError("max_events/max_bytes", (max_events, max_bytes), "must be >= 1")
    ends: list[int] = []
    count = size = 0
    for i, n in enumerate(sizes):
        c = 1 if counts is None else counts[i]
        if count and (count + c > max_events or size + n > max_bytes):
            ends.append(i)
            count = size = 0
        count += c
        size += n
    if count:
        ends.append(len(sizes))
    return ends
