"""OpenTelemetry across the retry ladder, on the real broker with the real OpenTelemetry
SDK (its in-memory span exporter): one trace from the producer's send through every
attempt, send-back, forward and dead letter, and exactly one ``traceparent`` on every copy
the adapter makes (docs/tracing.md)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adapter import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    telemetry,
)
from adapter.errors import ConfigError
from adapter.kafka import Consumer as DropInConsumer
from adapter.services.dlq import read_dlq
from adapter.services.redrive import redrive
from tests.support.consumer_helpers import (
    LATER,
    LEVELS,
    OK,
    Pair,
    RawRecord,
    RecordingListener,
    new_group,
    new_namespace,
    produce_raw,
    read_dlq_raw,
    read_topic,
    retry_kafka_topic,
    running_pair,
    wait_until,
)
from tests.support.simple_backends import BACKENDS, simple_consumer
from tests.support.span_capture import finished
from tests.support.trace_timeline import render

pytestmark = pytest.mark.integration

TRACEPARENT = "traceparent"


def hop(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    return str(attrs.get("rocketmq.hop") or attrs.get("messaging.operation.type"))


def trace_ids(spans: list[ReadableSpan]) -> set[int]:
    return {s.context.trace_id for s in spans if s.context is not None}


def traceparents(record: RawRecord) -> list[bytes | None]:
    return [v for k, v in record.headers if k == TRACEPARENT]


@contextlib.contextmanager
def traced_pair(
    bootstrap: str,
    topic: str,
    listener: Any,
    *,
    delivery: str,
    service_tracing: bool = True,
    **options: Any,
) -> Iterator[Pair]:
    """A ScheduleService forwarding with ``delivery`` and a PushConsumer on a fresh group
    and namespace (the short ladder), both made while instrumented."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    group, ns = new_group(), new_namespace()
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        namespace=ns,
        delay_levels=LEVELS,
        partitions=1,
        shutdown_await=10.0,
        **options,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    svc = ScheduleService(
        conf,
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        delivery=delivery,
        tracing=service_tracing,
    )
    with svc, consumer:
        yield Pair(conf, [topic], group, ns, consumer, svc, listener)


def fails_until(times: int) -> RecordingListener:
    """A listener that asks for a retry until a message's ``reconsume_times`` is ``times``."""
    return RecordingListener(
        lambda msgs, _ctx: LATER if any(m.reconsume_times < times for m in msgs) else OK
    )


