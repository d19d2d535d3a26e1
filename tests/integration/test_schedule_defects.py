"""Regression tests for ScheduleService defects found in review (docs/semantics.md §4.9):
each reproduces the situation that lost or mistimed an entry."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.constants import HEADER_DUE_MS, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_TOPIC
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.topics import TopicPlan, ensure_topics, plan_topics
from adapter.services.dlq import read_dlq
from adapter.services.schedule import DeliveryGuarantee
from adapter.services.schedule.destinations import DESTINATION_TTL_S
from tests.support.collector import Collector
from tests.support.consumer_helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _ns() -> str:
    return f"sd{uuid.uuid4().hex[:10]}"


def _entry(real: str, due_ms: int, body: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
    return body, [
        (PROPERTY_REAL_TOPIC, real.encode()),
        (PROPERTY_DELAY_TIME_LEVEL, b"1"),
        (HEADER_DUE_MS, str(due_ms).encode()),
        ("UNIQ_KEY", body),
    ]


def _produce(conf: dict[str, Any], topic: str, records: list[Any], partition: int = 0) -> None:
    raw = RawProducer({**conf, "linger.ms": 0})
    for value, headers in records:
        raw.produce(topic, value, headers=headers, partition=partition)
        raw.flush(10)


def _delete_topic(conf: dict[str, Any], topic: str) -> None:
    admin = AdminClient(conf)
    for fut in admin.delete_topics([topic], operation_timeout=30).values():
        fut.result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30, f"{topic} gone")


@pytest.mark.parametrize("delivery", list(DeliveryGuarantee), ids=lambda d: d.value.lower())
def test_an_entry_still_awaiting_its_answer_is_not_skipped_when_a_later_one_fails(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, delivery: DeliveryGuarantee
) -> None:
    """Entry A goes to a topic deleted after the service cached it (its refusal takes
    seconds); entry B, right behind it on the same level partition, is too large for its
    destination (refused at once).  B is dead-lettered; A must be dead-lettered too, and the
    committed offset must not pass A before.  (At-least-once used to rewind to B: A's late
    refusal was dropped as stale and the committed offset moved past it.)"""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = _ns()
    levels = "1s 2s"
    gone = kafka_topic_factory("gone")
    small = kafka_topic_factory("small", config={"max.message.bytes": "2000"})
    svc = ScheduleService(conf, delay_levels=levels, namespace=ns, partitions=1, delivery=delivery)
    level_topic = naming.to_kafka(naming.schedule_topic(1, DelayLevels.parse(levels), ns))
    with svc:
        wait_until(lambda: len(svc.assignment) == 2, 30, "assignment")
        out = Collector(kafka_bootstrap_servers, gone, 1)
        try:
            _produce(conf, level_topic, [_entry(gone, 0, b"warm")])  # caches the destination
            wait_until(lambda: len(out) == 1, 30, "the warm-up forward")
        finally:
            out.close()
        _delete_topic(conf, gone)
        _produce(conf, level_topic, [_entry(gone, 0, b"A"), _entry(small, 0, b"B" * 3000)])
        wait_until(lambda: len(read_dlq(conf, svc.group)) >= 2, 60, "A and B dead-lettered")
        svc.check_alive()
    dead = {e.message.body[:1]: e for e in read_dlq(conf, svc.group)}
    assert set(dead) == {b"A", b"B"}
    assert "does not exist" in (dead[b"A"].failure_message or "")


def test_level_topics_of_another_delay_table_are_served(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A producer whose delay table differs from the service's parks messages on topics of
    its own table; the service serves every level topic of its namespace (the delay is in
    the topic's name).  (It used to subscribe only to its own table's topics: such entries
    waited until retention deleted them.)"""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = _ns()
    real = kafka_topic_factory("other-table")
    svc = ScheduleService(conf, delay_levels="1s 5s", namespace=ns, partitions=1)
    out = Collector(kafka_bootstrap_servers, real, 1)
    try:
        with svc:
            wait_until(lambda: len(svc.assignment) == 2, 30, "the service's own levels")
            with Producer(conf, delay_levels="300ms 700ms", namespace=ns) as p:
                sent = time.time() * 1000
                p.send(Message(topic=real, body=b"late table", delay_time_level=2))
            wait_until(lambda: len(out) == 1, 30, "the forward from the other table's level")
            [rec] = out.snapshot()
            assert rec.received_ms >= sent + 700
    finally:
        out.close()


