"""KafkaTraceSink against a real broker: packed Avro records (or, unpacked, one per event keyed
by message id) a plain consumer (and Spark) can read, tagged with the writer schema; it never
raises into the caller and never blocks it (a full queue drops and counts)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer

from adapter.core import naming
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.io.avro import (
    TRACE_SCHEMA_HEADER,
    decode,
    decode_trace,
    decode_trace_records,
    trace_batch_schema,
    trace_schema,
)
from adapter.io.trace_sink import KafkaTraceSink

pytestmark = pytest.mark.integration


def _read_all(bootstrap: str, kafka_topic: str, n: int, timeout: float = 30.0) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([kafka_topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
    finally:
        c.close()
    return out


def _events(n: int) -> list[TraceEvent]:
    return [
        TraceEvent(1000 + i, "consumer", "g", "orders", i % 3, i, f"id-{i}", f"id-{i}",
                   TraceStatus.SUCCESS, 0, keys=f"k-{i}", consume_rt_ms=0.5)
        for i in range(n)
    ]  # fmt: skip


def test_events_are_packed_and_read_back_equal(kafka_bootstrap_servers: str) -> None:
    logical = f"trace-{uuid.uuid4().hex[:8]}"
    events = _events(250)
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    # a long interval: nothing is produced until flush(), so the caps alone cut the packs
    with KafkaTraceSink(config, logical, max_events=100, interval_s=60) as sink:
        for e in events:
            sink(e)
        assert sink.flush(10) == 0
    assert sink.sent == sink.delivered == 250 and sink.dropped == 0
    assert sink.records == 3
    msgs = _read_all(kafka_bootstrap_servers, sink.kafka_topic, 3)
    assert len(msgs) == 3
    packs = []
    for m in msgs:
        tag = dict(m.headers())[TRACE_SCHEMA_HEADER].decode()
        assert tag == trace_batch_schema().tag and m.key() is None
        packs.append(decode_trace_records(m.value(), tag))
    packs.sort(key=lambda pack: pack[0]["offset"])  # packs may sit in different partitions
    assert [len(p) for p in packs] == [100, 100, 50]
    assert [r for pack in packs for r in pack] == [e.to_record() for e in events]


def test_a_full_queue_drops_and_counts_without_blocking(kafka_bootstrap_servers: str) -> None:
    logical = f"trace-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    with KafkaTraceSink(config, logical, max_queued=10, interval_s=60) as sink:
        t0 = time.monotonic()
        for e in _events(25):
            sink(e)
        assert time.monotonic() - t0 < 1.0
        assert sink.queued == 10 and sink.dropped == 15
        assert sink.flush(10) == 0
        assert sink.delivered == 10 and sink.dropped == 15
    msgs = _read_all(kafka_bootstrap_servers, sink.kafka_topic, 1)
    assert [
        r["msg_id"] for r in decode_trace_records(msgs[0].value(), trace_batch_schema().tag)
    ] == [f"id-{i}" for i in range(10)]


def test_unpacked_events_reach_the_trace_topic(kafka_bootstrap_servers: str) -> None:
    logical = f"trace-{uuid.uuid4().hex[:8]}"
    config = {
        "bootstrap.servers": kafka_bootstrap_servers,
        "group.id": "consumer-only-keys-are-dropped",
        "auto.offset.reset": "earliest",
        "client.id": "svc",
    }
    events = [
        TraceEvent(1000 + i, "consumer", "g", "orders", 0, i, f"id-{i}", f"id-{i}",
                   TraceStatus.RETRY, i, delay_level=3 + i, tags="T")
        for i in range(20)
    ]  # fmt: skip
    with KafkaTraceSink(config, logical, partitions=2, packed=False) as sink:
        assert sink.kafka_topic == naming.to_kafka(logical)
        for e in events:
            sink(e)
        assert sink.flush(10) == 0
    assert sink.sent == sink.delivered == 20 and sink.dropped == 0
    msgs = _read_all(kafka_bootstrap_servers, sink.kafka_topic, 20)
    assert len(msgs) == 20
    got = {}
    for m in msgs:
        headers = dict(m.headers())
        assert headers[TRACE_SCHEMA_HEADER] == trace_schema().tag.encode()
        record = decode_trace(m.value(), headers[TRACE_SCHEMA_HEADER].decode())
        assert m.key() == record["msg_id"].encode()
        got[record["msg_id"]] = record
    assert got == {e.msg_id: e.to_record() for e in events}


def test_sink_never_raises(kafka_bootstrap_servers: str) -> None:
    sink = KafkaTraceSink({"bootstrap.servers": kafka_bootstrap_servers}, f"t-{uuid.uuid4().hex}")
    bad: Any = TraceEvent(1, "consumer", "g", "t", 0, 0, None, "m", TraceStatus.SUCCESS, 0)  # type: ignore[arg-type]
    sink(bad)  # cannot be encoded: counted (by the sink's thread), logged, not raised
    sink.defer(("g", 1, None, TraceStatus.SUCCESS, None, None, None, None))  # type: ignore[arg-type]
    assert sink.flush(10) == 0
    assert sink.dropped == 2 and sink.sent == 0
    sink.close()
    sink(TraceEvent(1, "consumer", "g", "t", 0, 0, "m", "m", TraceStatus.SUCCESS, 0))
    assert sink.sent == 0  # closed: ignored
    sink.close()  # idempotent


def test_unreachable_broker_drops_instead_of_raising() -> None:
    sink = KafkaTraceSink(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 500},
        "unreachable",
        create_topic=False,
    )
    t0 = time.monotonic()
    for i in range(5):
        sink(TraceEvent(i, "consumer", "g", "t", 0, i, f"m{i}", "m", TraceStatus.SUCCESS, 0))
    assert time.monotonic() - t0 < 1.0  # enqueueing does not wait for the broker
    sink.close(timeout_s=5)
    assert sink.dropped == 5 and sink.delivered == 0


@pytest.mark.parametrize("ours", [False, True], ids=["plain", "our-headers"])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_traced_consumer_writes_runs_that_read_back_as_its_events(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, batch: int, ours: bool
) -> None:
    """Records consumed with ``trace_topic``, plain Kafka ones (no headers) or as our
    producer writes them (``UNIQ_KEY``, ``TAGS``, ``KEYS``): the sink writes runs
    (``ConsumeTraceRun``), and they read back as the events a plain sink is handed for the
    same records (one more message has a header a run cannot hold: its events stay
    events)."""
    from confluent_kafka import Producer

    from adapter import PushConsumer
    from adapter.core.codec import encode_message_headers
    from adapter.core.message import Message
    from tests.support.consumer_helpers import RecordingListener, wait_until

    topic = kafka_topic_factory("runs")
    producer = Producer({"bootstrap.servers": kafka_bootstrap_servers})
    for i in range(40):
        headers: list[tuple[str, bytes | None]] | None
        if ours:
            sent = Message(topic=topic, body=b"", tags="T", keys=[f"k{i}", "x"])
            headers = encode_message_headers(sent, f"AC{i:04d}")
            if i == 17:
                headers.append(("ORIGIN_MESSAGE_ID", b"AC0000"))
        else:
            headers = [("TAGS", b"T"), ("ORIGIN_MESSAGE_ID", b"O17")] if i == 17 else None
        producer.produce(topic, f"m{i}".encode(), headers=headers)
    assert producer.flush(10) == 0
    logical = f"trace-{uuid.uuid4().hex[:8]}"
    plain: list[TraceEvent] = []
    sinks: list[dict[str, Any]] = [{"trace_topic": logical}, {"trace_sink": plain.append}]
    for options in sinks:
        listener = RecordingListener()
        consumer = PushConsumer(
            {"bootstrap.servers": kafka_bootstrap_servers, "group.id": f"g-{uuid.uuid4().hex}",
             "auto.offset.reset": "earliest"},
            consume_message_batch_max_size=batch, partitions=1, **options,
        )  # fmt: skip
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)
        with consumer:  # shutting down flushes the trace sink
            wait_until(lambda seen=listener: len(seen) >= 40, what="40 deliveries")
    got: list[dict[str, Any]] = []
    in_runs = 0
    reader = Consumer(
        {"bootstrap.servers": kafka_bootstrap_servers, "group.id": f"r-{uuid.uuid4().hex}",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    reader.subscribe([naming.to_kafka(logical)])
    deadline = time.monotonic() + 30
    try:
        while len(got) < 40 and time.monotonic() < deadline:
            m = reader.poll(0.5)
            if m is not None and m.error() is None:
                tag = dict(m.headers())[TRACE_SCHEMA_HEADER].decode()
                got += decode_trace_records(m.value(), tag)
                in_runs += sum(r["count"] for r in decode(trace_batch_schema(), m.value())["runs"])
    finally:
        reader.close()
    assert len(got) == 40
    same = ("topic", "partition", "offset", "msg_id", "origin_msg_id", "reconsume_times",
            "tags", "keys", "born_timestamp_ms", "origin_born_timestamp_ms",
            "store_timestamp_ms", "status", "ack_index", "delay_level")  # fmt: skip
    want = sorted((tuple(e.to_record()[f] for f in same) for e in plain), key=lambda r: r[2])
    assert sorted((tuple(r[f] for f in same) for r in got), key=lambda r: r[2]) == want
    assert all(0 <= r["batch_index"] < r["batch_size"] <= batch for r in got)
    assert {r["tags"] for r in got} == ({"T"} if ours else {None, "T"})
    if ours:
        assert {r["msg_id"] for r in got} == {f"AC{i:04d}" for i in range(40)}
    # the batch with headers is not in a run (nor is the rest of its fetched run, should
    # that start with it); the messages before it are
    assert 17 <= in_runs <= 40 - batch
