"""What became of consumed messages: the consumer's traces (:class:`ConsumerTracer`: its
deferred event, a tuple on the consume path, equal to the event built on the spot), its
counters, and the broker's verdicts on its send-back copies (:class:`SendBackResults`, over
real engines: what is settled, applied next, counted, traced and logged)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from adapter.clients.member.outcomes import ConsumerStats, ConsumerTracer, SendBackResults
from adapter.core.codec import Failure
from adapter.core.delay import DelayLevels
from adapter.core.engine import Action, ConcurrentEngine, EngineOptions, SendBack
from adapter.core.engine.actions import TraceInfo
from adapter.core.engine.pull import PullEngine, PullOptions
from adapter.core.hops import GroupTopics
from adapter.core.listener import ConsumeConcurrentlyContext, MessageQueue, judge
from adapter.core.message import MessageExt
from adapter.core.routing import (
    ConsumeConcurrentlyStatus,
    DeadLetter,
    DeadLetterReason,
    RetryLater,
    RetryNow,
)
from adapter.core.trace import (
    TraceEvent,
    TraceStatus,
    batches_fields,
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
    """A sink with ``defer``, as KafkaTraceSink: it is handed tuples (a ``Pending``, a
    ``PendingRun`` or a ``PendingBatches``) instead of events."""

    def __init__(self) -> None:
        self.pending: list[Any] = []

    def __call__(self, event: TraceEvent) -> None:
        raise AssertionError("a deferring sink is not handed events")

    def defer(self, pending: Any) -> None:
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


def test_a_failing_deferring_sink_is_logged_naming_the_member_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each hand-over (one event, a listener batch's successes, a fetched run's batches)
    that the sink refuses is logged with its traceback, naming the member."""

    class Refusing(DeferringSink):
        def defer(self, pending: Any) -> None:
            raise RuntimeError("queue closed")

    tracer = ConsumerTracer(Refusing(), name="member-7", group="g", clock=FakeClock(1))
    batch = [_msg(queue_offset=10 + i) for i in range(2)]
    with caplog.at_level(logging.ERROR, logger="adapter.consumer"):
        tracer.emit(batch[0], TraceStatus.SUCCESS, None)
        tracer.emit_successes(batch, [0, 1], None, 0.5)
        tracer.emit_batches(batch, 1, 0.5)
    records = [r for r in caplog.records if r.name == "adapter.consumer"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.ERROR, "member-7: trace sink failed")
    ] * 3
    assert all(r.exc_info and str(r.exc_info[1]) == "queue closed" for r in records)


def test_a_single_message_run_is_handed_to_a_deferring_sink_as_built_on_the_spot() -> None:
    clock = FakeClock(9_000)
    msg = _msg(queue_offset=5, properties={})
    msg.consume_start_time = 8_000
    events: list[TraceEvent] = []
    deferring = DeferringSink()
    ConsumerTracer(events.append, name="c", group="g", clock=clock).emit_batches([msg], 1, 0.3)
    ConsumerTracer(deferring, name="c", group="g", clock=clock).emit_batches([msg], 1, 0.3)
    assert len(deferring.pending) == 1
    deferred = [TraceEvent._make(f) for f in batches_fields(deferring.pending[0])]
    assert deferred == events
    assert [(e.offset, e.consume_timestamp_ms, e.consume_rt_ms) for e in events] == [
        (5, 8_000, 0.3)
    ]


def test_whole_batches_reach_a_plain_sink_one_event_per_message_in_its_batch() -> None:
    clock = FakeClock(9_000)
    msgs = [_msg(queue_offset=20 + i, properties={}) for i in range(4)]
    for m in msgs:
        m.consume_start_time = 8_000
    events: list[TraceEvent] = []
    deferring = DeferringSink()
    ConsumerTracer(events.append, name="c", group="g", clock=clock).emit_batches(msgs, 2, 0.3)
    ConsumerTracer(deferring, name="c", group="g", clock=clock).emit_successes(
        msgs[3:], [0], None, 0.3
    )
    assert [(e.offset, e.batch_size, e.batch_index) for e in events] == [
        (20, 2, 0), (21, 2, 1), (22, 2, 0), (23, 2, 1),
    ]  # fmt: skip
    [run] = deferring.pending  # a listener batch of one
    assert [TraceEvent._make(f) for f in run_fields(run)] == [
        events[3]._replace(batch_size=1, batch_index=0)
    ]


