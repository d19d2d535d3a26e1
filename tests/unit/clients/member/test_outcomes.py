"""The consumer's traces (:class:`ConsumerTracer`): its deferred event (a tuple on the consume
path, the event derived later) equal to the event built on the spot."""

from __future__ import annotations

from typing import Any

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
    run_fields,
)


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
