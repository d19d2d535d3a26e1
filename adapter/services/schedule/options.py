"""What a ScheduleService is configured with and what it counts: its options (typed for
callers, validated as a dataclass), the delivery guarantee it forwards with, and its
stats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypedDict

from adapter.constants import DEFAULT_SCHEDULE_SERVICE_GROUP
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.delay import DelayLevels
from adapter.core.offsets import ConsumeFromWhere, consume_from_where_of
from adapter.core.stats import Histogram, LatencySummary, Reservoir
from adapter.core.trace import TraceSink
from adapter.errors import ConfigError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_int, check_port, check_seconds
from adapter.io.loop import ErrorCallback

__all__ = [
    "DeliveryGuarantee",
    "ScheduleServiceOptions",
    "ScheduleServiceSettings",
    "ScheduleStats",
]


class DeliveryGuarantee(str, Enum):
    """How the ScheduleService forwards due messages."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    """Commit a delay-topic offset after the forward is acknowledged; a crash between the
    two forwards the message again (consumers de-duplicate on ``UNIQ_KEY``)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    """Forwards and delay-topic offsets commit in one Kafka transaction per loop pass;
    readers with ``isolation.level=read_committed`` (the default) never see a duplicate."""


class ScheduleServiceOptions(TypedDict, total=False):
    """Keyword options of :class:`ScheduleService`."""

    delay_levels: DelayLevels | str | None
    namespace: str | None
    group: str | None
    delivery: DeliveryGuarantee | str
    batch_size: int
    poll_timeout_s: float
    retry_after_failure_s: float
    partitions: int
    auto_create_topics: bool
    transactional_id: str | None
    trace_topic: str | None
    trace_sink: TraceSink | None
    tracing: bool
    clock: Clock
    buffer_max: int
    txn_linger_ms: int
    tick_ms: int
    shutdown_timeout: float
    on_error: ErrorCallback | None
    metrics_port: int | None
    metrics_registry: Any
    metrics_addr: str
    lag_groups: Sequence[str]
    lag_horizon_s: float
    lag_consume_from_where: ConsumeFromWhere | str


@dataclass(frozen=True, slots=True)
class ScheduleServiceSettings:
    """The validated options (see :class:`ScheduleServiceOptions`)."""

    delay_levels: DelayLevels | str | None = None
    namespace: str | None = None
    group: str | None = None
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    batch_size: int = 500
    poll_timeout_s: float = 0.1
    retry_after_failure_s: float = 1.0
    partitions: int = 3
    auto_create_topics: bool = True
    transactional_id: str | None = None
    trace_topic: str | None = None
    trace_sink: TraceSink | None = None
    #: ``False``: no OpenTelemetry ``forward`` spans from this service, though
    #: :func:`adapter.telemetry.instrument` is in effect
    tracing: bool = True
    clock: Clock = SYSTEM_CLOCK
    #: entries a level partition buffers before it stops fetching (again below half)
    buffer_max: int = 5000
    #: exactly-once: how long a transaction gathers forwards before it commits
    txn_linger_ms: int = 5
    #: while entries wait, the loop wakes at most this often: what is due is forwarded at
    #: most this late, and a steady stream is taken in batches instead of record by record
    tick_ms: int = 5
    shutdown_timeout: float = 20.0
    on_error: ErrorCallback | None = None
    #: serve Prometheus metrics on this port (0: any free port)
    metrics_port: int | None = None
    #: a ``prometheus_client.CollectorRegistry`` to register the metrics in
    metrics_registry: Any = None
    #: the address the metrics endpoint binds (``0.0.0.0`` inside a container)
    metrics_addr: str = "127.0.0.1"
    #: consumer groups whose backlog gauge (``rmq_group_backlog``) the metrics serve
    lag_groups: Sequence[str] = ()
    #: their retries at the delay levels count when due within this many seconds
    lag_horizon_s: float = 60.0
    #: where those groups start on a partition without a committed offset (their retry
    #: topic: from its start, always)
    lag_consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))
        try:
            delivery = DeliveryGuarantee(self.delivery)
        except ValueError:
            raise ConfigError(
                "delivery", self.delivery, f"expected one of {[d.value for d in DeliveryGuarantee]}"
            ) from None
        object.__setattr__(self, "delivery", delivery)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("partitions", self.partitions, minimum=1)
        check_int("buffer_max", self.buffer_max, minimum=2)
        check_int("txn_linger_ms", self.txn_linger_ms, minimum=0)
        check_int("tick_ms", self.tick_ms, minimum=0)
        check_seconds("poll_timeout_s", self.poll_timeout_s)
        check_seconds("retry_after_failure_s", self.retry_after_failure_s)
        check_seconds("shutdown_timeout", self.shutdown_timeout)
        if self.namespace is not None:
            naming.schedule_topic(1, self.levels, self.namespace)  # refuses a bad namespace
        if self.on_error is not None and not callable(self.on_error):
            raise ConfigError("on_error", self.on_error, "must be a callable(exception)")
        if not isinstance(self.tracing, bool):
            raise ConfigError("tracing", self.tracing, "expected True or False")
        check_port("metrics_port", self.metrics_port)
        if isinstance(self.lag_groups, str) or not isinstance(self.lag_groups, Sequence):
            raise ConfigError("lag_groups", self.lag_groups, "must be a list of group names")
        for group in self.lag_groups:
            naming.check_group(group, "lag_groups")
        object.__setattr__(self, "lag_groups", tuple(self.lag_groups))
        check_seconds("lag_horizon_s", self.lag_horizon_s)
        object.__setattr__(
            self,
            "lag_consume_from_where",
            consume_from_where_of(self.lag_consume_from_where, None),
        )

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels

    @property
    def group_id(self) -> str:
        if self.group:
            return self.group
        if self.namespace:
            return f"{DEFAULT_SCHEDULE_SERVICE_GROUP}.{self.namespace}"
        return DEFAULT_SCHEDULE_SERVICE_GROUP


@dataclass
class ScheduleStats:
    """What the service did; ``lateness_ms`` is forward time minus due time."""

    forwarded: int = 0
    reparked: int = 0
    invalid: int = 0
    early: int = 0
    send_failures: int = 0
    pauses: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    lateness: Reservoir = field(default_factory=Reservoir)
    lateness_seconds: dict[int, Histogram] = field(default_factory=dict)
    forwarded_by_level: dict[int, int] = field(default_factory=dict)

    def lateness_ms(self) -> LatencySummary:
        return self.lateness.summary()


#: Deprecated name of :class:`ScheduleServiceOptions` (the keyword options).
ScheduleServiceOptionsDict = ScheduleServiceOptions
