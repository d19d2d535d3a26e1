"""Listeners slower than ``max.poll.interval.ms`` and slower than ``consume_timeout``.

What the README promises, checked on a real broker:

* listeners run on worker threads; the poll loop keeps calling ``consume()`` (at least every
  second, also while every worker is busy), so a listener slower than
  ``max.poll.interval.ms`` neither gets the member kicked out of its group nor causes a
  rebalance: the slow message completes once, nothing is redelivered, offsets commit;
* a listener call running past ``consume_timeout`` counts as ``RECONSUME_LATER``: its
  message is sent back (retried at level ``3 + reconsume_times``) while the slow call is
  still running, and the result that arrives later is ignored (no second send-back);
  nothing is lost and the consumer keeps consuming.

``max.poll.interval.ms`` is set to 7 s (librdkafka wants it ≥ ``session.timeout.ms``, whose
broker minimum is 6 s) and the slow listener sleeps 9-10 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from adapter import ConsumeConcurrentlyStatus, Message

try:
    from tests.support.rel_common import now_ms, wait_until
except ModuleNotFoundError:  # pragma: no cover - if this folder becomes a package
    from tests.reliability.rel_common import now_ms, wait_until

from tests.support.consumer_helpers import (
    RecordingListener,
    read_dlq_raw,
    retry_kafka_topic,
    running_pair,
    send,
)

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
MAX_POLL_MS = 7000
SLOW_S = 10.0
GROUP_TIMING = {
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "max.poll.interval.ms": str(MAX_POLL_MS),
    "auto.commit.interval.ms": "200",
}


@pytest.fixture
def membership_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger="adapter.consumer")
    yield caplog


def _rebalances(caplog: pytest.LogCaptureFixture, group: str) -> list[str]:
    """Revocations and losses the consumer logged (an assignment alone is the first join)."""
    messages = [r.getMessage() for r in caplog.records if r.name == "adapter.consumer"]
    return [
        m
        for m in messages
        if m.startswith(f"{group} revoked") or " lost" in m or "maximum poll interval" in m
    ]


def _retry_settled(pair: Any, records: int) -> bool:
    """The retry topic holds ``records`` records and the group committed past each (its end
    offset also counts the ScheduleService's transaction markers)."""
    got = pair.retry_records()
    if len(got) != records:
        return False
    committed = pair.committed(retry_kafka_topic(pair.group))
    return all(committed.get(r.partition, -1) > r.offset for r in got)


def _describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=15)


def _sends(bootstrap: str, topic: str, bodies: list[str]) -> None:
    send(bootstrap, [Message(topic=topic, body=b.encode(), sharding_key=b) for b in bodies])


@pytest.mark.timeout(120)
def test_listener_slower_than_max_poll_interval_keeps_the_member_and_completes(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, membership_log: Any
) -> None:
    """One worker, busy for longer than ``max.poll.interval.ms`` with messages queued behind
    it: the member stays in the group (Stable, same member), the slow message completes
    exactly once, the queued ones after it, and every offset is committed."""
    topic = kafka_topic_factory("rel-slow-poll", partitions=2)
    slow_started = threading.Event()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].body == b"slow":
            slow_started.set()
            time.sleep(SLOW_S)
        return OK

    listener = RecordingListener(decide)
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        config=GROUP_TIMING,
        consume_thread_max=1,
        consume_timeout=60.0,
        partitions=2,
    ) as pair:
        _sends(kafka_bootstrap_servers, topic, ["slow"])
        wait_until(slow_started.is_set, 30, "the slow listener call")
        started = time.monotonic()
        before = _describe(kafka_bootstrap_servers, pair.group)
        queued = [f"q-{i:03d}" for i in range(50)]  # wait behind the one busy worker
        _sends(kafka_bootstrap_servers, topic, queued)
        # past max.poll.interval.ms into the slow call: still the same, stable member
        wait_until(lambda: time.monotonic() - started > MAX_POLL_MS / 1000 + 1.0, 30, "time")
        during = _describe(kafka_bootstrap_servers, pair.group)
        assert during.state == ConsumerGroupState.STABLE, during.state
        assert [m.member_id for m in during.members] == [m.member_id for m in before.members]
        assert listener.running == 1 and len(listener) == 1, "the slow call is still running"
        wait_until(lambda: len(listener) == 1 + len(queued), 60, "the queued messages")
        wait_until(lambda: pair.committed() == pair.end_offsets(), 30, "every offset committed")
        pair.consumer.check_alive()
        rebalances = _rebalances(membership_log, pair.group)  # (shutdown revokes, later)
    counts = listener.count()
    assert counts == {b.encode(): 1 for b in ["slow", *queued]}, "each exactly once"
    stats = pair.topic_stats()
    assert (stats.consume_ok, stats.timeouts, stats.sent_back) == (1 + len(queued), 0, 0)
    assert pair.retry_records() == [] and pair.dlq() == []
    assert rebalances == []


