"""Benchmark rows of the Producer: ``send_async`` and ``send`` (sync) of 100-byte bodies,
against a raw confluent-kafka producer with the same settings (idempotent, linger 5 ms)."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Producer as RawProducer

from adapter.bench.harness import Bench, Scenario, measure
from adapter.clients.producer import Producer
from adapter.core.message import Message

__all__ = ["producer_scenarios"]


def producer_scenarios(bench: Bench) -> list[Scenario]:
    n = bench.n
    body = b"x" * 100
    async_sc = Scenario("producer send_async body=100B")
    sync_sc = Scenario("producer send (sync) body=100B")
    sync_n = max(200, n // 100)
    for _ in range(bench.repeats):
        topic = bench.topic()
        # the same settings the adapter's Producer uses (idempotent, linger 5 ms)
        raw = RawProducer({**bench.config, "enable.idempotence": True, "linger.ms": 5})

        def raw_async() -> tuple[int, float, float]:
            acked = [0]

            def cb(err: Any, _: Any) -> None:
                if err is None:
                    acked[0] += 1

            t0 = time.perf_counter()
            for _ in range(n):
                while True:
                    try:
                        raw.produce(topic, body, on_delivery=cb)
                        break
                    except BufferError:
                        raw.poll(0.01)
                raw.poll(0)
            raw.flush(60)
            return acked[0], t0, time.perf_counter()

        async_sc.raw.append(measure(raw_async))

        def raw_sync() -> tuple[int, float, float]:
            t0 = time.perf_counter()
            for _ in range(sync_n):
                raw.produce(topic, body)
                raw.flush(10)
            return sync_n, t0, time.perf_counter()

        sync_sc.raw.append(measure(raw_sync))
        with Producer(bench.config) as ours:
            ours.send(Message(topic=topic, body=body))  # metadata warm-up

            def ours_async() -> tuple[int, float, float]:
                acked = [0]
                finished = threading.Event()

                def cb(result: Any, exc: Any) -> None:
                    acked[0] += 1
                    if acked[0] >= n:
                        finished.set()

                t0 = time.perf_counter()
                for _ in range(n):
                    ours.send_async(Message(topic=topic, body=body), cb)
                finished.wait(120)
                return acked[0], t0, time.perf_counter()

            async_sc.ours.append(measure(ours_async))

            def ours_sync() -> tuple[int, float, float]:
                t0 = time.perf_counter()
                for _ in range(sync_n):
                    ours.send(Message(topic=topic, body=body))
                return sync_n, t0, time.perf_counter()

            sync_sc.ours.append(measure(ours_sync))
    return [async_sc, sync_sc]
