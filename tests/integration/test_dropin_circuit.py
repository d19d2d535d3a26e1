"""The circuit breaker of the confluent-kafka drop-in (``adapter.kafka.Consumer``) on a real
broker, and a breaker's state in ``rmq-kafka group progress`` (drop-in and PushConsumer).

The drop-in run: a poll loop whose dependency is down for a while, a backlog waiting.  With
the breaker: what is sent back before it opens stays under 1 % of the backlog, nothing
reaches the DLQ, nothing is lost, and every message succeeds soon after recovery; meanwhile
``group progress`` shows the member's breaker ``open``, then ``closed``.  The short ladder
of tests/support (first retry after 300 ms) and a ScheduleService bring the few copies back.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from adapter import CircuitBreaker, PushConsumer, ScheduleService
from adapter.core.listener import ConsumeConcurrentlyContext
from adapter.core.message import MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus
from adapter.kafka import Consumer
from tests.support.consumer_helpers import (
    LEVELS,
    committed_offsets,
    delay_records,
    end_offsets,
    new_group,
    new_ids,
    new_namespace,
    produce,
    read_dlq_raw,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MESSAGES = 2_000
OUTAGE_S = 10.0
SETTLE_S = 20.0


def progress(bootstrap: str, group: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "group", "progress", "--group", group,
         "-b", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out
    return out.stdout


def test_the_dropin_with_a_breaker_holds_through_an_outage_and_shows_it_in_progress(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("dropin-circuit", partitions=2)
    ids = new_ids(MESSAGES)
    produce(bootstrap, topic, ids)
    group, ns = new_group(), new_namespace()
    conf = {"bootstrap.servers": bootstrap}
    ok: set[str] = set()
    failures = 0
    shown: dict[str, str] = {}
    with (
        ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1),
        Consumer(
            {**conf, "group.id": group, "auto.offset.reset": "earliest"},
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
            circuit_breaker=CircuitBreaker(open_s=1.0),
        ) as c,
    ):
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.1) is None and c.assignment(), what="an assignment")
        recover_at = time.monotonic() + OUTAGE_S
        last_ok = 0.0
        deadline = recover_at + SETTLE_S
        while time.monotonic() < deadline and len(ok) < MESSAGES:
            msg = c.poll(0.1)
            circuit = c.circuit()
            assert circuit is not None
            if "open" not in shown and circuit["state"] == "open":
                time.sleep(0.5)  # the status is on its way (published by the last poll)
                shown["open"] = progress(bootstrap, group)
            if msg is None or msg.error():
                continue
            if time.monotonic() < recover_at:
                failures += 1
                c.reconsume_later(msg, error=ConnectionError("dependency down"))
            else:
                ok.add(msg.value().decode())
                last_ok = time.monotonic()
        assert ok == set(ids), f"{len(ok)} of {MESSAGES} succeeded"  # nothing lost
        assert last_ok - recover_at <= 10.0  # all soon after recovery (open_s + catch-up)
        circuit = c.circuit()
        assert circuit is not None and circuit["state"] == "closed", circuit
        assert circuit["held_messages"] == 0
        shown["closed"] = progress(bootstrap, group)
        # nothing is committed past a message until it was handled
        wait_until(
            lambda: (
                c.poll(0.05) is None
                and committed_offsets(conf, group, topic) == end_offsets(conf, topic)
            ),
            what="every offset committed",
        )
    sent_back = sum(len(records) for records in delay_records(conf, ns).values())
    # it opened after minimum_batches (10) failures: 9 went back, then only held probes failed
    assert 10 <= failures < 100, failures
    assert 0 < sent_back <= MESSAGES // 100, sent_back  # the rest was held, not sent back
    assert read_dlq_raw(conf, group) == []
    assert "circuit open since" in shown["open"], shown["open"]
    assert "message(s) held" in shown["open"]
    assert "circuit closed since" in shown["closed"], shown["closed"]


def test_a_push_consumer_shows_its_breaker_in_group_progress(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("push-circuit", partitions=1)
    group, ns = new_group(), new_namespace()
    down = threading.Event()
    down.set()
    ok: set[bytes] = set()

    def listener(
        msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        if down.is_set():
            raise ConnectionError("dependency down")
        ok.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        namespace=ns,
        delay_levels=LEVELS,
        partitions=1,
        # open long enough to be read open (a half-open probe after 1 s was read instead)
        circuit_breaker=CircuitBreaker(trip_on=(ConnectionError,), open_s=5.0),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    ids = new_ids(20)
    with consumer:
        produce(bootstrap, topic, ids)
        wait_until(lambda: (consumer.circuit() or {}).get("state") == "open", what="open")
        time.sleep(1.5)  # the status is published within a second of the change
        opened = progress(bootstrap, group)
        down.clear()
        wait_until(lambda: len(ok) == len(ids), what="every message succeeded")
        wait_until(lambda: (consumer.circuit() or {}).get("state") == "closed", what="closed")
        time.sleep(1.5)
        closed = progress(bootstrap, group)
    assert "circuit open since" in opened, opened
    assert "circuit closed since" in closed, closed
