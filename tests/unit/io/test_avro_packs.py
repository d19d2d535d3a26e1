"""Packed consume traces: where runs are cut, the packed record's bytes, both record kinds
decoded back, and the consumer's deferred event (a tuple on the consume path, the event
derived later) equal to the event built on the spot."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.clients.member.outcomes import ConsumerTracer
from adapter.core.codec import Failure
from adapter.core.engine.actions import TraceInfo
from adapter.core.message import MessageExt
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryLater
from adapter.core.trace import (
    Pending,
    TraceEvent,
    TraceStatus,
    consumer_event,
    plan_packs,
    run_fields,
)
from adapter.errors import AdapterError, ConfigError
from adapter.io.avro import (
    TRACE_BATCH,
    check_evolution,
    decode_trace_records,
    encode_trace,
    known_schemas,
    pack_traces,
    trace_batch_schema,
    trace_record,
    trace_schema,
)


def _event(i: int, **kw: Any) -> TraceEvent:
    base = TraceEvent(
        1_700_000_000_000 + i, "consumer", "g", "orders", i % 3, i, f"id-{i}", f"id-{i}",
        TraceStatus.SUCCESS, 0,
    )  # fmt: skip
    return base._replace(**kw)


# -- plan_packs -----------------------------------------------------------------------------


def test_packs_cut_at_the_event_cap() -> None:
    assert plan_packs([10] * 7, 3, 1_000) == [3, 6, 7]


def test_packs_cut_before_the_byte_cap() -> None:
    assert plan_packs([40, 40, 40, 10, 90], 100, 100) == [2, 4, 5]


def test_an_oversized_event_is_a_pack_of_its_own() -> None:
    assert plan_packs([10, 500, 10], 100, 100) == [1, 2, 3]


def test_nothing_to_pack() -> None:
    assert plan_packs([], 10, 10) == []


@pytest.mark.parametrize(("events", "size"), [(0, 10), (10, 0), (-1, 5)])
def test_caps_below_one_are_refused(events: int, size: int) -> None:
    with pytest.raises(ConfigError) as err:
        plan_packs([1], events, size)
    assert isinstance(err.value, AdapterError)


@given(
    sizes=st.lists(st.integers(1, 300), max_size=200),
    max_events=st.integers(1, 50),
    max_bytes=st.integers(1, 2_000),
)
def test_packs_cover_the_run_in_order_within_the_caps(
    sizes: list[int], max_events: int, max_bytes: int
) -> None:
    ends = plan_packs(sizes, max_events, max_bytes)
    starts = [0, *ends][: len(ends)]
    assert (ends[-1] if ends else 0) == len(sizes)
    for start, end in zip(starts, ends, strict=True):
        assert 1 <= end - start <= max_events
        assert sum(sizes[start:end]) <= max_bytes or end - start == 1
        if end < len(sizes):  # not cut early: the next event would break a cap
            assert end - start == max_events or sum(sizes[start : end + 1]) > max_bytes


# -- the packed record -----------------------------------------------------------------------


def test_batch_schema_embeds_the_single_event_schema() -> None:
    """The packed record's element is consume_trace.avsc itself: they evolve together."""
    batch = json.loads(trace_batch_schema().text)
    assert batch["fields"][0]["type"]["items"] == json.loads(trace_schema().text)
    assert trace_batch_schema().fullname == "io.rmqkafka.trace.ConsumeTraceBatch"
    assert trace_batch_schema().tag != trace_schema().tag


@pytest.mark.parametrize("n", [0, 1, 63, 64, 200])
def test_packed_bytes_are_what_fastavro_writes(n: int) -> None:
    events = [_event(i, tags="T" if i % 2 else None, consume_rt_ms=0.25) for i in range(n)]
    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf, trace_batch_schema().parsed, {"events": [trace_record(e) for e in events]}
    )
    assert pack_traces([encode_trace(e) for e in events]) == buf.getvalue()


def test_both_record_kinds_decode_to_the_events() -> None:
    events = [_event(i, status=TraceStatus.RETRY, delay_level=3) for i in range(5)]
    packed = pack_traces([encode_trace(e) for e in events])
    assert decode_trace_records(packed, trace_batch_schema().tag) == [e.to_record() for e in events]
    single = encode_trace(events[0])
    assert decode_trace_records(single, trace_schema().tag) == [events[0].to_record()]
    assert decode_trace_records(single, None) == [events[0].to_record()]


def test_every_retired_batch_schema_evolves_safely() -> None:
    current = json.loads(trace_batch_schema().text)
    for tag, schema in known_schemas(TRACE_BATCH).items():
        assert check_evolution(json.loads(schema.text), current) == [], tag