class _SkewedClock:
    """A wall clock ``ahead_s`` ahead of the real one (a sender with a wrong clock)."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_ms = int(ahead_s * 1000)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.ahead_ms

    def monotonic(self) -> float:
        return time.monotonic()


def test_a_consumer_clock_ahead_does_not_remove_the_retry_delay(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A consumer whose clock runs 600 s ahead sends a failed message back: its due time is
    ten minutes off.  The retry still waits the level's delay (clamped to one level delay
    from when the service saw it) instead of coming back at once.  (It used to be
    redelivered after 0.07 s instead of 10 s.)"""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = _ns()
    levels = "100ms 200ms 2s"  # the first retry is level 3: 2 s
    topic = kafka_topic_factory("skew")
    seen: list[tuple[int, float]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        seen.extend((m.reconsume_times, time.monotonic()) for m in msgs)
        if msgs[0].reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"},
        delay_levels=levels,
        namespace=ns,
        partitions=1,
        clock=_SkewedClock(600),
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with ScheduleService(conf, delay_levels=levels, namespace=ns, partitions=1), consumer:
        with Producer(conf) as p:
            p.send(Message(topic=topic, body=b"skewed"))
        wait_until(lambda: len(seen) == 2, 40, "the retry")
    (first, t0), (second, t1) = seen
    assert (first, second) == (0, 1)
    assert t1 - t0 >= 1.9, f"redelivered after {t1 - t0:.2f}s: the 2 s delay was removed"


def test_exactly_once_a_deleted_destination_does_not_hold_back_other_entries(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Exactly-once: a destination deleted after the service cached it fails its
    transaction; the entry is dead-lettered (the destination is looked up again) and the
    entries of other partitions forward within seconds.  (It used to take ~45 s of aborted
    transactions, holding back an entry of another partition ~11 s.)"""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = _ns()
    levels = "1s 2s"
    gone = kafka_topic_factory("eos-gone")
    fine = kafka_topic_factory("eos-fine")
    level_topic = naming.to_kafka(naming.schedule_topic(1, DelayLevels.parse(levels), ns))
    ensure_topics(
        conf,
        [
            TopicPlan(p.logical, p.kafka_topic, 2, p.config)
            for p in plan_topics(delay_levels=DelayLevels.parse(levels), namespace=ns)
        ],
    )
    svc = ScheduleService(
        conf,
        delay_levels=levels,
        namespace=ns,
        partitions=2,
        delivery=DeliveryGuarantee.EXACTLY_ONCE,
    )
    out = Collector(kafka_bootstrap_servers, fine, 1)
    warm = Collector(kafka_bootstrap_servers, gone, 1)
    try:
        with svc:
            wait_until(lambda: len(svc.assignment) == 4, 30, "assignment")
            _produce(conf, level_topic, [_entry(gone, 0, b"warm")], partition=0)
            wait_until(lambda: len(warm) == 1, 30, "the warm-up forward")
            warm.close()
            _delete_topic(conf, gone)
            time.sleep(DESTINATION_TTL_S)  # the service's destination cache is this old now
            start = time.monotonic()
            _produce(conf, level_topic, [_entry(gone, 0, b"doomed")], partition=0)
            _produce(conf, level_topic, [_entry(fine, 0, b"other")], partition=1)
            wait_until(lambda: len(out) == 1, 30, "the other partition's forward")
            other_s = time.monotonic() - start
            wait_until(lambda: len(read_dlq(conf, svc.group)) == 1, 30, "the doomed entry")
            doomed_s = time.monotonic() - start
            svc.check_alive()
    finally:
        out.close()
        warm.close()
    assert other_s < 8, f"the other partition's entry waited {other_s:.1f}s"
    assert doomed_s < 20, f"the doomed entry took {doomed_s:.1f}s to reach the DLQ"
