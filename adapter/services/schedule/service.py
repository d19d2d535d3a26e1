"""``ScheduleService``: serves the delay-level topics (RocketMQ's ScheduleMessageService).

One consumer group reads every delay-level topic of its namespace (by pattern, so a level
topic of any delay table is served: the delay is part of its name).  Entries of a level
partition become due in order; the service keeps fetching while entries wait (up to a
bound), forwards each to its ``REAL_TOPIC`` when due, and never early
(:mod:`adapter.core.engine.schedule` has the rules).  How forwards become final is the
:mod:`~adapter.services.schedule.delivery` guarantee: at-least-once or exactly-once.

Entries that cannot be scheduled (no ``REAL_TOPIC``, a bad due time, a destination that
does not exist or refuses them for good) go to ``%DLQ%<service group>`` with
``RMQ_DLQ_REASON=INVALID_SCHEDULE_ENTRY`` and the reason in ``RMQ_FAILURE_MESSAGE``.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypedDict, Unpack

import tenacity
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from adapter.constants import (
    DEFAULT_SCHEDULE_SERVICE_GROUP,
    KAFKA_SCHEDULE_PREFIX,
    METADATA_REFRESH_MS,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import hops, naming
from adapter.core.clock import Clock
from adapter.core.codec import OmittedBody
from adapter.core.delay import UNIT_MS, DelayLevels
from adapter.core.engine.actions import Pause, Resume, StoreOffsets
from adapter.core.engine.schedule import Entry, Mark, Rewind, ScheduleAction, ScheduleEngine
from adapter.core.headers import HeaderView, parse_non_negative
from adapter.core.publishing import Escalation, escalate
from adapter.core.schedule import Forward, Invalid, Repark, decide_due
from adapter.core.stats import LATENCY_BUCKETS_S, Histogram, LatencySummary, Reservoir
from adapter.core.trace import TraceEvent, TraceSink, TraceStatus
from adapter.core.types import TP
from adapter.errors import ConfigError, TopicNameError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import (
    admin_config,
    build_options,
    check_int,
    check_kafka_config,
    check_seconds,
    require_setting,
)
from adapter.io.errors import (
    FatalErrorWatch,
    error_text,
    is_unknown_topic,
    make_client,
    refusal_of,
)
from adapter.io.loop import ClientLoop, ErrorCallback
from adapter.io.polling import apply_assignment, consume_available, is_cooperative
from adapter.io.polling import release_assignment as release
from adapter.io.publisher import Publisher
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.schedule.delivery import AtLeastOnce, ExactlyOnce

log = logging.getLogger("adapter.schedule")

INVALID_SCHEDULE_ENTRY = "INVALID_SCHEDULE_ENTRY"
_LOOKUP_TIMEOUT_S = 10.0
#: A destination's partition count is looked up again once it is this old: a destination
#: deleted meanwhile is dead-lettered before a forward to it waits out its timeout (and,
#: exactly-once, holds back the transaction of every other entry).
DESTINATION_TTL_S = 1.0
#: How long a forward to a destination whose description is stale waits for the new one.
REFRESH_WAIT_S = 2.0
_LEVEL_PATTERN = r"L[0-9]{2,}-[0-9]+(ms|s|m|h|d)$"


class DeliveryGuarantee(str, Enum):
    """How the ScheduleService forwards due messages."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    """Commit a delay-topic offset after the forward is acknowledged; a crash between the
    two forwards the message again (consumers de-duplicate on ``UNIQ_KEY``)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    """Forwards and delay-topic offsets commit in one Kafka transaction per loop pass;
    readers with ``isolation.level=read_committed`` (the default) never see a duplicate."""


class ScheduleServiceOptionsDict(TypedDict, total=False):
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
    clock: Clock
    buffer_max: int
    txn_linger_ms: int
    tick_ms: int
    shutdown_timeout: float
    on_error: ErrorCallback | None
    metrics_port: int | None
    metrics_registry: Any
    metrics_addr: str


