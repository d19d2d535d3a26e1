"""Records the broker refuses for good are dead-lettered, never retried for ever or lost."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer as RawProducer

from adapter import ConsumeConcurrentlyStatus, PushConsumer, ScheduleService
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.topics import TopicPlan, ensure_topics, plan_topics
from adapter.services.dlq import read_dlq

pytestmark = pytest.mark.integration

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


def _wait(cond: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_retry_copy_too_large_for_the_delay_topic_goes_to_the_dlq(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = f"ns{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    # delay topics that accept at most 2000 bytes per record batch
    small = [
        TopicPlan(p.logical, p.kafka_topic, 1, {**p.config, "max.message.bytes": "2000"})
        for p in plan_topics(delay_levels=DelayLevels.parse(LEVELS), namespace=ns)
    ]
    ensure_topics(conf, small)
    topic = kafka_topic_factory("big")
    body = b"b" * 1800  # fits the user topic; with retry headers it no longer fits a delay topic
    raw = RawProducer(conf)
    raw.produce(topic, body, headers=[("user", b"u1")])
    raw.flush(10)
    deliveries: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        deliveries.extend(m.reconsume_times for m in msgs)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1), consumer:
        _wait(lambda: len(read_dlq(conf, group)) == 1)
        [entry] = read_dlq(conf, group)
        stats = consumer.stats()[topic]
    assert entry.message.body == body
    assert entry.message.properties["user"] == "u1"
    assert entry.reason == "SEND_BACK_REFUSED"
    assert entry.origin_topic == topic
    assert deliveries == [0]  # refused once, then dead-lettered: no endless local retries
    assert stats.dead_lettered == 1 and stats.send_back_failed == 1
    assert naming.to_kafka(naming.dlq_topic(group)) == entry.message.kafka_topic


@pytest.mark.parametrize("delivery", ["AT_LEAST_ONCE", "EXACTLY_ONCE"])
def test_forward_refused_by_its_destination_is_dead_lettered_and_others_still_flow(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, delivery: str
) -> None:
    """A scheduled message whose destination refuses it for good (too large with the
    forward's headers) goes to the service's DLQ once; the entries behind it are forwarded,
    in both delivery modes (exactly-once must not abort and re-read it for ever)."""
    from adapter import Message, Producer

    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = f"ns{uuid.uuid4().hex[:6]}"
    service_group = f"svc-{uuid.uuid4().hex[:8]}"
    topic = kafka_topic_factory("small", 1, {"max.message.bytes": "2000"})
    big = Message(topic=topic, body=b"B" * 1900, delay_time_level=1, keys=["big"])
    smalls = [Message(topic=topic, body=f"s{i}".encode(), delay_time_level=1) for i in range(5)]
    with Producer(conf, delay_levels=LEVELS, namespace=ns) as producer:
        ensure_topics(conf, plan_topics(delay_levels=DelayLevels.parse(LEVELS), namespace=ns))
        producer.send(smalls[0])
        big_id = producer.send(big).msg_id
        for m in smalls[1:]:
            producer.send(m)
    seen: list[bytes] = []
    reader = _read_committed(conf, topic)
    with ScheduleService(
        conf,
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        group=service_group,
        delivery=delivery,
    ) as svc:
        # exactly-once aborts and re-reads the batch: slow on a loaded machine
        deadline = time.monotonic() + 90
        while len(seen) < len(smalls) or len(read_dlq(conf, service_group)) < 1:
            assert time.monotonic() < deadline, f"stalled: forwarded {seen}"
            msg = reader.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(msg.value())
        svc.check_alive()
    reader.close()
    dead = read_dlq(conf, service_group)
    assert sorted(seen) == sorted(m.body for m in smalls)  # each exactly once
    assert len(dead) == 1
    [entry] = dead
    assert entry.message.msg_id == big_id
    assert entry.reason == "INVALID_SCHEDULE_ENTRY"
    assert "forward failed permanently" in entry.message.properties["RMQ_FAILURE_MESSAGE"]


def _read_committed(conf: dict[str, Any], topic: str) -> Any:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            **conf,
            "group.id": f"r-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    c.subscribe([topic])
    return c


def test_retry_copies_batched_with_a_too_large_one_are_still_retried(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The broker's size limit is per record batch: when one retry copy is too large, the
    copies batched with it are refused too.  Each is sent again alone, so only the large
    one is dead-lettered and the others are retried."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ns = f"ns{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    small = [
        TopicPlan(p.logical, p.kafka_topic, 1, {**p.config, "max.message.bytes": "2500"})
        for p in plan_topics(delay_levels=DelayLevels.parse(LEVELS), namespace=ns)
    ]
    ensure_topics(conf, small)
    topic = kafka_topic_factory("mixed")
    bodies = [f"s{i}-".encode() + b"x" * 300 for i in range(8)]
    bodies.insert(3, b"B" * 2450)  # with its retry headers it no longer fits, even alone
    raw = RawProducer({**conf, "linger.ms": 50})
    for body in bodies:
        raw.produce(topic, body)
    raw.flush(10)
    seen: list[tuple[bytes, int]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        seen.extend((m.body, m.reconsume_times) for m in msgs)
        if all(m.reconsume_times == 0 for m in msgs):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER  # the whole first batch fails
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
        consume_message_batch_max_size=32,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with (
        ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1),
        consumer,
    ):
        retried = lambda: {b for b, rt in seen if rt == 1}  # noqa: E731
        try:
            _wait(lambda: len(retried()) == len(bodies) - 1 and len(read_dlq(conf, group)) == 1)
        except AssertionError:
            shown = [(b[:3], rt) for b, rt in seen]
            dlq = [e.message.body[:3] for e in read_dlq(conf, group)]
            raise AssertionError(f"seen {shown}; dlq {dlq}; {consumer.stats()}") from None
        dead = read_dlq(conf, group)
    assert [e.message.body for e in dead] == [bodies[3]]
    assert dead[0].reason == "SEND_BACK_REFUSED"
    assert retried() == set(bodies) - {bodies[3]}
