"""The trace sink's columns: the successes of listener batches read off their records at a
hand-over (:func:`batch_columns`), with C-level operations over the whole batch (offsets,
Kafka timestamps, the ``UNIQ_KEY``/``TAGS``/``KEYS`` headers: :func:`text_columns`), so
:class:`~adapter.io.trace_sink.KafkaTraceSink` queues columns that hold no message and
joins them into runs (:func:`add_batch_run`).  ``None`` where the records' events cannot
be a run (the sink then derives them one by one)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, Final

from confluent_kafka import Message

from adapter.constants import (
    HEADER_ORIGIN_BORN_MS,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core.message import fetched_records, plain_records
from adapter.core.trace import BATCHES, NO_TEXT, SEPARATOR, PendingBatches, PendingRun, RunBuilder

#: confluent-kafka's record accessors, unbound: ``map`` calls them from C (no Python frame
#: per record); on anything that is not a confluent-kafka record they raise TypeError.
_HEADERS: Final[Any] = Message.headers
_TIMESTAMP: Final[Any] = Message.timestamp
_OFFSET: Final[Any] = Message.offset
_PARTITION: Final[Any] = Message.partition
_TOPIC: Final[Any] = Message.topic
_GET: Final[Any] = dict.get
#: Headers whose values a run holds as its text columns (``msg_ids``, ``tags``, ``keys``).
_TEXT_HEADERS: Final = (PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS)
#: Headers that make an event say more than a run can (an origin id, a reconsume count,
#: an origin born time, a retry record's original topic): records with one (not empty)
#: are traced event by event.
_OFF_RUN_HEADERS: Final = (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    HEADER_ORIGIN_BORN_MS,
    PROPERTY_RETRY_TOPIC,
)
_OFF_RUN: Final = frozenset(_OFF_RUN_HEADERS)
_NAME: Final = itemgetter(0)
_VALUE: Final = itemgetter(1)
_SEP: Final = SEPARATOR.encode()


#: The first element of a :data:`Columns` item.
COLUMNS: Final[Any] = object()


#: The columns of the successes of listener batches, read off their records
#: (:func:`batch_columns`): ``(COLUMNS, key, first_offset, count, offsets, indices,
#: timestamps, text)``, the arguments of :meth:`~adapter.core.trace.RunBuilder.add`.
#: Holds no message: queued, it keeps nothing of the batch alive.
Columns = tuple[Any, tuple[Any, ...], int, int, "list[int] | None", "list[int] | None", Any, Any]


#: The columns of no event.
_NO_COLUMNS: Final[Columns] = (COLUMNS, (), 0, 0, None, None, (), None)


def add_batch_run(
    builder: RunBuilder, item: PendingRun | PendingBatches | Columns
) -> tuple[Any, ...] | bool | None:
    """Add the successes of listener batches to ``builder`` as columns (``item`` as
    :func:`batch_columns` takes it, or what it gave): the run this closed (``None``: none).
    ``False``: they cannot be a run (the caller derives the events one by one)."""
    columns: Any = item if item[0] is COLUMNS else batch_columns(item)  # type: ignore[arg-type]
    if columns is None:
        return False
    _, key, first, n, offsets, indices, stamps, text = columns
    if not n:
        return None
    return builder.add(key, first, n, offsets, indices, stamps, text)


def batch_columns(item: PendingRun | PendingBatches) -> Columns | None:
    """The columns of the successes of one listener batch (a
    :data:`~adapter.core.trace.PendingRun`), or of consecutive whole batches (a
    :data:`~adapter.core.trace.PendingBatches`), when every event follows from its record
    alone (no local redelivery: :func:`~adapter.core.message.plain_records` for a batch;
    whole batches are a fetched run's messages as fetched,
    :func:`~adapter.core.message.fetched_records`; one timestamp type, one partition,
    and no headers or only headers a run holds as columns: :func:`text_columns`);
    ``None`` when they cannot be a run.

    Every per-record step is C code over the whole batch (``map``, ``any``, ``zip``, a
    comprehension of slot reads), so it costs far less per event than deriving and
    encoding each event."""
    if item[0] is BATCHES:  # a fetched run's views as fetched: no local redelivery
        _, group, now_ms, msgs, size, rt_ms, started = item  # type: ignore[misc]
        if not msgs:
            return _NO_COLUMNS
        records = fetched_records(msgs)
        return _columns(group, now_ms, msgs, records, size, None, None, rt_ms, started)
    _, group, now_ms, batch, indices, ack_index, rt_ms, started = item  # type: ignore[misc]
    size = len(batch)
    ok: list[int] | None = None
    msgs = batch
    if len(indices) != size:  # ``indices`` are distinct positions in order: not all
        ok = list(indices)
        msgs = [batch[i] for i in ok]
    if not msgs:
        return _NO_COLUMNS
    plain = plain_records(msgs)
    if plain is None:
        return None
    return _columns(group, now_ms, msgs, plain, size, ok, ack_index, rt_ms, started)


def _columns(  # noqa: PLR0917 - one call per hand-over, positional is cheapest
    group: str,
    now_ms: int,
    msgs: list[Any],
    records: list[Any],
    size: int,
    indices: list[int] | None,
    ack_index: int | None,
    rt_ms: float | None,
    started: int | None,
) -> Columns | None:
    n = len(records)
    head = records[0]
    text: tuple[str | None, str | None, str | None] | None = None
    has = NO_TEXT
    try:
        if n == 1:  # a batch of one: no iterators set up for one record
            if _HEADERS(head):
                text = text_columns(records)
                if text is None:
                    return None
            kind, stamp = _TIMESTAMP(head)
            stamps: Any = (stamp,)
        else:
            if any(map(_HEADERS, records)):
                text = text_columns(records)
                if text is None:
                    return None
            kinds, stamps = zip(*map(_TIMESTAMP, records), strict=True)
            kind = kinds[0]
            if kinds.count(kind) != n:
                return None
    except TypeError:  # not confluent-kafka records (messages built from fields)
        return None
    if text is not None:
        has = (text[0] is not None, text[1] is not None, text[2] is not None)
    tail = records[-1]
    first, partition, kafka_topic = head.offset(), head.partition(), head.topic()
    offsets: list[int] | None = None
    if not (tail.offset() - first == n - 1 and tail.partition() == partition):
        if len(set(map(_PARTITION, records))) != 1 or len(set(map(_TOPIC, records))) != 1:
            return None
        offsets = list(map(_OFFSET, records))
    key = (
        group, now_ms, msgs[0].topic, kafka_topic, partition, size, ack_index, rt_ms, started,
        kind, has,
    )  # fmt: skip
    return (COLUMNS, key, first, n, offsets, indices, stamps, text)


def text_columns(records: list[Any]) -> tuple[str | None, str | None, str | None] | None:
    """The ``msg_ids``, ``tags`` and ``keys`` columns of a run (``UNIQ_KEY``, ``TAGS``,
    ``KEYS`` of each record, joined with :data:`~adapter.core.trace.SEPARATOR`; ``None``
    for a header no record has), read with C code over the records' header lists: when
    every record has the same header names in the same order (one producer's traffic),
    by position; otherwise one look-up per header and record.  ``None`` when the
    records' events cannot be a run: a header of :data:`_OFF_RUN_HEADERS` set, a header
    of the columns on some records only, an empty ``UNIQ_KEY``, a value that holds the
    separator or is not UTF-8, a record without headers.

    What the events say is what :meth:`~adapter.core.message.MessageExt.decoded` reads
    from the same headers: the last value of a repeated name, a null value as absent."""
    lists = list(map(_HEADERS, records))
    head = lists[0]
    if (
        head
        and not _OFF_RUN.isdisjoint(map(_NAME, head))
        and any(value for name, value in head if name in _OFF_RUN)
    ):  # the first record's events cannot be a run (retried messages): refused at once
        return None
    n = len(lists)
    try:  # position j of every record's header list: one tuple per position
        columns = list(zip(*lists, strict=True))
    except TypeError:  # a record without headers among them
        return None
    except ValueError:  # not as many headers on every record
        return _text_by_name(lists, n)
    layout = tuple(map(_NAME, head))
    for name, column in zip(layout, columns, strict=True):
        if list(map(_NAME, column)).count(name) != n:
            return _text_by_name(lists, n)
    where = {name: j for j, name in enumerate(layout)}  # the last of a repeated name
    if not _OFF_RUN.isdisjoint(where):
        return _text_by_name(lists, n)  # (an empty one reads as absent: may still be a run)
    out: list[str | None] = []
    for name in _TEXT_HEADERS:
        j = where.get(name)
        if j is None:
            out.append(None)
            continue
        # a null value reads as absent (some records have it, some not): not joined
        text = _joined(list(map(_VALUE, columns[j])), n, name)
        if text is None:
            return None
        out.append(text)
    return out[0], out[1], out[2]


def _text_by_name(lists: list[Any], n: int) -> tuple[str | None, str | None, str | None] | None:
    """:func:`text_columns` for records whose header names differ: one dict per record."""
    headers = list(map(dict, lists))  # the last value of a repeated name, as decoded
    for name in _OFF_RUN_HEADERS:  # an empty value reads as absent there too
        if any(map(_GET, headers, repeat(name))):
            return None
    out: list[str | None] = []
    for name in _TEXT_HEADERS:
        values = list(map(_GET, headers, repeat(name)))
        absent = values.count(None)
        if absent == n:
            out.append(None)
            continue
        text = None if absent else _joined(values, n, name)
        if text is None:
            return None
        out.append(text)
    return out[0], out[1], out[2]


def _joined(values: Sequence[bytes], n: int, name: str) -> str | None:
    """One text column: ``n`` header values joined, or ``None`` when they cannot be (a
    null one, an empty ``UNIQ_KEY``, a value that holds the separator, not UTF-8)."""
    if name == PROPERTY_UNIQ_KEY and not all(values):
        return None  # an empty one: the event's id is derived from the record
    try:
        joined = _SEP.join(values)
    except TypeError:  # a null value
        return None
    if joined.count(_SEP) != n - 1:
        return None
    try:
        return joined.decode("utf-8")
    except UnicodeDecodeError:  # the event's value would be shown with U+FFFD
        return None
