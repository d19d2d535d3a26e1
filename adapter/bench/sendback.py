"""The send-back micro-benchmark: what one copy of a failed message to its delay level costs
(the engine's routing and tracking, the record and its RocketMQ headers, the produce, and
the broker's verdict settling its offset), against raw confluent-kafka producing records
with the very same headers to the same topic.

Both sides start from records already fetched (the fetch is not measured) and end when the
broker has acknowledged every copy.  Ours drives the real push-consumer path without a
listener: :class:`~adapter.clients.member.group_consumer.GroupConsumer` carries out the
:class:`~adapter.core.engine.SendBack` actions of a
:class:`~adapter.core.engine.ConcurrentEngine` whose batches of 32 all failed
(``ack_index=-1``), and each verdict settles its message; the partition's committable offset
must then be past the last record, or the row fails.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import Producer as RawProducer

from adapter.bench.harness import BENCH_LEVELS, Bench, Run, Scenario, uid
from adapter.clients.member.contracts import ConsumeSettings
from adapter.clients.member.group_consumer import GroupConsumer
from adapter.core import hops
from adapter.core.delay import DelayLevels
from adapter.core.engine import ConcurrentEngine, EngineOptions
from adapter.core.listener import ConsumeConcurrentlyContext, MessageQueue, Outcome, judge
from adapter.core.routing import ConsumeConcurrentlyStatus, route_failed
from adapter.io.clock import SystemClock
from adapter.io.errors import FatalErrorWatch
from adapter.io.records import TopicNames
from adapter.io.topics import ensure_topics, plan_topics

__all__ = ["send_back_scenario"]

#: the listener batch the failed messages came in (the failure rows' size)
BATCH = 32
#: copies produced between two ``poll(0)`` calls on both sides (a fetch's worth)
POLL_EVERY = 128


def send_back_scenario(bench: Bench) -> Scenario:
    """Half of ``--messages`` copies per run, ours and raw alternating."""
    n = bench.n // 2
    group = f"sb-{uid()}"
    levels = DelayLevels.parse(BENCH_LEVELS)
    topics = hops.GroupTopics(group, levels, "bench")
    ensure_topics(
        bench.config,
        plan_topics(groups=[group], delay_levels=levels, namespace="bench", partitions=1),
    )
    source = bench.topic()
    bench.fill(source, n, 100)
    kmsgs = _read_all(bench.config, source, n)
    sc = Scenario(
        f"send-back of a failed message, batch={BATCH} body=100B (13 headers; raw: "
        "produce with the same headers)"
    )
    threads: dict[str, list[float]] = {"ours": [], "raw": []}
    for _ in range(bench.repeats):
        for side, run in (("raw", _raw_run), ("ours", _ours_run)):
            measured, thread_us = run(bench.config, kmsgs, topics, group)
            getattr(sc, side).append(measured)
            threads[side].append(thread_us)
    for side, values in threads.items():
        # the calling thread alone (the consumer's loop): librdkafka's threads left out
        sc.extra[f"{side}_thread_cpu_us_per_copy"] = round(statistics.median(values), 2)
    return sc


def _read_all(config: dict[str, Any], topic: str, n: int) -> list[Any]:
    c = Consumer(
        {
            **config,
            "group.id": f"sb-read-{uid()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 120
    while len(out) < n and time.monotonic() < deadline:
        out.extend(m for m in c.consume(500, 1.0) if m.error() is None)
    c.close()
    if len(out) < n:
        raise RuntimeError(f"read {len(out)} of {n} records from {topic}")
    return out


def _views(kmsgs: list[Any], group: str) -> list[Any]:
    names = TopicNames(group)
    return [names.view(k) for k in kmsgs]


def _raw_run(
    config: dict[str, Any], kmsgs: list[Any], topics: hops.GroupTopics, group: str
) -> tuple[Run, float]:
    """``produce`` of records carrying exactly the headers our copies carry (built before
    the clock starts: this side pays for the produce and the verdicts only)."""
    now_ms = int(time.time() * 1000)
    views = _views(kmsgs, group)
    failure = _all_failed(views[0], BATCH).failure
    dest = route_failed(
        reconsume_times=0,
        max_reconsume_times=16,
        delay_level_when_next_consume=0,
        levels=topics.levels,
    )
    records = [hops.send_back(v, dest, topics, now_ms=now_ms, failure=failure) for v in views]
    producer = RawProducer({**config, "enable.idempotence": True, "linger.ms": 5})
    acked = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    producer.list_topics(timeout=10)  # connected before the clock starts
    gc.collect()  # the setup's garbage is not this side's to collect (see _ours_run)
    cpu0, t0, th0 = time.process_time(), time.perf_counter(), time.thread_time()
    produce: Any = producer.produce  # the headers' list type is the adapter's
    poll = producer.poll
    for i, rec in enumerate(records):
        produce(rec.topic, rec.value, rec.key, on_delivery=on_delivery, headers=rec.headers)
        if i % POLL_EVERY == 0:
            poll(0)
    producer.flush(60)
    th1, t1, cpu1 = time.thread_time(), time.perf_counter(), time.process_time()
    if acked[0] != len(records):
        raise RuntimeError(f"raw send-back: {acked[0]} of {len(records)} acknowledged")
    n = len(records)
    return Run(n / (t1 - t0), (cpu1 - cpu0) / n * 1e6), (th1 - th0) / n * 1e6


def _all_failed(view: Any, size: int) -> Outcome:
    """The outcome of a batch of ``size`` whose listener acknowledged none of it."""
    ctx = ConsumeConcurrentlyContext(MessageQueue(view.topic, view.queue_id))
    ctx.ack_index = -1
    outcome = judge(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ctx, size)
    assert outcome is not None
    return outcome


def _ours_run(
    config: dict[str, Any], kmsgs: list[Any], topics: hops.GroupTopics, group: str
) -> tuple[Run, float]:
    clock = SystemClock()
    engine = ConcurrentEngine(
        EngineOptions(batch_size=BATCH, levels=topics.levels, store_interval_s=3600.0)
    )
    member = GroupConsumer(
        name=f"send-back bench {group}",
        config={**config, "group.id": group},
        group=group,
        engine=engine,
        topics=topics,
        filters={},
        settings=ConsumeSettings(),
        errors=FatalErrorWatch(None),
        clock=clock,
    )
    views = _views(kmsgs, group)
    tp = (views[0].kafka_topic, views[0].queue_id)
    outcomes = {size: _all_failed(views[0], size) for size in range(1, BATCH + 1)}
    engine.assigned(tp)
    member.publisher.producer.list_topics(timeout=10)  # connected before the clock starts
    publisher, apply = member.publisher, member.apply
    # the runs of views as a consumer meets them: each is handed over and let go, so that a
    # copied message dies once its copy is acknowledged (as in a consumer) instead of
    # living on in this list with the headers decoded for it
    n, last = len(views), views[-1].queue_offset
    runs = [views[start : start + POLL_EVERY] for start in range(0, n, POLL_EVERY)]
    del views
    runs.reverse()
    # the setup (views, records, the other side's run) leaves garbage behind; collected
    # now, it is not charged to the copies (which pay for the collections they cause)
    gc.collect()
    cpu0, t0, th0 = time.process_time(), time.perf_counter(), time.thread_time()
    while runs:
        run = runs.pop()
        work = engine.fetched(tp, run, run[-1].queue_offset + 1)
        assert work is not None
        failures = [(i, outcomes[work.batch_len(i)], 0.0) for i in range(work.nbatches)]
        actions = engine.settle_run(work, failures, clock.monotonic())
        apply(actions)
        publisher.poll(0)
        del run, work, actions
    publisher.flush(60)
    th1, t1, cpu1 = time.thread_time(), time.perf_counter(), time.process_time()
    settled = engine.committable(tp)
    publisher.close(5)
    if settled != last + 1:
        raise RuntimeError(f"send-back: committable {settled}, not past {last}")
    return Run(n / (t1 - t0), (cpu1 - cpu0) / n * 1e6), (th1 - th0) / n * 1e6
