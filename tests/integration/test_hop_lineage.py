"""What a message keeps across hops (delay topic → real topic, retry, DLQ) and the size rule,
on the real broker (docs/semantics.md §3 "Headers" and §7 "Size limits")."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.constants import PROPERTY_REAL_QUEUE_ID
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.topics import HOP_HEADER_ROOM
from tests.support.consumer_helpers import (
    LATER,
    LEVELS,
    OK,
    RecordingListener,
    read_topic,
    running_pair,
    wait_until,
)


class _Born:
    """Records (body, reconsume_times, born_timestamp, store_timestamp) per delivery and
    asks for one retry of every message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[bytes, int, int | None, int | None]] = []

    def __call__(self, msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        with self.lock:
            for m in msgs:
                self.seen.append((m.body, m.reconsume_times, m.born_timestamp, m.store_timestamp))
        return LATER if any(m.reconsume_times == 0 for m in msgs) else OK


def test_born_timestamp_survives_the_delay_topic_and_a_retry(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Issue 11 #11: a scheduled message reported its forward time as ``born_timestamp``
    (old code: born = the forwarded record's timestamp, ≥ send time + the level's delay).
    Now the send time, kept on the retry too; the Kafka timestamp is not set back."""
    topic = kafka_topic_factory(partitions=1)
    listener = _Born()
    with running_pair(kafka_bootstrap_servers, topic, RecordingListener(listener)) as pair:
        with Producer(
            {"bootstrap.servers": kafka_bootstrap_servers},
            delay_levels=LEVELS,
            namespace=pair.namespace,
        ) as producer:
            before = int(time.time() * 1000)
            producer.send(Message(topic=topic, body=b"scheduled", delay_time_level=4))  # 400 ms
            after = int(time.time() * 1000)
        wait_until(lambda: len(listener.seen) >= 2, 30, "the delivery and its retry")
    (body0, times0, born0, store0), (body1, times1, born1, store1) = listener.seen[:2]
    assert (body0, times0, body1, times1) == (b"scheduled", 0, b"scheduled", 1)
    assert born0 is not None and before - 5 <= born0 <= after + 5, (before, born0, after)
    assert born1 == born0  # the retry keeps the first born time
    # the records themselves keep Kafka's own (forward) time: retention is not cut short
    assert store0 is not None and store0 >= born0 + 400 - 5
    assert store1 is not None and store1 > store0


def test_a_forwarded_message_records_the_partition_it_went_to(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Issue 11 #15: RocketMQ's delivered scheduled message keeps ``REAL_QID``; the forward
    now records the partition it chose (keyed: the key's partition, keyless: spread)."""
    topic = kafka_topic_factory(partitions=3)
    with running_pair(kafka_bootstrap_servers, topic, RecordingListener()) as pair:
        with Producer(
            {"bootstrap.servers": kafka_bootstrap_servers},
            delay_levels=LEVELS,
            namespace=pair.namespace,
        ) as producer:
            for i in range(6):
                key = f"k{i}" if i % 2 else None
                producer.send(
                    Message(topic=topic, body=f"m{i}".encode(), keys=key, delay_time_level=1)
                )
        wait_until(lambda: len(pair.listener) >= 6, 30, "six forwarded messages")
        delivered = pair.listener.snapshot()
    for d in delivered:
        assert d.properties.get(PROPERTY_REAL_QUEUE_ID) == str(d.queue_id), d
    records = read_topic(pair.conf, topic)
    assert len(records) == 6
    assert all(r.text(PROPERTY_REAL_QUEUE_ID) == str(r.partition) for r in records)


def _max_message_bytes(bootstrap: str, kafka_topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, kafka_topic)
    return int(admin.describe_configs([res])[res].result(timeout=30)["max.message.bytes"].value)


def test_topics_ensure_matches_the_user_topic_size_and_a_1_5_mib_message_retries(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Issue 11 #15: a 1.5 MiB message (RocketMQ carries up to 4 MiB) was refused on the
    group's default-sized retry path.  ``topics ensure --match-topic`` gives the retry, DLQ
    and level topics the user topic's ``max.message.bytes`` plus header room; with the
    clients' ``message.max.bytes`` raised, the message is retried and consumed."""
    bs = kafka_bootstrap_servers
    limit = 2_000_000
    topic = kafka_topic_factory(partitions=1, config={"max.message.bytes": str(limit)})
    group = f"g-{uuid.uuid4().hex[:10]}"
    ns = f"ns{uuid.uuid4().hex[:10]}"
    out = subprocess.run(
        [
            *(sys.executable, "-m", "adapter.cli", "topics", "ensure", "--group", group),
            *("--namespace", ns, "--delay-levels", LEVELS, "--partitions", "1"),
            *("--match-topic", topic, "-b", bs),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    want = limit + HOP_HEADER_ROOM
    planned = [naming.retry_topic(group), naming.dlq_topic(group)] + [
        naming.schedule_topic(level, DelayLevels.parse(LEVELS), ns) for level in range(1, 7)
    ]
    for logical in planned:
        assert _max_message_bytes(bs, naming.to_kafka(logical)) == want, logical

    body = uuid.uuid4().bytes * (1_572_864 // 16)  # 1.5 MiB
    big = {"message.max.bytes": want}
    listener = _Born()
    consumer = PushConsumer(
        {"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest", **big},
        namespace=ns,
        delay_levels=LEVELS,
        partitions=1,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    service = ScheduleService(
        {"bootstrap.servers": bs, **big}, delay_levels=LEVELS, namespace=ns, partitions=1
    )
    with service, consumer:
        with Producer({"bootstrap.servers": bs, "message.max.bytes": limit - 1024}) as producer:
            producer.send(Message(topic=topic, body=body))
        wait_until(lambda: len(listener.seen) >= 2, 60, "the message and its retry")
    assert [(b == body, t) for b, t, _, _ in listener.seen[:2]] == [(True, 0), (True, 1)]
    assert read_topic({"bootstrap.servers": bs}, naming.to_kafka(naming.dlq_topic(group))) == []