@dataclass(frozen=True, slots=True)
class ScheduleServiceOptions:
    """The validated options (see :class:`ScheduleServiceOptionsDict`)."""

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
    clock: Clock = SYSTEM_CLOCK
    #: entries a level partition buffers before it stops fetching (again below half)
    buffer_max: int = 5000
    #: exactly-once: how long a transaction gathers forwards before it commits
    txn_linger_ms: int = 5
    #: while entries wait, the loop wakes at most this often: what is due is forwarded at
    #: most this late, and a steady stream is taken in batches instead of record by record
    tick_ms: int = 5
    shutdown_timeout: float = 30.0
    on_error: ErrorCallback | None = None
    #: serve Prometheus metrics on this port (0: any free port)
    metrics_port: int | None = None
    #: a ``prometheus_client.CollectorRegistry`` to register the metrics in
    metrics_registry: Any = None
    #: the address the metrics endpoint binds (``0.0.0.0`` inside a container)
    metrics_addr: str = "127.0.0.1"

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
        if self.metrics_port is not None:
            check_int("metrics_port", self.metrics_port, minimum=0)
            if self.metrics_port > 65535:
                raise ConfigError("metrics_port", self.metrics_port, "must be <= 65535")

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


def level_delay_ms(kafka_topic: str) -> tuple[int, int] | None:
    """``(level, delay in ms)`` of a delay-level topic, read from its name."""
    parsed = naming.schedule_level_of(kafka_topic)
    if parsed is None:
        return None
    level, token = parsed
    for unit in ("ms", "s", "m", "h", "d"):
        if token.endswith(unit) and token[: -len(unit)].isdigit():
            return level, int(token[: -len(unit)]) * UNIT_MS[unit]
    return None


def level_topics_pattern(namespace: str | None) -> str:
    """The subscription pattern of every delay-level topic of ``namespace``: the service
    serves every delay table's topics, not only its own table's."""
    prefix = re.escape(KAFKA_SCHEDULE_PREFIX)
    if namespace:
        return f"^{prefix}{naming.escape(namespace)}\\.{_LEVEL_PATTERN}"
    return f"^{prefix}{_LEVEL_PATTERN}"


@dataclass(slots=True, eq=False)
class _Copy:
    """What a produced record was for (the token its verdict comes back with)."""

    entry: Entry
    record: hops.OutRecord
    dead_letter: bool = False
    alone: bool = False
    omitted: bool = False
    epoch: int = 0  # exactly-once: the transaction it was produced in


