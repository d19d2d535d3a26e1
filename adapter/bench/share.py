"""Benchmark row of the SimpleConsumer's share backend (KIP-932): ``receive(32)`` + ``ack``
of every message, against a raw confluent-kafka ``ShareConsumer`` loop in explicit
acknowledgement mode (``poll``, an error check per record, ``acknowledge`` each) on the same
pre-filled topic, each on a new share group reading from the earliest offset.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from adapter.bench.harness import CONSUMER_SCALE, Scenario, measure, noop_listener, uid
from adapter.bench.pull import receive_loop
from adapter.clients.simple.simple_consumer import SimpleConsumer

if TYPE_CHECKING:
    from adapter.bench.harness import Bench

#: Messages per receive (RocketMQ's maximum) and records asked of librdkafka per poll.
BATCH = 32


def share_consumer_scenario(bench: Bench, size: int = 100) -> Scenario:
    """The row: ours and raw alternate ``bench.repeats`` times on one pre-filled topic."""
    n = bench.n * CONSUMER_SCALE
    sc = Scenario(f"SimpleConsumer(share) receive/ack batch={BATCH} body={size}B ({n} msgs)")
    topic = bench.topic()
    bench.fill(topic, n, size)
    for _ in range(bench.repeats):
        sc.raw.append(measure(partial(_raw_share_loop, bench, topic, n)))
        sc.ours.append(measure(partial(_share_receive, bench, topic, n)))
    return sc


def earliest_share_group(bench: Bench, prefix: str) -> str:
    """A new share group's name, set to read from the earliest offset."""
    group = f"{prefix}-{uid()}"
    admin = AdminClient(dict[str, Any](bench.config))
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)
    return group


def _raw_share_loop(bench: Bench, topic: str, n: int) -> tuple[int, float, float]:
    """The raw baseline: explicit acknowledgement of every record, sent with the next poll."""
    c: Any = confluent_kafka.ShareConsumer(
        {
            **bench.config,
            "group.id": earliest_share_group(bench, "share-raw"),
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": BATCH,
        }
    )
    c.subscribe([topic])
    seen, first = 0, 0.0
    deadline = time.monotonic() + 600
    accept = confluent_kafka.AcknowledgeType.ACCEPT
    while seen < n and time.monotonic() < deadline:
        msgs = c.poll(1.0)
        if not msgs:
            continue
        if not first:
            first = time.perf_counter()
        records = [m for m in msgs if m.error() is None]
        noop_listener(records)
        for m in records:
            c.acknowledge(m, accept)
        seen += len(records)
    last = time.perf_counter()
    c.close()
    return seen, first, last


def _share_receive(bench: Bench, topic: str, n: int) -> tuple[int, float, float]:
    consumer = SimpleConsumer(
        bench.config,
        f"share-ours-{uid()}",
        backend="share",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        partitions=1,
        await_duration=1.0,
    )
    consumer.subscribe(topic)
    return receive_loop(consumer, n, invisible_s=20)