def test_consumer_stats_add_up_batches_per_topic() -> None:
    stats = ConsumerStats()
    stats.topic("orders").timeouts += 1
    stats.listener_seconds["orders"].observe(0.004)  # the runners' listener time
    stats.batches("orders", ok=3, failed=1, rt_total_s=0.5, rt_max_s=0.25, n=2)
    stats.batches("orders", ok=2, failed=4, rt_total_s=0.25, rt_max_s=0.125, n=3)
    stats.batches("audit", ok=1, failed=0, rt_total_s=0.0, rt_max_s=0.0, n=1)
    orders = stats.snapshot()["orders"]
    assert (orders.consume_ok, orders.consume_failed, orders.rt_count) == (5, 5, 5)
    assert (orders.rt_total_ms, orders.rt_max_ms) == (750.0, 250.0)
    assert orders.timeouts == 1 and stats.listener_seconds["orders"].snapshot()[2] == 1
    assert stats.snapshot()["audit"].consume_ok == 1


# -- the broker's verdicts on send-back copies (SendBackResults) ---------------------------

GROUP = "outcomes-group"
TOPICS = GroupTopics(GROUP, DelayLevels.DEFAULT)
DLQ = TOPICS.dlq_topic
TP = ("orders", 1)
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
INVALID = KafkaError(KafkaError.INVALID_RECORD)
TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT)


class Verdicts:
    """A member's SendBackResults over a real engine: what it applied, counted, traced."""

    def __init__(self, engine: Any, *, traced: bool = False) -> None:
        self.engine = engine
        self.clock = FakeClock(50_000)
        self.stats = ConsumerStats()
        self.applied: list[list[Action]] = []
        self.events: list[TraceEvent] = []
        tracer = ConsumerTracer(self.events.append, name="m1", group=GROUP, clock=self.clock)
        self.results = SendBackResults(
            name="m1",
            engine=engine,
            topics=TOPICS,
            stats=self.stats,
            clock=self.clock,
            apply=self.applied.append,
            emit=tracer.emit if traced else None,
        )

    def counts(self, topic: str = "orders") -> tuple[int, int, int, int]:
        st = self.stats.snapshot()[topic]
        return st.sent_back, st.dead_lettered, st.send_back_failed, st.local_retries

    def next_copy(self) -> SendBack:
        [[step]] = self.applied[-1:]
        assert isinstance(step, SendBack)
        return step


def concurrent(max_reconsume_times: int = 16) -> ConcurrentEngine:
    eng = ConcurrentEngine(
        EngineOptions(batch_size=4, max_reconsume_times=max_reconsume_times, store_interval_s=0.0)
    )
    eng.assigned(TP)
    return eng


def failed_copies(
    eng: ConcurrentEngine, msgs: list[MessageExt], result: object = LATER, level: int = 0
) -> list[SendBack]:
    """The copies of ``msgs`` (one listener batch that failed) the engine asks for."""
    first = msgs[0].queue_offset
    work = eng.fetched(TP, msgs, end=first + len(msgs))
    assert work is not None
    ctx = ConsumeConcurrentlyContext(MessageQueue("orders", 1), None, level)
    out = judge(result, ctx, len(msgs))
    actions = eng.settle_run(work, [(0, out, 0.002)], 0.0)
    copies = [a for a in actions if isinstance(a, SendBack)]
    assert len(copies) == len(msgs)
    return copies


def numbered(first: int, *times: int) -> list[MessageExt]:
    """Messages at offsets ``first``.., failed ``times`` times before."""
    return [
        _msg(
            queue_offset=first + i,
            msg_id=f"M{first + i}",
            reconsume_times=t,
            kafka_topic="k.orders",
        )
        for i, t in enumerate(times)
    ]


