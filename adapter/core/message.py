"""The message types users see: :class:`Message` (to send) and :class:`MessageExt` (received).

Pure: no clients.  A received message is a lazy view over the Kafka record it was read
from (anything with confluent-kafka's ``value() / key() / headers() / timestamp()``): its
headers are decoded the first time a header-backed attribute is read, so a listener that
only reads ``body`` pays for nothing else.

Why the views stay in one module with :class:`MessageExt`: the consumers' hot path builds
and reads views without a call per record (:func:`view_of`, :func:`split_fetch`,
:func:`start_consuming`, :func:`plain_records`), writing and reading the view's slots
directly; those slots are the class's own, so they stay beside it.  The record a view reads
is in :mod:`adapter.core.record`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Final, NamedTuple

from adapter.constants import (
    HEADER_ORIGIN_BORN_MS,
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core.filter import TagFilter
from adapter.core.headers import RawHeader, header_text, parse_non_negative, read_headers
from adapter.core.record import TS_CREATE, TS_LOG_APPEND, Fields, Record

__all__ = [
    "FetchedRun",
    "Message",
    "MessageExt",
    "RawHeader",
    "body_bytes",
    "fetched_records",
    "plain_records",
    "split_fetch",
    "start_consuming",
    "view_of",
]


def _keys_text(keys: str | Sequence[str] | None) -> str | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        return keys
    return " ".join(keys)


@dataclass(slots=True, kw_only=True)
class Message:
    """A message to send, RocketMQ style.

    ``keys`` are RocketMQ index keys (space-separated, header ``KEYS``); ``sharding_key``
    is the Kafka record key, which picks the partition.  ``delay_time_level`` > 0 makes a
    scheduled message; ``deliver_time_ms`` an absolute delivery time (epoch ms).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_time_level: int = 0
    deliver_time_ms: int | None = None
    partition: int | None = None
    sharding_key: bytes | str | None = None

    @property
    def keys_text(self) -> str | None:
        return _keys_text(self.keys)

    def put_user_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    def get_property(self, name: str) -> str | None:
        if name == PROPERTY_TAGS:
            return self.tags
        if name == PROPERTY_KEYS:
            return self.keys_text
        return self.properties.get(name)


class _Decoded(NamedTuple):
    """What the headers say, read once (a named tuple: one is made per message read)."""

    msg_id: str
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    raw: tuple[RawHeader, ...]
    errors: tuple[str, ...]
    reconsume_times: int
    topic: str | None  # the original topic of a retry record (``RETRY_TOPIC``)


