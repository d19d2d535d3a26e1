"""The message types users see: :class:`Message` (to send) and :class:`MessageExt` (received).

Pure data: no clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from adapter.constants import (
    HEADER_ORIGIN_BORN_MS,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_TAGS,
)

#: One Kafka header as it travels: key and raw value (``None`` is a null value).
RawHeader = tuple[str, bytes | None]


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


@dataclass(slots=True, kw_only=True)
class MessageExt:
    """A received message (RocketMQ ``MessageExt``).

    ``topic`` is the logical topic the message was sent to: for a retried message, the
    original topic again (``resetRetryTopic``).  ``properties`` holds every header decoded
    as text; ``raw_headers`` the headers exactly as read, which a send-back re-emits
    unchanged (so bytes that are not UTF-8 survive every hop).  ``header_errors`` lists
    what the codec found malformed and how it handled it.
    """

    topic: str
    body: bytes
    msg_id: str
    queue_id: int
    queue_offset: int
    kafka_topic: str
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    raw_headers: tuple[RawHeader, ...] = ()
    sharding_key: bytes | None = None
    reconsume_times: int = 0
    born_timestamp: int | None = None
    store_timestamp: int | None = None
    header_errors: tuple[str, ...] = ()

    @property
    def origin_message_id(self) -> str:
        return self.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or self.msg_id

    @property
    def origin_born_timestamp(self) -> int | None:
        """Born timestamp of the first delivery (``RMQ_ORIGIN_BORN_MS``), else this one's."""
        raw = self.properties.get(HEADER_ORIGIN_BORN_MS)
        if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 19:
            return int(raw)
        return self.born_timestamp

    @property
    def max_reconsume_times(self) -> int | None:
        """The per-message ``MAX_RECONSUME_TIMES`` override (``None`` when absent or bad)."""
        raw = self.properties.get(PROPERTY_MAX_RECONSUME_TIMES)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            return None
        return value if value >= -1 else None

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def get_user_properties(self, system: Mapping[str, object] | frozenset[str]) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in system}
