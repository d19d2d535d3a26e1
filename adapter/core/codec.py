"""Kafka record ↔ RocketMQ message, and the headers written on every hop.  Pure.

Decoding rules for headers that are malformed (each leaves a note in
``MessageExt.header_errors`` and never raises):

* duplicate keys: the last value wins (Kafka's ``lastHeader``); a send-back writes one;
* a null value is read as absent;
* bytes that are not UTF-8 are shown with U+FFFD in ``properties`` but kept byte-exact
  in ``raw_headers``, and re-emitted unchanged on every hop;
* ``RECONSUME_TIME`` that is not a whole number ≥ 0 is read as 0 (the next hop rewrites it);
* ``MAX_RECONSUME_TIMES`` that is not a whole number ≥ -1 is ignored (group maximum);
* no ``UNIQ_KEY`` (plain Kafka producers): the message id is ``<topic>:<partition>:<offset>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.constants import (
    FAILURE_MESSAGE_MAX_CHARS,
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    HEADER_MALFORMED,
    HEADER_ORIGIN_BORN_MS,
    HEADER_ORIGIN_OFFSET,
    HEADER_ORIGIN_PARTITION,
    KAFKA_DLQ_PREFIX,
    KAFKA_RETRY_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_HEADERS,
)
from adapter.core.headers import HeaderView, RawHeader
from adapter.core.message import Message, MessageExt, view_of
from adapter.core.naming import dlq_topic, from_kafka, is_retry_topic, retry_topic, to_kafka
from adapter.core.record import Fields
from adapter.errors import TopicNameError


def logical_topic(kafka_topic: str, group_hint: str | None = None) -> str:
    """The logical name of a Kafka topic; a name that cannot be reversed here (a
    digest-shortened retry/DLQ name) is recovered from the group that wrote it
    (``RMQ_GROUP``) when given, else left as the Kafka name."""
    try:
        return from_kafka(kafka_topic)
    except TopicNameError:
        if group_hint:
            for kafka_prefix, logical_of in (
                (KAFKA_RETRY_PREFIX, retry_topic),
                (KAFKA_DLQ_PREFIX, dlq_topic),
            ):
                if (
                    kafka_topic.startswith(kafka_prefix)
                    and to_kafka(logical_of(group_hint)) == kafka_topic
                ):
                    return logical_of(group_hint)
        return kafka_topic


def derived_message_id(kafka_topic: str, partition: int, offset: int) -> str:
    """Message id of a record without ``UNIQ_KEY``: ``<topic>:<partition>:<offset>``."""
    return f"{kafka_topic}:{partition}:{offset}"


def decode_record(
    *,
    kafka_topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    key: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] | None,
    timestamp_ms: int | None,
    log_append_time: bool = False,
    group_hint: str | None = None,
) -> MessageExt:
    """Turn the fields of one Kafka record into a :class:`MessageExt`.  Never raises on
    headers (see the module docstring for how malformed ones are read)."""
    view = HeaderView.read(headers)
    logical = logical_topic(kafka_topic, group_hint or view.text.get(HEADER_GROUP))
    kind = 0 if timestamp_ms is None else (2 if log_append_time else 1)
    record = Fields(
        kafka_topic, partition, offset, value, key, view.raw or None, (kind, timestamp_ms or 0)
    )
    msg = view_of(record, logical, is_retry_topic(logical), [None])
    msg.properties  # noqa: B018 - decode now: a record given by fields is read once
    return msg


def _put(out: dict[str, bytes | None], key: str, value: str | int | None) -> None:
    if value is None:
        out.pop(key, None)
    else:
        out[key] = str(value).encode("utf-8")


def _finish(out: Mapping[str, bytes | None]) -> list[tuple[str, bytes | None]]:
    return list(out.items())


def encode_message_headers(msg: Message, msg_id: str) -> list[tuple[str, bytes | None]]:
    """Headers of a freshly sent message: its properties, ``KEYS``, ``TAGS``, ``UNIQ_KEY``."""
    out: dict[str, bytes | None] = {}
    for name, value in msg.properties.items():
        if name in SYSTEM_HEADERS:
            continue
        _put(out, name, value)
    _put(out, PROPERTY_TAGS, msg.tags)
    _put(out, PROPERTY_KEYS, msg.keys_text)
    _put(out, PROPERTY_UNIQ_KEY, msg_id)
    return _finish(out)


def schedule_headers(
    base: Mapping[str, bytes | None],
    *,
    real_topic: str,
    real_queue_id: int | None,
    level: int,
    due_ms: int,
    deliver_time_ms: int | None = None,
    born_ms: int | None = None,
) -> list[tuple[str, bytes | None]]:
    """Add what a delay-topic entry needs: ``REAL_TOPIC``, ``REAL_QID``, ``DELAY``, due time,
    and the born time (``born_ms``, unless ``base`` already carries one) that the forwarded
    copy reports as its ``born_timestamp`` (its own Kafka timestamp is the forward time)."""
    out = dict(base)
    _add_schedule(out, real_topic, real_queue_id, level, due_ms, deliver_time_ms, born_ms)
    return _finish(out)


def _add_schedule(  # noqa: PLR0917 - internal, one caller per kind of entry
    out: dict[str, bytes | None],
    real_topic: str,
    real_queue_id: int | None,
    level: int,
    due_ms: int,
    deliver_time_ms: int | None,
    born_ms: int | None,
) -> None:
    """:func:`schedule_headers`' additions, made in place."""
    if HEADER_ORIGIN_BORN_MS not in out:
        _put(out, HEADER_ORIGIN_BORN_MS, born_ms)
    _put(out, PROPERTY_REAL_TOPIC, real_topic)
    _put(out, PROPERTY_REAL_QUEUE_ID, real_queue_id)
    _put(out, PROPERTY_DELAY_TIME_LEVEL, level)
    _put(out, HEADER_DUE_MS, due_ms)
    _put(out, PROPERTY_TIMER_DELIVER_MS, deliver_time_ms)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the last consumption failed: exception type (or status) and a message."""

    type: str
    message: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(type(exc).__qualname__, str(exc))

    def truncated(self) -> str:
        text = self.message
        if len(text) > FAILURE_MESSAGE_MAX_CHARS:
            return text[: FAILURE_MESSAGE_MAX_CHARS - 1] + "…"
        return text


def _hop_headers(msg: MessageExt, group: str, failure: Failure | None) -> dict[str, bytes | None]:
    """Headers common to a retry and a DLQ hop: user headers plus the lineage.  (The hot
    path of every failure: each value is encoded once, straight into the dict.)"""
    out: dict[str, bytes | None] = {}
    system = SYSTEM_HEADERS
    hdr = msg.decoded()
    for key, value in hdr.raw:
        if key in system:
            continue
        out.pop(key, None)  # the last value of a repeated header wins, at the end
        out[key] = value
    msg_id = hdr.msg_id
    out[PROPERTY_UNIQ_KEY] = msg_id.encode()
    out[PROPERTY_ORIGIN_MESSAGE_ID] = (
        hdr.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or msg_id
    ).encode()
    out[PROPERTY_RETRY_TOPIC] = msg.topic.encode()
    out[PROPERTY_RECONSUME_TIME] = b"%d" % (hdr.reconsume_times + 1)
    out[HEADER_GROUP] = group.encode()
    out[HEADER_ORIGIN_PARTITION] = b"%d" % msg.queue_id
    out[HEADER_ORIGIN_OFFSET] = b"%d" % msg.queue_offset
    if HEADER_ORIGIN_BORN_MS not in out:
        born = msg.born_timestamp
        if born is not None:
            out[HEADER_ORIGIN_BORN_MS] = b"%d" % born
    if failure is not None:
        out[HEADER_FAILURE_TYPE] = failure.type.encode()
        out[HEADER_FAILURE_MESSAGE] = failure.truncated().encode()
    errors = hdr.errors
    if errors:
        out[HEADER_MALFORMED] = "; ".join(errors)[:FAILURE_MESSAGE_MAX_CHARS].encode()
    return out


class _Encoded(dict[Any, tuple[str, bytes]]):
    """``(name, value encoded)`` header pairs for values that repeat from copy to copy (a
    group, its retry topic, a topic, a delay level), each made once and then shared by
    every copy that carries it (pairs are immutable).  Bounded: cleared when full."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __missing__(self, value: str | int) -> tuple[str, bytes]:
        if len(self) >= _ENCODED_MAX:
            self.clear()
        pair = self[value] = (
            self.name,
            b"%d" % value if isinstance(value, int) else value.encode(),
        )
        return pair