class MessageExt:
    """A received message (RocketMQ ``MessageExt``).

    ``topic`` is the logical topic the message was sent to: for a retried message, the
    original topic again (``resetRetryTopic``).  ``properties`` holds every header decoded
    as text; ``raw_headers`` the headers exactly as read, which a send-back re-emits
    unchanged (so bytes that are not UTF-8 survive every hop).  ``header_errors`` lists
    what was found malformed and how it was handled.  ``born_timestamp`` is when the
    message was first sent, kept across retries and delays (``RMQ_ORIGIN_BORN_MS``);
    ``store_timestamp`` is the timestamp of the record this delivery was read from.

    Built with keyword fields (tests, tools) or, by the consumers, as a view over a Kafka
    record (:meth:`of_record`): a view stores four references (and ``None`` for the headers
    it has not decoded yet) and reads everything else from the record, decoding headers
    only when an attribute needs them.
    """

    __slots__ = ("_hdr", "_rec", "_retry", "_stamp", "_topic")
    _hdr: _Decoded | None  # ``None`` until a view's headers are first needed

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        msg_id: str,
        queue_id: int,
        queue_offset: int,
        kafka_topic: str,
        tags: str | None = None,
        keys: str | None = None,
        properties: dict[str, str] | None = None,
        raw_headers: tuple[RawHeader, ...] = (),
        sharding_key: bytes | None = None,
        reconsume_times: int = 0,
        born_timestamp: int | None = None,
        store_timestamp: int | None = None,
        header_errors: tuple[str, ...] = (),
    ) -> None:
        stamp = store_timestamp if store_timestamp is not None else born_timestamp
        kind = 0 if stamp is None else (TS_CREATE if born_timestamp is not None else TS_LOG_APPEND)
        self._rec: Record = Fields(
            kafka_topic, queue_id, queue_offset, body, sharding_key, raw_headers, (kind, stamp or 0)
        )
        self._topic = topic
        self._retry: str | None = None
        self._stamp: list[int | None] = [None]
        props = {} if properties is None else properties
        if (
            born_timestamp is not None
            and store_timestamp is not None
            and born_timestamp != store_timestamp
            and HEADER_ORIGIN_BORN_MS not in props
        ):
            props = {**props, HEADER_ORIGIN_BORN_MS: str(born_timestamp)}
        self._hdr = _Decoded(
            msg_id, tags, keys, props, raw_headers, header_errors, reconsume_times, None
        )

    @classmethod
    def of_record(
        cls,
        record: Record,
        *,
        kafka_topic: str,
        topic: str,
        partition: int,
        offset: int,
        retry: bool = False,
    ) -> MessageExt:
        """A lazy view over one Kafka record.  ``topic`` is the logical name of
        ``kafka_topic``; ``retry`` says it is a retry topic, whose records carry their
        original topic in ``RETRY_TOPIC``.  (``kafka_topic``, ``partition`` and ``offset``
        are read from the record; they are here for callers that hold them anyway.)"""
        del kafka_topic, partition, offset
        return view_of(record, topic, retry, [None])

    # -- decoding --------------------------------------------------------------------------
    def _decoded(self) -> _Decoded:
        hdr = self._hdr
        if hdr is not None:
            return hdr
        # a view starts with ``_hdr = None``: a ``None`` test, not a caught AttributeError
        # (raising and catching one is dearer than the test, on every failed message)
        rec = self._rec
        headers = rec.headers()
        if headers:
            raw, props, read_errors = read_headers(headers)
        elif self._retry is None:  # a plain record's first failure: nothing to read
            msg_id = f"{rec.topic()}:{rec.partition()}:{rec.offset()}"
            plain: _Decoded = _new_tuple(_Decoded, (msg_id, None, None, {}, (), (), 0, None))
            self._hdr = plain
            return plain
        else:
            raw, props, read_errors = (), {}, ()  # never share an empty dict
        errors = list(read_errors) if read_errors else []
        msg_id = props.get(PROPERTY_UNIQ_KEY) or f"{rec.topic()}:{rec.partition()}:{rec.offset()}"
        rt = props.get(PROPERTY_RECONSUME_TIME)
        if rt is None:
            times: int | None = 0
        elif rt.isdigit() and rt.isascii() and len(rt) <= 19:  # the common case
            times = int(rt)
        else:
            times = parse_non_negative(rt)
        if times is None:
            errors.append(f"{PROPERTY_RECONSUME_TIME}={rt!r} is not a count: read as 0")
        max_raw = props.get(PROPERTY_MAX_RECONSUME_TIMES)
        if max_raw is not None and _max_reconsume(max_raw) is None:
            errors.append(
                f"{PROPERTY_MAX_RECONSUME_TIMES}={max_raw!r} is not valid: group maximum used"
            )
        original: str | None = None
        if self._retry is not None:  # resetRetryTopic
            original = props.get(PROPERTY_RETRY_TOPIC)
            if not original:
                errors.append(
                    f"{PROPERTY_RETRY_TOPIC} missing on a retry record: topic left as {self._retry}"
                )
        # _Decoded(...), made without the named tuple's generated ``__new__`` (a Python
        # frame fewer for every message whose headers are read: each failed one)
        decoded: _Decoded = _new_tuple(
            _Decoded,
            (
                msg_id,
                props.get(PROPERTY_TAGS),
                props.get(PROPERTY_KEYS),
                props,
                raw,
                tuple(errors) if errors else (),
                times or 0,
                original,
            ),
        )
        self._hdr = decoded
        return decoded

    #: what the headers say, decoded once (the codec builds hop headers from it)
    decoded = _decoded

    def _timestamps(self) -> tuple[int | None, int | None]:
        kind, value = self._rec.timestamp()
        stored = value if kind in (TS_CREATE, TS_LOG_APPEND) else None
        # a log-append time is when the broker stored it, not when it was born
        return (stored if kind == TS_CREATE else None, stored)

    # -- attributes ------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        if self._retry is not None:
            return self._decoded().topic or self._retry
        return self._topic

    @property
    def kafka_topic(self) -> str:
        return self._rec.topic()  # type: ignore[no-any-return]

    @property
    def queue_id(self) -> int:
        return self._rec.partition()  # type: ignore[no-any-return]

    @property
    def queue_offset(self) -> int:
        return self._rec.offset()  # type: ignore[no-any-return]

    @property
    def body(self) -> bytes:
        return self._rec.value() or b""

    # the header-backed attributes read ``_hdr`` first: one call, not two, once decoded
    # (the failure path reads several of them for every failed message)
    @property
    def msg_id(self) -> str:
        return (self._hdr or self._decoded()).msg_id

    @property
    def tags(self) -> str | None:
        return (self._hdr or self._decoded()).tags

    @property
    def keys(self) -> str | None:
        return (self._hdr or self._decoded()).keys

    @property
    def properties(self) -> dict[str, str]:
        props = self._decoded().properties
        started = self._stamp[0]
        if started is not None:
            props[PROPERTY_CONSUME_START_TIMESTAMP] = str(started)
        return props

    @property
    def raw_headers(self) -> tuple[RawHeader, ...]:
        return (self._hdr or self._decoded()).raw

    @property
    def header_errors(self) -> tuple[str, ...]:
        return (self._hdr or self._decoded()).errors

    @property
    def reconsume_times(self) -> int:
        return (self._hdr or self._decoded()).reconsume_times

    @property
    def consume_start_time(self) -> int | None:
        """When the listener was handed this message (epoch ms; ``CONSUME_START_TIME`` on a
        concurrent delivery: an orderly one has no such property, as in RocketMQ 4.9.7)."""
        return self._stamp[-1]

    @consume_start_time.setter
    def consume_start_time(self, value: int | None) -> None:
        self._stamp = [value]

    @property
    def sharding_key(self) -> bytes | None:
        key = self._rec.key()
        return key.encode() if isinstance(key, str) else key

    @property
    def born_timestamp(self) -> int | None:
        """When the message was first sent (kept across retries and delays)."""
        origin = self._origin_born()
        return origin if origin is not None else self._timestamps()[0]

    @property
    def store_timestamp(self) -> int | None:
        return self._timestamps()[1]

    @property
    def origin_born_timestamp(self) -> int | None:
        """Born timestamp of the first delivery (``RMQ_ORIGIN_BORN_MS``), else this one's."""
        return self.born_timestamp

    def _origin_born(self) -> int | None:
        raw = self._decoded().properties.get(HEADER_ORIGIN_BORN_MS)
        if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 19:
            return int(raw)
        return None

    @property
    def origin_message_id(self) -> str:
        return self._decoded().properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or self.msg_id

    @property
    def max_reconsume_times(self) -> int | None:
        """The per-message ``MAX_RECONSUME_TIMES`` override (``None`` when absent or bad)."""
        raw = (self._hdr or self._decoded()).properties.get(PROPERTY_MAX_RECONSUME_TIMES)
        return None if raw is None else _max_reconsume(raw)

    def retry_fields(self) -> tuple[int, int | None, int, int]:
        """What the concurrent engine reads of a failed message, in one call: its
        ``reconsume_times``, ``max_reconsume_times``, offset and body size (read one by
        one they are four calls or more, for every failed message)."""
        rec = self._rec
        hdr = self._hdr
        if hdr is None:
            if self._retry is None and not rec.headers():
                # a plain record's first failure: nothing to decode (and nothing decoded
                # for it yet: its copy is built without it too, see ``copy_fields``)
                return 0, None, rec.offset(), len(rec.value() or b"")
            hdr = self._decoded()
        raw = hdr.properties.get(PROPERTY_MAX_RECONSUME_TIMES)
        limit = None if raw is None else _max_reconsume(raw)
        return hdr.reconsume_times, limit, rec.offset(), len(rec.value() or b"")

    def hop_fields(self) -> tuple[_Decoded, str, int, int, int | None, bytes | None, bytes]:
        """What a copy of this message (a send-back, a dead letter) is made of, read in one
        call: the decoded headers, the logical topic, the partition, the offset, the born
        time, the key and the body (the failure path makes a copy of every failed message;
        each attribute read on its own is a call or two)."""
        hdr = self._hdr or self._decoded()
        rec = self._rec
        topic = self._topic if self._retry is None else (hdr.topic or self._retry)
        raw = hdr.properties.get(HEADER_ORIGIN_BORN_MS)
        if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 19:
            born: int | None = int(raw)
        else:
            kind, value = rec.timestamp()
            born = value if kind == TS_CREATE else None
        key = rec.key()
        if isinstance(key, str):
            key = key.encode()
        return hdr, topic, rec.partition(), rec.offset(), born, key, rec.value() or b""

    def copy_fields(
        self,
    ) -> tuple[_Decoded | bytes, str, int, int, int | None, bytes | None, bytes]:
        """:meth:`hop_fields`, except that a plain record's first delivery (no headers,
        not from a retry topic: its headers say nothing, its id is its position) gives its
        message id, encoded, instead of the decoded headers: the retry copier's read,
        for the failure path's most common message, which is then never decoded."""
        rec = self._rec
        if self._hdr is None and self._retry is None and not rec.headers():
            partition, offset = rec.partition(), rec.offset()
            kind, value = rec.timestamp()
            key = rec.key()
            if isinstance(key, str):
                key = key.encode()
            return (
                f"{rec.topic()}:{partition}:{offset}".encode(),  # ``msg_id``, as decoded
                self._topic,
                partition,
                offset,
                value if kind == TS_CREATE else None,
                key,
                rec.value() or b"",
            )
        return self.hop_fields()

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def get_user_properties(self, system: Mapping[str, object] | frozenset[str]) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in system}

    def redelivered(self) -> MessageExt:
        """The same message delivered once more: ``reconsume_times + 1`` (a local retry)."""
        hdr = self._decoded()
        again = view_of(self._rec, self._topic, self._retry is not None, [None])
        again._hdr = _Decoded(
            hdr.msg_id,
            hdr.tags,
            hdr.keys,
            dict(hdr.properties),
            hdr.raw,
            hdr.errors,
            hdr.reconsume_times + 1,
            hdr.topic,
        )
        return again

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, msg_id={self.msg_id!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, reconsume_times={self.reconsume_times})"
        )

    def _identity(self) -> tuple[object, ...]:
        return (self.kafka_topic, self.queue_id, self.queue_offset, self.reconsume_times)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return self._identity() == other._identity() and self.body == other.body

    __hash__ = None  # type: ignore[assignment]