def test_acknowledged_retry_copies_settle_their_offsets_and_count_per_level() -> None:
    eng = concurrent()
    v = Verdicts(eng)
    copies = failed_copies(eng, numbered(10, 0, 0, 1, 0))
    assert eng.committable(TP) == 10
    v.results.on_result(copies[0], None, False)
    v.results.on_result(copies[2], None, False)
    assert eng.committable(TP) == 11  # offset 11 still waits for its copy
    for c in (copies[1], copies[3]):
        v.results.delivered(c, None)  # noted only: settled once the poll returns
    assert eng.committable(TP) == 11 and v.counts() == (2, 0, 0, 0)
    v.results.settle()
    v.results.settle()  # nothing new: nothing counted twice
    assert eng.committable(TP) == 14 and eng.in_flight(TP) == 0
    assert v.counts() == (4, 0, 0, 0)
    assert v.stats.send_backs == {("orders", 3): 3, ("orders", 4): 1}
    assert v.applied == [] and v.events == []


def test_acknowledged_dead_letters_are_counted_per_reason_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    eng = concurrent(max_reconsume_times=2)
    v = Verdicts(eng)
    maxed = failed_copies(eng, numbered(20, 2, 2))
    asked = failed_copies(eng, numbered(22, 0), level=-1)
    with caplog.at_level(logging.WARNING, logger="adapter.consumer"):
        for c in maxed:
            v.results.delivered(c, None)
        v.results.settle()
        v.results.on_result(asked[0], None, False)
    assert eng.committable(TP) == 23
    assert v.counts() == (0, 3, 0, 0)
    assert v.stats.dead_letters == {
        ("orders", "MAX_RECONSUME_TIMES"): 2,
        ("orders", "LISTENER_REQUESTED"): 1,
    }
    assert v.stats.send_backs == {}
    assert [r.getMessage() for r in caplog.records if r.name == "adapter.consumer"] == [
        f"m1: message M20 moved to {DLQ} (MAX_RECONSUME_TIMES)",
        f"m1: message M21 moved to {DLQ} (MAX_RECONSUME_TIMES)",
        f"m1: message M22 moved to {DLQ} (LISTENER_REQUESTED)",
    ]


def test_a_traced_consumer_emits_retry_and_dlq_events_and_counts_the_same() -> None:
    eng = concurrent(max_reconsume_times=3)
    v = Verdicts(eng, traced=True)
    copies = failed_copies(eng, numbered(30, 0, 0, 5, 1), result=ValueError("boom"))
    for c in copies:
        v.results.delivered(c, None)
    v.results.settle()
    assert eng.committable(TP) == 34
    assert v.counts() == (3, 1, 0, 0)
    assert v.stats.send_backs == {("orders", 3): 2, ("orders", 4): 1}
    assert v.stats.dead_letters == {("orders", "MAX_RECONSUME_TIMES"): 1}
    got = [
        (e.offset, e.status, e.delay_level, e.dlq_reason, e.batch_size, e.batch_index)
        for e in v.events
    ]
    assert got == [
        (30, TraceStatus.RETRY, 3, None, 4, 0),
        (31, TraceStatus.RETRY, 3, None, 4, 1),
        (32, TraceStatus.DLQ, None, "MAX_RECONSUME_TIMES", 4, 2),
        (33, TraceStatus.RETRY, 4, None, 4, 3),
    ]
    assert {(e.failure_type, e.failure_message, e.group) for e in v.events} == {
        ("ValueError", "boom", GROUP)
    }
    assert [e.msg_id for e in v.events] == ["M30", "M31", "M32", "M33"]


def test_acknowledged_retry_topic_copies_settle_through_an_engine_without_bulk_verdicts() -> None:
    """The SimpleConsumer's expired messages go straight to the retry topic (level 0)."""
    eng = PullEngine(PullOptions(max_delivery_attempts=3, store_interval_s=0.0), "c1")
    eng.assigned(TP)
    msgs = numbered(40, 0, 1, 2)
    eng.fetched(TP, msgs, 43, 3)
    eng.receive(3, 1.0, now=0.0)
    copies = [a for a in eng.tick(2.0) if isinstance(a, SendBack)]
    assert [type(c.dest) for c in copies] == [RetryNow, RetryNow, DeadLetter]
    v = Verdicts(eng)
    for c in copies:
        v.results.delivered(c, None)
    v.results.settle()
    assert eng.committable(TP) == 43
    assert v.counts() == (2, 1, 0, 0)
    assert v.stats.send_backs == {("orders", 0): 2}
    assert v.stats.dead_letters == {("orders", "MAX_DELIVERY_ATTEMPTS"): 1}