@pytest.mark.timeout(120)
def test_listener_past_consume_timeout_is_retried_while_still_running_and_nothing_is_lost(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, membership_log: Any
) -> None:
    """Three listener calls sleep 9 s, past ``consume_timeout`` (2 s) and past
    ``max.poll.interval.ms``, in a stream of other messages: each slow message is sent back
    once and its retry handled (on the free worker) before the slow call even returns; the
    late results are ignored; the other messages flow meanwhile; nothing is lost."""
    topic = kafka_topic_factory("rel-slow-timeout", partitions=2)
    slow = {"slow-a", "slow-b", "slow-c"}
    returned_at: dict[str, int] = {}
    lock = threading.Lock()

    def decide(msgs: list[Any], ctx: Any) -> Any:
        m = msgs[0]
        text = m.body.decode()
        if text in slow and m.reconsume_times == 0:
            time.sleep(SLOW_S - 1)
            with lock:
                returned_at[text] = now_ms()
        return OK

    listener = RecordingListener(decide)
    others = [f"o-{i:03d}" for i in range(60)]
    with running_pair(
        kafka_bootstrap_servers,
        topic,
        listener,
        config=GROUP_TIMING,
        consume_thread_max=4,
        consume_timeout=2.0,
        partitions=2,
    ) as pair:
        _sends(kafka_bootstrap_servers, topic, sorted(slow))
        wait_until(lambda: listener.running == 3, 30, "three slow calls running")
        sent_others = now_ms()
        _sends(kafka_bootstrap_servers, topic, others)
        # the fourth worker handles the others and the retries while three calls sleep
        wait_until(
            lambda: all(len(listener.of(s)) == 2 for s in slow), 30, "the slow messages' retries"
        )
        with lock:
            assert returned_at == {}, "retried only after the slow calls returned"
        wait_until(lambda: all(listener.of(o) for o in others), 30, "the other messages")
        assert now_ms() - sent_others < (SLOW_S - 1) * 1000, "others waited for the slow calls"
        wait_until(lambda: len(returned_at) == 3, 30, "the late results")
        wait_until(lambda: listener.returned == len(listener), 30, "every call returned")
        wait_until(
            lambda: pair.committed() == pair.end_offsets() and _retry_settled(pair, 3),
            30,
            "every offset committed",
        )
        pair.consumer.check_alive()
        stats = pair.topic_stats()
        rebalances = _rebalances(membership_log, pair.group)  # (shutdown revokes, later)
    for s in slow:
        assert [d.reconsume_times for d in listener.of(s)] == [0, 1], s
        retry = listener.of(s)[1]
        assert retry.properties.get("RMQ_FAILURE_TYPE") == "ConsumeTimeout"
    for o in others:
        assert [d.reconsume_times for d in listener.of(o)] == [0], o
    assert stats.timeouts == 3
    assert stats.sent_back == 3, "one send-back per timed-out call; the late OKs ignored"
    assert (stats.consume_ok, stats.consume_failed) == (len(others) + 3, 3)
    assert len(pair.retry_records()) == 3
    assert read_dlq_raw(pair.conf, pair.group) == []
    assert rebalances == []
    assert any("late result" in r.getMessage() for r in membership_log.records)
