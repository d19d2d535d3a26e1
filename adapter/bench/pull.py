"""Benchmark rows of the pull-style consumers, each a ratio to raw confluent-kafka in the
same run (``rmq-kafka bench --only pull``):

* SimpleConsumer ``receive(32)`` + ``ack`` of every message, against the careful raw loop
  of :meth:`~adapter.bench.harness.Bench.raw_consume` at batch 32;
* the drop-in (:class:`adapter.kafka.Consumer`) running that very raw loop
  (``consume(500)``, an error check per record, the no-op per batch of 32, offsets stored
  per fetch), against the same loop on ``confluent_kafka.Consumer``;
* the drop-in running a ``poll()``-per-message loop with the default
  ``enable.auto.offset.store``, against the same loop on ``confluent_kafka.Consumer``.

Each row alternates ours and raw ``--repeats`` times on one pre-filled topic, with the same
fetch settings (:data:`~adapter.bench.harness.RAW_FETCH_SETTINGS`).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from confluent_kafka import Consumer as RawConsumer

from adapter.bench.harness import (
    BENCH_LEVELS,
    CONSUMER_SCALE,
    RAW_FETCH_SETTINGS,
    Bench,
    Scenario,
    measure,
    noop_listener,
    uid,
)
from adapter.clients.simple.simple_consumer import SimpleConsumer
from adapter.kafka import Consumer as DropInConsumer

#: Messages per receive (RocketMQ's maximum) and per listener batch in the raw loop.
BATCH = 32


def pull_scenarios(bench: Bench) -> list[Scenario]:
    """The three rows of this module."""
    return [
        simple_consumer_scenario(bench),
        dropin_consume_scenario(bench),
        dropin_poll_scenario(bench),
    ]


def simple_consumer_scenario(bench: Bench, size: int = 100) -> Scenario:
    n = bench.n * CONSUMER_SCALE
    sc = Scenario(f"SimpleConsumer receive/ack batch={BATCH} body={size}B ({n} msgs)")
    topic = bench.topic()
    bench.fill(topic, n, size)
    for _ in range(bench.repeats):
        sc.raw.append(bench.raw_consume(topic, n, BATCH))
        sc.ours.append(measure(partial(_simple_receive, bench, topic, n)))
    return sc


def _simple_receive(bench: Bench, topic: str, n: int) -> tuple[int, float, float]:
    consumer = SimpleConsumer(
        {**bench.config, "auto.offset.reset": "earliest", **RAW_FETCH_SETTINGS},
        f"simple-{uid()}",
        partitions=1,
        await_duration=1.0,
    )
    consumer.subscribe(topic)
    return receive_loop(consumer, n, invisible_s=60)


def receive_loop(consumer: Any, n: int, *, invisible_s: float) -> tuple[int, float, float]:
    """``receive(BATCH)`` + ``ack`` each until ``n`` were handed out: (count, first, last)."""
    seen, first = 0, 0.0
    deadline = time.monotonic() + 600
    with consumer:
        while seen < n and time.monotonic() < deadline:
            views = consumer.receive(BATCH, invisible_s)
            if not views:
                continue
            if not first:
                first = time.perf_counter()
            noop_listener(views)
            for view in views:
                consumer.ack(view)
            seen += len(views)
        last = time.perf_counter()
    return seen, first, last


def dropin_consume_scenario(bench: Bench, size: int = 100) -> Scenario:
    n = bench.n * CONSUMER_SCALE
    sc = Scenario(f"drop-in consume(500) loop batch={BATCH} body={size}B ({n} msgs)")
    topic = bench.topic()
    bench.fill(topic, n, size)
    for _ in range(bench.repeats):
        sc.raw.append(bench.raw_consume(topic, n, BATCH))
        sc.ours.append(measure(partial(_consume_loop, bench, DropInConsumer, topic, n)))
    return sc


def _consume_loop(bench: Bench, cls: Any, topic: str, n: int) -> tuple[int, float, float]:
    """:meth:`Bench.raw_consume`'s loop, line for line, on ``cls``."""
    options = {"delay_levels": BENCH_LEVELS, "namespace": "bench", "partitions": 1}
    c = cls(
        {
            **bench.config,
            "group.id": f"dropin-{uid()}",
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            "enable.auto.commit": True,
            **RAW_FETCH_SETTINGS,
        },
        **(options if cls is DropInConsumer else {}),
    )
    c.subscribe([topic])
    seen, first = 0, 0.0
    while seen < n:
        msgs = c.consume(500, 1.0)
        if not msgs:
            continue
        if not first:
            first = time.perf_counter()
        records = [m for m in msgs if m.error() is None]
        for i in range(0, len(records), BATCH):
            noop_listener(records[i : i + BATCH])
        seen += len(records)
        c.store_offsets(message=msgs[-1])
    last = time.perf_counter()
    c.close()
    return seen, first, last


def dropin_poll_scenario(bench: Bench, size: int = 100) -> Scenario:
    n = bench.n
    sc = Scenario(f"drop-in poll() loop, auto offset store, body={size}B ({n} msgs)")
    topic = bench.topic()
    bench.fill(topic, n, size)
    for _ in range(bench.repeats):
        sc.raw.append(measure(partial(poll_loop, bench, RawConsumer, topic, n)))
        sc.ours.append(measure(partial(poll_loop, bench, DropInConsumer, topic, n)))
    return sc


def poll_loop(bench: Bench, cls: Any, topic: str, n: int) -> tuple[int, float, float]:
    """The textbook loop: ``poll()``, an error check, the message handed on, offsets stored
    by ``enable.auto.offset.store`` and committed in the background."""
    options = {"delay_levels": BENCH_LEVELS, "namespace": "bench", "partitions": 1}
    c = cls(
        {
            **bench.config,
            "group.id": f"poll-{uid()}",
            "auto.offset.reset": "earliest",
            **RAW_FETCH_SETTINGS,
        },
        **(options if cls is DropInConsumer else {}),
    )
    c.subscribe([topic])
    seen, first = 0, 0.0
    while seen < n:
        msg = c.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            continue
        if not first:
            first = time.perf_counter()
        noop_listener([msg])
        seen += 1
    last = time.perf_counter()
    c.close()
    return seen, first, last
