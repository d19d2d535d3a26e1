"""KafkaTraceSink against a real broker: Avro records a plain consumer (and Spark) can read,
keyed by message id, tagged with the writer schema; it never raises into the caller."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer

from adapter.core import naming
from adapter.core.trace import TraceEvent, TraceStatus
from adapter.io.avro import TRACE_SCHEMA_HEADER, decode_trace, trace_schema
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


def test_events_reach_the_trace_topic(kafka_bootstrap_servers: str) -> None:
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
    with KafkaTraceSink(config, logical, partitions=2) as sink:
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
    assert sink.flush(10) == 0
    assert sink.dropped == 1 and sink.sent == 0
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