# -- the consumer's deferred event -----------------------------------------------------------


def _msg(**kw: Any) -> MessageExt:
    fields: dict[str, Any] = {
        "topic": "orders",
        "body": b"x",
        "msg_id": "MID",
        "queue_id": 1,
        "queue_offset": 17,
        "kafka_topic": "orders",
        "tags": "TagA",
        "keys": "k1 k2",
        "properties": {"ORIGIN_MESSAGE_ID": "ORIG"},
        "reconsume_times": 2,
        "born_timestamp": 1_000,
        "store_timestamp": 2_000,
    }
    fields.update(kw)
    return MessageExt(**fields)


class FakeClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000


class DeferringSink:
    """A sink with ``defer``, as KafkaTraceSink: it is handed Pending tuples."""

    def __init__(self) -> None:
        self.pending: list[Pending] = []

    def __call__(self, event: TraceEvent) -> None:
        raise AssertionError("a deferring sink is not handed events")

    def defer(self, pending: Pending) -> None:
        self.pending.append(pending)


def test_consumer_event_derives_every_field() -> None:
    msg = _msg()
    msg.consume_start_time = 3_000
    failure = Failure("ValueError", "boom")
    retry = (
        "g", 5_000, msg, TraceStatus.RETRY, TraceInfo(4, 2, 1, 0.5), failure,
        RetryLater(3, 10_000, 3), 3_000,
    )  # fmt: skip
    assert consumer_event(retry) == TraceEvent(
        5_000, "consumer", "g", "orders", 1, 17, "MID", "ORIG", TraceStatus.RETRY, 2,
        tags="TagA", keys="k1 k2", batch_size=4, batch_index=2, ack_index=1, delay_level=3,
        consume_rt_ms=0.5, born_timestamp_ms=1_000, origin_born_timestamp_ms=1_000,
        store_timestamp_ms=2_000, consume_timestamp_ms=3_000, failure_type="ValueError",
        failure_message="boom",
    )  # fmt: skip
    dlq = ("g", 5_000, msg, TraceStatus.DLQ, None, failure,
           DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 16), None)  # fmt: skip
    event = consumer_event(dlq)
    assert (event.dlq_reason, event.delay_level, event.batch_size, event.batch_index) == (
        "MAX_RECONSUME_TIMES", None, 1, 0,
    )  # fmt: skip


def test_tracer_hands_a_deferring_sink_what_a_plain_sink_gets_built() -> None:
    clock = FakeClock(9_000)
    events: list[TraceEvent] = []
    deferring = DeferringSink()
    plain = ConsumerTracer(events.append, name="c", group="g", clock=clock)
    deferred = ConsumerTracer(deferring, name="c", group="g", clock=clock)
    msg = _msg()
    msg.consume_start_time = 8_000
    info = TraceInfo(1, 0, None, 0.1)
    plain.emit(msg, TraceStatus.SUCCESS, info)
    deferred.emit(msg, TraceStatus.SUCCESS, info)
    msg.consume_start_time = 8_500  # handed to the listener again later
    assert [consumer_event(p) for p in deferring.pending] == events
    assert events[0].consume_timestamp_ms == 8_000  # read when the outcome happened
    assert events[0].event_time_ms == 9_000


def test_a_failing_sink_never_breaks_the_tracer() -> None:
    def broken(event: TraceEvent) -> None:
        raise RuntimeError("sink down")

    tracer = ConsumerTracer(broken, name="c", group="g", clock=FakeClock(1))
    tracer.emit(_msg(), TraceStatus.SUCCESS, None)  # logged, not raised


def test_a_batch_of_successes_is_one_hand_over_with_the_same_events() -> None:
    clock = FakeClock(9_000)
    batch = [_msg(queue_offset=10 + i, msg_id=f"M{i}", properties={}) for i in range(4)]
    for m in batch:
        m.consume_start_time = 8_000
    events: list[TraceEvent] = []
    deferring = DeferringSink()
    ConsumerTracer(events.append, name="c", group="g", clock=clock).emit_successes(
        batch, [0, 2, 3], 1, 0.25
    )
    ConsumerTracer(deferring, name="c", group="g", clock=clock).emit_successes(
        batch, [0, 2, 3], 1, 0.25
    )
    assert len(deferring.pending) == 1  # one tuple for the batch, not one per message
    assert [TraceEvent._make(f) for f in run_fields(deferring.pending[0])] == events
    assert [(e.batch_index, e.batch_size, e.offset, e.origin_msg_id) for e in events] == [
        (0, 4, 10, "M0"), (2, 4, 12, "M2"), (3, 4, 13, "M3"),
    ]  # fmt: skip
    assert {e.status for e in events} == {TraceStatus.SUCCESS}
