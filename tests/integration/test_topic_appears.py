"""A subscribed topic that appears after the consumer started is picked up within seconds.

On a three-node cluster the group's own retry topic, created just before the consumer
subscribes, was not yet known to the broker the consumer asked: librdkafka took it for
missing and looked again only after ``topic.metadata.refresh.interval.ms`` (5 minutes by
default), so retries waited that long (the bounce tier's rolling restart, at-least-once:
229 retries not delivered within its 3-minute window). A topic created after ``subscribe``
is the same case on one broker.

A shorter refresh interval was not enough: under broker bounces the refresh sometimes did
not bring the topic back for minutes (the bounce tier again: 117 and 13 retries never
delivered, the member holding no retry partition at the end). So the member checks on its
own (:mod:`adapter.core.subscription`), whatever librdkafka's refresh interval."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from adapter import Message, Producer, PushConsumer
from adapter.io.topics import TopicPlan, ensure_with

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "refresh",
    [None, 600_000],
    ids=["default_refresh", "librdkafka_refresh_does_not_come"],
)
def test_a_topic_created_after_subscribe_is_consumed_within_seconds(
    kafka_bootstrap_servers: str, refresh: int | None, group_protocol: str
) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    cconf = {**conf, "group.protocol": group_protocol}
    if refresh is not None:
        cconf["topic.metadata.refresh.interval.ms"] = refresh
    topic = f"appears-{uuid.uuid4().hex}"
    got: list[bytes] = []
    consumer = PushConsumer(
        {**cconf, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
        delay_levels="1s 2s",
        namespace=f"ap{uuid.uuid4().hex[:10]}",
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(lambda msgs, ctx: got.extend(m.body for m in msgs))
    admin = AdminClient(conf)
    try:
        with consumer:
            time.sleep(2)  # the consumer has asked for the topic and been told it is missing
            ensure_with(admin, [TopicPlan(topic, topic, 1)])
            created = time.monotonic()
            with Producer(conf) as producer:
                producer.send(Message(topic=topic, body=b"first"))
            while not got and time.monotonic() - created < 30:
                consumer.check_alive()
                time.sleep(0.1)
            took = time.monotonic() - created
    finally:
        admin.delete_topics([topic], operation_timeout=0)
    assert got == [b"first"], f"nothing consumed {took:.1f} s after the topic appeared"
    assert took < 20


def test_the_drop_in_picks_up_a_topic_created_after_subscribe(
    kafka_bootstrap_servers: str, group_protocol: str
) -> None:
    """The drop-in keeps librdkafka's own refresh interval (5 minutes): its check alone
    brings the topic in."""
    from adapter.kafka import Consumer

    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = f"appears-{uuid.uuid4().hex}"
    consumer = Consumer(
        {
            **conf,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "group.protocol": group_protocol,
        },
        delay_levels="1s 2s",
        namespace=f"ap{uuid.uuid4().hex[:10]}",
    )
    admin = AdminClient(conf)
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # told the topic is missing
            consumer.poll(0.2)
        ensure_with(admin, [TopicPlan(topic, topic, 1)])
        created = time.monotonic()
        with Producer(conf) as producer:
            producer.send(Message(topic=topic, body=b"first"))
        while not got and time.monotonic() - created < 40:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        took = time.monotonic() - created
    finally:
        consumer.close()
        admin.delete_topics([topic], operation_timeout=0)
    assert got == [b"first"], f"nothing consumed {took:.1f} s after the topic appeared"
    assert took < 35


def test_only_unsubscribe_then_subscribe_makes_a_cooperative_member_rejoin(
    kafka_bootstrap_servers: str, kafka_topic: str, kafka_group_id: str, group_protocol: str
) -> None:
    """What the member's repair (``GroupConsumer._rejoin``) relies on, on the real broker:
    librdkafka treats ``subscribe()`` with the topics already subscribed as no change (no
    rebalance, so a member stuck without one of them stays stuck), while ``unsubscribe()``
    then ``subscribe()`` revokes the partitions and assigns them again; under either group
    protocol (both incremental: the adapter's settings of each)."""
    from confluent_kafka import Consumer

    from adapter.io.config import set_rebalance_protocol

    events: list[str] = []

    def on_assign(_c: Any, parts: list[Any]) -> None:
        events.append(f"assign {len(parts)}")
        consumer.incremental_assign(parts)

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        events.append(f"revoke {len(parts)}")
        consumer.incremental_unassign(parts)

    def subscribe() -> None:
        consumer.subscribe([kafka_topic], on_assign=on_assign, on_revoke=on_revoke)

    def poll_until(condition: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            consumer.poll(0.1)

    conf: dict[str, Any] = {
        "bootstrap.servers": kafka_bootstrap_servers,
        "group.id": kafka_group_id,
        "group.protocol": group_protocol,
    }
    set_rebalance_protocol(conf)  # classic: cooperative-sticky
    consumer = Consumer(conf)
    try:
        subscribe()
        poll_until(lambda: any(e.startswith("assign 1") for e in events), 30)
        assert [e for e in events if e != "assign 0"] == ["assign 1"]
        # the broker serves the protocol asked for (Kafka 4.x: both by default)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
        desc = admin.describe_consumer_groups([kafka_group_id])[kafka_group_id].result(30)
        assert desc.type.name == group_protocol.upper()
        events.clear()
        subscribe()  # the same topics: nothing happens
        poll_until(lambda: False, 5)
        assert [e for e in events if e != "assign 0"] == []
        consumer.unsubscribe()
        subscribe()
        poll_until(lambda: "assign 1" in events, 30)
        assert [e for e in events if e != "assign 0"] == ["revoke 1", "assign 1"]
    finally:
        consumer.close()


def test_a_missing_topic_is_said_once_at_info_not_as_a_consume_error(
    kafka_bootstrap_servers: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first lines a newcomer reads, for a topic about to be created, used to be
    repeated ``consume error: Subscribed topic not available`` warnings."""
    import logging

    conf: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = f"missing-{uuid.uuid4().hex}"
    consumer = PushConsumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex}"},
        namespace=f"ms{uuid.uuid4().hex[:10]}",
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(lambda msgs, ctx: None)
    caplog.set_level(logging.INFO, logger="adapter")
    waiting = f"waiting for topic {topic}"
    with consumer:
        deadline = time.monotonic() + 30
        while not any(waiting in r.getMessage() for r in caplog.records):
            consumer.check_alive()
            assert time.monotonic() < deadline, "the missing topic was never mentioned"
            time.sleep(0.1)
        time.sleep(3)  # librdkafka reports the topic again meanwhile
    said = [r for r in caplog.records if waiting in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    noisy = [r.getMessage() for r in caplog.records if "consume error" in r.getMessage()]
    assert not noisy, noisy