class ScheduleService:
    """Forwards delay-level entries to their real topics when due.  Scales as a group."""

    def __init__(
        self, config: Mapping[str, Any], **options: Unpack[ScheduleServiceOptionsDict]
    ) -> None:
        self.options = build_options(ScheduleServiceOptions, options, "ScheduleService")
        self._config = check_kafka_config(config, "ScheduleService")
        self.group = self.options.group_id
        self.stats = ScheduleStats()
        self._errors = FatalErrorWatch(self._config.get("error_cb"))
        self._handler = _ServiceLoop(self)
        self._loop = ClientLoop(
            "rmq-schedule-service",
            self._handler,
            shutdown_timeout=self.options.shutdown_timeout,
            errors=self._errors,
            on_error=self._died,
        )
        #: what stopped the service loop, if it died
        self.error: BaseException | None = None
        self._metrics: Any = None

    def _died(self, exc: BaseException) -> None:
        self.error = exc
        if self.options.on_error is not None:
            self.options.on_error(exc)

    # -- lifecycle -------------------------------------------------------------------------
    def _prepare(self) -> None:
        if self.options.auto_create_topics:
            ensure_topics(
                self._config,
                plan_topics(
                    groups=[self.group],
                    delay_levels=self.options.levels,
                    namespace=self.options.namespace,
                    partitions=self.options.partitions,
                ),
            )

    def start(self) -> ScheduleService:
        """Run the service on a background thread (idempotent)."""
        if self._loop.running:
            return self
        self._prepare()
        self._loop.start()
        self._expose_metrics()
        return self

    def _expose_metrics(self) -> None:
        opts = self.options
        if self._metrics is not None or (
            opts.metrics_port is None and opts.metrics_registry is None
        ):
            return
        from adapter.io.metrics import ScheduleCollector, expose  # on use

        handler = self._handler
        self._metrics = expose(
            ScheduleCollector(
                self.group, self.stats, handler.engine, lambda t: handler._level(t)[0]
            ),
            registry=opts.metrics_registry,
            port=opts.metrics_port,
            addr=opts.metrics_addr,
        )

    @property
    def metrics_endpoint(self) -> str | None:
        """Where the metrics are served (``metrics_port``)."""
        return None if self._metrics is None else self._metrics.endpoint

    def run(self) -> None:
        """Run the service on this thread until :meth:`shutdown` (e.g. from a signal
        handler); raises what stopped it."""
        self._prepare()
        self._expose_metrics()
        try:
            self._loop.run()
        finally:
            self._close_metrics()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop, finish what is in flight (exactly-once: commit the open transaction),
        commit and close; ``timeout`` bounds the wait (default ``shutdown_timeout`` plus a
        margin).  A service whose loop died raises that error here."""
        try:
            self._loop.shutdown(timeout)
        finally:
            self._close_metrics()

    def _close_metrics(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def check_alive(self) -> None:
        """Raise what stopped the service loop, or a fatal client error that stands now."""
        self._loop.check_alive()

    def __enter__(self) -> ScheduleService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- figures ---------------------------------------------------------------------------
    @property
    def assignment(self) -> set[TP]:
        return set(self._handler.engine.partitions)

    def running_info(self) -> dict[str, Any]:
        """A snapshot for diagnostics: per partition entries waiting and the oldest due
        time, forwards in flight, held partitions, the open transaction."""
        h = self._handler
        delivery = h.delivery
        return {
            "group": self.group,
            "running": self._loop.running,
            "error": None if self.error is None else repr(self.error),
            "in_flight": delivery.in_flight() if delivery is not None else 0,
            "forwards_unsettled": h.engine.inflight(),
            "transaction_open": isinstance(delivery, ExactlyOnce) and delivery.open,
            "held": [f"{t}[{p}]" for t, p in h.engine.held()],
            "waiting": {
                f"{t}[{p}]": {"entries": n, "oldest_due_ms": due}
                for (t, p), (n, due) in sorted(h.engine.waiting().items())
            },
        }


class _ServiceLoop:
    """The service's :class:`~adapter.io.loop.LoopHandler`."""

    def __init__(self, service: ScheduleService) -> None:
        self.service = service
        opts = service.options
        self.opts = opts
        self.clock = opts.clock
        self.stats = service.stats
        self.engine = ScheduleEngine(
            buffer_max=opts.buffer_max,
            retry_after_ms=int(opts.retry_after_failure_s * 1000),
        )
        self.topics = hops.GroupTopics(service.group, opts.levels, opts.namespace)
        self.dlq = naming.dlq_topic(service.group)
        self.delivery: AtLeastOnce | ExactlyOnce | None = None
        self._consumer: Any = None
        self._cooperative = True
        self._destinations = _Destinations(service._config, DESTINATION_TTL_S)
        self._levels: dict[str, tuple[int, int]] = {}  # Kafka topic -> (level, delay ms)
        self._trace: TraceSink | None = opts.trace_sink
        self._owned_trace: Any = None
        self._txn_since: float | None = None

    @property
    def eos(self) -> bool:
        return self.opts.delivery is DeliveryGuarantee.EXACTLY_ONCE

    # -- clients ---------------------------------------------------------------------------
    def open(self) -> None:
        svc, opts = self.service, self.opts
        if opts.trace_topic and self._trace is None:
            trace_module = importlib.import_module("adapter.analytics.trace")
            self._owned_trace = trace_module.KafkaTraceSink(svc._config, opts.trace_topic)
            self._trace = self._owned_trace
        cconf = dict(svc._config)
        cconf["group.id"] = svc.group
        cconf["error_cb"] = svc._errors
        cconf["auto.offset.reset"] = "earliest"  # out of range: never skip an entry
        cconf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        # a resumed partition joins the next fetch request: keep the broker's long poll
        # short; and never sit out librdkafka's 1 s fetch back-off with entries due
        cconf.setdefault("fetch.wait.max.ms", 20)
        cconf.setdefault("fetch.queue.backoff.ms", 20)
        # level topics are subscribed by pattern: a new table's topics are found this soon
        cconf.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        require_setting(cconf, "enable.auto.offset.store", False, "offsets are stored when settled")
        require_setting(cconf, "enable.auto.commit", not self.eos, "commits follow the delivery")
        require_setting(cconf, "isolation.level", "read_committed", "aborted entries are skipped")
        defaults: dict[str, Any] = {"linger.ms": 5}
        txn_id = None
        if self.eos:
            txn_id = opts.transactional_id or f"{svc.group}-{uuid.uuid4().hex}"
            # after a commit the next transaction's first request is often answered
            # CONCURRENT_TRANSACTIONS until the markers are written: ask again within 10 ms,
            # not librdkafka's 100 ms (measured: commit p50 19 -> 8-12 ms on a 2-core box)
            defaults["retry.backoff.ms"] = 10
            if "message.timeout.ms" not in svc._config:
                # a crashed instance's open transaction blocks read_committed readers and
                # the successor's offset fetch until it times out (a fresh transactional.id
                # never fences it): keep that short, as Kafka Streams does (default 60 s)
                defaults["transaction.timeout.ms"] = 10_000
        else:
            defaults["message.timeout.ms"] = 300_000
        publisher = Publisher(
            svc._config,
            what="ScheduleService producer",
            on_result=self._on_result,
            errors=svc._errors,
            defaults=defaults,
            transactional_id=txn_id,
        )
        self._cooperative = is_cooperative(cconf)
        self._consumer = make_client(Consumer, cconf, what="ScheduleService consumer")
        if self.eos:
            eos = ExactlyOnce(
                publisher,
                group_metadata=self._consumer.consumer_group_metadata,
                offsets=self._txn_offsets,
                on_commit=self._committed,
                on_abort=self._aborted,
                running=lambda: self.service._loop.running,
            )
            eos.init()
            self.delivery = eos
        else:
            publisher.producer  # noqa: B018 - created now: a bad config fails start()
            self.delivery = AtLeastOnce(publisher)
        guard = self.service._loop.guard
        self._consumer.subscribe(
            [level_topics_pattern(opts.namespace)],
            on_assign=guard(self._on_assign),
            on_revoke=guard(self._on_revoke),
            on_lost=guard(self._on_lost),
        )

    # -- the loop --------------------------------------------------------------------------
    def step(self) -> None:
        engine = self.engine
        delivery = self.delivery
        assert delivery is not None
        now_ms = self.clock.now_ms()
        actions = engine.tick(now_ms)
        if actions:
            self._apply(actions)
        due = engine.due(now_ms)
        for entry in due:
            self._process(entry, now_ms)
        if isinstance(delivery, ExactlyOnce):
            self._maybe_commit(delivery, bool(due))
        else:
            delivery.finish()
        opts = self.opts
        wake = engine.next_wake_ms()
        if wake is None and not (isinstance(delivery, ExactlyOnce) and delivery.open):
            # nothing waits: take whatever comes first (it may be overdue already)
            fetched = consume_available(self._consumer, opts.batch_size, opts.poll_timeout_s)
        else:
            # entries wait: sleep until the next is due (at least tick_ms), taking in what
            # arrives meanwhile as one batch
            timeout = opts.poll_timeout_s
            if wake is not None:
                timeout = min(timeout, max(opts.tick_ms, wake - self.clock.now_ms()) / 1000)
            if isinstance(delivery, ExactlyOnce) and delivery.open:
                timeout = min(timeout, opts.txn_linger_ms / 1000)
            fetched = self._consumer.consume(opts.batch_size, timeout)
        seen_ms = self.clock.now_ms()  # after the fetch: never before the sender sent it
        for kmsg in fetched:
            err = kmsg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("ScheduleService consume error: %s", err.str())
                continue
            engine.fetched(
                (kmsg.topic(), kmsg.partition()),
                kmsg.offset(),
                kmsg.value(),
                kmsg.key(),
                kmsg.headers(),
                seen_ms,
            )

    def _maybe_commit(self, delivery: ExactlyOnce, forwarded: bool) -> None:
        """Exactly-once: commit once the transaction has gathered for ``txn_linger_ms``
        (a transaction per forward would make the commits, not the forwards, the cost)."""
        if not delivery.open:
            self._txn_since = None
            return
        now = time.monotonic()
        if self._txn_since is None:
            self._txn_since = now
        if not forwarded or (now - self._txn_since) * 1000 >= self.opts.txn_linger_ms:
            delivery.finish()
            self._txn_since = None

    def close(self) -> None:
        try:
            if self.delivery is not None and self._consumer is not None:
                if isinstance(self.delivery, ExactlyOnce):
                    self.delivery.finish()
                else:
                    self.delivery.publisher.flush(30)
                    self._commit(self.engine.partitions)
            if self._consumer is not None:
                self._consumer.close()  # may revoke (cooperative): commits again, harmlessly
        finally:
            self._consumer = None
            self._destinations.close()
            if self.delivery is not None:
                self.delivery.close()
            if self._owned_trace is not None:
                self._owned_trace.close()

    # -- one entry -------------------------------------------------------------------------
    def _process(self, entry: Entry, now_ms: int) -> None:
        """Forward, re-park or dead-letter a due entry."""
        if not self.engine.current(entry):
            return  # its partition was rewound or revoked meanwhile: it is read again
        mark = entry.mark
        if mark is not None and mark.refused is not None:
            self._dead_letter(entry, f"forward failed permanently: {mark.refused}", now_ms)
            return
        decision = decide_due(entry.info, now_ms=now_ms, levels=self.opts.levels)
        if isinstance(decision, Forward):
            try:
                problem, partitions = self._destination(decision)
            except KafkaException as exc:  # the broker did not answer: not the entry's fault
                self._lookup_failed(entry, decision.real_topic, exc, now_ms)
                return
            if problem is not None:
                self._dead_letter(entry, problem, now_ms)
                return
            record = hops.forward(
                entry.headers,
                entry.value,
                entry.key,
                real_topic=decision.real_topic,
                real_queue_id=decision.real_queue_id,
                partitions=partitions,
            )
            self._forwarded(entry, now_ms, decision)
        elif isinstance(decision, Repark):
            self.stats.reparked += 1
            record = hops.repark(
                entry.headers,
                entry.value,
                entry.key,
                placement=decision.placement,
                levels=self.opts.levels,
                namespace=self.opts.namespace,
            )
        else:
            assert isinstance(decision, Invalid)
            self._dead_letter(entry, decision.reason, now_ms)
            return
        self._send(_Copy(entry, record, alone=bool(mark and mark.alone)))

    def _forwarded(self, entry: Entry, now_ms: int, decision: Forward) -> None:
        stats = self.stats
        due = entry.info.due_ms
        stats.forwarded += 1
        stats.lateness.add(now_ms - due)
        if now_ms < due:
            stats.early += 1
        level = self._level(entry.tp[0])[0]
        stats.forwarded_by_level[level] = stats.forwarded_by_level.get(level, 0) + 1
        hist = stats.lateness_seconds.get(level)
        if hist is None:
            hist = stats.lateness_seconds[level] = Histogram(LATENCY_BUCKETS_S)
        hist.observe(max(0, now_ms - due) / 1000)
        if self._trace is not None:
            self._emit_forward(entry, decision, now_ms)

    def _dead_letter(self, entry: Entry, reason: str, now_ms: int) -> None:
        tp = entry.tp
        log.warning(
            "invalid schedule entry %s[%d]@%d: %s -> %s",
            tp[0],
            tp[1],
            entry.offset,
            reason,
            self.dlq,
        )
        self.stats.invalid += 1
        record = hops.invalid_entry(
            entry.headers,
            entry.value,
            entry.key,
            dlq_topic=self.dlq,
            origin_topic=_logical_or_raw(tp[0]),
            reason=reason,
            now_ms=now_ms,
        )
        mark = entry.mark
        if mark is not None and mark.omit_body:
            record = hops.without_body(record, _omitted(entry))
        self._send(
            _Copy(
                entry,
                record,
                dead_letter=True,
                alone=bool(mark and mark.alone),
                omitted=bool(mark and mark.omit_body),
            )
        )

    def _send(self, copy: _Copy) -> None:
        delivery = self.delivery
        assert delivery is not None
        if copy.alone and isinstance(delivery, ExactlyOnce) and delivery.open:
            delivery.finish()  # its neighbours commit without it
            if not self.engine.current(copy.entry):
                return  # that transaction failed: the entry is read again
        if isinstance(delivery, ExactlyOnce):
            # the transaction send() is about to begin, or the open one
            copy.epoch = delivery.epoch if delivery.open else delivery.epoch + 1
            self.engine.in_transaction(copy.entry)
        delivery.send(copy.entry, copy.record, copy, alone=copy.alone)

    def _lookup_failed(
        self, entry: Entry, real_topic: str, exc: KafkaException, now_ms: int
    ) -> None:
        """Looking ``real_topic`` up failed even after retries (the broker is down or
        unreachable): the entry is neither forwarded nor dead-lettered.  Its partition is
        read again from its smallest unsettled entry after a hold; exactly-once, the open
        transaction aborts too (entries of the partition in it are read again with it)."""
        tp = entry.tp
        log.warning(
            "looking up %s for %s[%d]@%d failed (%s); holding the partition and reading it again",
            real_topic,
            tp[0],
            tp[1],
            entry.offset,
            exc,
        )
        delivery = self.delivery
        if isinstance(delivery, ExactlyOnce) and delivery.open:
            delivery.mark_failed(known=False)
        rewind = self.engine.failed(entry, now_ms)
        if rewind is not None:
            self._apply([rewind])

    def _destination(self, fwd: Forward) -> tuple[str | None, int]:
        """``(problem, partitions)`` of a forward's destination (cached; looked up again
        when a forward to it was refused as unknown)."""
        try:
            kafka_topic = naming.to_kafka(fwd.real_topic)
        except TopicNameError as exc:
            return str(exc), 0
        partitions = self._destinations.partitions(kafka_topic, time.monotonic())
        if partitions is not None:
            # stale: a refresh is under way; its answer may be "gone"
            self._destinations.settle(kafka_topic, REFRESH_WAIT_S)
            partitions = self._destinations.partitions(kafka_topic, time.monotonic())
        if partitions is None:
            partitions = self._partition_count(kafka_topic)
            if partitions is None:
                return f"REAL_TOPIC {fwd.real_topic!r} does not exist", 0
            self._destinations.known(kafka_topic, partitions, time.monotonic())
        if fwd.real_queue_id is not None and fwd.real_queue_id >= partitions:
            problem = (
                f"REAL_QID={fwd.real_queue_id} but {fwd.real_topic!r} has {partitions} partitions"
            )
            return problem, partitions
        return None, partitions

    def _partition_count(self, kafka_topic: str) -> int | None:
        # ask through the consumer: a producer's metadata request auto-creates the topic on
        # brokers with auto.create.topics.enable (the check itself would create it)
        md = _retrying_lookup(
            lambda: self._consumer.list_topics(topic=kafka_topic, timeout=_LOOKUP_TIMEOUT_S)
        )
        tmd = md.topics.get(kafka_topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            return None
        return len(tmd.partitions)

    def _level(self, kafka_topic: str) -> tuple[int, int]:
        known = self._levels.get(kafka_topic)
        if known is None:
            known = level_delay_ms(kafka_topic) or (0, 0)
            self._levels[kafka_topic] = known
        return known

    # -- verdicts --------------------------------------------------------------------------
    def _on_result(self, copy: _Copy, err: Any, local: bool) -> None:
        """The broker's verdict on a copy (on the loop thread)."""
        entry = copy.entry
        delivery = self.delivery
        eos = isinstance(delivery, ExactlyOnce)
        if err is None:
            if not eos:
                self.engine.settled(entry)
            return
        if not self.engine.current(entry) or _purged(err):
            return  # rewound, revoked or aborted meanwhile: the entry is read again
        if eos and copy.epoch != delivery.epoch:  # type: ignore[union-attr]
            return  # a verdict on a transaction that already ended
        self.stats.send_failures += 1
        text = error_text(err)
        if is_unknown_topic(err):
            self._destinations.forget()  # deleted after it was cached: look again
        alone = copy.alone or local
        step = escalate(
            refusal_of(err), alone=alone, dead_letter=copy.dead_letter, body_omitted=copy.omitted
        )
        tp = entry.tp
        log.warning(
            "%s from %s[%d]@%d refused (%s): %s",
            "dead letter" if copy.dead_letter else "forward",
            tp[0],
            tp[1],
            entry.offset,
            text,
            step.value,
        )
        if eos:
            assert isinstance(delivery, ExactlyOnce)
            mark = entry.mark or Mark()
            if step is Escalation.SEND_ALONE:
                mark = Mark(alone=True, refused=mark.refused, omit_body=mark.omit_body)
            elif step is Escalation.DEAD_LETTER:
                mark = Mark(alone=False, refused=text)
            elif step is Escalation.OMIT_BODY:
                mark = Mark(alone=False, refused=mark.refused or text, omit_body=True)
            known = step is not Escalation.HOLD or is_unknown_topic(err)
            if step is not Escalation.HOLD:
                self.engine.mark(entry, mark)
            delivery.mark_failed(known=known)
            return
        now_ms = self.clock.now_ms()
        if step is Escalation.SEND_ALONE:
            self._send(
                _Copy(entry, copy.record, copy.dead_letter, alone=True, omitted=copy.omitted)
            )
        elif step is Escalation.DEAD_LETTER:
            self._dead_letter(entry, f"forward failed permanently: {text}", now_ms)
        elif step is Escalation.OMIT_BODY:
            record = hops.without_body(copy.record, _omitted(entry))
            self._send(_Copy(entry, record, dead_letter=True, omitted=True))
        else:
            rewind = self.engine.failed(entry, now_ms)
            if rewind is not None:
                self._apply([rewind])

    # -- exactly-once ----------------------------------------------------------------------
    def _txn_offsets(self, tps: list[TP]) -> list[Any]:
        out = []
        for tp in tps:
            offset = self.engine.txn_offset(tp)
            if offset is not None:
                out.append(TopicPartition(tp[0], tp[1], offset))
        return out

    def _committed(self, tps: list[TP]) -> None:
        self.stats.transactions_committed += 1
        for tp in tps:
            self.engine.txn_committed(tp)

    def _aborted(self, starts: dict[TP, int], known: bool) -> None:
        """A transaction failed: read its partitions again from where it began (``known``:
        at once, its refusals are marked; else after a hold, from the committed position,
        which waits for a fenced producer's transaction to end)."""
        self.stats.transactions_aborted += 1
        now_ms = self.clock.now_ms()
        rewinds: list[ScheduleAction] = []
        for tp, start in starts.items():
            if not self.engine.owns(tp):
                continue
            offset = start if known else self._committed_position(tp, start)
            rewind = self.engine.rewind(tp, offset, now_ms, hold_ms=0 if known else None)
            if rewind is not None:
                rewinds.append(rewind)
        self._apply(rewinds)

    def _committed_position(self, tp: TP, fallback: int) -> int:
        try:
            [c] = _retrying_lookup(
                lambda: self._consumer.committed(
                    [TopicPartition(tp[0], tp[1])], timeout=_LOOKUP_TIMEOUT_S
                )
            )
        except KafkaException as exc:
            log.error("committed offset of %s[%d] unknown (%s); from %d", *tp, exc, fallback)
            return fallback
        return int(c.offset) if c.offset >= 0 else OFFSET_BEGINNING

    # -- actions and offsets ---------------------------------------------------------------
    def _apply(self, actions: list[ScheduleAction]) -> None:
        consumer = self._consumer
        for action in actions:
            if isinstance(action, Rewind):
                tpo = TopicPartition(action.tp[0], action.tp[1], action.offset)
                consumer.pause([tpo])
                consumer.seek(tpo)
                self.stats.pauses += 1
            elif isinstance(action, Resume):
                consumer.resume([TopicPartition(*action.tp)])
            elif isinstance(action, Pause):
                consumer.pause([TopicPartition(*action.tp)])
                self.stats.pauses += 1
            elif isinstance(action, StoreOffsets) and not self.eos:
                try:
                    consumer.store_offsets(
                        offsets=[TopicPartition(t, p, o) for (t, p), o in action.offsets]
                    )
                except KafkaException as exc:
                    log.debug("store_offsets failed (revoked?): %s", exc)

    def _commit(self, tps: list[TP]) -> None:
        offsets = []
        for tp in tps:
            offset = self.engine.committable(tp)
            if offset is not None:
                offsets.append(TopicPartition(tp[0], tp[1], offset))
        if not offsets:
            return
        try:
            self._consumer.store_offsets(offsets=offsets)
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("ScheduleService commit failed: %s", exc)

    # -- rebalance -------------------------------------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        for p in partitions:
            level = self._level(p.topic)
            self.engine.assigned((p.topic, p.partition), level[1])
        apply_assignment(consumer, partitions, self._cooperative)
        log.info(
            "ScheduleService %s assigned %s",
            self.service.group,
            [(p.topic, p.partition) for p in partitions],
        )

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        delivery = self.delivery
        if isinstance(delivery, ExactlyOnce):
            # forwards of this pass commit with their offsets while the partitions are ours;
            # committed without them, the new owner would forward them a second time
            delivery.finish()
        elif delivery is not None:
            delivery.publisher.flush(30)  # acknowledgements settle entries (callbacks run)
            self._commit(tps)
        for tp in tps:
            self.engine.revoked(tp)
        release(consumer, partitions, self._cooperative)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        for p in partitions:
            self.engine.revoked((p.topic, p.partition))
        release(consumer, partitions, self._cooperative)

    # -- traces ----------------------------------------------------------------------------
    def _emit_forward(self, entry: Entry, fwd: Forward, now: int) -> None:
        assert self._trace is not None
        props = HeaderView.read(entry.headers).text
        tp = entry.tp
        event = TraceEvent(
            event_time_ms=now,
            source="schedule-service",
            group=self.service.group,
            topic=fwd.real_topic,
            partition=tp[1],
            offset=entry.offset,
            msg_id=props.get(PROPERTY_UNIQ_KEY) or f"{tp[0]}:{tp[1]}:{entry.offset}",
            origin_msg_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID)
            or props.get(PROPERTY_UNIQ_KEY)
            or "",
            status=TraceStatus.FORWARDED,
            reconsume_times=parse_non_negative(props.get(PROPERTY_RECONSUME_TIME)) or 0,
            tags=props.get(PROPERTY_TAGS),
            keys=props.get(PROPERTY_KEYS),
            delay_level=self._level(tp[0])[0] or None,
            lateness_ms=now - entry.info.due_ms,
        )
        try:
            self._trace(event)
        except Exception:  # tracing must never stop forwarding
            log.exception("trace sink failed")