def test_a_refused_copy_escalates_alone_then_to_the_dlq_then_without_its_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/semantics.md §4.3, step by step: the engine's next copy is applied, and each
    give-up is counted and logged as an error naming the message and the DLQ."""
    eng = concurrent()
    v = Verdicts(eng)
    [retry] = failed_copies(eng, numbered(17, 0))
    with caplog.at_level(logging.WARNING, logger="adapter.consumer"):
        v.results.delivered(retry, TOO_LARGE)  # in a record batch with others
        alone = v.next_copy()
        assert (alone.dest, alone.alone, v.counts()) == (retry.dest, True, (0, 0, 0, 0))
        v.results.on_result(alone, TOO_LARGE, False)  # on its own too: to the DLQ
        dead = v.next_copy()
        assert dead.dest == DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1)
        assert (dead.alone, dead.omit_body, v.counts()) == (False, False, (0, 0, 1, 0))
        v.results.on_result(dead, TOO_LARGE, False)
        dead_alone = v.next_copy()
        assert (dead_alone.alone, dead_alone.omit_body) == (True, False)
        v.results.on_result(dead_alone, TOO_LARGE, False)  # the DLQ refuses it alone too
        bodiless = v.next_copy()
        assert (bodiless.dest, bodiless.omit_body, v.counts()) == (dead.dest, True, (0, 0, 1, 0))
        v.results.on_result(bodiless, TIMED_OUT, False)  # transient: consumed again later
    assert len(v.applied) == 5 and v.applied[-1] == []
    assert v.counts() == (0, 0, 2, 1)
    assert eng.committable(TP) == 17  # held all along
    text, timeout = TOO_LARGE.str(), TIMED_OUT.str()
    assert [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "adapter.consumer"
    ] == [
        ("ERROR", f"m1: the broker refuses the retry copy of M17 ({text}); sending it to {DLQ}"),
        (
            "ERROR",
            f"m1: the broker refuses the dead-letter copy of M17 too ({text}); sending it to "
            f"{DLQ} without its 1-byte body (left at k.orders[1]@17)",
        ),
        (
            "WARNING",
            f"m1: copy of M17 to {DLQ} failed ({timeout}); consumed again locally later, "
            "offset held",
        ),
    ]


def test_copies_refused_before_they_were_sent_are_judged_alone() -> None:
    """``local``: librdkafka refused the copy itself, so no neighbour is to blame: each
    goes to the DLQ at once, and each give-up is counted."""
    eng = concurrent()
    v = Verdicts(eng)
    refused = failed_copies(eng, numbered(50, 0, 1))
    dead = []
    for copy in refused:
        v.results.on_result(copy, INVALID, True)
        dead.append(v.next_copy())
    assert [(d.dest, d.alone) for d in dead] == [
        (DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1), False),
        (DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 2), False),
    ]
    assert v.counts() == (0, 0, 2, 0)
    for d in dead:
        v.results.on_result(d, None, False)
    assert eng.committable(TP) == 52
    assert v.counts() == (0, 2, 2, 0)
    assert v.stats.dead_letters == {("orders", "SEND_BACK_REFUSED"): 2}


def test_transiently_refused_copies_are_consumed_again_locally_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    eng = concurrent()
    v = Verdicts(eng)
    copies = failed_copies(eng, numbered(60, 0, 2))
    with caplog.at_level(logging.WARNING, logger="adapter.consumer"):
        v.results.delivered(copies[0], TIMED_OUT)
        v.results.on_result(copies[1], TIMED_OUT, False)
    assert v.applied == [[], []]
    assert v.counts() == (0, 0, 2, 2)
    assert eng.committable(TP) == 60 and eng.local_retries() == 2
    timeout = TIMED_OUT.str()
    assert [r.getMessage() for r in caplog.records if r.name == "adapter.consumer"] == [
        f"m1: copy of M60 to level 3 failed ({timeout}); consumed again locally later, offset held",
        f"m1: copy of M61 to level 5 failed ({timeout}); consumed again locally later, offset held",
    ]
