"""The measuring harness every benchmark row shares: a run's rate and CPU per message
(:func:`measure`), a row's series and its ratio to raw confluent-kafka (:class:`Scenario`),
pre-filled topics, and the two consumer loops most rows compare: the careful raw
confluent-kafka loop (:meth:`Bench.raw_consume`) and the PushConsumer doing the same work
(:meth:`Bench.ours_consume`).
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import Producer as RawProducer

from adapter.clients.push.push_consumer import PushConsumer
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.io.topics import TopicPlan, ensure_topics

__all__ = [
    "BENCH_LEVELS",
    "CONSUMER_SCALE",
    "RAW_FETCH_SETTINGS",
    "Bench",
    "RawCopyHeaders",
    "Run",
    "Scenario",
    "header",
    "measure",
    "noop_listener",
    "uid",
]

BENCH_LEVELS = "1s 2s 3s 4s 5s"
#: librdkafka fetch settings the PushConsumer uses; the raw baselines get them too, so the
#: ratio compares the code, not the settings (librdkafka's default fetch.queue.backoff.ms
#: of 1 s stalls any loop that drains the queue slower than the fetcher fills it).
RAW_FETCH_SETTINGS = {"fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 20}
#: The all-success consumer rows read this many times ``--messages``.
CONSUMER_SCALE = 4


@dataclass
class Run:
    rate: float  # messages per second
    cpu_us: float  # client CPU microseconds per message


@dataclass
class Scenario:
    name: str
    ours: list[Run] = field(default_factory=list)
    raw: list[Run] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.name}
        if self.ours and self.raw:
            ours = statistics.median(r.rate for r in self.ours)
            raw = statistics.median(r.rate for r in self.raw)
            out.update(
                ours_msgs_per_s=round(ours),
                raw_msgs_per_s=round(raw),
                ratio=round(ours / raw, 3),
                ours_cpu_us_per_msg=round(statistics.median(r.cpu_us for r in self.ours), 2),
                raw_cpu_us_per_msg=round(statistics.median(r.cpu_us for r in self.raw), 2),
                runs=len(self.ours),
            )
        out.update(self.extra)
        return out


def header(kmsg: Any, name: str) -> str:
    """A Kafka record's header ``name`` as text (``KeyError`` when absent)."""
    for key, value in kmsg.headers() or ():
        if key == name and value is not None:
            return bytes(value).decode()
    raise KeyError(name)


def noop_listener(msgs: list[Any]) -> None:
    """What a raw loop hands its application: a batch."""


def uid() -> str:
    return uuid.uuid4().hex[:10]


def measure(work: Callable[[], tuple[int, float, float]]) -> Run:
    """``work`` returns (count, first_ts, last_ts); CPU is measured around it."""
    cpu0 = time.process_time()
    count, t_first, t_last = work()
    cpu = time.process_time() - cpu0
    return Run(count / max(t_last - t_first, 1e-9), cpu / count * 1e6)


