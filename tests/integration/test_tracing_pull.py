"""OpenTelemetry on the pull clients, on the real broker with the real OpenTelemetry SDK (its
in-memory span exporter): the confluent-kafka drop-in's ``poll()``/``consume()`` and
``AsyncSimpleConsumer.receive()`` are ``receive`` spans in the producer's trace, and a client
made with ``tracing=False`` (or made while not instrumented) makes none (docs/tracing.md)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapter import Message, Producer, telemetry
from adapter.aio import AsyncSimpleConsumer
from adapter.clients.simple.simple_consumer import SimpleConsumer
from adapter.errors import ConfigError
from adapter.kafka import Consumer as DropInConsumer
from tests.support.consumer_helpers import new_group, wait_until
from tests.support.simple_backends import BACKENDS, FAST, LOCK_S
from tests.support.span_capture import finished

pytestmark = pytest.mark.integration


def op(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get("messaging.operation.type"))


def send(bootstrap: str, topic: str, bodies: list[bytes], *, tracing: bool = True) -> None:
    with Producer({"bootstrap.servers": bootstrap}, tracing=tracing) as producer:
        for body in bodies:
            producer.send(Message(topic=topic, body=body))


def drop_in(bootstrap: str, **options: Any) -> DropInConsumer:
    return DropInConsumer(
        {"bootstrap.servers": bootstrap, "group.id": new_group(), "auto.offset.reset": "earliest"},
        partitions=1,
        **options,
    )


def poll_all(c: DropInConsumer, topic: str, n: int, *, batch: int = 0) -> list[Any]:
    """``n`` records of ``topic`` through ``poll()`` (``batch`` 0) or ``consume(batch)``."""
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        msgs = c.consume(batch, 0.5) if batch else [c.poll(0.5)]
        got += [m for m in msgs if m is not None and m.error() is None]
    assert len(got) == n
    return got


def test_the_drop_in_s_poll_is_a_receive_span_in_the_producer_s_trace(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    send(kafka_bootstrap_servers, topic, [b"polled"])
    with drop_in(kafka_bootstrap_servers) as c:
        (msg,) = poll_all(c, topic, 1)
    sent, received = finished(spans)
    assert (op(sent), op(received)) == ("send", "receive")
    assert sent.context is not None and received.context is not None
    assert received.context.trace_id == sent.context.trace_id
    assert received.parent is not None and received.parent.span_id == sent.context.span_id
    assert [link.context.span_id for link in received.links] == [sent.context.span_id]
    attrs = received.attributes or {}
    assert attrs["messaging.destination.name"] == topic
    assert attrs["messaging.kafka.offset"] == msg.offset()
    assert attrs["rocketmq.reconsume_times"] == 0


def test_the_drop_in_s_consume_is_one_receive_span_linking_each_message(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    send(kafka_bootstrap_servers, topic, [f"m{i}".encode() for i in range(3)])
    sends = {s.context.span_id for s in finished(spans) if s.context is not None}
    assert len(sends) == 3
    with drop_in(kafka_bootstrap_servers) as c:
        poll_all(c, topic, 3, batch=10)
    receives = [s for s in finished(spans) if op(s) == "receive"]
    assert receives
    assert {link.context.span_id for s in receives for link in s.links} == sends
    for s in receives:
        attrs = s.attributes or {}
        assert attrs["messaging.batch.message_count"] == len(s.links)
        if len(s.links) > 1:  # a batch has no parent: the links say whose it is
            assert s.parent is None


def test_the_drop_in_made_with_tracing_off_or_uninstrumented_makes_no_span(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(partitions=1)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # made before instrument(): the untraced class, whatever happens after
    before = drop_in(kafka_bootstrap_servers)
    telemetry.instrument(tracer_provider=provider)
    try:
        send(kafka_bootstrap_servers, topic, [b"a", b"b"], tracing=False)
        opted_out = drop_in(kafka_bootstrap_servers, tracing=False)
        with before, opted_out:
            poll_all(before, topic, 2)
            poll_all(opted_out, topic, 2, batch=5)
        assert type(opted_out) is DropInConsumer and type(before) is DropInConsumer
    finally:
        telemetry.uninstrument()
        provider.shutdown()
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_simple_consumer_s_receive_is_a_receive_span_in_the_trace(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    spans: InMemorySpanExporter,
    backend: str,
) -> None:
    topic = kafka_topic_factory(partitions=1)
    send(kafka_bootstrap_servers, topic, [b"awaited"])

    async def main() -> list[Any]:
        async with async_simple(kafka_bootstrap_servers, topic, backend) as sc:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = await sc.receive(1, 2.0)
            for view in got:
                await sc.ack(view)
            return got

    got = asyncio.run(main())
    assert len(got) == 1
    wait_until(lambda: any(op(s) == "receive" for s in finished(spans)), 10, "the span")
    sent, received = finished(spans)[:2]
    assert (op(sent), op(received)) == ("send", "receive")
    assert sent.context is not None and received.context is not None
    assert received.context.trace_id == sent.context.trace_id
    assert received.parent is not None and received.parent.span_id == sent.context.span_id
    assert sum(op(s) == "receive" for s in finished(spans)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_simple_consumer_with_tracing_off_makes_no_span(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    spans: InMemorySpanExporter,
    backend: str,
) -> None:
    topic = kafka_topic_factory(partitions=1)
    send(kafka_bootstrap_servers, topic, [b"private"], tracing=False)

    async def main() -> int:
        async with async_simple(kafka_bootstrap_servers, topic, backend, tracing=False) as sc:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = await sc.receive(1, 2.0)
            for view in got:
                await sc.ack(view)
            return len(got)

    assert asyncio.run(main()) == 1
    assert telemetry.is_instrumented()
    assert finished(spans) == []


def async_simple(bootstrap: str, topic: str, backend: str, **options: Any) -> AsyncSimpleConsumer:
    """An AsyncSimpleConsumer on ``backend`` (the options of tests/support/simple_backends)."""
    options.update(backend=backend, partitions=1)
    if backend == "share":
        options.update(lock_duration=LOCK_S, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    else:
        conf = {"bootstrap.servers": bootstrap, **FAST}
    return AsyncSimpleConsumer(conf, new_group(), {topic: "*"}, **options)


@pytest.mark.parametrize("backend", ["classic", "share"])
def test_tracing_must_be_a_bool_on_the_pull_clients(backend: str) -> None:
    """``tracing`` is an option of theirs (``False`` accepted), and only a bool is."""
    conf = {"bootstrap.servers": "127.0.0.1:9"}
    with pytest.raises(ConfigError, match="tracing='no': expected True or False"):
        SimpleConsumer(conf, "g", backend=backend, tracing="no")  # type: ignore[typeddict-item]
    with pytest.raises(ConfigError, match="tracing=1: expected True or False"):
        DropInConsumer({**conf, "group.id": "g"}, tracing=1)  # type: ignore[typeddict-item]
    assert SimpleConsumer(conf, "g", backend=backend, tracing=False).consumer_group == "g"
    DropInConsumer({**conf, "group.id": "g"}, tracing=False).close()