class _Destinations:
    """Partition counts of the topics entries are forwarded to.

    A count older than ``ttl_s`` is looked up again (an admin request).  The forward that
    found it stale waits for that answer up to ``REFRESH_WAIT_S``: a destination deleted
    since is then found gone before a record is produced to it (such a record would sit in
    the producer until ``message.timeout.ms`` and, exactly-once, hold back every other
    entry of its transaction that long).  When the broker does not answer in time (it is
    down or slow) the forward goes on with the count it had, and the loop never blocks
    longer than that.
    """

    def __init__(self, config: Mapping[str, Any], ttl_s: float) -> None:
        self._config = config
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[int, float]] = {}
        self._refreshing: dict[str, Any] = {}  # Kafka topic -> future
        self._waited: set[Any] = set()  # refreshes a forward waited for (once each)
        self._admin: Any = None

    def partitions(self, kafka_topic: str, now: float) -> int | None:
        """The cached count (``None``: never seen, or found gone by a refresh)."""
        self._collect()
        known = self._known.get(kafka_topic)
        if known is None:
            return None
        if now - known[1] > self._ttl_s and kafka_topic not in self._refreshing:
            self._refresh(kafka_topic)
        return known[0]

    def settle(self, kafka_topic: str, timeout_s: float) -> None:
        """Wait (bounded) for a refresh of ``kafka_topic`` under way, and take its answer."""
        future = self._refreshing.get(kafka_topic)
        if future is None or future in self._waited:
            return  # none under way, or one forward already waited for it
        self._waited.add(future)
        concurrent.futures.wait([future], timeout=timeout_s)
        self._collect()

    def known(self, kafka_topic: str, partitions: int, now: float) -> None:
        self._known[kafka_topic] = (partitions, now)

    def forget(self) -> None:
        self._known.clear()

    def _refresh(self, kafka_topic: str) -> None:
        if self._admin is None:
            self._admin = make_client(
                AdminClient, admin_config(self._config), what="ScheduleService admin client"
            )
        futures = self._admin.describe_topics(
            TopicCollection([kafka_topic]), request_timeout=_LOOKUP_TIMEOUT_S
        )
        self._refreshing[kafka_topic] = futures[kafka_topic]

    def _collect(self) -> None:
        if not self._refreshing:
            return
        for topic, future in list(self._refreshing.items()):
            if not future.done():
                continue
            del self._refreshing[topic]
            self._waited.discard(future)
            try:
                description = future.result()
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and is_unknown_topic(err):
                    self._known.pop(topic, None)  # gone: the next forward finds out
                continue  # any other failure: keep the count, try again later
            self._known[topic] = (len(description.partitions), time.monotonic())

    def close(self) -> None:
        self._admin = None


def _purged(err: Any) -> bool:
    """Our own abort or fencing removed the record (it is read again, not refused)."""
    return isinstance(err, KafkaError) and err.code() in (
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    )


def _omitted(entry: Entry) -> OmittedBody:
    return OmittedBody(len(entry.value or b""), entry.tp[0], entry.tp[1], entry.offset)


def _logical_or_raw(kafka_topic: str) -> str:
    try:
        return naming.from_kafka(kafka_topic)
    except TopicNameError:
        return kafka_topic


def _retrying_lookup(call: Callable[[], Any]) -> Any:
    """A metadata or offset lookup, tried again with back-off (bounded, logged)."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(4),
        wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
        retry=tenacity.retry_if_exception_type(KafkaException),
        before_sleep=lambda st: log.warning(
            "lookup failed (%s); retrying", st.outcome.exception() if st.outcome else None
        ),
        reraise=True,
    )
    return retrying(call)
