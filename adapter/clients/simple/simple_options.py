"""The options of :class:`SimpleConsumer`: the keyword
options (``SimpleConsumerOptions``), their validation (``SimpleOptions``) and the backends
a consumer may run on (``SimpleConsumerBackend``; the facade picks the class).

Kept apart from the consumer so every backend (:mod:`adapter.clients.simple.classic_backend`,
:mod:`adapter.clients.share.share_backend`) takes the same options without the other's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, TypedDict

from adapter.constants import (
    DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
)
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.engine.pull import (
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MAX_UNACKED,
    seconds_of,
)
from adapter.core.offsets import ConsumeFromWhere, consume_from_where_of, timestamp_ms
from adapter.errors import ConfigError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_int, check_kafka_config, check_seconds
from adapter.io.loop import ErrorCallback

__all__ = [
    "DEFAULT_AWAIT_DURATION_S",
    "MAX_AWAIT_DURATION_S",
    "SimpleConsumerBackend",
    "SimpleConsumerOptions",
    "SimpleOptions",
]

#: RocketMQ's Python client waits this long (seconds) for the first message of a receive.
DEFAULT_AWAIT_DURATION_S = 20.0
#: Longest ``await_duration`` accepted.
MAX_AWAIT_DURATION_S = 3600.0


class SimpleConsumerBackend(str, Enum):
    """Where a :class:`SimpleConsumer`'s queue semantics live."""

    CLASSIC = "classic"
    """A classic consumer group: invisibility tracked by the client, at most one consumer per
    partition (the default)."""
    SHARE = "share"
    """A Kafka share group (KIP-932, broker 4.2+): broker-side record locks and delivery
    counts, any number of consumers per partition (docs/semantics.md §4.13.1)."""


class SimpleConsumerOptions(TypedDict, total=False):
    """Keyword options of :class:`SimpleConsumer` (times in seconds)."""

    await_duration: float | timedelta
    max_delivery_attempts: int
    max_unacked_messages: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue: int
    consume_concurrently_max_span: int
    auto_create_topics: bool
    partitions: int
    consume_from_where: ConsumeFromWhere | str | None
    consume_timestamp: int | str | datetime | None
    shutdown_await: float
    clock: Clock
    on_error: ErrorCallback | None
    #: share backend only: the group's record lock (``share.record.lock.duration.ms``)
    lock_duration: float | timedelta | None
    #: ``False``: no span and no copy's span for this consumer while
    #: :func:`adapter.telemetry.instrument` is in effect
    tracing: bool


@dataclass(frozen=True, slots=True)
class SimpleOptions:
    """The validated options (see :class:`SimpleConsumerOptions`)."""

    #: how long ``receive`` waits for the first message (RocketMQ: ``awaitDuration``)
    await_duration: float | timedelta = DEFAULT_AWAIT_DURATION_S
    #: deliveries before the DLQ (RocketMQ: the group's retry policy, 16 retries + 1)
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    #: received messages neither acknowledged nor expired that this consumer may hold
    max_unacked_messages: int = DEFAULT_MAX_UNACKED
    #: per partition, messages in flight (buffered or received) before fetching pauses
    pull_threshold_for_queue: int = DEFAULT_PULL_THRESHOLD_FOR_QUEUE
    pull_threshold_size_for_queue: int = DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB
    consume_concurrently_max_span: int = DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN
    auto_create_topics: bool = True
    partitions: int = 3
    consume_from_where: ConsumeFromWhere | str | None = None
    consume_timestamp: int | str | datetime | None = None
    #: on shutdown, how long copies of expired messages may take to be acknowledged
    shutdown_await: float = 10.0
    clock: Clock = field(default_factory=lambda: SYSTEM_CLOCK)
    on_error: ErrorCallback | None = None
    #: share backend only (refused here: a classic group has no record locks)
    lock_duration: float | timedelta | None = None
    #: ``False``: this consumer makes no span while :func:`adapter.telemetry.instrument`
    #: is in effect
    tracing: bool = True

    def __post_init__(self) -> None:
        if self.lock_duration is not None:
            raise ConfigError(
                "lock_duration", self.lock_duration, "only with backend='share' (record locks)"
            )
        check_int("max_delivery_attempts", self.max_delivery_attempts, minimum=1)
        check_int("pull_threshold_for_queue", self.pull_threshold_for_queue, minimum=1)
        check_int("pull_threshold_size_for_queue", self.pull_threshold_size_for_queue, minimum=1)
        check_int("consume_concurrently_max_span", self.consume_concurrently_max_span, minimum=1)
        self.check_common()

    def check_common(self) -> None:
        """The checks of the options both backends use (the share backend's options are
        this class with its own ``__post_init__``)."""
        seconds_of("await_duration", self.await_duration, minimum=0, maximum=MAX_AWAIT_DURATION_S)
        check_int("max_unacked_messages", self.max_unacked_messages, minimum=1)
        if self.max_unacked_messages > 1_000_000:
            raise ConfigError(
                "max_unacked_messages", self.max_unacked_messages, "must be <= 1000000"
            )
        check_int("partitions", self.partitions, minimum=1)
        check_seconds("shutdown_await", self.shutdown_await)
        if self.consume_from_where is not None:
            object.__setattr__(
                self, "consume_from_where", consume_from_where_of(self.consume_from_where, None)
            )
        if self.consume_timestamp is not None:
            timestamp_ms(self.consume_timestamp)
        if self.on_error is not None and not callable(self.on_error):
            raise ConfigError("on_error", self.on_error, "must be a callable(exception)")
        if not isinstance(self.tracing, bool):
            raise ConfigError("tracing", self.tracing, "expected True or False")

    @property
    def await_s(self) -> float:
        return seconds_of("await_duration", self.await_duration, minimum=0)


def group_config(
    config: Mapping[str, Any], consumer_group: str | None
) -> tuple[dict[str, Any], str]:
    """A SimpleConsumer's checked consumer config and its group: ``consumer_group`` (RocketMQ's
    constructor argument) or ``group.id``; both given must agree."""
    conf = check_kafka_config(config, "consumer")
    if consumer_group is not None:
        naming.check_group(consumer_group, "consumer_group")
        given = conf.get("group.id")
        if given is not None and given != consumer_group:
            raise ConfigError("group.id", given, f"differs from consumer_group={consumer_group!r}")
        conf["group.id"] = consumer_group
    group = conf.get("group.id")
    if not isinstance(group, str) or not group:
        raise ConfigError("group.id", group, "a consumer group is required")
    return conf, group
