"""A group with retries and dead letters made by a real PushConsumer, for the console's
tests (the API tier and the browser tier)."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.services.dlq import read_dlq
from tests.support.consumer_helpers import end_offsets

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


def wait_for(cond: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class ConsoleGroup:
    bootstrap: str
    topic: str
    group: str
    namespace: str
    dead: list[str]  # message ids in the DLQ, oldest first
    parked: int  # messages of the group waiting on delay level 3
    trace_topic: str  # where the consumer traced every consumption


def make_console_group(bootstrap: str) -> ConsoleGroup:
    """A PushConsumer of a fresh group fails the messages saying ``bad`` (one a JSON body): with
    ``max_reconsume_times=1`` each is retried once through delay level 3 and the
    ScheduleService, then dead-lettered; ``ok-*`` succeed.  Then the ScheduleService stops
    and two more fail: they wait on level 3 (the group's ladder)."""
    conf = {"bootstrap.servers": bootstrap}
    suffix = uuid.uuid4().hex[:8]
    topic, group, ns = f"orders-{suffix}", f"console-{suffix}", f"c{suffix}"
    trace_topic = f"trace-{suffix}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    healed = threading.Event()

    def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        if any(b"bad" in m.body for m in msgs):
            raise ValueError("downstream says no")
        if any(m.body == b"flaky" for m in msgs):
            if not any(m.reconsume_times for m in msgs):
                raise TimeoutError("slow downstream")
            healed.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        max_reconsume_times=1,
        partitions=1,
        trace_topic=trace_topic,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer:
        with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1):
            with Producer(conf) as p:
                for i in range(3):
                    p.send(
                        Message(topic=topic, body=b'{"order": %d, "bad": true}' % i, keys=[f"k{i}"])
                        if i == 0
                        else Message(topic=topic, body=b"bad-%d" % i, keys=[f"k{i}"])
                    )
                for i in range(2):
                    p.send(Message(topic=topic, body=b"ok-%d" % i))
                p.send(Message(topic=topic, body=b"flaky"))
            wait_for(lambda: len(read_dlq(conf, group)) == 3, what="three dead letters")
            wait_for(healed.is_set, what="the flaky message's second delivery")
        level3 = naming.to_kafka(naming.schedule_topic(3, DelayLevels.parse(LEVELS), ns))
        before = sum(end_offsets(conf, level3).values())
        with Producer(conf) as p:
            for i in range(2):
                p.send(Message(topic=topic, body=b"bad-late-%d" % i))
        wait_for(
            lambda: sum(end_offsets(conf, level3).values()) >= before + 2,
            what="two retries parked on level 3",
        )
        wait_for(lambda: committed(conf, group, topic) == 8, what="the group's offsets")
    dead = [e.message.msg_id for e in read_dlq(conf, group)]
    return ConsoleGroup(bootstrap, topic, group, ns, dead, 2, trace_topic)


def committed(conf: dict[str, Any], group: str, topic: str) -> int:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()
