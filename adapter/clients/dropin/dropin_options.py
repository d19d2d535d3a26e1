"""The options of the confluent-kafka drop-in (:class:`adapter.kafka.Consumer`): the keyword
options as typed (:class:`DropInOptions`) and validated (:class:`DropInSettings`), and how a
confluent-kafka flag given as text is read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from adapter.constants import DEFAULT_SEND_BACK_RETRY_INTERVAL_S
from adapter.core.breaker import CircuitBreaker
from adapter.core.clock import Clock
from adapter.core.delay import DelayLevels, resolve_max_reconsume_times
from adapter.errors import ConfigError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_int, check_seconds

__all__ = ["DropInOptions", "DropInSettings", "truthy"]


class DropInOptions(TypedDict, total=False):
    """Keyword options of :class:`~adapter.kafka.Consumer` (times in seconds)."""

    max_reconsume_times: int
    delay_levels: DelayLevels | str | None
    namespace: str | None
    auto_create_topics: bool
    partitions: int
    send_back_retry_interval: float
    circuit_breaker: CircuitBreaker | None
    clock: Clock
    tracing: bool


@dataclass(frozen=True, slots=True)
class DropInSettings:
    max_reconsume_times: int = -1
    delay_levels: DelayLevels | str | None = None
    namespace: str | None = None
    auto_create_topics: bool = True
    partitions: int = 3
    send_back_retry_interval: float = DEFAULT_SEND_BACK_RETRY_INTERVAL_S
    #: off by default; see :mod:`adapter.clients.dropin.dropin_circuit`
    circuit_breaker: CircuitBreaker | None = None
    clock: Clock = field(default_factory=lambda: SYSTEM_CLOCK)
    #: ``False``: this consumer makes no span (its ``poll()``/``consume()`` receives, its
    #: copies) while :func:`adapter.telemetry.instrument` is in effect
    tracing: bool = True

    def __post_init__(self) -> None:
        resolve_max_reconsume_times(self.max_reconsume_times)
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))
        check_int("partitions", self.partitions, minimum=1)
        check_seconds("send_back_retry_interval", self.send_back_retry_interval)
        if self.circuit_breaker is not None and not isinstance(
            self.circuit_breaker, CircuitBreaker
        ):
            raise ConfigError("circuit_breaker", self.circuit_breaker, "expected a CircuitBreaker")
        if not isinstance(self.tracing, bool):
            raise ConfigError("tracing", self.tracing, "expected True or False")


def truthy(value: Any) -> bool:
    """A confluent-kafka boolean setting, given as a bool or as text (``"true"``, ``"1"``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