_ENCODED_MAX = 4096
_GROUP_PAIRS = _Encoded(HEADER_GROUP)
_RETRY_TOPIC_PAIRS = _Encoded(PROPERTY_RETRY_TOPIC)
_REAL_TOPIC_PAIRS = _Encoded(PROPERTY_REAL_TOPIC)
_DELAY_PAIRS = _Encoded(PROPERTY_DELAY_TIME_LEVEL)
#: the last failure's two header pairs: a failed batch's messages share one ``Failure``
_last_failure: tuple[Failure | None, list[tuple[str, bytes | None]]] = (None, [])


def _failure_pairs(failure: Failure) -> list[tuple[str, bytes | None]]:
    """The two header pairs of ``failure``, made and cached (the callers look in the cache
    first, inline: a failed batch's messages share one ``Failure``)."""
    global _last_failure  # noqa: PLW0603 - a one-entry cache, replaced whole (thread-safe)
    pairs: list[tuple[str, bytes | None]] = [
        (HEADER_FAILURE_TYPE, failure.type.encode()),
        (HEADER_FAILURE_MESSAGE, failure.truncated().encode()),
    ]
    _last_failure = (failure, pairs)
    return pairs


def _hop_list(
    msg: MessageExt, group: str, failure: Failure | None
) -> list[tuple[str, bytes | None]]:
    """:func:`_hop_headers` as the header list itself, in the same order."""
    return _hop_pairs(msg.hop_fields(), group, failure, ())


