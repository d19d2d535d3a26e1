"""The subset of confluent-kafka's client API that the adapter's loops use, as Protocols.

The group member (:mod:`adapter.clients.member.group_consumer`) and the
:class:`~adapter.io.publisher.Publisher` create their clients through a factory that defaults
to confluent-kafka's own class; a unit test hands in a factory of fakes instead.
These Protocols name what such a fake has to offer (records and partitions are
confluent-kafka's ``Message`` and ``TopicPartition``, or anything with the same methods and
attributes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "AdminFactory",
    "AdminLike",
    "ConsumerFactory",
    "ConsumerLike",
    "ProducerFactory",
    "ProducerLike",
]


class ConsumerLike(Protocol):
    """What the group member calls on its ``confluent_kafka.Consumer``."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: Any = ...,
        on_revoke: Any = ...,
        on_lost: Any = ...,
    ) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...
    def assign(self, partitions: list[Any]) -> None: ...
    def unassign(self) -> None: ...
    def incremental_assign(self, partitions: list[Any]) -> None: ...
    def incremental_unassign(self, partitions: list[Any]) -> None: ...
    def pause(self, partitions: list[Any]) -> None: ...
    def resume(self, partitions: list[Any]) -> None: ...
    def seek(self, partition: Any) -> None: ...
    def position(self, partitions: list[Any]) -> list[Any]: ...
    def store_offsets(self, message: Any = ..., offsets: Any = ...) -> None: ...
    def commit(self, *args: Any, **kwargs: Any) -> Any: ...
    def committed(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def offsets_for_times(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def get_watermark_offsets(
        self, partition: Any, timeout: float = ..., cached: bool = ...
    ) -> Any: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def memberid(self) -> str: ...
    def close(self) -> None: ...


class ProducerLike(Protocol):
    """What the :class:`~adapter.io.publisher.Publisher` calls on a ``confluent_kafka.Producer``."""

    def produce(  # noqa: PLR0917 - confluent-kafka's positional signature
        self,
        topic: str,
        value: Any = ...,
        key: Any = ...,
        partition: int = ...,
        callback: Any = ...,
        on_delivery: Any = ...,
        timestamp: int = ...,
        headers: Any = ...,
    ) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...
    def purge(self, in_queue: bool = ..., in_flight: bool = ..., blocking: bool = ...) -> None: ...
    def __len__(self) -> int: ...


class AdminLike(Protocol):
    """What lag tracking calls on a ``confluent_kafka.admin.AdminClient``: ``list_offsets``
    answers ``{TopicPartition: future of ListOffsetsResultInfo}``."""

    def list_offsets(self, topic_partition_offsets: Any, **kwargs: Any) -> dict[Any, Any]: ...


#: Creates a client from its config dict (the confluent-kafka class itself, or a fake's).
ConsumerFactory = Callable[[dict[str, Any]], ConsumerLike]
ProducerFactory = Callable[[dict[str, Any]], ProducerLike]
AdminFactory = Callable[[dict[str, Any]], AdminLike]