def test_a_message_that_fails_twice_is_one_trace_with_one_traceparent_on_every_copy(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    spans: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    """Also draws the trace (docs/tracing.md's picture; see tests/support/trace_timeline.py)."""
    topic = kafka_topic_factory(partitions=1)
    listener = fails_until(2)
    with traced_pair(kafka_bootstrap_servers, topic, listener, delivery="AT_LEAST_ONCE") as pair:
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"flaky"))
        wait_until(lambda: len(listener) >= 3, 60, "two retries and the success")
        wait_until(lambda: sum(hop(s) == "process" for s in finished(spans)) >= 3, 10, "spans")
        delays = pair.delay_records()
        retries = pair.retry_records()
        firsts = read_topic(pair.conf, topic)
    got = finished(spans)
    assert [hop(s) for s in got] == [
        "send",
        "process",
        "send-back",
        "forward",
        "process",
        "send-back",
        "forward",
        "process",
    ], [s.name for s in got]
    assert len(trace_ids(got)) == 1, [s.name for s in got]
    send = got[0]
    assert send.context is not None
    # every other span is a child of the send (the one context every copy carries)
    assert all(s.parent is not None and s.parent.span_id == send.context.span_id for s in got[1:])
    processes = [s for s in got if hop(s) == "process"]
    assert [s.attributes["rocketmq.result"] for s in processes] == [  # type: ignore[index]
        "RECONSUME_LATER",
        "RECONSUME_LATER",
        "CONSUME_SUCCESS",
    ]
    assert [s.status.status_code for s in processes] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert [s.attributes["rocketmq.reconsume_times"] for s in processes] == [0, 1, 2]  # type: ignore[index]
    assert all(s.links and s.links[0].context.span_id == send.context.span_id for s in processes)
    forwards = [s for s in got if hop(s) == "forward"]
    assert all(isinstance((s.attributes or {}).get("rocketmq.lateness_ms"), int) for s in forwards)
    send_backs = [s for s in got if hop(s) == "send-back"]
    assert [(s.attributes or {}).get("rocketmq.delay_level") for s in send_backs] == [3, 4]
    # the records: the first send and every copy carry the first send's context, once
    copies = [*firsts, *retries, *(r for level in delays.values() for r in level)]
    assert len(copies) == 5  # the send, two delay-topic copies, two forwards
    expected = traceparents(firsts[0])
    assert len(expected) == 1 and expected[0] is not None
    assert expected[0].decode().split("-")[1] == f"{send.context.trace_id:032x}"
    for record in copies:
        assert traceparents(record) == expected, record
    picture = render(got, tmp_path / "tracing.png")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_poison_message_s_trace_ends_in_the_dead_letter_write_and_its_redrive(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    listener = fails_until(99)
    with running_pair(kafka_bootstrap_servers, topic, listener, max_reconsume_times=1) as pair:
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"poison"))
        wait_until(lambda: len(pair.dlq()) == 1, 60, "the dead letter")
        wait_until(lambda: any(hop(s) == "dead-letter" for s in finished(spans)), 10, "span")
        got = finished(spans)
        dead = pair.dlq()[0]
        first = read_topic(pair.conf, topic)[0]
    assert len(trace_ids(got)) == 1
    assert [hop(s) for s in got][-1] == "dead-letter"
    last = got[-1]
    assert (last.attributes or {}).get("rocketmq.dead_letter.reason")
    assert (last.attributes or {}).get("messaging.destination.name") == dead.topic
    assert traceparents(dead) == traceparents(first) and len(traceparents(first)) == 1
    # a redrive is one more copy in the same trace, carrying the same context once
    entries = read_dlq(pair.conf, pair.group, timeout_s=5)
    assert len(entries) == 1
    assert redrive(pair.conf, pair.group, entries).sent == 1
    redriven = read_topic(pair.conf, retry_kafka_topic(pair.group))[-1]
    assert traceparents(redriven) == traceparents(first)
    after = finished(spans)
    assert hop(after[-1]) == "redrive" or any(hop(s) == "redrive" for s in after)
    assert len(trace_ids(after)) == 1


