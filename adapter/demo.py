"""The end-to-end demo: RocketMQ's whole retry ladder on a real (embedded) Kafka broker.

A listener fails some messages; the ScheduleService redelivers them through the delay
levels with rising ``reconsume_times``; a batch is partly acknowledged with ``ack_index``;
a poison message ends in ``%DLQ%<group>`` after ``max_reconsume_times + 1`` deliveries;
another is sent to the DLQ at once with ``delay_level_when_next_consume = -1``.  The demo
checks the outcome and exits non-zero if anything is missing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

from adapter.clients.producer import Producer
from adapter.clients.push.push_consumer import ConsumeConcurrentlyContext, PushConsumer
from adapter.constants import TRACE_TOPIC
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.message import Message, MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.dlq import read_dlq
from adapter.services.schedule import ScheduleService

DELAY_LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"
MAX_RECONSUME = 3
BATCH = 4


class DemoListener:
    """Handles a batch message by message, the way RocketMQ recommends: at the first
    failure it sets ``ack_index`` to the message before and returns CONSUME_SUCCESS, so
    the messages before are done and the rest of the batch is retried.

    ok-*: succeed; flaky-*: fail until their 2nd retry; batch-cut: fail on first delivery;
    poison: always fail (its own MAX_RECONSUME_TIMES header is 3); dlq-now: straight to
    the DLQ with ``delay_level_when_next_consume = -1``.
    """

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.lock = threading.Lock()
        self.print_lock = threading.Lock()
        self.deliveries: Counter[str] = Counter()
        self.done: set[str] = set()

    def say(self, text: str) -> None:
        """One whole line at a time: listener threads and the main thread never interleave."""
        line = f"[{time.monotonic() - self.t0:6.2f}s] {text}\n"
        with self.print_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def consume_message(self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> Any:
        bodies = [m.body.decode() for m in msgs]
        with self.lock:
            self.deliveries.update(bodies)
        where = f"{msgs[0].topic}[{ctx.message_queue.queue_id}]"
        self.say(
            f"batch from {where}: "
            f"{list(zip(bodies, [m.reconsume_times for m in msgs], strict=True))}"
        )
        for i, m in enumerate(msgs):
            body = bodies[i]
            if body == "dlq-now":
                ctx.delay_level_when_next_consume = -1
                ctx.ack_index = i - 1
                self.say("  dlq-now: delay_level_when_next_consume=-1 -> straight to the DLQ")
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            failed = (
                body == "poison"
                or (body.startswith("flaky") and m.reconsume_times < 2)
                or (body.startswith("batch-cut") and m.reconsume_times == 0)
            )
            if failed:
                ctx.ack_index = i - 1
                self._mark(msgs[:i])
                self.say(
                    f"  {body} failed (reconsume_times={m.reconsume_times}): ack_index={i - 1}, "
                    f"done {bodies[:i]}, retry {bodies[i:]}"
                )
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        self._mark(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def _mark(self, msgs: list[MessageExt]) -> None:
        with self.lock:
            self.done.update(m.body.decode() for m in msgs)


def run_demo(bootstrap: str | None = None) -> int:
    """Run the demo against ``bootstrap`` or, when none is given, an embedded broker that
    is started for it (and stopped afterwards unless it was already running)."""
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        return _run(bootstrap)
    from adapter.embedded import EmbeddedKafka

    broker = EmbeddedKafka("demo")
    was_running = broker.is_running()
    print("starting the embedded Kafka broker (KRaft, single node) ...", flush=True)
    try:
        return _run(broker.start())
    finally:
        if not was_running:
            broker.stop()


def _run(bootstrap: str) -> int:
    print(f"bootstrap.servers = {bootstrap}")
    config = {"bootstrap.servers": bootstrap}
    run = uuid.uuid4().hex[:6]
    topic, group, ns = f"demo-orders-{run}", f"demo-group-{run}", f"demo{run}"
    ensure_topics(config, [TopicPlan(topic, topic, 2)])
    print(f"topic {topic}, group {group}, delay levels {DELAY_LEVELS}")
    print(
        "group max_reconsume_times 16; "
        f"the poison message carries MAX_RECONSUME_TIMES={MAX_RECONSUME}"
    )
    print(
        f"retry topic {naming.retry_topic(group)} "
        f"-> Kafka {naming.to_kafka(naming.retry_topic(group))}"
    )
    print(
        f"DLQ topic   {naming.dlq_topic(group)} -> Kafka {naming.to_kafka(naming.dlq_topic(group))}"
    )

    t0 = time.monotonic()
    listener = DemoListener(t0)
    print(
        f"consume traces -> {TRACE_TOPIC} (Avro; read them with "
        "'rmq-kafka analytics stream --available-now --sink console')"
    )
    service = ScheduleService(
        config, delay_levels=DELAY_LEVELS, namespace=ns, partitions=1, trace_topic=TRACE_TOPIC
    )
    consumer = PushConsumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=DELAY_LEVELS,
        namespace=ns,
        consume_message_batch_max_size=BATCH,
        partitions=1,
        trace_topic=TRACE_TOPIC,
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    bodies = ["ok-1", "ok-2", "batch-cut-a", "ok-3", "flaky-1", "poison", "ok-4", "dlq-now"]
    levels = DelayLevels.parse(DELAY_LEVELS).max_level
    with service, consumer, Producer(config) as producer:
        # send once the service owns every delay-level partition and the consumer its topic
        # and retry topic: on a cold broker the first assignment takes seconds, which would
        # otherwise show up as seconds of "lateness"
        _wait_for(
            lambda: len(service.assignment) >= levels and len(consumer.assignment) >= 3,
            timeout_s=60,
        )
        for body in bodies:
            producer.send(
                Message(
                    topic=topic,
                    body=body.encode(),
                    keys=[f"key-{body}"],
                    tags="Order",
                    # dlq-now alone on partition 1, so its batch holds only itself
                    partition=1 if body == "dlq-now" else 0,
                    properties={"MAX_RECONSUME_TIMES": str(MAX_RECONSUME)}
                    if body == "poison"
                    else {},
                )
            )
        listener.say(f"sent {len(bodies)} messages")
        expected_done = {b for b in bodies if b not in ("poison", "dlq-now")}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with listener.lock:
                finished = (
                    expected_done <= listener.done
                    and listener.deliveries["poison"] >= MAX_RECONSUME + 1
                )
            if finished and sum(s.dead_lettered for s in consumer.stats().values()) >= 2:
                break
            time.sleep(0.1)
        stats = consumer.stats()
        lateness = service.stats.lateness_ms()
    dead = read_dlq(config, group)
    print("\n--- dead letters (%DLQ%" + group + ") ---")
    for entry in dead:
        print(
            f"{entry.message.body.decode()}: reason={entry.reason} origin={entry.origin_topic} "
            f"reconsume_times={entry.message.reconsume_times} "
            f"failure={entry.failure_type}: {entry.failure_message}"
        )
    print("\n--- consumer stats ---")
    for t, s in stats.items():
        print(
            f"{t}: ok={s.consume_ok} failed={s.consume_failed} sent_back={s.sent_back} "
            f"dlq={s.dead_lettered} rt_avg={s.consume_rt_avg_ms:.2f}ms"
        )
    print(
        f"ScheduleService: forwarded={service.stats.forwarded} early={service.stats.early} "
        f"lateness p50={lateness.p50}ms p99={lateness.p99}ms"
    )
    problems = []
    if not expected_done <= listener.done:
        problems.append(f"not consumed: {sorted(expected_done - listener.done)}")
    if listener.deliveries["poison"] != MAX_RECONSUME + 1:
        problems.append(
            f"poison delivered {listener.deliveries['poison']} times, expected {MAX_RECONSUME + 1}"
        )
    if sorted(e.message.body for e in dead) != [b"dlq-now", b"poison"]:
        problems.append(f"DLQ holds {[e.message.body for e in dead]}")
    if service.stats.early:
        problems.append(f"{service.stats.early} message(s) redelivered early")
    print(
        "\nRESULT:",
        "OK - every message consumed or dead-lettered, nothing lost"
        if not problems
        else f"FAILED {problems}",
    )
    return 0 if not problems else 1


def _wait_for(cond: Any, *, timeout_s: float) -> None:
    """Wait (bounded) until ``cond()``; the demo goes on either way and reports what it saw."""
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