#: what :meth:`MessageExt.hop_fields` returns
HopFields = tuple[Any, str, int, int, int | None, bytes | None, bytes]


def _hop_pairs(
    fields: HopFields,
    group: str,
    failure: Failure | None,
    tail: tuple[tuple[str, bytes | None], ...],
) -> list[tuple[str, bytes | None]]:
    """:func:`_hop_headers` as the header list itself, in the same order, then ``tail``
    (the hot path of every retry copy: one list, the message read in one call, the pairs
    that repeat from copy to copy made once)."""
    hdr, topic, partition, offset, born, _key, _body = fields
    msg_id = hdr.msg_id.encode()
    origin = hdr.properties.get(PROPERTY_ORIGIN_MESSAGE_ID)
    lineage = [
        (PROPERTY_UNIQ_KEY, msg_id),
        (PROPERTY_ORIGIN_MESSAGE_ID, origin.encode() if origin else msg_id),
        _RETRY_TOPIC_PAIRS[topic],
        (PROPERTY_RECONSUME_TIME, b"%d" % (hdr.reconsume_times + 1)),
        _GROUP_PAIRS[group],
        (HEADER_ORIGIN_PARTITION, b"%d" % partition),
        (HEADER_ORIGIN_OFFSET, b"%d" % offset),
    ]
    raw = hdr.raw
    born_kept = False
    if raw:  # the user headers first, in their order
        system = SYSTEM_HEADERS
        user: dict[str, bytes | None] = {}
        for key, value in raw:
            if key in system:
                continue
            user.pop(key, None)  # the last value of a repeated header wins, at the end
            user[key] = value
        out = list(user.items())
        out += lineage
        born_kept = HEADER_ORIGIN_BORN_MS in user
    else:  # a plain record (a first failure): the lineage is the list
        out = lineage
    if not born_kept and born is not None:
        out.append((HEADER_ORIGIN_BORN_MS, b"%d" % born))
    if failure is not None:
        last = _last_failure
        out += last[1] if last[0] is failure else _failure_pairs(failure)
    errors = hdr.errors
    if errors:
        out.append((HEADER_MALFORMED, "; ".join(errors)[:FAILURE_MESSAGE_MAX_CHARS].encode()))
    if tail:
        out += tail
    return out