def test_a_batch_process_span_links_each_message(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
        producer.send_batch([Message(topic=topic, body=f"b{i}".encode()) for i in range(4)])
    sent = {s.context.span_id for s in finished(spans) if s.context is not None}
    assert len(sent) == 4
    listener = RecordingListener()
    consumer = PushConsumer(
        {
            "bootstrap.servers": kafka_bootstrap_servers,
            "group.id": new_group(),
            "auto.offset.reset": "earliest",
        },
        namespace=new_namespace(),
        delay_levels=LEVELS,
        consume_message_batch_max_size=4,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    with consumer:
        wait_until(lambda: len(listener) >= 4, 30, "the four messages")
    processes = [s for s in finished(spans) if hop(s) == "process"]
    linked = {link.context.span_id for s in processes for link in s.links}
    assert linked == sent
    batch = max(processes, key=lambda s: len(s.links))
    assert len(batch.links) == (batch.attributes or {}).get("messaging.batch.message_count", 1)
    assert len(batch.links) > 1  # four messages fetched together make one call (batch 4)


def test_a_plain_kafka_record_s_traceparent_is_honoured_and_never_repeated(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    trace_id = uuid.uuid4().hex
    theirs = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01".encode()
    produce_raw(kafka_bootstrap_servers, topic, [(b"plain", [(TRACEPARENT, theirs)])])
    listener = fails_until(1)
    with running_pair(kafka_bootstrap_servers, topic, listener) as pair:
        wait_until(lambda: len(listener) >= 2, 60, "the retry's success")
        wait_until(lambda: sum(hop(s) == "process" for s in finished(spans)) >= 2, 10, "spans")
        copies = [*pair.retry_records(), *(r for lv in pair.delay_records().values() for r in lv)]
    got = finished(spans)
    assert trace_ids(got) == {int(trace_id, 16)}
    assert len(copies) == 2
    assert all(traceparents(r) == [theirs] for r in copies)


def test_exactly_once_forwarding_keeps_the_context(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    listener = RecordingListener()
    with traced_pair(kafka_bootstrap_servers, topic, listener, delivery="EXACTLY_ONCE") as pair:
        with Producer(
            {"bootstrap.servers": kafka_bootstrap_servers},
            delay_levels=LEVELS,
            namespace=pair.namespace,
        ) as producer:
            producer.send(Message(topic=topic, body=b"later", delay_time_level=2))
        wait_until(lambda: len(listener) >= 1, 60, "the forwarded message")
        wait_until(lambda: any(hop(s) == "process" for s in finished(spans)), 10, "span")
        records = read_topic(pair.conf, topic)
        parked = pair.delay_records()[2]
    got = finished(spans)
    assert [hop(s) for s in got] == ["send", "forward", "process"]
    assert len(trace_ids(got)) == 1
    assert len(records) == 1 and len(traceparents(records[0])) == 1
    assert traceparents(records[0]) == traceparents(parked[0])


def test_orderly_local_retries_are_attempts_of_one_trace(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    seen: list[int] = []
    lock = threading.Lock()

    def orderly(msgs: list[Any], _ctx: Any) -> ConsumeOrderlyStatus:
        with lock:
            seen.append(msgs[0].reconsume_times)
        if msgs[0].reconsume_times < 2:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(
        {
            "bootstrap.servers": kafka_bootstrap_servers,
            "group.id": new_group(),
            "auto.offset.reset": "earliest",
        },
        namespace=new_namespace(),
        delay_levels=LEVELS,
        suspend_current_queue_time_millis=50,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_orderly(orderly)
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
        producer.send(Message(topic=topic, body=b"ordered"))
    with consumer:
        wait_until(lambda: len(seen) >= 3, 30, "two local retries and the success")
    got = finished(spans)
    assert [hop(s) for s in got] == ["send", "process", "process", "process"]
    assert len(trace_ids(got)) == 1
    assert [(s.attributes or {}).get("rocketmq.result") for s in got[1:]] == [
        "SUSPEND_CURRENT_QUEUE_A_MOMENT",
        "SUSPEND_CURRENT_QUEUE_A_MOMENT",
        "SUCCESS",
    ]


def test_a_listener_exception_is_recorded_on_its_process_span(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)

    def boom(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        if msgs[0].reconsume_times == 0:
            raise ValueError("bad order 42")
        return OK

    listener = RecordingListener(boom)
    with running_pair(kafka_bootstrap_servers, topic, listener):
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"x"))
        wait_until(lambda: sum(hop(s) == "process" for s in finished(spans)) >= 2, 60, "spans")
    first = next(s for s in finished(spans) if hop(s) == "process")
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {}).get("rocketmq.result") == "exception"
    assert [e.name for e in first.events] == ["exception"]
    assert "bad order 42" in str((first.events[0].attributes or {}).get("exception.message"))


def test_uninstrumented_no_header_is_added_and_no_span_made(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    topic = kafka_topic_factory(partitions=1)
    listener = fails_until(1)
    with contextlib.ExitStack() as stack:
        # a tracer provider exists and a span is current, but the adapter is not instrumented
        tracer = provider.get_tracer("test")
        stack.enter_context(tracer.start_as_current_span("the caller"))
        pair = stack.enter_context(running_pair(kafka_bootstrap_servers, topic, listener))
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"quiet"))
        wait_until(lambda: len(listener) >= 2, 60, "the retry's success")
        records = [
            *read_topic(pair.conf, topic),
            *pair.retry_records(),
            *(r for lv in pair.delay_records().values() for r in lv),
        ]
    assert not telemetry.is_instrumented()
    assert len(records) == 3
    assert all(traceparents(r) == [] for r in records)
    assert [s.name for s in exporter.get_finished_spans()] == ["the caller"]
    provider.shutdown()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_simple_consumer_s_receives_are_in_the_message_s_trace(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    spans: InMemorySpanExporter,
    backend: str,
) -> None:
    """Received, left unacknowledged (its invisible duration runs out), received again and
    acknowledged: each receive is a span of the send's trace, and the classic backend's copy
    to the retry topic is one more, carrying the send's context once."""
    topic = kafka_topic_factory(partitions=1)
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
        producer.send(Message(topic=topic, body=b"pulled"))
    with simple_consumer(backend, kafka_bootstrap_servers, topic, new_group()) as sc:
        first: list[Any] = []
        deadline = time.monotonic() + 30
        while not first and time.monotonic() < deadline:
            first = sc.receive(1, 2.0)
        assert len(first) == 1
        again: list[Any] = []
        while not again and time.monotonic() < deadline + 30:
            again = sc.receive(1, 2.0)
        assert len(again) == 1 and again[0].delivery_attempt == 2
        sc.ack(again[0])
        group = sc.consumer_group
        retried = read_topic(
            {"bootstrap.servers": kafka_bootstrap_servers}, retry_kafka_topic(group)
        )
    got = finished(spans)
    kinds = [hop(s) for s in got]
    assert kinds.count("receive") == 2 and kinds[0] == "send", kinds
    assert len(trace_ids(got)) == 1
    receives = [s for s in got if hop(s) == "receive"]
    assert [(s.attributes or {}).get("rocketmq.reconsume_times") for s in receives] == [0, 1]
    if backend == "classic":
        assert "retry" in kinds
        first_record = read_topic({"bootstrap.servers": kafka_bootstrap_servers}, topic)[0]
        assert len(retried) == 1
        assert traceparents(retried[0]) == traceparents(first_record)
        assert len(traceparents(first_record)) == 1


def test_the_drop_in_s_send_back_and_its_forward_are_in_the_message_s_trace(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
        producer.send(Message(topic=topic, body=b"dropped-in"))
    group, ns = new_group(), new_namespace()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    times: list[int] = []
    with (
        ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1),
        DropInConsumer(
            {**conf, "group.id": group, "auto.offset.reset": "earliest"},
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
        ) as c,
    ):
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(times) < 2 and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            times.append(c.reconsume_times(msg))
            if times[-1] == 0:
                c.reconsume_later(msg)
            c.commit(message=msg)
        retried = read_topic(conf, retry_kafka_topic(group))
        first = read_topic(conf, topic)[0]
    assert times == [0, 1]
    got = finished(spans)
    # each poll() that returned the message is a receive span (the drop-in's own loop)
    assert [hop(s) for s in got] == ["send", "receive", "send-back", "forward", "receive"]
    assert len(trace_ids(got)) == 1
    receives = [s for s in got if hop(s) == "receive"]
    assert [(s.attributes or {}).get("rocketmq.reconsume_times") for s in receives] == [0, 1]
    assert len(traceparents(first)) == 1 and traceparents(retried[0]) == traceparents(first)


def test_an_async_listener_s_calls_are_process_spans(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    calls: list[int] = []

    async def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        await asyncio.sleep(0)
        calls.append(msgs[0].reconsume_times)
        return LATER if msgs[0].reconsume_times == 0 else OK

    with traced_pair(kafka_bootstrap_servers, topic, listener, delivery="AT_LEAST_ONCE"):
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"awaited"))
        wait_until(lambda: sum(hop(s) == "process" for s in finished(spans)) >= 2, 60, "spans")
    got = finished(spans)
    assert calls[:2] == [0, 1]
    assert [hop(s) for s in got] == ["send", "process", "send-back", "forward", "process"]
    assert len(trace_ids(got)) == 1
    processes = [s for s in got if hop(s) == "process"]
    assert [(s.attributes or {}).get("rocketmq.result") for s in processes] == [
        "RECONSUME_LATER",
        "CONSUME_SUCCESS",
    ]


def test_clients_that_opt_out_make_no_span_and_add_no_header(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    """``tracing=False`` on a Producer, a PushConsumer and a ScheduleService, while
    instrumented: a retried message carries no context and no span is made."""
    topic = kafka_topic_factory(partitions=1)
    listener = fails_until(1)
    with traced_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        delivery="AT_LEAST_ONCE",
        tracing=False,
        service_tracing=False,
    ) as pair:
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}, tracing=False) as producer:
            producer.send(Message(topic=topic, body=b"private"))
        wait_until(lambda: len(listener) >= 2, 60, "the retry's success")
        records = [
            *read_topic(pair.conf, topic),
            *pair.retry_records(),
            *(r for lv in pair.delay_records().values() for r in lv),
        ]
    assert telemetry.is_instrumented()
    assert len(records) == 3 and all(traceparents(r) == [] for r in records)
    assert finished(spans) == []