class Bench:
    """One benchmark run's broker and size: what every scenario family takes."""

    def __init__(
        self, bootstrap: str, messages: int, repeats: int, *, warm_up: bool = True
    ) -> None:
        self.config = {"bootstrap.servers": bootstrap}
        self.n = messages
        self.repeats = repeats
        #: whether the Spark row runs its warm-up jobs first (``--no-warm-up``)
        self.warm_up = warm_up

    measure = staticmethod(measure)

    # -- helpers ---------------------------------------------------------------------------
    def topic(self, partitions: int = 1) -> str:
        name = f"bench-{uid()}"
        ensure_topics(self.config, [TopicPlan(name, name, partitions)])
        return name

    def fill(
        self, topic: str, n: int, size: int, headers: Callable[[int], list[Any]] | None = None
    ) -> None:
        p = RawProducer(
            {**self.config, "linger.ms": 20, "enable.idempotence": True, "batch.size": 1_000_000}
        )
        body = b"x" * size
        for i in range(n):
            while True:
                try:
                    p.produce(topic, body, headers=headers(i) if headers else None)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10_000 == 0:
                p.poll(0)
        p.flush(60)

    # -- consumer --------------------------------------------------------------------------
    def raw_consume(
        self,
        topic: str,
        n: int,
        batch: int,
        fail_every: int | None = None,
        group_config: Mapping[str, Any] | None = None,
    ) -> Run:
        """A careful raw confluent-kafka loop: ``consume(500)``, an error check per record,
        the no-op per batch of ``batch`` records, offsets stored per fetch and committed in
        the background, and the adapter's fetch settings (:data:`RAW_FETCH_SETTINGS`:
        without them a loop slower than the fetcher stalls for a second at a time); with
        ``fail_every`` it also produces the failed record and the rest of its batch to a
        side topic (the work ``ack_index`` implies), each with the headers our copies carry
        (:class:`RawCopyHeaders`); ``group_config`` is added to the consumer's config (a
        group protocol)."""

        def work() -> tuple[int, float, float]:
            c = Consumer(
                {
                    **self.config,
                    "group.id": f"raw-{uid()}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.offset.store": False,
                    "enable.auto.commit": True,
                    **RAW_FETCH_SETTINGS,
                    **(group_config or {}),
                }
            )
            side = (
                RawProducer({**self.config, "enable.idempotence": True, "linger.ms": 5})
                if fail_every
                else None
            )
            side_topic = topic + "-retry"
            copy_headers = RawCopyHeaders(topic, f"raw-{uid()}", side_topic)
            c.subscribe([topic])
            seen, first = 0, 0.0
            while seen < n:
                msgs = c.consume(500, 1.0)
                if not msgs:
                    continue
                if not first:
                    first = time.perf_counter()
                records = [m for m in msgs if m.error() is None]
                for i in range(0, len(records), batch):
                    chunk = records[i : i + batch]
                    noop_listener(chunk)  # the same per-batch call our consumer makes
                    if side is not None and fail_every is not None:
                        before = seen + i
                        for j in range(len(chunk)):
                            if (before + j + 1) % fail_every == 0:
                                for failed in chunk[j:]:  # like ack_index: the rest goes back
                                    side.produce(
                                        side_topic, failed.value(), headers=copy_headers(failed)
                                    )
                                break
                seen += len(records)
                c.store_offsets(message=msgs[-1])
                if side is not None:
                    side.poll(0)
            last = time.perf_counter()
            if side is not None:
                side.flush(30)
            c.close()
            return seen, first, last

        if fail_every:
            ensure_topics(self.config, [TopicPlan(topic + "-retry", topic + "-retry", 1)])
        return measure(work)

    def ours_consume(
        self,
        topic: str,
        n: int,
        batch: int,
        fail_every: int | None = None,
        block_s: float = 0.0,
        *,
        group_config: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Run:
        counts: list[int] = []  # one entry per listener call (list.append is atomic)
        first = [0.0]
        ok = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        calls = itertools.count(1)

        def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
            if block_s:
                time.sleep(block_s)
            if not first[0]:
                first[0] = time.perf_counter()
            counts.append(len(msgs))
            if fail_every:
                if batch == 1:
                    # one record a call: its position is the call's, counted as the raw loop
                    # counts its records (next() on a count is atomic: no lock for workers)
                    if next(calls) % fail_every == 0:
                        ctx.ack_index = -1
                    return ok
                # the raw loop's pattern (every ``fail_every``-th record fails): the topic has
                # one partition filled from offset 0, so a record's offset is its count, and
                # no lock is needed to keep a count across worker threads
                for i, msg in enumerate(msgs):
                    if (msg.queue_offset + 1) % fail_every == 0:
                        ctx.ack_index = i - 1
                        return ok
            return ok

        group = f"ours-{uid()}"
        consumer = PushConsumer(
            {
                **self.config,
                "group.id": group,
                "auto.offset.reset": "earliest",
                **(group_config or {}),
            },
            consume_message_batch_max_size=batch,
            delay_levels=BENCH_LEVELS,
            namespace="bench",
            partitions=1,
            **options,
        )
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)

        return measure(partial(run_until_counted, consumer, n, counts, first))


class RawCopyHeaders:
    """The headers a careful raw loop puts on a retry copy: the 13 names and values a
    first send-back of ours carries (message id, origin id, topic, count, group, where
    it was read, born time, failure, where it goes back to, delay level, due time), the
    values that are the same for every copy encoded once.  Without them the raw baseline
    of the failure rows would produce smaller records than ours does (no headers at all).
    """

    __slots__ = ("_fixed", "_tail", "_topic")

    def __init__(self, topic: str, group: str, back_to: str) -> None:
        self._topic = topic
        self._fixed = [
            ("RETRY_TOPIC", topic.encode()),
            ("RECONSUME_TIME", b"1"),
            ("RMQ_GROUP", group.encode()),
        ]
        self._tail = [
            ("RMQ_FAILURE_TYPE", b"NotAcknowledged"),
            ("RMQ_FAILURE_MESSAGE", b"CONSUME_SUCCESS with ack_index=-1"),
            ("REAL_TOPIC", back_to.encode()),
            ("DELAY", b"3"),
        ]

    def __call__(self, record: Any) -> list[tuple[str, str | bytes | None]]:
        partition, offset = record.partition(), record.offset()
        msg_id = b"%s:%d:%d" % (self._topic.encode(), partition, offset)
        born = record.timestamp()[1]
        return [
            ("UNIQ_KEY", msg_id),
            ("ORIGIN_MESSAGE_ID", msg_id),
            *self._fixed,
            ("RMQ_ORIGIN_PARTITION", b"%d" % partition),
            ("RMQ_ORIGIN_OFFSET", b"%d" % offset),
            ("RMQ_ORIGIN_BORN_MS", b"%d" % born),
            *self._tail,
            ("RMQ_DUE_MS", b"%d" % (time.time_ns() // 1_000_000 + 3_000)),
        ]


def run_until_counted(
    consumer: Any, n: int, counts: list[int], first: list[float]
) -> tuple[int, float, float]:
    """Start ``consumer``, wait until its listener appended ``n`` to ``counts`` (batch sizes;
    ``first[0]``: when the first batch arrived), shut it down: (count, first, last)."""
    consumer.start()
    total, pos, deadline = 0, 0, time.monotonic() + 600
    while total < n and time.monotonic() < deadline:
        time.sleep(0.0005)
        fresh = counts[pos:]
        pos += len(fresh)
        total += sum(fresh)
    last = time.perf_counter()
    consumer.shutdown()
    return total, first[0], last