#: ``RECONSUME_TIME`` and ``RMQ_ORIGIN_PARTITION`` pairs: a few values, over and over
_RECONSUME_PAIRS = _Encoded(PROPERTY_RECONSUME_TIME)
_PARTITION_PAIRS = _Encoded(HEADER_ORIGIN_PARTITION)

#: a first failure's ``RECONSUME_TIME`` pair
_FIRST_RETRY = (PROPERTY_RECONSUME_TIME, b"1")

#: what :meth:`RetryCopier.copy` returns: topic, body, key, headers, partition (``None``)
RetryRecord = tuple[str, bytes, bytes | None, list[tuple[str, bytes | None]], None]


class RetryCopier:
    """The retry copies of one group's failed messages, one call each: the failure path's
    hottest call (every failed message, and with ``ack_index`` the rest of its batch,
    becomes one), so it reads the message once (:meth:`MessageExt.copy_fields`: a plain
    record's first failure, the most common, is never decoded, its id is all it says), takes the
    user headers from the message's raw header tuples as they were read (never decoded
    and encoded again), and builds the header list in one go from pairs made once and
    shared: the group's, a level's ``REAL_TOPIC``/``DELAY``, a count's, a partition's, and
    the due time's (the copies of one ``apply`` share their clock reading).

    What it builds is exactly :func:`retry_headers` (same pairs, same order), which stays
    the general definition; a message with malformed headers is left to it (``None``), so
    that the caller notices and logs them.  Pure; its one-entry cache of the last due time
    is replaced whole, so concurrent callers never see half of it."""

    __slots__ = ("_group_pair", "_last", "_levels")

    def __init__(self, group: str, retry_topic: str, level_topics: Sequence[str]) -> None:
        self._group_pair = _GROUP_PAIRS[group]
        real_topic = _REAL_TOPIC_PAIRS[retry_topic]
        #: level -> (its Kafka topic, its ``REAL_TOPIC`` and ``DELAY`` pairs)
        self._levels = {
            n: (topic, real_topic, _DELAY_PAIRS[n]) for n, topic in enumerate(level_topics, 1)
        }
        #: (level, due_ms, topic, tail): the last copy's destination and trailing pairs
        self._last: tuple[int, int, str, tuple[tuple[str, bytes | None], ...]] = (0, -1, "", ())

    def copy(
        self, msg: MessageExt, level: int, due_ms: int, failure: Failure | None
    ) -> RetryRecord | None:
        """The copy of ``msg`` parked on delay ``level`` until ``due_ms``: what
        :func:`adapter.core.hops.send_back` makes of it for a
        :class:`~adapter.core.routing.RetryLater`; ``None`` for a message with malformed
        headers or an unknown level (the caller takes the general path, which says why)."""
        hdr, topic, partition, offset, born, key, body = msg.copy_fields()
        last = self._last
        if last[0] != level or last[1] != due_ms:
            where = self._levels.get(level)
            if where is None:
                return None
            last = self._last = (
                level,
                due_ms,
                where[0],
                (where[1], where[2], (HEADER_DUE_MS, b"%d" % due_ms)),
            )
        if failure is None:
            failed: Sequence[tuple[str, bytes | None]] = ()
        else:
            cached = _last_failure
            failed = cached[1] if cached[0] is failure else _failure_pairs(failure)
        if type(hdr) is bytes:  # a plain record's first failure: its id, nothing decoded
            born_pair = () if born is None else ((HEADER_ORIGIN_BORN_MS, b"%d" % born),)
            out = [
                (PROPERTY_UNIQ_KEY, hdr),
                (PROPERTY_ORIGIN_MESSAGE_ID, hdr),
                _RETRY_TOPIC_PAIRS[topic],
                _FIRST_RETRY,
                self._group_pair,
                _PARTITION_PAIRS[partition],
                (HEADER_ORIGIN_OFFSET, b"%d" % offset),
                *born_pair,
                *failed,
                *last[3],
            ]
            return last[2], body, key, out, None
        assert isinstance(hdr, tuple)  # decoded headers (typing: not the id's bytes)
        if hdr.errors:
            return None
        msg_id = hdr.msg_id.encode()
        origin = hdr.properties.get(PROPERTY_ORIGIN_MESSAGE_ID)
        raw = hdr.raw
        hop = (
            (PROPERTY_UNIQ_KEY, msg_id),
            (PROPERTY_ORIGIN_MESSAGE_ID, origin.encode() if origin else msg_id),
            _RETRY_TOPIC_PAIRS[topic],
            _RECONSUME_PAIRS[hdr.reconsume_times + 1],
            self._group_pair,
            _PARTITION_PAIRS[partition],
            (HEADER_ORIGIN_OFFSET, b"%d" % offset),
        )
        if raw:  # the user headers first, in their order (the last of a repeated one wins)
            system = SYSTEM_HEADERS
            user: dict[str, bytes | None] = {}
            for name, value in raw:
                if name in system:
                    continue
                user.pop(name, None)
                user[name] = value
            out = list(user.items())
            out += hop
            if born is not None and HEADER_ORIGIN_BORN_MS not in user:
                out.append((HEADER_ORIGIN_BORN_MS, b"%d" % born))
        else:  # no user headers
            out = list(hop)
            if born is not None:
                out.append((HEADER_ORIGIN_BORN_MS, b"%d" % born))
        out += failed
        out += last[3]
        return last[2], body, key, out, None


