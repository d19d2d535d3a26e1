"""The Kafka record a received message views: what one offers (:class:`Record`,
confluent-kafka's ``Message`` fits) and :class:`Fields`, a record given field by field
(tools and tests build messages from these).  Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from adapter.core.headers import RawHeader


class Record(Protocol):
    """What a Kafka record offers (``confluent_kafka.Message`` fits)."""

    def topic(self) -> Any: ...

    def partition(self) -> Any: ...

    def offset(self) -> Any: ...

    def value(self) -> bytes | None: ...

    def key(self) -> Any: ...

    def headers(self) -> Any: ...

    def timestamp(self) -> tuple[int, int]: ...


#: ``timestamp()`` types (librdkafka): none, create time, log-append time.
TS_CREATE = 1
TS_LOG_APPEND = 2


@dataclass(frozen=True, slots=True)
class Fields:
    """A record given field by field (tools and tests build messages from these)."""

    topic_: str
    partition_: int
    offset_: int
    value_: bytes | None = None
    key_: bytes | None = None
    headers_: tuple[RawHeader, ...] | None = None
    timestamp_: tuple[int, int] = (0, 0)

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def value(self) -> bytes | None:
        return self.value_

    def key(self) -> bytes | None:
        return self.key_

    def headers(self) -> tuple[RawHeader, ...] | None:
        return self.headers_

    def timestamp(self) -> tuple[int, int]:
        return self.timestamp_
