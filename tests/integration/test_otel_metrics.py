"""The adapter's metrics through an OpenTelemetry meter, on the real broker with the real
OpenTelemetry SDK (its ``InMemoryMetricReader``): after real traffic (a message that
succeeds, one that fails once, a poison message dead-lettered) the consumer's, the
ScheduleService's and the producer's counts arrive under the Prometheus names with the
values Prometheus reports for the same clients (docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from adapter import Message, Producer, PushConsumer, ScheduleService, telemetry
from tests.support.consumer_helpers import (
    LATER,
    LEVELS,
    OK,
    RecordingListener,
    new_group,
    new_namespace,
    wait_until,
)

pytestmark = pytest.mark.integration

#: (metric name, attributes as sorted pairs) -> value
Points = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """The adapter instrumented with a real SDK meter provider read into memory."""
    out = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[out])
    telemetry.instrument(meter_provider=provider)
    try:
        yield out
    finally:
        telemetry.uninstrument()
        provider.shutdown()


def points(reader: InMemoryMetricReader) -> Points:
    data = reader.get_metrics_data()
    out: Points = {}
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attrs = tuple(sorted((k, str(v)) for k, v in point.attributes.items()))
                    out[(metric.name, attrs)] = float(point.value)  # type: ignore[union-attr]
    return out


def total(got: Points, name: str, **match: str) -> float:
    """The sum of ``name``'s points whose attributes include ``match``."""
    return sum(v for (n, attrs), v in got.items() if n == name and set(match.items()) <= set(attrs))


def prometheus(registry: CollectorRegistry) -> Points:
    """What a Prometheus scrape of ``registry`` gives, keyed as above: counters by family
    name, gauges, and each histogram's ``_bucket``, ``_count`` and ``_sum`` samples."""
    out: Points = {}
    for family in registry.collect():
        if family.type == "counter":
            wanted = {f"{family.name}_total": family.name}
        elif family.type == "gauge":
            wanted = {family.name: family.name}
        elif family.type == "histogram":
            wanted = {family.name + p: family.name + p for p in ("_bucket", "_count", "_sum")}
        else:
            continue
        for s in family.samples:
            if s.name in wanted:
                key = (wanted[s.name], tuple(sorted(s.labels.items())))
                out[key] = out.get(key, 0.0) + s.value
    return out


def test_the_consumer_s_and_the_service_s_counts_arrive_through_the_meter(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, reader: InMemoryMetricReader
) -> None:
    topic = kafka_topic_factory(partitions=1)
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    group, ns = new_group(), new_namespace()

    def decide(msgs: list[Any], _ctx: Any) -> Any:
        body = msgs[0].body
        if body == b"poison" or (body == b"flaky" and msgs[0].reconsume_times == 0):
            return LATER
        return OK

    listener = RecordingListener(decide)
    registry = CollectorRegistry()  # Prometheus beside the meter: the same numbers
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        namespace=ns,
        delay_levels=LEVELS,
        partitions=1,
        max_reconsume_times=1,
        metrics_registry=registry,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    service = ScheduleService(
        conf, delay_levels=LEVELS, namespace=ns, partitions=1, metrics_registry=registry
    )
    with service, consumer, Producer(conf, metrics_registry=registry) as producer:
        for body in (b"fine", b"flaky", b"poison"):
            producer.send(Message(topic=topic, body=body))

        def settled() -> bool:
            got = points(reader)
            return (
                total(got, "rmq_consumer_dead_letters") == 1
                and total(got, "rmq_consumer_messages", result="ok") == 2
                and total(got, "rmq_producer_messages_sent") == 3
            )

        wait_until(settled, 90, "the success, the retry's success and the dead letter")
        got, scraped = points(reader), prometheus(registry)
        kinds = {(f.name, f.type) for f in registry.collect()}
    # a first try ok; flaky fails once then succeeds; poison fails twice, then the DLQ
    assert total(got, "rmq_consumer_messages", group=group, result="ok") == 2
    assert total(got, "rmq_consumer_messages", group=group, result="failed") == 3
    assert total(got, "rmq_consumer_send_backs", group=group, level="3") == 2
    assert total(got, "rmq_consumer_send_backs", group=group) == 2
    assert total(got, "rmq_consumer_dead_letters", group=group) == 1
    assert total(got, "rmq_schedule_forwarded", level="3") == 2
    assert total(got, "rmq_producer_messages_sent", topic=topic) == 3
    # every point the meter got is what Prometheus reports for the same clients
    counted = {k: v for k, v in got.items() if k[0].startswith(("rmq_consumer_", "rmq_schedule_"))}
    counters = ("messages", "send_backs", "dead_letters", "forwarded", "local_retries")
    for key, value in counted.items():
        if key[0].endswith(counters):
            assert scraped.get(key) == value, key
    # a histogram arrives as Prometheus exposes it: its buckets, count and sum
    assert ("rmq_consumer_listener_duration_seconds", "histogram") in kinds
    duration = "rmq_consumer_listener_duration_seconds"
    calls = total(got, f"{duration}_count", group=group)
    assert calls == listener.calls == 5, listener.calls
    assert total(got, f"{duration}_bucket", group=group, le="+Inf") == calls
    assert total(got, f"{duration}_sum", group=group) > 0
    for key, value in got.items():
        if key[0].startswith(duration) and ("group", group) in key[1]:
            assert scraped.get(key) == value, key
    assert total(got, "rmq_schedule_lateness_seconds_count") >= 2


def test_without_a_meter_provider_nothing_reaches_a_meter_and_prometheus_still_counts(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Instrumented for traces only (no global meter provider set): no metric is read for
    the meter, and a Prometheus registry given to the producer still counts."""
    out = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[out])  # not given to the adapter
    topic = kafka_topic_factory(partitions=1)
    registry = CollectorRegistry()
    telemetry.instrument()
    try:
        with Producer(
            {"bootstrap.servers": kafka_bootstrap_servers}, metrics_registry=registry
        ) as producer:
            producer.send(Message(topic=topic, body=b"x"))
            wait_until(
                lambda: (
                    registry.get_sample_value("rmq_producer_messages_sent_total", {"topic": topic})
                    == 1.0
                ),
                30,
                "the Prometheus count",
            )
    finally:
        telemetry.uninstrument()
    assert points(out) == {}
    provider.shutdown()