#: a named tuple made without its generated ``__new__`` (one Python frame fewer)
_new_tuple: Any = tuple.__new__


def _max_reconsume(raw: str) -> int | None:
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= -1 else None


def view_of(
    record: Record,
    topic: str,
    retry: bool,
    stamp: list[int | None],
    _new: Any = object.__new__,
    _cls: type[MessageExt] = MessageExt,
) -> MessageExt:
    """A view over ``record`` of logical ``topic`` (``retry``: a retry topic, whose records
    name their original topic); ``stamp`` holds the consume start time shared by the
    messages handed to a listener together.  The consumers' hot path."""
    msg: MessageExt = _new(_cls)
    msg._rec = record
    msg._topic = topic
    msg._retry = topic if retry else None
    msg._stamp = stamp
    msg._hdr = None
    return msg


_HDR: Final = operator.attrgetter("_hdr")
_REC: Final = operator.attrgetter("_rec")


def plain_records(msgs: Sequence[MessageExt]) -> list[Record] | None:
    """The Kafka records under ``msgs``, when what their headers say is still what their
    records say (``None`` when one is a local redelivery, which counts one delivery more
    than its record).  A trace sink derives these messages' events from the records alone
    (``KafkaTraceSink``: no header is decoded on the consume path).  Not per message in
    Python unless one was decoded already."""
    if any(map(_HDR, msgs)):
        for msg in msgs:
            hdr = msg._hdr
            if hdr is not None and hdr.reconsume_times:
                return None
    return list(map(_REC, msgs))


