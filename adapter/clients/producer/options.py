"""The options of :class:`~adapter.clients.producer.Producer`: the validated
:class:`ProducerSettings` and the ``TypedDict`` its ``**options`` are typed with."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import tenacity
from confluent_kafka import Producer as _KafkaProducer

from adapter.constants import (
    DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_MSG_TIMEOUT_MS,
)
from adapter.core.backoff import ExponentialBackoff
from adapter.core.clock import Clock
from adapter.core.delay import DelayLevels
from adapter.errors import ConfigError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_int


class ProducerOptions(TypedDict, total=False):
    """Keyword options of :class:`Producer` (RocketMQ's ``DefaultMQProducer`` settings,
    snake_case; see :class:`ProducerSettings` for each one's meaning and default)."""

    retry_times_when_send_failed: int
    retry_times_when_send_async_failed: int
    send_msg_timeout_ms: int
    delay_levels: DelayLevels | str | None
    namespace: str | None
    backoff: ExponentialBackoff
    auto_create_delay_topics: bool
    clock: Clock
    sleep: Callable[[float], Any]
    uniform: Callable[[float, float], float]
    client_factory: Callable[[dict[str, Any]], Any]
    metrics_port: int | None
    metrics_registry: Any
    metrics_addr: str
    tracing: bool


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """DefaultMQProducer settings, snake_case.

    ``client_factory`` makes the confluent-kafka client from its config dict
    (``confluent_kafka.Producer``; a stand-in in tests).
    """

    retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED
    retry_times_when_send_async_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED
    send_msg_timeout_ms: int = DEFAULT_SEND_MSG_TIMEOUT_MS
    delay_levels: DelayLevels | str | None = None
    namespace: str | None = None
    backoff: ExponentialBackoff = field(default_factory=ExponentialBackoff)
    auto_create_delay_topics: bool = True
    clock: Clock = SYSTEM_CLOCK
    sleep: Callable[[float], Any] = tenacity.nap.sleep
    uniform: Callable[[float, float], float] = random.uniform
    client_factory: Callable[[dict[str, Any]], Any] = _KafkaProducer
    #: serve Prometheus metrics on this port / register them in this registry
    metrics_port: int | None = None
    metrics_registry: Any = None
    metrics_addr: str = "127.0.0.1"
    #: ``False``: no ``send`` span and no context headers from this producer, though
    #: :func:`adapter.telemetry.instrument` is in effect
    tracing: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.tracing, bool):
            raise ConfigError("tracing", self.tracing, "expected True or False")
        check_int("retry_times_when_send_failed", self.retry_times_when_send_failed, minimum=0)
        check_int(
            "retry_times_when_send_async_failed", self.retry_times_when_send_async_failed, minimum=0
        )
        check_int("send_msg_timeout_ms", self.send_msg_timeout_ms, minimum=1)
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels


#: Deprecated name of :class:`ProducerOptions` (the keyword options).
ProducerOptionsDict = ProducerOptions
