"""The options of :class:`~adapter.clients.push.push_consumer.PushConsumer`: the keyword options as
typed (:class:`PushConsumerOptions`) and validated (:class:`PushConsumerSettings`), and the
``consume_timestamp`` forms it accepts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, TypedDict

from adapter.constants import (
    DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN,
    DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE,
    DEFAULT_CONSUME_THREAD_MAX,
    DEFAULT_CONSUME_TIMEOUT_S,
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
    DEFAULT_SEND_BACK_RETRY_INTERVAL_S,
    DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS,
)
from adapter.core.breaker import CircuitBreaker
from adapter.core.clock import Clock
from adapter.core.delay import DelayLevels, resolve_max_reconsume_times
from adapter.core.engine.orderly import SUSPEND_MAX_MS, SUSPEND_MIN_MS, Ordering
from adapter.core.listener import ListenerMode
from adapter.core.offsets import (
    ConsumeFromWhere,
    FlowLimits,
    consume_from_where_of,
    timestamp_ms,
)
from adapter.core.routing import MessageModel
from adapter.core.trace import TraceSink
from adapter.errors import ConfigError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_int, check_port, check_seconds
from adapter.io.loop import ErrorCallback

__all__ = ["PushConsumerOptions", "PushConsumerSettings", "timestamp_ms"]


class PushConsumerOptions(TypedDict, total=False):
    """Keyword options of :class:`PushConsumer` (RocketMQ's ``DefaultMQPushConsumer``
    settings, snake_case; times in seconds unless the name says otherwise)."""

    message_model: MessageModel | str
    consume_message_batch_max_size: int
    pull_batch_size: int
    max_reconsume_times: int
    consume_thread_max: int
    consume_timeout: float
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue: int
    consume_concurrently_max_span: int
    delay_levels: DelayLevels | str | None
    send_back_retry_interval: float
    suspend_current_queue_time_millis: int
    ordering: Ordering | str
    max_suspended_keys_per_queue: int
    namespace: str | None
    auto_create_topics: bool
    partitions: int
    offset_store_dir: str | None
    instance_name: str | None
    shutdown_await: float
    trace_topic: str | None
    trace_sink: TraceSink | None
    tracing: bool
    clock: Clock
    listener_mode: ListenerMode | str
    consume_from_where: ConsumeFromWhere | str | None
    consume_timestamp: int | str | datetime | None
    on_error: ErrorCallback | None
    metrics_port: int | None
    metrics_registry: Any
    metrics_addr: str
    event_loop: Any
    offset_resets: bool
    circuit_breaker: CircuitBreaker | None


@dataclass(frozen=True, slots=True)
class PushConsumerSettings:
    """The validated options (see :class:`PushConsumerOptions`)."""

    message_model: MessageModel = MessageModel.CLUSTERING
    consume_message_batch_max_size: int = DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    max_reconsume_times: int = -1
    consume_thread_max: int = DEFAULT_CONSUME_THREAD_MAX
    consume_timeout: float = DEFAULT_CONSUME_TIMEOUT_S
    pull_threshold_for_queue: int = DEFAULT_PULL_THRESHOLD_FOR_QUEUE
    pull_threshold_size_for_queue: int = DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB
    consume_concurrently_max_span: int = DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN
    delay_levels: DelayLevels | str | None = None
    send_back_retry_interval: float = DEFAULT_SEND_BACK_RETRY_INTERVAL_S
    #: orderly listeners: how long a suspended batch waits before it is consumed again
    #: (RocketMQ ``suspendCurrentQueueTimeMillis``; 10..30000)
    suspend_current_queue_time_millis: int = DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS
    #: orderly listeners: what stays in order, a whole partition (RocketMQ) or each key
    ordering: Ordering = Ordering.PARTITION
    #: orderly listeners, ``ordering="key"``: a partition stops fetching while more of its
    #: keys than this wait for a suspended batch
    max_suspended_keys_per_queue: int = 100
    namespace: str | None = None
    auto_create_topics: bool = True
    partitions: int = 3
    offset_store_dir: str | None = None
    instance_name: str | None = None
    shutdown_await: float = 20.0
    trace_topic: str | None = None
    trace_sink: TraceSink | None = None
    #: ``False``: no OpenTelemetry spans from this consumer, though
    #: :func:`adapter.telemetry.instrument` is in effect
    tracing: bool = True
    clock: Clock = SYSTEM_CLOCK
    listener_mode: ListenerMode = ListenerMode.AUTO
    consume_from_where: ConsumeFromWhere | None = None
    consume_timestamp: int | str | datetime | None = None
    on_error: ErrorCallback | None = None
    #: serve Prometheus metrics on this port (0: any free port; ``None``: only into
    #: ``metrics_registry`` when one is given)
    metrics_port: int | None = None
    #: a ``prometheus_client.CollectorRegistry`` to register the metrics in
    metrics_registry: Any = None
    #: the address the metrics endpoint binds (``0.0.0.0`` inside a container)
    metrics_addr: str = "127.0.0.1"
    #: ``async def`` listeners run on this asyncio event loop (``None``: an event-loop
    #: thread of the consumer's own), at most ``consume_thread_max`` batches at a time
    event_loop: Any = None
    #: clustering: apply ``rmq-kafka group reset-offset --force`` while running (RocketMQ's
    #: reset by time reaches live consumers); the member reads the control topic each second
    offset_resets: bool = True
    #: stop consuming while everything fails (``None``: no breaker; see
    #: :class:`~adapter.core.breaker.CircuitBreaker`)
    circuit_breaker: CircuitBreaker | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "message_model", _enum(MessageModel, "message_model", self.message_model)
        )
        object.__setattr__(
            self, "listener_mode", _enum(ListenerMode, "listener_mode", self.listener_mode)
        )
        check_int("consume_message_batch_max_size", self.consume_message_batch_max_size, minimum=1)
        if self.consume_message_batch_max_size > 1024:
            raise ConfigError(
                "consume_message_batch_max_size",
                self.consume_message_batch_max_size,
                "must be <= 1024",
            )
        check_int("pull_batch_size", self.pull_batch_size, minimum=1)
        resolve_max_reconsume_times(self.max_reconsume_times)
        check_int("consume_thread_max", self.consume_thread_max, minimum=1)
        check_seconds("consume_timeout", self.consume_timeout)
        check_int("pull_threshold_for_queue", self.pull_threshold_for_queue, minimum=1)
        check_int("pull_threshold_size_for_queue", self.pull_threshold_size_for_queue, minimum=1)
        check_int("consume_concurrently_max_span", self.consume_concurrently_max_span, minimum=1)
        check_seconds("send_back_retry_interval", self.send_back_retry_interval)
        check_seconds("shutdown_await", self.shutdown_await)
        check_int("partitions", self.partitions, minimum=1)
        object.__setattr__(self, "ordering", _enum(Ordering, "ordering", self.ordering))
        check_int(
            "suspend_current_queue_time_millis",
            self.suspend_current_queue_time_millis,
            minimum=SUSPEND_MIN_MS,
        )
        if self.suspend_current_queue_time_millis > SUSPEND_MAX_MS:
            raise ConfigError(
                "suspend_current_queue_time_millis",
                self.suspend_current_queue_time_millis,
                f"must be <= {SUSPEND_MAX_MS}",
            )
        check_int("max_suspended_keys_per_queue", self.max_suspended_keys_per_queue, minimum=1)
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))
        if self.consume_from_where is not None:
            object.__setattr__(
                self, "consume_from_where", consume_from_where_of(self.consume_from_where, None)
            )
        if self.consume_timestamp is not None:
            timestamp_ms(self.consume_timestamp)
        if self.on_error is not None and not callable(self.on_error):
            raise ConfigError("on_error", self.on_error, "must be a callable(exception)")
        if self.circuit_breaker is not None and not isinstance(
            self.circuit_breaker, CircuitBreaker
        ):
            raise ConfigError("circuit_breaker", self.circuit_breaker, "expected a CircuitBreaker")
        if not isinstance(self.tracing, bool):
            raise ConfigError("tracing", self.tracing, "expected True or False")
        check_port("metrics_port", self.metrics_port)

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels

    @property
    def flow_limits(self) -> FlowLimits:
        return FlowLimits(
            max_count=self.pull_threshold_for_queue,
            max_bytes=self.pull_threshold_size_for_queue * 1024 * 1024,
            max_span=self.consume_concurrently_max_span,
        )


def _enum(cls: type[Enum], name: str, value: Any) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise ConfigError(name, value, f"expected one of {[m.value for m in cls]}") from None