@pytest.mark.parametrize("client", ["Producer", "PushConsumer", "ScheduleService"])
def test_tracing_must_be_a_bool(client: str) -> None:
    conf = {"bootstrap.servers": "127.0.0.1:9"}
    make = {
        "Producer": lambda: Producer(conf, tracing="no"),  # type: ignore[typeddict-item]
        "PushConsumer": lambda: PushConsumer({**conf, "group.id": "g"}, tracing="no"),  # type: ignore[typeddict-item]
        "ScheduleService": lambda: ScheduleService(conf, tracing="no"),  # type: ignore[typeddict-item]
    }[client]
    with pytest.raises(ConfigError, match="tracing='no'"):
        make()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_simple_consumer_s_dead_letter_ends_the_message_s_trace(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    spans: InMemorySpanExporter,
    backend: str,
) -> None:
    """One delivery attempt allowed, never acknowledged: the trace ends in the dead-letter
    write, and the dead letter carries the send's context once."""
    topic = kafka_topic_factory(partitions=1)
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    with Producer(conf) as producer:
        producer.send(Message(topic=topic, body=b"abandoned"))
    group = new_group()
    with simple_consumer(
        backend, kafka_bootstrap_servers, topic, group, max_delivery_attempts=1
    ) as sc:
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = sc.receive(1, 1.0)
        assert len(got) == 1

        def dead_lettered() -> bool:
            sc.receive(1, 1.0)  # keeps the share backend polling (its dead letters go then)
            return any(hop(s) == "dead-letter" for s in finished(spans))

        wait_until(dead_lettered, 60, "the dead-letter span")
        wait_until(lambda: len(read_dlq_raw(conf, group)) == 1, 30, "the dead letter")
    dead = read_dlq_raw(conf, group)[0]
    first = read_topic(conf, topic)[0]
    spans_now = finished(spans)
    assert hop(spans_now[0]) == "send" and hop(spans_now[-1]) == "dead-letter"
    assert len(trace_ids(spans_now)) == 1
    assert len(traceparents(first)) == 1 and traceparents(dead) == traceparents(first)