def fetched_records(msgs: Sequence[MessageExt]) -> list[Record]:
    """The Kafka records under views of one fetch as it came (none a local redelivery:
    :func:`plain_records` is the checked read), in one C pass: what a trace sink reads
    per fetched run on the consume path.  (A comprehension: its slot reads are specialised,
    cheaper than ``map`` with an ``attrgetter``.)"""
    return [msg._rec for msg in msgs]


def start_consuming(
    msgs: list[MessageExt], start_ms: int, *, shared: bool, listed: bool = True
) -> None:
    """Set ``CONSUME_START_TIME`` on messages handed to a listener together.  ``shared``:
    they were viewed with one stamp (one fetched run going to the listener inline).
    ``listed=False`` (orderly deliveries: RocketMQ 4.9.7 sets the property only on
    concurrent ones) keeps it out of ``properties``; ``consume_start_time`` still tells it.
    (A stamp is ``[property]``, or ``[None, time]`` when not listed.)"""
    if shared:
        if msgs:
            if listed:
                msgs[0]._stamp[0] = start_ms
            else:
                msgs[0]._stamp[:] = (None, start_ms)
        return
    stamp: list[int | None] = [start_ms] if listed else [None, start_ms]
    for msg in msgs:
        msg._stamp = stamp


class FetchedRun(NamedTuple):
    """The records one fetch brought from one partition, in offset order."""

    tp: tuple[str, int]
    #: views of those that pass the subscription's tag filter
    msgs: list[MessageExt]
    #: the last record fetched there, filtered or not (the offset after it is settled
    #: once ``msgs`` are)
    last: Any
    #: the fetch's records, when ``msgs`` view ``source[start:start + len(msgs)]`` one for
    #: one (none filtered out or skipped: their bodies' size is then read in one pass,
    #: :func:`body_bytes`); else ``None``.  Kept whole, not sliced: a run that does not
    #: need its size costs nothing more
    source: Sequence[Any] | None = None
    start: int = 0


