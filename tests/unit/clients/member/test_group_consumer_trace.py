"""The consumer's trace hand-over on fake Kafka clients: what a deferring sink (the Kafka
sink's way) is handed for a fetched run and for a local retry, and the events it derives
from it (a local redelivery counts one delivery more than its record says)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from adapter.clients.member.group_consumer import ConsumeSettings, GroupConsumer
from adapter.clients.push.concurrent_runner import ConcurrentRunner
from adapter.core.delay import DelayLevels
from adapter.core.engine import ConcurrentEngine, EngineOptions
from adapter.core.filter import TagFilter
from adapter.core.hops import GroupTopics
from adapter.core.listener import ListenerMode
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.core.trace import (
    RUN,
    RUN_FIELDS,
    RunBuilder,
    TraceStatus,
    batches_fields,
    expand_run,
    run_fields,
)
from adapter.io.errors import FatalErrorWatch
from adapter.io.trace_columns import add_batch_run
from tests.unit.kafka_fakes import Factory, FakeAdmin, FakeClock, FakeConsumer, FakeProducer, record

pytestmark = pytest.mark.unit

GROUP = "th-group"
TOPIC = "orders"


class _Deferring:
    """A sink that takes what the consumer defers, and derives the events as the Kafka
    sink's thread does: runs where it can, one by one elsewhere."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.items.append(event)

    def defer(self, pending: Any) -> None:
        self.items.append(pending)

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in self.items:
            builder = RunBuilder(1000)
            done = add_batch_run(builder, item)
            if done is False:
                rows = run_fields(item) if item[0] is RUN else batches_fields(item)
                out += [{"offset": r[5], "reconsume_times": r[9], "status": r[8]} for r in rows]
                continue
            runs = [r for r in (done, builder.close()) if isinstance(r, tuple)]
            for run in runs:
                out += expand_run(dict(zip(RUN_FIELDS, run, strict=True)))
        return out


def _member(sink: _Deferring, fail_once: set[bytes]) -> tuple[GroupConsumer, Any, Any, FakeClock]:
    clock = FakeClock()
    consumers, producers = Factory(FakeConsumer), Factory(FakeProducer)
    topics = GroupTopics(GROUP, DelayLevels.DEFAULT)
    engine = ConcurrentEngine(EngineOptions(batch_size=2, store_interval_s=0.0))
    group = GroupConsumer(
        name="trace member",
        config={"bootstrap.servers": "fake:9092", "group.id": GROUP},
        group=GROUP,
        engine=engine,
        topics=topics,
        filters={TOPIC: TagFilter.parse("*"), topics.retry_kafka: TagFilter.parse("*")},
        settings=ConsumeSettings(instance_name="unit", offset_store_dir=".unused"),
        errors=FatalErrorWatch(),
        clock=clock,
        consumer_factory=consumers,
        producer_factory=producers,
        admin_factory=Factory(FakeAdmin),
        trace=sink,
    )

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        for i, msg in enumerate(msgs):
            if msg.body in fail_once:
                fail_once.discard(msg.body)
                ctx.ack_index = i - 1
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    runner = ConcurrentRunner(listener, group, engine, mode=ListenerMode.INLINE, threads=1)
    group.bind(runner, guard=lambda f: f, running=lambda: True)
    group.open()
    [consumer] = consumers.made
    consumer.watermarks[(TOPIC, 0)] = (0, 0)
    consumer.rebalance("assign", [(TOPIC, 0)])
    return group, consumer, producers, clock


def test_a_local_retry_is_traced_with_its_delivery_count() -> None:
    sink = _Deferring()
    group, consumer, producers, clock = _member(sink, {b"bad"})
    producers.made[0].verdict = KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "no replicas")
    consumer.queue += [record(TOPIC, 0, o, b"bad" if o == 1 else b"ok") for o in range(4)]
    for _ in range(40):  # fetched, the copy refused, retried locally after its back-off
        clock.advance(0.5)
        group.step()
    successes = [e for e in sink.events() if e["status"] in (TraceStatus.SUCCESS, "SUCCESS")]
    assert sorted((e["offset"], e["reconsume_times"]) for e in successes) == [
        (0, 0),
        (1, 1),  # the local redelivery: one delivery more than its record says
        (2, 0),
        (3, 0),
    ]
