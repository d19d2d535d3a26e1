"""Prometheus metrics scraped from live endpoints while messages flow, checked against what
was sent (docs/semantics.md §4.11)."""

from __future__ import annotations

import threading
import urllib.request
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from adapter import Message, Producer, PushConsumer, ScheduleService
from tests.support.consumer_helpers import LATER, LEVELS, OK, RecordingListener, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an endpoint: ``{(name, sorted labels): value}``."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return samples(text)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_consumer_service_and_producer_metrics_count_what_flowed(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("metrics")
    ns = f"m{uuid.uuid4().hex[:10]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    service_group = f"svc-{uuid.uuid4().hex[:8]}"

    def decide(msgs: list[Any], ctx: Any) -> Any:
        body = msgs[0].body
        if body.startswith(b"retry") and msgs[0].reconsume_times == 0:
            return LATER  # back once through level 3, then fine
        if body.startswith(b"dead"):
            ctx.delay_level_when_next_consume = -1
            return LATER
        return OK

    listener = RecordingListener(decide)
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        metrics_port=0,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    service = ScheduleService(
        conf, delay_levels=LEVELS, namespace=ns, partitions=1, group=service_group, metrics_port=0
    )
    bodies = [b"ok-%d" % i for i in range(20)] + [b"retry-0", b"retry-1", b"dead-0"]
    with service, consumer, Producer(conf, metrics_port=0) as producer:
        for body in bodies:
            producer.send(Message(topic=topic, body=body))
        wait_until(lambda: len(listener) == len(bodies) + 2, 60, "every delivery")
        url = consumer.metrics_endpoint
        assert url is not None and service.metrics_endpoint and producer.metrics_endpoint

        def counted() -> dict[Any, float] | None:
            found = scrape(url)
            want = {
                ("rmq_consumer_messages_total", "ok"): 22,  # 20 + the 2 retries that succeeded
                ("rmq_consumer_messages_total", "failed"): 3,
            }
            for (name, result), n in want.items():
                if value(found, name, group=group, topic=topic, result=result) != n:
                    return None
            dead = value(found, "rmq_consumer_dead_letters_total", group=group, topic=topic,
                         reason="LISTENER_REQUESTED")  # fmt: skip
            lag_topics = {dict(labels).get("topic") for (n, labels) in found
                          if n == "rmq_consumer_lag_messages"}  # fmt: skip
            if dead != 1 or lag_topics != {topic, f"%RETRY%{group}"}:
                return None
            return found

        found = wait_until(counted, 30, "the counts and the lag of every partition")
        assert value(found, "rmq_consumer_send_backs_total", group=group, topic=topic,
                     level="3") == 2  # fmt: skip
        assert value(found, "rmq_consumer_listener_duration_seconds_count", group=group,
                     topic=topic) >= 1  # fmt: skip
        lag = [v for (n, labels), v in found.items() if n == "rmq_consumer_lag_messages"]
        assert all(v >= 0 for v in lag)

        def caught_up() -> bool:
            # everything is settled: no lag, also on the retry topic, whose end offset
            # counts the ScheduleService's last transaction marker
            lags = [v for (n, _), v in scrape(url).items() if n == "rmq_consumer_lag_messages"]
            return bool(lags) and all(v == 0 for v in lags)

        wait_until(caught_up, 30, "zero lag once everything is settled")
        svc = scrape(service.metrics_endpoint)
        assert value(svc, "rmq_schedule_forwarded_total", group=service_group, level="3") == 2
        assert value(svc, "rmq_schedule_lateness_seconds_count", group=service_group,
                     level="3") == 2  # fmt: skip
        prod = scrape(producer.metrics_endpoint)
        assert value(prod, "rmq_producer_messages_sent_total", topic=topic) == len(bodies)
    with pytest.raises(OSError):  # the endpoint goes with the client
        urllib.request.urlopen(url, timeout=2)


def test_metrics_go_into_an_application_registry_and_every_family_is_there_from_the_start(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    registry = CollectorRegistry()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    consumer = PushConsumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}"},
        delay_levels=LEVELS,
        namespace=f"m{uuid.uuid4().hex[:10]}",
        partitions=1,
        metrics_registry=registry,
    )
    consumer.subscribe(kafka_topic_factory("reg"))
    consumer.register_message_listener(lambda msgs, ctx: OK)
    with consumer:
        text = generate_latest(registry).decode()
        assert consumer.metrics_endpoint is None  # no port asked for
    for family in (
        "rmq_consumer_messages_total",
        "rmq_consumer_listener_duration_seconds",
        "rmq_consumer_batches_running",
        "rmq_consumer_messages_in_flight",
        "rmq_consumer_partitions_paused",
        "rmq_consumer_send_backs_total",
        "rmq_consumer_dead_letters_total",
        "rmq_consumer_send_back_failures_total",
        "rmq_consumer_local_retries_total",
        "rmq_consumer_consume_timeouts_total",
        "rmq_consumer_lag_messages",
    ):
        assert f"# TYPE {family.removesuffix('_total')}" in text, family
    assert "rmq_consumer" not in generate_latest(registry).decode()  # unregistered on shutdown


def test_the_group_backlog_gauge_rises_with_a_backlog_and_retries_and_falls_to_zero(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """One scrape of the ScheduleService covers a group: while its listener is held the
    gauge counts the messages sent to its topic (lag), then, every message failing once,
    its retries waiting at a delay level (due within the horizon) and on its retry topic,
    and it ends at 0 once everything succeeded."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("backlog", partitions=2)
    ns = f"m{uuid.uuid4().hex[:10]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    levels = "1s 2s 3s 4s"  # a first retry waits at level 3: 3 s, long enough to be seen
    gate = threading.Event()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        gate.wait(60)
        return LATER if msgs[0].reconsume_times == 0 else OK

    listener = RecordingListener(decide)
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=levels,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    service = ScheduleService(
        conf,
        delay_levels=levels,
        namespace=ns,
        partitions=1,
        metrics_port=0,
        lag_groups=[group],
        lag_horizon_s=30,
        lag_consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    n = 20
    seen: list[tuple[float, float, float, float]] = []  # total, topics, retry, delayed

    def read() -> tuple[float, float, float, float]:
        url = service.metrics_endpoint
        assert url is not None
        found = scrape(url)
        parts = tuple(
            value(found, "rmq_group_backlog_part", group=group, part=p)
            for p in ("topics", "retry", "delayed")
        )
        sample = (value(found, "rmq_group_backlog", group=group), *parts)
        assert sample[0] == sum(parts), sample
        seen.append(sample)
        return sample

    with service, consumer, Producer(conf) as producer:
        assert read()[0] == 0  # nothing to do yet
        for i in range(n):
            producer.send(Message(topic=topic, body=b"b-%d" % i))
        # the listener is held: the group's lag on its topic is the backlog
        wait_until(lambda: read()[1] == n, 30, f"a backlog of {n} on the topic")
        gate.set()  # every message fails once: its retry waits at level 3, then comes back
        wait_until(lambda: read()[3] > 0, 30, "retries waiting at a delay level")
        wait_until(lambda: len(listener) >= 2 * n and read()[0] == 0, 60, "the gauge at 0")
    assert max(s[1] for s in seen) == n
    assert max(s[3] for s in seen) > 0
    assert seen[-1] == (0, 0, 0, 0)
    print(f"backlog readings (total, topics, retry, delayed): {seen}")
