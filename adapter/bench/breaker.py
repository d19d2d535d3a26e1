"""The outage scenario: a listener whose dependency is down for a while, with and without a
circuit breaker.  One job: run it once against a broker and say what reached the retry
ladder (the integration test asserts on it; ``python -m adapter.bench.breaker`` prints the
figures for the README).

Messages are produced at a steady rate during the outage; the listener fails every call
until the outage ends, then succeeds.  Measured: messages sent back (acknowledged copies),
records written to the retry and delay topics, dead letters, listener calls, and how long
after recovery the last message succeeded.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from adapter import CircuitBreaker, PushConsumer, ScheduleService
from adapter.bench.harness import Bench, Scenario
from adapter.core import naming
from adapter.core.breaker import CircuitChange
from adapter.core.delay import DelayLevels
from adapter.core.listener import ConsumeConcurrentlyContext
from adapter.core.message import MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus

__all__ = ["OutageResult", "main", "outage"]

_OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


@dataclass
class OutageResult:
    """What one outage run did (see the module docstring)."""

    breaker: bool
    messages: int
    outage_s: float
    sent_back: int = 0
    retry_records: int = 0
    delay_records: int = 0
    dead_letters: int = 0
    calls: int = 0
    succeeded: int = 0
    #: seconds from the end of the outage until the last message succeeded (None: not all)
    all_ok_after_s: float | None = None
    changes: list[str] = field(default_factory=list)

    def row(self) -> str:
        after = "-" if self.all_ok_after_s is None else f"{self.all_ok_after_s:.1f} s"
        return (
            f"breaker={'on' if self.breaker else 'off'} messages={self.messages} "
            f"outage={self.outage_s:g}s sent_back={self.sent_back} "
            f"retry+delay records={self.retry_records + self.delay_records} "
            f"(retry {self.retry_records}, delay {self.delay_records}) "
            f"dlq={self.dead_letters} listener calls={self.calls} "
            f"succeeded={self.succeeded} all ok {after} after recovery"
        )


class _Dependency:
    """The listener: every call fails until ``recover_at`` (a ``ConnectionError``)."""

    def __init__(self) -> None:
        self.recover_at = float("inf")
        self.ok: set[bytes] = set()
        self.last_ok = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(
        self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        now = time.monotonic()
        with self._lock:
            self.calls += 1
        if now < self.recover_at:
            raise ConnectionError("dependency down")
        with self._lock:
            for m in msgs:
                if m.body not in self.ok:
                    self.ok.add(m.body)
                    self.last_ok = now
        return _OK


def _ends(conf: dict[str, Any], topics: list[str]) -> int:
    """Records written to ``topics`` (their end offsets; a missing topic counts 0)."""
    consumer = Consumer({**conf, "group.id": f"probe-{uuid.uuid4().hex[:8]}"})
    try:
        meta = consumer.list_topics(timeout=10)
        total = 0
        for topic in topics:
            t = meta.topics.get(topic)
            if t is None or t.error is not None:
                continue
            for p in t.partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                total += max(0, high)
        return total
    finally:
        consumer.close()


def _create_topic(conf: dict[str, Any], topic: str, partitions: int) -> None:
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


@contextmanager
def _running(
    conf: dict[str, Any], consumer: PushConsumer, service: ScheduleService
) -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(service)
        stack.enter_context(consumer)
        yield


def outage(
    bootstrap: str,
    *,
    breaker: CircuitBreaker | None,
    messages: int = 20_000,
    outage_s: float = 60.0,
    settle_s: float = 30.0,
    partitions: int = 3,
    delay_levels: DelayLevels | str | None = None,
    batch_size: int = 1,
) -> OutageResult:
    """Send ``messages`` evenly over ``outage_s`` while the listener fails every call, then
    let it succeed and wait up to ``settle_s`` for every message to succeed."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    tag = uuid.uuid4().hex[:10]
    topic, group, ns = f"outage-{tag}", f"outage-{tag}", f"o{tag}"
    kafka_topic = naming.to_kafka(topic)
    levels = DelayLevels.coerce(delay_levels)
    _create_topic(conf, kafka_topic, partitions)
    result = OutageResult(breaker=breaker is not None, messages=messages, outage_s=outage_s)
    if breaker is not None:
        user = breaker.on_circuit_change

        def changed(change: CircuitChange) -> None:
            result.changes.append(f"{change.old.value}->{change.new.value} ({change.reason})")
            if user is not None:
                user(change)

        breaker = CircuitBreaker(
            failure_rate_threshold=breaker.failure_rate_threshold,
            window_s=breaker.window_s,
            minimum_batches=breaker.minimum_batches,
            open_s=breaker.open_s,
            half_open_probes=breaker.half_open_probes,
            trip_on=breaker.trip_on,
            on_circuit_change=changed,
        )
    listener = _Dependency()
    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        namespace=ns,
        delay_levels=levels,
        partitions=partitions,
        consume_message_batch_max_size=batch_size,
        circuit_breaker=breaker,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        shutdown_await=10.0,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    service = ScheduleService(conf, delay_levels=levels, namespace=ns, partitions=partitions)
    producer = Producer({**conf, "linger.ms": 5})
    with _running(conf, consumer, service):
        start = time.monotonic()
        listener.recover_at = start + outage_s
        for i in range(messages):
            due = start + outage_s * i / messages
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.produce(kafka_topic, value=b"%d" % i, key=b"%d" % i)
            producer.poll(0)
        producer.flush(30)
        deadline = listener.recover_at + settle_s
        while time.monotonic() < deadline and len(listener.ok) < messages:
            time.sleep(0.1)
        if len(listener.ok) >= messages:
            result.all_ok_after_s = max(0.0, listener.last_ok - listener.recover_at)
        result.succeeded = len(listener.ok)
        result.calls = listener.calls
        result.sent_back = sum(st.sent_back for st in consumer.stats().values())
    retry = naming.to_kafka(naming.retry_topic(group))
    delays = [
        naming.to_kafka(naming.schedule_topic(level, levels, ns)) for level in levels.levels()
    ]
    result.retry_records = _ends(conf, [retry])
    result.delay_records = _ends(conf, delays)
    result.dead_letters = _ends(conf, [naming.to_kafka(naming.dlq_topic(group))])
    return result


