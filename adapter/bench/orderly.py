"""Benchmark rows of the orderly consumer (``register_message_listener_orderly``), each
measured beside the concurrent PushConsumer and raw confluent-kafka in the same run
(``rmq-kafka bench --only orderly``):

* a no-op orderly listener at batch 1 and at batch 32 (all success), against the no-op
  concurrent listener (:meth:`~adapter.bench.harness.Bench.ours_consume`) and the careful raw loop
  (:meth:`~adapter.bench.harness.Bench.raw_consume`) at the same batch size;
* 1 % of the messages failing at batch 32: the orderly listener returns
  ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` on a failing message's first delivery, and the same
  batch succeeds when it comes back (``reconsume_times`` 1) after
  ``suspend_current_queue_time_millis`` (:data:`SUSPEND_MS`, RocketMQ's minimum).  Beside
  it: the concurrent listener failing the same messages (``ack_index``, sent back to the
  retry topic, only first deliveries counted) and a raw loop that retries such a batch in
  place after sleeping the same suspend time.  An orderly partition waits for each suspend
  by contract, so the row also gives the suspends and their floor (suspends times the
  suspend time).

The table's ``ratio`` is against raw confluent-kafka, as in every row; ``vs_concurrent`` is
the rate against the concurrent PushConsumer.  Each row alternates raw, concurrent and
orderly ``--repeats`` times on one pre-filled single-partition topic.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import Consumer as RawConsumer

from adapter.bench.harness import (
    BENCH_LEVELS,
    CONSUMER_SCALE,
    RAW_FETCH_SETTINGS,
    Bench,
    Run,
    Scenario,
    measure,
    noop_listener,
    run_until_counted,
    uid,
)
from adapter.clients.push.push_consumer import PushConsumer
from adapter.core.listener import ConsumeOrderlyStatus

#: The failing row's suspend time: RocketMQ's smallest (``SUSPEND_MIN_MS``).
SUSPEND_MS = 10
#: The failing row: this share of the messages fails on its first delivery.
FAIL_PERCENT = 1
FAIL_BATCH = 32

_SUCCESS = ConsumeOrderlyStatus.SUCCESS
_SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


@dataclass
class OrderlyScenario(Scenario):
    """A row with a third series: the concurrent PushConsumer on the same topic."""

    concurrent: list[Run] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        if self.ours and self.concurrent:
            ours = statistics.median(r.rate for r in self.ours)
            conc = statistics.median(r.rate for r in self.concurrent)
            out.update(
                concurrent_msgs_per_s=round(conc),
                vs_concurrent=round(ours / conc, 3),
                concurrent_cpu_us_per_msg=round(
                    statistics.median(r.cpu_us for r in self.concurrent), 2
                ),
            )
        return out


def orderly_scenarios(bench: Bench) -> list[Scenario]:
    """The three rows of this module."""
    rows: list[Scenario] = [noop_scenario(bench, batch) for batch in (1, 32)]
    rows.append(failing_scenario(bench))
    return rows


def noop_scenario(bench: Bench, batch: int, size: int = 100) -> OrderlyScenario:
    n = bench.n * CONSUMER_SCALE
    sc = OrderlyScenario(f"orderly all-success batch={batch} body={size}B ({n} msgs)")
    topic = bench.topic()
    bench.fill(topic, n, size)
    for _ in range(bench.repeats):
        sc.raw.append(bench.raw_consume(topic, n, batch))
        sc.concurrent.append(bench.ours_consume(topic, n, batch))
        sc.ours.append(orderly_consume(bench, topic, n, batch)[0])
    return sc


def failing_scenario(bench: Bench, size: int = 100) -> OrderlyScenario:
    n = bench.n // 2
    fail_every = max(1, round(100 / FAIL_PERCENT))
    sc = OrderlyScenario(
        f"orderly {FAIL_PERCENT}% failing batch={FAIL_BATCH} body={size}B "
        f"(SUSPEND once, {SUSPEND_MS} ms, then success; {n} msgs)"
    )
    topic = bench.topic()
    bench.fill(topic, n, size)
    suspends: list[int] = []
    for _ in range(bench.repeats):
        sc.raw.append(
            measure(
                partial(_raw_retry_in_place, bench, topic, n, FAIL_BATCH, fail_every, SUSPEND_MS)
            )
        )
        sc.concurrent.append(bench.ours_consume(topic, n, FAIL_BATCH, fail_every))
        run, suspended = orderly_consume(
            bench,
            topic,
            n,
            FAIL_BATCH,
            fail_every,
            suspend_current_queue_time_millis=SUSPEND_MS,
        )
        sc.ours.append(run)
        suspends.append(suspended)
    floor_s = statistics.median(suspends) * SUSPEND_MS / 1000
    sc.extra = {"suspends": round(statistics.median(suspends)), "suspend_floor_s": floor_s}
    return sc


def orderly_consume(
    bench: Bench, topic: str, n: int, batch: int, fail_every: int | None = None, **options: Any
) -> tuple[Run, int]:
    """:meth:`Bench.ours_consume` with an orderly listener: the rate of messages consumed
    successfully (each counted once), and how many batches were suspended.  With
    ``fail_every``, a batch holding an offset ``o`` with ``(o + 1) % fail_every == 0`` on
    its first delivery is suspended (the messages the concurrent row fails)."""
    counts: list[int] = []  # one entry per successful call (list.append is atomic)
    suspended = [0]
    first = [0.0]

    def listener(msgs: list[Any], ctx: Any) -> ConsumeOrderlyStatus:
        if not first[0]:
            first[0] = time.perf_counter()
        if fail_every:
            for m in msgs:
                if m.reconsume_times == 0 and (m.queue_offset + 1) % fail_every == 0:
                    suspended[0] += 1  # one run of a partition at a time: no race
                    return _SUSPEND
        counts.append(len(msgs))
        return _SUCCESS

    consumer = PushConsumer(
        {**bench.config, "group.id": f"orderly-{uid()}", "auto.offset.reset": "earliest"},
        consume_message_batch_max_size=batch,
        delay_levels=BENCH_LEVELS,
        namespace="bench",
        partitions=1,
        **options,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener_orderly(listener)

    return measure(partial(run_until_counted, consumer, n, counts, first)), suspended[0]


def _raw_retry_in_place(  # noqa: PLR0917
    bench: Bench, topic: str, n: int, batch: int, fail_every: int, suspend_ms: int
) -> tuple[int, float, float]:
    """:meth:`Bench.raw_consume`'s loop, where a batch holding a failing record (first
    delivery) waits ``suspend_ms`` and is handed on again: an orderly retry by hand."""
    c = RawConsumer(
        {
            **bench.config,
            "group.id": f"raw-orderly-{uid()}",
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            "enable.auto.commit": True,
            **RAW_FETCH_SETTINGS,
        }
    )
    c.subscribe([topic])
    seen, first = 0, 0.0
    pause = suspend_ms / 1000
    while seen < n:
        msgs = c.consume(500, 1.0)
        if not msgs:
            continue
        if not first:
            first = time.perf_counter()
        records = [m for m in msgs if m.error() is None]
        for i in range(0, len(records), batch):
            chunk = records[i : i + batch]
            noop_listener(chunk)
            if any(((m.offset() or 0) + 1) % fail_every == 0 for m in chunk):
                time.sleep(pause)  # the suspend time, then the same batch again
                noop_listener(chunk)
        seen += len(records)
        c.store_offsets(message=msgs[-1])
    last = time.perf_counter()
    c.close()
    return seen, first, last
