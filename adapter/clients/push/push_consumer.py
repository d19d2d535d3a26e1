"""``PushConsumer``: RocketMQ's ``DefaultMQPushConsumer`` on a Kafka consumer group.

The rules live in the pure engine (:mod:`adapter.core.engine`); the Kafka side in the
shared loop (:mod:`adapter.io.loop`), the group member
(:mod:`adapter.clients.member.group_consumer`) and the listener runner
(:mod:`adapter.clients.push.concurrent_runner`).  This module is the API: options,
subscriptions, the listener, the lifecycle and the figures.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any, Unpack

from adapter.clients.member.circuit_reporter import CircuitReporter, circuit_engine
from adapter.clients.member.group_consumer import ConsumeSettings, GroupConsumer, Runner
from adapter.clients.member.reset_receiver import ResetReceiver
from adapter.clients.push.async_runner import AsyncRunner, is_async_listener
from adapter.clients.push.concurrent_runner import ConcurrentRunner
from adapter.clients.push.orderly_runner import OrderlyListener, OrderlyRunner
from adapter.clients.push.push_listeners import (
    Listener,
    MessageListenerConcurrently,
    MessageListenerOrderly,
)
from adapter.clients.push.push_options import (
    PushConsumerOptions,
    PushConsumerSettings,
    timestamp_ms,
)
from adapter.core import naming
from adapter.core.delay import resolve_max_reconsume_times
from adapter.core.engine import ConcurrentEngine, EngineOptions
from adapter.core.engine.orderly import (
    Ordering,
    OrderlyEngine,
    OrderlyOptions,
    orderly_max_reconsume_times,
)
from adapter.core.filter import TagFilter
from adapter.core.hops import GroupTopics
from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageQueue,
)
from adapter.core.offsets import start_rule
from adapter.core.routing import MessageModel
from adapter.core.stats import TopicStats
from adapter.core.types import TP
from adapter.errors import ClientClosedError, ConfigError, InvalidInputError
from adapter.io.config import build_options, check_group_protocol, check_kafka_config
from adapter.io.control import ControlChannel, StatusPublisher
from adapter.io.errors import FatalErrorWatch
from adapter.io.loop import ClientLoop
from adapter.io.signals import StartsInWith, TerminateAsInterrupt
from adapter.io.topics import ensure_topics, plan_topics
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.consumer")

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumerOptions",
    "MessageListenerConcurrently",
    "MessageListenerOrderly",
    "MessageQueue",
    "Ordering",
    "PushConsumer",
    "PushConsumerOptions",
    "PushConsumerSettings",
    "TopicStats",
    "timestamp_ms",
]

#: Records taken per ``consume()`` while the listener runs inline.  A fetch's records and
#: their views stay under the garbage collector's young-generation threshold (700 live
#: allocations), so no collection runs on the hot path (larger fetches ran young-generation
#: collections on it and were markedly slower; BENCHMARKS.md).
FETCH_SIZE = 128


class PushConsumer(StartsInWith):
    """RocketMQ ``DefaultMQPushConsumer`` semantics over a confluent-kafka config dict.

    The group is ``config["group.id"]``.  Subscribe, register a listener, ``start()``;
    ``shutdown()`` (or leave the ``with`` block) drains, commits and closes.
    """

    def __init__(self, config: Mapping[str, Any], **options: Unpack[PushConsumerOptions]) -> None:
        self.options = build_options(PushConsumerSettings, options, "PushConsumer")
        self._config = check_kafka_config(config, "consumer")
        check_group_protocol(self._config)  # a refused setting fails here, not at start()
        group = self._config.get("group.id")
        if not isinstance(group, str) or not group:
            raise ConfigError("group.id", group, "a consumer group is required")
        self.group = group
        self.max_reconsume_times = resolve_max_reconsume_times(self.options.max_reconsume_times)
        self.retry_topic = naming.retry_topic(group)
        self.dlq_topic = naming.dlq_topic(group)
        self._subscriptions: dict[str, TagFilter] = {}
        self._listener: Listener | None = None
        self._orderly: OrderlyListener | None = None
        self._errors = FatalErrorWatch(self._config.get("error_cb"), config=self._config)
        self._member: GroupConsumer | None = None
        self._loop: ClientLoop | None = None
        self._signals = TerminateAsInterrupt()
        self._owned_trace: Any = None
        self._metrics: Any = None

    # -- configuration ---------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        """Subscribe to a (logical) topic with a tag expression (``*``, ``TagA || TagB``).

        A group may read its own dead-letter topic (``%DLQ%<group>``, RocketMQ 4.9.2+):
        its failures are dropped with a warning, never dead-lettered into itself.
        """
        if self._loop is not None:
            if self._loop.closed:
                raise ClientClosedError(f"consumer {self.group} was shut down; create a new one")
            raise InvalidInputError("subscribe", topic, "subscribe before start()")
        if not (isinstance(topic, str) and naming.is_dlq_topic(topic)):
            naming.check_user_topic(topic)
        self._subscriptions[topic] = TagFilter.parse(expression)

    def register_message_listener(self, listener: Listener | MessageListenerConcurrently) -> None:
        """The concurrent listener: ``listener(msgs, ctx) -> ConsumeConcurrentlyStatus``
        (or an object with ``consume_message``)."""
        if hasattr(listener, "consume_message"):
            self._listener = listener.consume_message
        elif callable(listener):
            self._listener = listener
        else:
            raise InvalidInputError(
                "listener", listener, "must be callable or have consume_message()"
            )

    def register_message_listener_orderly(
        self, listener: OrderlyListener | MessageListenerOrderly
    ) -> None:
        """The orderly listener (RocketMQ ``MessageListenerOrderly``): ``listener(msgs, ctx)
        -> ConsumeOrderlyStatus`` (or an object with ``consume_message``), handed one batch
        per partition at a time, in offset order (per key with ``ordering="key"``).
        ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or an exception, ``None``, a consume timeout)
        hands the same messages back after ``suspend_current_queue_time_millis`` with
        ``reconsume_times + 1``, holding the partition (or the keys); no retry topic.
        ``max_reconsume_times=-1`` (the default) retries for ever; a bound sends a message
        that reaches it to ``%DLQ%<group>``."""
        if hasattr(listener, "consume_message"):
            fn = listener.consume_message
        elif callable(listener):
            fn = listener
        else:
            raise InvalidInputError(
                "listener", listener, "must be callable or have consume_message()"
            )
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an object's async __call__
        ):
            # its coroutine is no status: every batch would be suspended for ever
            raise InvalidInputError(
                "listener", listener, "orderly listeners must be plain functions, not async def"
            )
        self._orderly = fn
        self.max_reconsume_times = orderly_max_reconsume_times(self.options.max_reconsume_times)

    @property
    def orderly(self) -> bool:
        """Whether the registered listener is an orderly one."""
        return self._orderly is not None

    @property
    def clustering(self) -> bool:
        return self.options.message_model is MessageModel.CLUSTERING

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> PushConsumer:
        """Create the clients and start consuming on a background thread (idempotent)."""
        if self._loop is not None:
            self._loop.start()
            return self
        if self._listener is None and self._orderly is None:
            raise InvalidInputError("listener", None, "register_message_listener() before start()")
        if self._listener is not None and self._orderly is not None:
            raise InvalidInputError(
                "listener",
                self._orderly,
                "both a concurrent and an orderly listener are registered; register one",
            )
        if not self._subscriptions:
            raise InvalidInputError(
                "subscription", None, "subscribe() to at least one topic before start()"
            )
        opts = self.options
        topics = GroupTopics(self.group, opts.levels, opts.namespace)
        filters = {naming.to_kafka(t): f for t, f in self._subscriptions.items()}
        if self.clustering:
            filters[topics.retry_kafka] = TagFilter.parse("*")
        if opts.auto_create_topics and (self.clustering or self._orderly is not None):
            plans = plan_topics(
                groups=[self.group],
                delay_levels=opts.levels,
                namespace=opts.namespace,
                partitions=opts.partitions,
                include_schedule=self.clustering,
            )
            if not self.clustering:  # broadcasting orderly: dead letters only (§4.8)
                plans = [p for p in plans if p.logical == topics.dlq_topic]
            ensure_topics(self._config, plans)
        trace = opts.trace_sink
        if opts.trace_topic and trace is None:
            # imported on use: tracing is opt-in and its Avro codec costs import time
            from adapter.io.trace_sink import KafkaTraceSink

            self._owned_trace = KafkaTraceSink(self._config, opts.trace_topic, clock=opts.clock)
            trace = self._owned_trace
        engine_options = EngineOptions(
            batch_size=opts.consume_message_batch_max_size,
            max_reconsume_times=self.max_reconsume_times,
            levels=opts.levels,
            consume_timeout_s=opts.consume_timeout,
            send_back_retry_interval_s=opts.send_back_retry_interval,
            flow=opts.flow_limits,
            # a group reading its own DLQ never dead-letters into it: failures drop
            clustering=self.clustering and not self._reads_own_dlq(),
        )
        engine: ConcurrentEngine | OrderlyEngine
        orderly = None
        if self._orderly is not None:
            orderly = OrderlyOptions(
                suspend_ms=opts.suspend_current_queue_time_millis,
                ordering=opts.ordering,
                max_suspended_keys=opts.max_suspended_keys_per_queue,
                dead_letters=not self._reads_own_dlq(),
            )
        reporter = None
        if opts.circuit_breaker is not None:
            if self.clustering:  # its state for ``group progress``, on the control topic
                reporter = CircuitReporter(
                    self.group,
                    f"consumer {self.group}",
                    opts.clock,
                    lambda member_id: StatusPublisher(
                        self._config, self.group, member_id, clock=opts.clock
                    ),
                )
            engine = circuit_engine(
                engine_options,
                orderly,
                opts.circuit_breaker,
                name=f"consumer {self.group}",
                group=self.group,
                reporter=reporter,
            )
        elif orderly is not None:
            engine = OrderlyEngine(engine_options, orderly)
        else:
            engine = ConcurrentEngine(engine_options)
        member = GroupConsumer(
            name=f"consumer {self.group}",
            config=self._config,
            group=self.group,
            engine=engine,
            topics=topics,
            filters=filters,
            settings=self._settings(),
            errors=self._errors,
            clock=opts.clock,
            trace=trace,
        )
        member.tracing = opts.tracing
        if reporter is not None:
            reporter.bind(member.member_id, member.engine.circuit)  # type: ignore[attr-defined]
            member.circuit_status = reporter
        if self.clustering and opts.offset_resets:
            member.resets = ResetReceiver(
                member,
                lambda member_id: ControlChannel(
                    self._config, self.group, member_id, clock=opts.clock
                ),
                name=member.name,
            )
        loop = ClientLoop(
            f"rmq-poll-{self.group}",
            member,
            shutdown_timeout=opts.shutdown_await,
            errors=self._errors,
            on_error=opts.on_error,
        )
        runner = self._runner(member, engine)
        member.bind(runner, guard=loop.guard, running=lambda: loop.running)
        self._member, self._loop = member, loop
        try:
            loop.start()
        except BaseException:
            self._close_trace()
            raise
        self._expose_metrics()
        return self

    def _expose_metrics(self) -> None:
        opts = self.options
        if opts.metrics_port is None and opts.metrics_registry is None and not telemetry.metered():
            return
        from adapter.io.metrics import ConsumerCollector  # on use
        from adapter.telemetry.reporting import report

        if self._member is not None:
            self._member.track_lag = True
        self._metrics = report(
            ConsumerCollector(self.group, lambda: self._member),
            registry=opts.metrics_registry,
            port=opts.metrics_port,
            addr=opts.metrics_addr,
        )

    @property
    def metrics_endpoint(self) -> str | None:
        """Where the metrics are served (``metrics_port``), e.g. for a port chosen by 0."""
        return None if self._metrics is None else self._metrics.endpoint

    def _runner(self, member: GroupConsumer, engine: ConcurrentEngine | OrderlyEngine) -> Runner:
        """How the registered listener is run (one runner per listener kind)."""
        hooks = telemetry.active if self.options.tracing else None
        if isinstance(engine, OrderlyEngine):
            assert self._orderly is not None
            orderly = self._orderly
            if hooks is not None:  # a ``process`` span per listener call
                orderly = hooks.wrap_listener(
                    orderly, self.group, self.options.consume_timeout, clock=self.options.clock
                )
            return OrderlyRunner(
                orderly,
                member,
                engine,
                mode=self.options.listener_mode,
                threads=self.options.consume_thread_max,
            )
        assert self._listener is not None
        listener = self._listener
        if hooks is not None:
            listener = hooks.wrap_listener(
                listener, self.group, self.options.consume_timeout, clock=self.options.clock
            )
        if is_async_listener(self._listener):
            return AsyncRunner(
                listener,
                member,
                engine,
                threads=self.options.consume_thread_max,
                loop=self.options.event_loop,
            )
        return ConcurrentRunner(
            listener,
            member,
            engine,
            mode=self.options.listener_mode,
            threads=self.options.consume_thread_max,
        )

    def _reads_own_dlq(self) -> bool:
        return self.dlq_topic in self._subscriptions

    def _settings(self) -> ConsumeSettings:
        opts = self.options
        where, ts = start_rule(
            opts.consume_from_where,
            self._config.get("auto.offset.reset"),
            opts.consume_timestamp,
            opts.clock.now_ms(),
        )
        return ConsumeSettings(
            clustering=self.clustering,
            consume_from_where=where,
            consume_timestamp_ms=ts,
            fetch_size=max(opts.pull_batch_size, FETCH_SIZE),
            pull_batch_size=opts.pull_batch_size,
            soft_backlog=min(
                2 * opts.consume_thread_max * opts.consume_message_batch_max_size,
                max(opts.pull_batch_size, opts.pull_threshold_for_queue // 2),
            ),
            shutdown_await=opts.shutdown_await,
            revoke_await=self._revoke_await(),
            offset_store_dir=opts.offset_store_dir or ".rmq-offsets",
            instance_name=opts.instance_name or "DEFAULT",
        )

    def _revoke_await(self) -> float:
        """How long a rebalance waits for running batches of revoked partitions.  An
        orderly consumer waits for the batch itself, so the next owner never starts beside
        it: up to ``consume_timeout`` (a listener running longer counts as hung), and
        below ``max.poll.interval.ms``, past which the group would drop this member."""
        settings = ConsumeSettings()
        if self._orderly is None:
            return settings.revoke_await
        try:
            max_poll_s = float(self._config.get("max.poll.interval.ms", 300_000)) / 1000
        except (TypeError, ValueError):
            max_poll_s = 300.0
        return max(settings.revoke_await, min(self.options.consume_timeout, 0.9 * max_poll_s))

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop fetching, let running batches finish (up to ``shutdown_await``), send back
        what failed, commit what is settled and close.  ``timeout`` bounds the whole wait
        (default: ``shutdown_await`` plus a margin for closing); a consumer whose loop died
        raises that error here."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.shutdown(timeout)
        finally:
            self._close_trace()
            if self._metrics is not None:
                self._metrics.close()
                self._metrics = None

    def _close_trace(self) -> None:
        if self._owned_trace is not None:
            self._owned_trace.close()
            self._owned_trace = None

    def check_alive(self) -> None:
        """Raise what stopped the consumer (its loop's error, or a fatal client error such
        as bad credentials); raise :class:`~adapter.errors.ClientClosedError` when it is not
        running."""
        if self._loop is None:
            raise ClientClosedError(f"consumer {self.group} is not started")
        self._loop.check_alive()

    # -- figures ---------------------------------------------------------------------------
    def stats(self) -> dict[str, TopicStats]:
        """Per logical topic: OK / failed counts, send-backs, dead letters, consume RT."""
        return self._member.stats.snapshot() if self._member is not None else {}

    def running_info(self) -> dict[str, Any]:
        """A snapshot for diagnostics (RocketMQ's consumer running info): per partition the
        committable offset, messages in flight and whether flow control paused it; the
        listener backlog, local retries waiting, copies awaiting the broker, and the loop."""
        member, loop = self._member, self._loop
        if member is None or loop is None:
            return {"group": self.group, "started": False}
        engine = member.engine
        paused = set(engine.paused())
        runner = member.runner
        return {
            "group": self.group,
            "started": True,
            "running": loop.running,
            "error": None if loop.error is None else repr(loop.error),
            "listener_inline": bool(runner is not None and runner.inline),
            "listener_backlog": runner.backlog() if runner is not None else 0,
            "local_retries": engine.local_retries(),
            "circuit": self.circuit(),
            "copies_in_flight": member.publisher.in_flight(),
            "partitions": {
                f"{t}[{p}]": {
                    "committable": engine.committable((t, p)),
                    "in_flight": engine.in_flight((t, p)),
                    "paused": (t, p) in paused,
                }
                for t, p in sorted(member.assignment)
            },
        }

    def circuit(self) -> dict[str, Any] | None:
        """The circuit breaker's state (``None``: no breaker, or not started): ``state``
        (closed / open / half_open), ``open_seconds`` in all, ``held_messages`` and
        ``held_batches`` (held while open, not sent back), ``opened`` (times).  The state
        lives in this process only (also in the metrics)."""
        member = self._member
        circuit = getattr(member.engine, "circuit", None) if member is not None else None
        if member is None or circuit is None:
            return None
        snapshot: dict[str, Any] = circuit(member.clock.monotonic()).as_dict()
        return snapshot

    def in_flight(self) -> dict[TP, int]:
        """Per assigned partition: messages fetched and not settled yet (RocketMQ's
        process-queue message count; flow control pauses a partition above
        ``pull_threshold_for_queue``)."""
        member = self._member
        if member is None:
            return {}
        return {tp: member.engine.in_flight(tp) for tp in list(member.assignment)}

    @property
    def assignment(self) -> set[TP]:
        """The partitions this member owns now, as ``(Kafka topic, partition)``."""
        return set(self._member.assignment) if self._member is not None else set()


#: Deprecated name of :class:`PushConsumerSettings` (the validated options).
ConsumerOptions = PushConsumerSettings