def retry_headers(
    msg: MessageExt,
    *,
    group: str,
    retry_topic: str,
    level: int,
    due_ms: int,
    failure: Failure | None,
) -> list[tuple[str, bytes | None]]:
    """A send-back to the delay topic of ``level``, bound for the group's retry topic: the
    hop's headers, then what :func:`schedule_headers` adds (no queue id, no timer)."""
    return retry_pairs(msg.hop_fields(), group, retry_topic, level, due_ms, failure)


def retry_pairs(  # noqa: PLR0917 - the failure path's hot call: positional is cheapest
    fields: HopFields,
    group: str,
    retry_topic: str,
    level: int,
    due_ms: int,
    failure: Failure | None,
) -> list[tuple[str, bytes | None]]:
    """:func:`retry_headers` of a message already read with
    :meth:`~adapter.core.message.MessageExt.hop_fields` (the send-back reads its key and
    body from the same fields)."""
    tail = (_REAL_TOPIC_PAIRS[retry_topic], _DELAY_PAIRS[level], (HEADER_DUE_MS, b"%d" % due_ms))
    return _hop_pairs(fields, group, failure, tail)


def straight_retry_headers(
    msg: MessageExt, *, group: str, failure: Failure | None
) -> list[tuple[str, bytes | None]]:
    """A copy sent straight to the group's retry topic (no delay level: the wait is over)."""
    return _hop_list(msg, group, failure)


#: Where a message's last hop went (a dead letter keeps them, a redrive drops them).
_LAST_HOP = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)