def test_an_orderly_poison_message_s_trace_ends_in_the_dead_letter_write(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    topic = kafka_topic_factory(partitions=1)
    group = new_group()
    consumer = PushConsumer(
        {
            "bootstrap.servers": kafka_bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
        },
        namespace=new_namespace(),
        delay_levels=LEVELS,
        partitions=1,
        suspend_current_queue_time_millis=50,
        max_reconsume_times=1,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_orderly(
        lambda msgs, ctx: ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
    )
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    with Producer(conf) as producer:
        producer.send(Message(topic=topic, body=b"never in order"))
    with consumer:
        wait_until(lambda: len(read_dlq_raw(conf, group)) == 1, 60, "the dead letter")
        wait_until(lambda: any(hop(s) == "dead-letter" for s in finished(spans)), 10, "span")
    got = finished(spans)
    assert [hop(s) for s in got] == ["send", "process", "process", "dead-letter"]
    assert len(trace_ids(got)) == 1
    dead = read_dlq_raw(conf, group)[0]
    assert traceparents(dead) == traceparents(read_topic(conf, topic)[0])
    assert len(traceparents(dead)) == 1


def test_a_listener_past_consume_timeout_is_a_timeout_on_its_span(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, spans: InMemorySpanExporter
) -> None:
    """The first call runs past ``consume_timeout`` (counted as RECONSUME_LATER): its span
    says ``timeout`` with an error status; the retry succeeds in the same trace."""
    topic = kafka_topic_factory(partitions=1)

    def slow_once(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        if msgs[0].reconsume_times == 0:
            time.sleep(0.8)
        return OK

    listener = RecordingListener(slow_once)
    with traced_pair(
        kafka_bootstrap_servers, topic, listener, delivery="AT_LEAST_ONCE", consume_timeout=0.3
    ):
        with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as producer:
            producer.send(Message(topic=topic, body=b"slow"))
        wait_until(lambda: sum(hop(s) == "process" for s in finished(spans)) >= 2, 60, "spans")
    got = finished(spans)
    processes = [s for s in got if hop(s) == "process"]
    assert [(s.attributes or {}).get("rocketmq.result") for s in processes[:2]] == [
        "timeout",
        "CONSUME_SUCCESS",
    ]
    assert processes[0].status.status_code is StatusCode.ERROR
    assert len(trace_ids(got)) == 1
