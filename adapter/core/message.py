"""The message types users see: :class:`Message` (to send) and :class:`MessageExt` (received).

Pure: no clients.  A received message is a lazy view over the Kafka record it was read
from (anything with confluent-kafka's ``value() / key() / headers() / timestamp()``): its
headers are decoded the first time a header-backed attribute is read, so a listener that
only reads ``body`` pays for nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
from adapter.core.headers import EMPTY_VIEW, HeaderView, RawHeader, parse_non_negative

__all__ = ["Message", "MessageExt", "RawHeader", "Record", "view_of"]


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


class Record(Protocol):
    """What a Kafka record offers (``confluent_kafka.Message`` fits)."""

    def value(self) -> bytes | None: ...

    def key(self) -> Any: ...

    def headers(self) -> Any: ...

    def timestamp(self) -> tuple[int, int]: ...


#: ``timestamp()`` types (librdkafka): none, create time, log-append time.
_TS_CREATE = 1
_TS_LOG_APPEND = 2
_UNSET: Any = object()


class MessageExt:
    """A received message (RocketMQ ``MessageExt``).

    ``topic`` is the logical topic the message was sent to: for a retried message, the
    original topic again (``resetRetryTopic``).  ``properties`` holds every header decoded
    as text; ``raw_headers`` the headers exactly as read, which a send-back re-emits
    unchanged (so bytes that are not UTF-8 survive every hop).  ``header_errors`` lists
    what was found malformed and how it was handled.  ``born_timestamp`` is when the
    message was first sent, kept across retries and delays (``RMQ_ORIGIN_BORN_MS``);
    ``store_timestamp`` is the timestamp of the record this delivery was read from.

    Built with keyword fields (tests, tools) or, by the consumers, over a Kafka record
    with :meth:`of_record`, decoding headers only when an attribute needs them.
    """

    __slots__ = (
        "_body",
        "_errors",
        "_keys",
        "_msg_id",
        "_props",
        "_raw",
        "_rec",
        "_reconsume",
        "_retry",
        "_sharding_key",
        "_tags",
        "_topic",
        "_ts",
        "consume_start_time",
        "kafka_topic",
        "queue_id",
        "queue_offset",
    )

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
        self._rec: Record | None = None
        self._retry = False
        self._topic = topic
        self._body: bytes | None = body
        self._msg_id: Any = msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.kafka_topic = kafka_topic
        self._tags = tags
        self._keys = keys
        self._props = {} if properties is None else properties
        self._raw = raw_headers
        self._sharding_key = sharding_key
        self._reconsume: int | None = reconsume_times
        self._ts: tuple[int | None, int | None] | None = (born_timestamp, store_timestamp)
        self._errors = header_errors
        self.consume_start_time: int | None = None

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
        original topic in ``RETRY_TOPIC``."""
        return view_of(record, kafka_topic, topic, partition, offset, retry)

    # -- decoding --------------------------------------------------------------------------
    def _decode(self) -> None:
        """Read the record's headers once (never raises on malformed headers)."""
        rec = self._rec
        assert rec is not None
        view = HeaderView.read(rec.headers())
        props = view.text if view is not EMPTY_VIEW else {}  # never share the empty dict
        errors = list(view.errors)
        self._msg_id = props.get(PROPERTY_UNIQ_KEY) or (
            f"{self.kafka_topic}:{self.queue_id}:{self.queue_offset}"
        )
        if self._reconsume is None:
            raw = props.get(PROPERTY_RECONSUME_TIME)
            times = parse_non_negative(raw)
            if times is None and raw is not None:
                errors.append(f"{PROPERTY_RECONSUME_TIME}={raw!r} is not a count: read as 0")
            self._reconsume = times or 0
        max_raw = props.get(PROPERTY_MAX_RECONSUME_TIMES)
        if max_raw is not None and _max_reconsume(max_raw) is None:
            errors.append(
                f"{PROPERTY_MAX_RECONSUME_TIMES}={max_raw!r} is not valid: group maximum used"
            )
        if self._retry:  # resetRetryTopic
            original = props.get(PROPERTY_RETRY_TOPIC)
            if original:
                self._topic = original
            else:
                errors.append(
                    f"{PROPERTY_RETRY_TOPIC} missing on a retry record: topic left as {self._topic}"
                )
            self._retry = False
        self._tags = props.get(PROPERTY_TAGS)
        self._keys = props.get(PROPERTY_KEYS)
        self._props = props
        self._raw = view.raw
        self._errors = tuple(errors)

    def _timestamps(self) -> tuple[int | None, int | None]:
        ts = self._ts
        if ts is None:
            assert self._rec is not None
            kind, value = self._rec.timestamp()
            stored = value if kind in (_TS_CREATE, _TS_LOG_APPEND) else None
            # a log-append time is when the broker stored it, not when it was born
            ts = self._ts = (stored if kind == _TS_CREATE else None, stored)
        return ts

    # -- attributes ------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        if self._retry:
            self._decode()
        return self._topic

    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            assert self._rec is not None
            body = self._body = self._rec.value() or b""
        return body

    @property
    def msg_id(self) -> str:
        if self._msg_id is _UNSET:
            self._decode()
        return self._msg_id  # type: ignore[no-any-return]

    @property
    def tags(self) -> str | None:
        if self._msg_id is _UNSET:
            self._decode()
        return self._tags

    @property
    def keys(self) -> str | None:
        if self._msg_id is _UNSET:
            self._decode()
        return self._keys

    @property
    def properties(self) -> dict[str, str]:
        if self._msg_id is _UNSET:
            self._decode()
        props = self._props
        started = self.consume_start_time
        if started is not None:
            props[PROPERTY_CONSUME_START_TIMESTAMP] = str(started)
        return props

    @property
    def raw_headers(self) -> tuple[RawHeader, ...]:
        if self._msg_id is _UNSET:
            self._decode()
        return self._raw

    @property
    def header_errors(self) -> tuple[str, ...]:
        if self._msg_id is _UNSET:
            self._decode()
        return self._errors

    @property
    def reconsume_times(self) -> int:
        times = self._reconsume
        if times is None:
            self._decode()
            times = self._reconsume
        assert times is not None
        return times

    @property
    def sharding_key(self) -> bytes | None:
        if self._rec is None:
            return self._sharding_key
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
        if self._rec is not None and not self._rec.headers():
            return None  # a plain record: nothing to decode
        raw = self.properties.get(HEADER_ORIGIN_BORN_MS)
        if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 19:
            return int(raw)
        return None

    @property
    def origin_message_id(self) -> str:
        return self.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or self.msg_id

    @property
    def max_reconsume_times(self) -> int | None:
        """The per-message ``MAX_RECONSUME_TIMES`` override (``None`` when absent or bad)."""
        raw = self.properties.get(PROPERTY_MAX_RECONSUME_TIMES)
        return None if raw is None else _max_reconsume(raw)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def get_user_properties(self, system: Mapping[str, object] | frozenset[str]) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in system}

    def redelivered(self) -> MessageExt:
        """The same message delivered once more: ``reconsume_times + 1`` (a local retry)."""
        again = MessageExt.__new__(MessageExt)
        for name in MessageExt.__slots__:
            value = getattr(self, name, _UNSET)  # header-backed slots stay unset until decoded
            if value is not _UNSET or name == "_msg_id":
                object.__setattr__(again, name, value)
        if again._msg_id is not _UNSET:
            again._props = dict(again._props)
        again._reconsume = self.reconsume_times + 1
        again.consume_start_time = None
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


def _max_reconsume(raw: str) -> int | None:
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= -1 else None


def view_of(  # noqa: PLR0917 - positional on purpose: called once per message
    record: Record,
    kafka_topic: str,
    topic: str,
    partition: int,
    offset: int,
    retry: bool,
    _new: Any = object.__new__,
    _cls: type[MessageExt] = MessageExt,
    _unset: Any = _UNSET,
) -> MessageExt:
    """:meth:`MessageExt.of_record` with positional arguments: the consumers' hot path."""
    msg: MessageExt = _new(_cls)
    msg._rec = record
    msg._retry = retry
    msg._topic = topic
    msg._body = None
    msg._msg_id = _unset
    msg.queue_id = partition
    msg.queue_offset = offset
    msg.kafka_topic = kafka_topic
    msg._reconsume = None
    msg._ts = None
    msg.consume_start_time = None
    return msg