def dlq_headers(
    msg: MessageExt,
    *,
    group: str,
    reason: str,
    now_ms: int,
    failure: Failure | None,
    reconsume_times: int | None = None,
    last_hop: str | None = None,
    max_reconsume_times: int | None = None,
) -> list[tuple[str, bytes | None]]:
    """A dead letter: says why and from where (original topic, group, count, last failure).

    ``reconsume_times``: its ``RECONSUME_TIME`` (``None``: one more than the message's, as
    RocketMQ's concurrent send-back).  Like RocketMQ's, it keeps ``REAL_TOPIC``/``REAL_QID``
    of the message's last hop (a redelivery from the retry topic names it); ``last_hop``
    replaces them when the dead letter is a hop of its own (the orderly path's:
    ``%DLQ%<group>``; its partition is the producer's choice, unknown here, so no
    ``REAL_QID``).  ``max_reconsume_times``: written into ``MAX_RECONSUME_TIMES`` when set.
    """
    out = _hop_headers(msg, group, failure)
    if reconsume_times is not None:
        out[PROPERTY_RECONSUME_TIME] = b"%d" % reconsume_times
    if last_hop is None:
        kept: dict[str, bytes | None] = {}
        for key, value in msg.decoded().raw:
            if key in _LAST_HOP:
                kept[key] = value  # the last value of a repeated header wins
        for key, value in kept.items():
            if value is not None:
                out[key] = value
    else:
        _put(out, PROPERTY_REAL_TOPIC, last_hop)
    if max_reconsume_times is not None:
        _put(out, PROPERTY_MAX_RECONSUME_TIMES, max_reconsume_times)
    _put(out, PROPERTY_DLQ_ORIGIN_TOPIC, msg.topic)
    _put(out, PROPERTY_DLQ_ORIGIN_MESSAGE_ID, msg.origin_message_id)
    _put(out, HEADER_DLQ_REASON, reason)
    _put(out, HEADER_DLQ_TIME_MS, now_ms)
    return _finish(out)


#: Headers only a dead letter carries (``dlq_headers`` and ``RMQ_BODY_OMITTED``) plus the last
#: failure: a redriven message starts a new life without them, which also keeps a copy whose
#: body was too large for the DLQ as small as it can be.
_DEAD_LETTER_ONLY = (
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_FAILURE_TYPE,
    HEADER_FAILURE_MESSAGE,
    HEADER_BODY_OMITTED,
)


def redrive_headers(raw: Sequence[RawHeader], origin_topic: str) -> list[tuple[str, bytes | None]]:
    """A dead letter sent back for consumption: ``RECONSUME_TIME`` 0, ``RETRY_TOPIC`` its
    original topic, the dead-letter headers and those of its last hop left behind."""
    updates: dict[str, str | int | None] = dict.fromkeys((*_DEAD_LETTER_ONLY, *_LAST_HOP))
    updates.update({PROPERTY_RECONSUME_TIME: 0, PROPERTY_RETRY_TOPIC: origin_topic})
    return replace_headers(raw, updates)


def forward_headers(raw: Sequence[RawHeader]) -> list[tuple[str, bytes | None]]:
    """Headers of a due message forwarded to its real topic: kept, minus ``DELAY``.

    Duplicates are collapsed (last wins) so that hops never grow the header list.
    """
    out: dict[str, bytes | None] = {}
    for key, value in raw:
        if key == PROPERTY_DELAY_TIME_LEVEL:
            continue
        out.pop(key, None)
        out[key] = value
    return _finish(out)


def replace_headers(
    raw: Sequence[RawHeader], updates: Mapping[str, str | int | None]
) -> list[tuple[str, bytes | None]]:
    """``raw`` with one value per key, ``updates`` applied (``None`` removes a key)."""
    out: dict[str, bytes | None] = {}
    for key, value in raw:
        out.pop(key, None)
        out[key] = value
    for key, update in updates.items():
        _put(out, key, update)
    return _finish(out)
