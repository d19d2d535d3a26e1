"""Prometheus metrics of the adapter's clients (prometheus-client).

Each collector reads its client's own counters when it is scraped, so consuming and
forwarding pay nothing extra for metrics.  A client registers its collector in the
registry the application passes (``metrics_registry=``) or in a registry of its own, and
serves it over HTTP when given ``metrics_port=`` (0: any free port; see ``endpoint``).
Nothing is registered in prometheus-client's process-global registry unless it is the
one passed in.  Instrumented with an OpenTelemetry meter provider
(:func:`adapter.telemetry.instrument`), the same collectors are read by the meter too
(:mod:`adapter.telemetry.meters`, :mod:`adapter.telemetry.reporting`): the counters and
gauges under the same names.

Names follow Prometheus conventions (``_total`` counters, base units, ``_seconds``);
labels: ``group`` and the logical ``topic`` (the retry topic as ``%RETRY%<group>``),
``level`` as a number, ``partition``.  Every family is exposed from the start, with no
samples until there is something to count.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from adapter.core.stats import Histogram, ProducerStats
from adapter.errors import AdapterError

log = logging.getLogger("adapter.metrics")


class _Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def _histogram(
    family: HistogramMetricFamily, labels: list[str], hist: Histogram
) -> HistogramMetricFamily:
    buckets, total, _ = hist.snapshot()
    family.add_metric(
        labels, [("+Inf" if b == float("inf") else repr(b), n) for b, n in buckets], total
    )
    return family


__all__ = [
    "BacklogCollector",
    "Collectors",
    "ConsumerCollector",
    "Exposition",
    "ProducerCollector",
    "ScheduleCollector",
    "expose",
]


class ConsumerCollector:
    """Metrics of one consumer (its group member's stats, engine and runner)."""

    def __init__(self, group: str, member: Callable[[], Any]) -> None:
        self.group = group
        self._member = member  # the current GroupConsumer (None before start)

    def collect(self) -> Iterator[Metric]:
        g = self.group
        member = self._member()
        consumed = CounterMetricFamily(
            "rmq_consumer_messages",
            "Messages the listener finished, by result (ok or failed)",
            labels=["group", "topic", "result"],
        )
        duration = HistogramMetricFamily(
            "rmq_consumer_listener_duration_seconds",
            "Time the listener took per batch",
            labels=["group", "topic"],
        )
        running = GaugeMetricFamily(
            "rmq_consumer_batches_running",
            "Listener batches handed out and not done",
            labels=["group"],
        )
        in_flight = GaugeMetricFamily(
            "rmq_consumer_messages_in_flight",
            "Messages fetched and not settled (running, or awaiting a copy's acknowledgement)",
            labels=["group", "topic"],
        )
        paused = GaugeMetricFamily(
            "rmq_consumer_partitions_paused", "Partitions paused by flow control", labels=["group"]
        )
        send_backs = CounterMetricFamily(
            "rmq_consumer_send_backs",
            "Failed messages sent back to a delay level (acknowledged)",
            labels=["group", "topic", "level"],
        )
        dead = CounterMetricFamily(
            "rmq_consumer_dead_letters",
            "Messages moved to %DLQ%<group> (acknowledged), by reason",
            labels=["group", "topic", "reason"],
        )
        failures = CounterMetricFamily(
            "rmq_consumer_send_back_failures",
            "Copies the broker refused (each goes alone, to the DLQ, or is retried locally)",
            labels=["group", "topic"],
        )
        local = CounterMetricFamily(
            "rmq_consumer_local_retries",
            "Messages consumed again locally after a failed send-back (offset held)",
            labels=["group", "topic"],
        )
        timeouts = CounterMetricFamily(
            "rmq_consumer_consume_timeouts",
            "Listener batches that ran past consume_timeout",
            labels=["group", "topic"],
        )
        lag = GaugeMetricFamily(
            "rmq_consumer_lag_messages",
            "End offset minus the committable offset, per assigned partition",
            labels=["group", "topic", "partition"],
        )
        circuit = _CircuitFamilies()
        if member is not None:
            circuit.add(g, member)
            stats = member.stats
            for topic, st in list(stats.topics.items()):
                consumed.add_metric([g, topic, "ok"], st.consume_ok)
                consumed.add_metric([g, topic, "failed"], st.consume_failed)
                failures.add_metric([g, topic], st.send_back_failed)
                local.add_metric([g, topic], st.local_retries)
                timeouts.add_metric([g, topic], st.timeouts)
                hist = stats.listener_seconds.get(topic)
                if hist is not None:
                    _histogram(duration, [g, topic], hist)
            for (topic, level), n in list(stats.send_backs.items()):
                send_backs.add_metric([g, topic, str(level)], n)
            for (topic, reason), n in list(stats.dead_letters.items()):
                dead.add_metric([g, topic, reason], n)
            runner = member.runner
            running.add_metric([g], float(getattr(runner, "running_batches", lambda: 0)()))
            engine = member.engine
            per_topic: dict[str, int] = {}
            names = member.names
            for tp in list(member.assignment):
                topic = names.resolve(tp[0])[0]
                per_topic[topic] = per_topic.get(topic, 0) + engine.in_flight(tp)
            for topic, n in per_topic.items():
                in_flight.add_metric([g, topic], n)
            paused.add_metric([g], len(engine.paused()))
            for (kafka_topic, partition), n in member.lag().items():
                lag.add_metric([g, names.resolve(kafka_topic)[0], str(partition)], n)
        yield from (consumed, duration, running, in_flight, paused, send_backs, dead)
        yield from (failures, local, timeouts, lag)
        yield from circuit.families()


class _CircuitFamilies:
    """A consumer's circuit breaker (no samples without one): its state, time open and
    what it holds."""

    def __init__(self) -> None:
        self.state = GaugeMetricFamily(
            "rmq_consumer_circuit_state",
            "Circuit breaker state: 1 for the current one (closed, open, half_open)",
            labels=["group", "state"],
        )
        self.open_seconds = CounterMetricFamily(
            "rmq_consumer_circuit_open_seconds",
            "Time the circuit breaker spent open or half-open",
            labels=["group"],
        )
        self.opened = CounterMetricFamily(
            "rmq_consumer_circuit_opened",
            "Times the circuit breaker opened",
            labels=["group"],
        )
        self.held = GaugeMetricFamily(
            "rmq_consumer_circuit_held_messages",
            "Messages held by the open circuit breaker (offsets held, not sent back)",
            labels=["group"],
        )

    def add(self, group: str, member: Any) -> None:
        circuit = getattr(member.engine, "circuit", None)
        if circuit is None:
            return
        snap = circuit(member.clock.monotonic())
        for state in ("closed", "open", "half_open"):
            self.state.add_metric([group, state], 1.0 if snap.state.value == state else 0.0)
        self.open_seconds.add_metric([group], snap.open_seconds)
        self.opened.add_metric([group], snap.opened)
        self.held.add_metric([group], snap.held_messages)

    def families(self) -> tuple[Metric, ...]:
        return (self.state, self.open_seconds, self.opened, self.held)


class ScheduleCollector:
    """Metrics of one ScheduleService."""

    def __init__(self, group: str, stats: Any, engine: Any, levels: Callable[[str], int]) -> None:
        self.group = group
        self._stats = stats
        self._engine = engine
        self._level = levels  # Kafka topic -> level number

    def collect(self) -> Iterator[Metric]:
        g = self.group
        stats = self._stats
        forwarded = CounterMetricFamily(
            "rmq_schedule_forwarded",
            "Entries forwarded to their real topic",
            labels=["group", "level"],
        )
        lateness = HistogramMetricFamily(
            "rmq_schedule_lateness_seconds",
            "Forward time minus due time",
            labels=["group", "level"],
        )
        waiting = GaugeMetricFamily(
            "rmq_schedule_entries_waiting",
            "Entries fetched and not due yet",
            labels=["group", "level"],
        )
        oldest = GaugeMetricFamily(
            "rmq_schedule_oldest_due_timestamp_seconds",
            "Due time of the oldest waiting entry (epoch seconds)",
            labels=["group", "level"],
        )
        txns = CounterMetricFamily(
            "rmq_schedule_transactions",
            "Exactly-once transactions, by outcome",
            labels=["group", "outcome"],
        )
        dead = CounterMetricFamily(
            "rmq_schedule_dead_letters",
            "Entries dead-lettered to the service's DLQ, by reason",
            labels=["group", "reason"],
        )
        for level, n in list(stats.forwarded_by_level.items()):
            forwarded.add_metric([g, str(level)], n)
        for level, hist in list(stats.lateness_seconds.items()):
            _histogram(lateness, [g, str(level)], hist)
        per_level: dict[int, tuple[int, int | None]] = {}
        for (topic, _partition), (n, head) in self._engine.waiting().items():
            level = self._level(topic)
            count, due = per_level.get(level, (0, None))
            if head is not None and (due is None or head < due):
                due = head
            per_level[level] = (count + n, due)
        for level, (n, due) in per_level.items():
            waiting.add_metric([g, str(level)], n)
            if due is not None:
                oldest.add_metric([g, str(level)], due / 1000)
        txns.add_metric([g, "committed"], stats.transactions_committed)
        txns.add_metric([g, "aborted"], stats.transactions_aborted)
        dead.add_metric([g, "INVALID_SCHEDULE_ENTRY"], stats.invalid)
        yield from (forwarded, lateness, waiting, oldest, txns, dead)


class ProducerCollector:
    """Metrics of one Producer."""

    def __init__(self, stats: ProducerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        sent = CounterMetricFamily(
            "rmq_producer_messages_sent", "Messages acknowledged by the broker", labels=["topic"]
        )
        failed = CounterMetricFamily(
            "rmq_producer_send_failures",
            "Sends that failed for good, by error class",
            labels=["topic", "error"],
        )
        retries = CounterMetricFamily(
            "rmq_producer_retries", "Resends after a definite failure", labels=["topic"]
        )
        backoffs = CounterMetricFamily(
            "rmq_producer_flow_control_backoffs",
            "Resends that first backed off from flow control (queue full, throttling)",
            labels=["topic"],
        )
        for topic, n in list(s.sent.items()):
            sent.add_metric([topic], n)
        for (topic, error), n in list(s.failures.items()):
            failed.add_metric([topic, error], n)
        for topic, n in list(s.retries.items()):
            retries.add_metric([topic], n)
        for topic, n in list(s.backoffs.items()):
            backoffs.add_metric([topic], n)
        yield from (sent, failed, retries, backoffs)


class Exposition:
    """A collector registered in a registry and, optionally, served over HTTP."""

    def __init__(
        self,
        collector: _Collector,
        *,
        registry: Any = None,
        port: int | None,
        addr: str = "127.0.0.1",
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.collector = collector
        self.registry.register(collector)
        self._server: Any = None
        self.port: int | None = None
        if port is not None:
            self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)
            self.port = int(self._server.server_address[1])
            log.info("metrics on http://%s:%d/metrics", addr, self.port)

    @property
    def endpoint(self) -> str | None:
        """``http://127.0.0.1:<port>/metrics`` when served."""
        return None if self.port is None else f"http://127.0.0.1:{self.port}/metrics"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with contextlib.suppress(KeyError):
            self.registry.unregister(self.collector)


def expose(
    collector: _Collector, *, registry: Any, port: int | None, addr: str = "127.0.0.1"
) -> Exposition | None:
    """Register (and serve) ``collector`` when the client asked for metrics at all."""
    if registry is None and port is None:
        return None
    return Exposition(collector, registry=registry, port=port, addr=addr)


class Collectors:
    """Several collectors registered and served as one."""

    def __init__(self, *collectors: _Collector) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


class BacklogCollector:
    """The backlog gauge of consumer groups: what each group still has to do, for an
    autoscaler (docs/autoscaling.md).  Per group, read when scraped: its lag on the topics
    it subscribes and on its retry topic (``lags(group)``: both from the cluster, as
    ``rmq-kafka group progress`` reads them), plus its retries waiting at the delay levels
    that this ScheduleService holds and that are due within the horizon (``delayed()``:
    group -> count).  A group whose lag cannot be read now has no sample (never a wrong
    one); the failure is logged."""

    def __init__(
        self,
        groups: Iterable[str],
        lags: Callable[[str], tuple[int, int]],
        delayed: Callable[[], dict[str, int]],
    ) -> None:
        self.groups = tuple(groups)
        self._lags = lags
        self._delayed = delayed

    def collect(self) -> Iterator[Metric]:
        total = GaugeMetricFamily(
            "rmq_group_backlog",
            "Messages a consumer group still has to handle: lag on its topics and its retry "
            "topic, plus its retries at the delay levels due within the horizon",
            labels=["group"],
        )
        parts = GaugeMetricFamily(
            "rmq_group_backlog_part",
            "The backlog gauge's parts: topics (lag on the subscribed topics), retry (lag on "
            "the retry topic), delayed (retries at the delay levels due within the horizon, "
            "held by this ScheduleService)",
            labels=["group", "part"],
        )
        delayed = self._delayed()
        for group in self.groups:
            try:
                topics, retry = self._lags(group)
            except AdapterError as exc:  # a scrape reports what it can
                log.warning("backlog of group %s not read: %s", group, exc)
                continue
            waiting = delayed.get(group, 0)
            total.add_metric([group], topics + retry + waiting)
            parts.add_metric([group, "topics"], topics)
            parts.add_metric([group, "retry"], retry)
            parts.add_metric([group, "delayed"], waiting)
        yield from (total, parts)