def body_bytes(run: FetchedRun) -> int:
    """The bytes of the bodies of ``run.msgs``: over the raw records in one C-level pass
    when the run has them (``value()`` unbound from the records' type, ``None`` bodies
    filtered out), else message by message."""
    source, start, msgs = run.source, run.start, run.msgs
    if source is not None and msgs:
        records = islice(source, start, start + len(msgs))
        try:
            return sum(map(len, filter(None, map(type(source[start]).value, records))))
        except TypeError:  # records of mixed types (a test's fakes): the general way
            pass
    return sum(len(m.body) for m in msgs)


def split_fetch(
    records: Sequence[Any],
    resolve: Callable[[str], tuple[str, bool]],
    filters: Mapping[str, TagFilter | None],
) -> tuple[list[FetchedRun], list[Any]]:
    """Cut one fetch into :class:`FetchedRun` s per partition, each record viewed as a
    :class:`MessageExt` in the same pass (the consumer's hot path: one loop, no call per
    record); and the records that carry an error, for the caller.

    ``resolve(kafka_topic)`` gives ``(logical topic, is a retry topic)``; ``filters`` the
    tag filter of each topic (``None`` or absent: every tag), tested on its ``TAGS`` header.
    """
    runs: list[FetchedRun] = []
    errors: list[Any] = []
    new = object.__new__
    cls = MessageExt
    views: list[MessageExt] = []
    append = views.append
    topic: str | None = None
    partition = -1
    logical = ""
    retry: str | None = None
    stamp: list[int | None] = [None]
    tag_filter: TagFilter | None = None
    last: Any = None
    # where the current run starts in ``records``, and how many records since then are not
    # in ``views`` (errors, filtered): none, and the run's records are one slice
    start = 0
    holes = 0
    for record in records:
        if record.error() is not None:
            errors.append(record)
            holes += 1
            continue
        p = record.partition()
        t = record.topic()
        if p != partition or t != topic:
            stop = start + len(views) + holes  # the index of this record
            if topic is not None:
                runs.append(
                    FetchedRun((topic, partition), views, last, None if holes else records, start)
                )
                views = []
                append = views.append
            start = stop
            holes = 0
            topic, partition = t, p
            logical, is_retry = resolve(t)
            retry = logical if is_retry else None
            stamp = [None]
            tag_filter = filters.get(t)
        last = record
        if tag_filter is not None and not tag_filter.matches(
            header_text(record.headers(), PROPERTY_TAGS)
        ):
            holes += 1
            continue  # filtered out by tag, like a broker-side filter: settled
        msg = new(cls)
        msg._rec = record
        msg._topic = logical
        msg._retry = retry
        msg._stamp = stamp
        msg._hdr = None
        append(msg)
    if topic is not None:
        runs.append(FetchedRun((topic, partition), views, last, None if holes else records, start))
    return runs, errors