def breaker_scenarios(
    bench: Bench, *, messages: int = 5_000, outage_s: float = 20.0
) -> list[Scenario]:
    """The registry row: the same outage with the breaker off and on; what reached the retry
    ladder per message sent (the breaker's job is to keep that near zero)."""
    rows = []
    for on in (False, True):
        result = outage(
            str(bench.config["bootstrap.servers"]),
            breaker=CircuitBreaker() if on else None,
            messages=messages,
            outage_s=outage_s,
            settle_s=outage_s,
        )
        sc = Scenario(
            f"100% failing for {outage_s:g} s then recovered, breaker {'on' if on else 'off'} "
            f"({messages} msgs)"
        )
        sc.extra = {
            "retry_records_per_msg": round(
                (result.retry_records + result.delay_records) / messages, 3
            ),
            "sent_back": result.sent_back,
            "dead_letters": result.dead_letters,
            "all_ok_after_s": result.all_ok_after_s,
        }
        rows.append(sc)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run the outage with and without the breaker on an embedded broker (or
    ``--bootstrap``) and print one row each."""
    parser = argparse.ArgumentParser(prog="python -m adapter.bench.breaker")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--only", choices=["on", "off"], default=None)
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from adapter.embedded.broker import EmbeddedKafka  # on use: starts a JVM

            broker = stack.enter_context(EmbeddedKafka(f"bench-breaker-{os.getpid()}"))
            bootstrap = broker.bootstrap_servers
        for on in (True, False):
            if args.only is not None and (args.only == "on") != on:
                continue
            res = outage(
                bootstrap,
                breaker=CircuitBreaker() if on else None,
                messages=args.messages,
                outage_s=args.outage,
                settle_s=args.settle,
            )
            print(res.row(), flush=True)
            for change in res.changes:
                print("   ", change)


if __name__ == "__main__":
    main()
