"""Benchmark rows of the ScheduleService's forwarding: due entries pre-filled on a delay
level topic, forwarded to their real topic (at-least-once and exactly-once), against a raw
consume -> produce pipe with offsets stored after the acknowledgement."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import Producer as RawProducer

from adapter.bench.harness import BENCH_LEVELS, Bench, Scenario, measure, uid
from adapter.constants import HEADER_DUE_MS, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_TOPIC
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.io.polling import consume_available
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.schedule import DeliveryGuarantee, ScheduleService

__all__ = ["count_until", "forwarding_scenarios", "raw_pipe", "service_pipe"]


def forwarding_scenarios(bench: Bench) -> list[Scenario]:
    """Due entries pre-filled on a level topic, forwarded to their real topic; the
    baseline is a raw consume→produce pipe with offsets committed after the ack."""
    out = []
    levels = DelayLevels.parse(BENCH_LEVELS)
    n = bench.n // 2
    for delivery in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE):
        sc = Scenario(f"ScheduleService forwarding {delivery.value.lower()}")
        for _ in range(bench.repeats):
            ns = f"b{uid()}"
            real = bench.topic()
            level_topic = naming.to_kafka(naming.schedule_topic(1, levels, ns))
            ensure_topics(bench.config, [TopicPlan(level_topic, level_topic, 1)])
            due = str(int(time.time() * 1000) - 1).encode()
            bench.fill(
                level_topic,
                n,
                100,
                lambda _i: [
                    (PROPERTY_REAL_TOPIC, real.encode()),
                    (PROPERTY_DELAY_TIME_LEVEL, b"1"),
                    (HEADER_DUE_MS, due),
                ],
            )
            sc.raw.append(measure(partial(raw_pipe, bench, level_topic, real, n)))
            sc.ours.append(measure(partial(service_pipe, bench, ns, real, n, delivery)))
        out.append(sc)
    return out


def count_until(bench: Bench, topic: str, n: int) -> float:
    c = Consumer({**bench.config, "group.id": f"cnt-{uid()}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    seen = 0
    while seen < n:
        seen += sum(1 for m in consume_available(c, 1000, 1.0) if not m.error())
    c.close()
    return time.perf_counter()


def raw_pipe(bench: Bench, src: str, dst: str, n: int) -> tuple[int, float, float]:
    c = Consumer(
        {
            **bench.config,
            "group.id": f"pipe-{uid()}",
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
        }
    )
    p = RawProducer({**bench.config, "enable.idempotence": True, "linger.ms": 5})
    c.subscribe([src])
    acked, first = [0], 0.0
    last_offset: list[Any] = [None]

    def cb(err: Any, m: Any) -> None:
        if err is None:
            acked[0] += 1

    moved = 0
    while acked[0] < n:
        msgs = consume_available(c, 500, 0.05)
        if not msgs:
            p.poll(0.01)  # serve acknowledgements while the source is drained
        if msgs and not first:
            first = time.perf_counter()
        for m in msgs:
            if m.error():
                continue
            p.produce(dst, m.value(), key=m.key(), headers=m.headers(), on_delivery=cb)
            moved += 1
            last_offset[0] = m
        p.poll(0)
        if last_offset[0] is not None and acked[0] == moved:
            c.store_offsets(message=last_offset[0])
    end = time.perf_counter()
    c.close()
    return acked[0], first, end


def service_pipe(
    bench: Bench, ns: str, real: str, n: int, delivery: DeliveryGuarantee
) -> tuple[int, float, float]:
    svc = ScheduleService(
        bench.config, delay_levels=BENCH_LEVELS, namespace=ns, partitions=1, delivery=delivery
    )
    start = time.perf_counter()
    svc.start()
    while svc.stats.forwarded == 0:
        time.sleep(0.001)
    first = time.perf_counter()
    end = count_until(bench, real, n)
    svc.shutdown()
    del start
    return n, first, end
