"""SimpleConsumer(backend="share") on a real broker's share groups (docs/semantics.md §4.13.1).

Tests whose rule holds on both backends run on both (``[classic]``, ``[share]``); the others
are about what only share groups do.

Each test uses its own topic and group.  Group locks are short (3-4 s; the embedded broker
allows 1 s, its ``group.share.min.record.lock.duration.ms``), so expiries take seconds.
A new member's first fetch takes a few seconds (the group join): deadlines allow for it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from adapter import ConfigError, InvalidInputError, Message
from adapter.clients.share.poll_state import PollState
from adapter.clients.simple.simple_consumer import (
    MessageView,
    SimpleConsumer,
    SimpleConsumerBackend,
)
from adapter.errors import ClientLoopError, InvalidReceiptHandleError
from tests.support.clocks import SkippingClock
from tests.support.consumer_helpers import new_group, read_dlq_raw, send, wait_until
from tests.support.share_procs import ShareConsumerProcess
from tests.support.simple_backends import (
    BACKENDS,
    EXPIRED,
    LOCK_S,
    share_backend_unsupported,
    simple_consumer,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        share_backend_unsupported(),
        reason="the share backend needs Kafka 4.3+ (per-group share.delivery.count.limit)",
    ),
]

#: The kill test's group session (``share.session.timeout.ms``).
SESSION_S = 6.0


def share(
    bootstrap: str, topic: str | None, group: str, backend: str = "share", **options: Any
) -> SimpleConsumer:
    """A started consumer (share backend unless told)."""
    options.setdefault("await_duration", 1.0)
    return simple_consumer(backend, bootstrap, topic, group, **options).start()


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Set configs of a share group (before its first member joins)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def bodies(bootstrap: str, topic: str, n: int, prefix: str = "m") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    send(bootstrap, [Message(topic=topic, body=i.encode()) for i in ids])
    return ids


def receive_until(
    sc: SimpleConsumer, n: int, invisible: float, timeout: float = 30.0, *, ack: bool = False
) -> list[MessageView]:
    """Receive until ``n`` messages came.  Unless each is acknowledged (``ack``), a later
    poll waits for the earlier ones' invisible duration: receive no more than one poll."""
    out: list[MessageView] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"received {len(out)} of {n}"
        got = sc.receive(32, invisible)
        if ack:
            for m in got:
                sc.ack(m)
        out.extend(got)
    return out


def test_backend_choice() -> None:
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    assert type(SimpleConsumer(conf, "g")) is SimpleConsumer
    sc = SimpleConsumer(conf, "g", backend="share")
    assert sc.backend is SimpleConsumerBackend.SHARE
    assert isinstance(sc, SimpleConsumer)
    assert sc.max_delivery_attempts == 9
    assert sc.delivery_limit == 10
    with pytest.raises(ConfigError):
        SimpleConsumer(conf, "g", backend="pop")
    with pytest.raises(ConfigError):
        SimpleConsumer(conf, "g", backend="share", max_unacked_mesages=3)  # type: ignore[call-arg]


def test_six_consumers_on_two_partitions_all_get_work_and_each_message_is_acked_once(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("share-six", partitions=2)
    group = new_group()
    consumers = [share(kafka_bootstrap_servers, topic, group, lock_duration=15.0) for _ in range(6)]
    acked: dict[int, list[str]] = defaultdict(list)
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(i: int, sc: SimpleConsumer) -> None:
        try:
            while not stop.is_set():
                for m in sc.receive(2, 10):
                    time.sleep(0.02)  # some work, so one member cannot take everything
                    sc.ack(m)
                    acked[i].append(m.body.decode())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, sc)) for i, sc in enumerate(consumers)]
    try:
        for t in threads:
            t.start()
        time.sleep(6)  # every member has joined (a join takes a few seconds)
        ids = bodies(kafka_bootstrap_servers, topic, 300)
        wait_until(
            lambda: sum(len(v) for v in acked.values()) >= len(ids), 60, "every message acked"
        )
        time.sleep(LOCK_S)  # nothing comes back
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for sc in consumers:
            sc.shutdown()
    assert not errors
    everything = Counter(b for v in acked.values() for b in v)
    assert set(everything) == set(ids)
    assert max(everything.values()) == 1, "a message was acknowledged twice"
    assert all(acked[i] for i in range(6)), {i: len(acked[i]) for i in range(6)}


def test_messages_held_by_a_killed_consumer_come_back_after_the_lock(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("share-kill", partitions=2)
    group = new_group()
    lock = 4.0
    # a partition assigned to the killed member alone is read by no one until the group
    # drops the member (§4.13.1): the embedded broker lets the session be short
    set_group_configs(
        kafka_bootstrap_servers,
        group,
        {
            "share.session.timeout.ms": str(int(SESSION_S * 1000)),
            "share.heartbeat.interval.ms": "1000",
        },
    )
    ids = bodies(kafka_bootstrap_servers, topic, 20)
    with ShareConsumerProcess(
        bootstrap=kafka_bootstrap_servers, topic=topic, group=group, lock=lock
    ) as child:  # started by ``with``
        held = child.wait_for(lambda s: "held" in s, 60, "a batch held")["held"]
        other = share(kafka_bootstrap_servers, topic, group, lock_duration=lock)
        try:
            child.kill()
            killed_at = time.monotonic()
            try:
                got = receive_until(other, len(ids), 3, timeout=40, ack=True)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; held {held}; {other.running_info()}") from None
            came_back = time.monotonic() - killed_at
        finally:
            other.shutdown()
    assert held
    assert sorted(m.body.decode() for m in got) == sorted(ids)  # nothing lost
    attempts = {m.body.decode(): m.delivery_attempt for m in got}
    assert {attempts[i] for i in held} == {2}, attempts
    assert came_back < SESSION_S + 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_message_never_acked_is_delivered_again_then_dead_lettered(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("share-dlq", partitions=1)
    group = new_group()
    sc = share(kafka_bootstrap_servers, topic, group, backend, max_delivery_attempts=2)
    try:
        (msg_id,) = bodies(kafka_bootstrap_servers, topic, 1)
        first = receive_until(sc, 1, 1)
        assert first[0].delivery_attempt == 1
        second = receive_until(sc, 1, 1)  # released once its 1 s ran out
        assert second[0].body.decode() == msg_id
        assert second[0].delivery_attempt == 2
        dlq = wait_until(
            lambda: read_dlq_raw({"bootstrap.servers": kafka_bootstrap_servers}, group),
            20,
            "the dead letter",
        )
        later = sc.receive(32, 1) + sc.receive(32, 1)
        time.sleep(LOCK_S)
        later += sc.receive(32, 1)
        assert later == []  # rejected after the DLQ write: never delivered again
    finally:
        sc.shutdown()
    (dead,) = dlq
    assert dead.value == msg_id.encode()
    assert dead.header("RMQ_DLQ_REASON") == b"MAX_DELIVERY_ATTEMPTS"
    assert dead.header("RECONSUME_TIME") == b"2"
    assert dead.header("DLQ_ORIGIN_TOPIC") == topic.encode()
    assert dead.header("RMQ_FAILURE_TYPE") == b"InvisibleDurationExpired"
    assert dead.header("RMQ_GROUP") == group.encode()


def test_change_invisible_duration_within_the_lock_and_refused_beyond(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("share-cid", partitions=1)
    group = new_group()
    sc = share(kafka_bootstrap_servers, topic, group)
    try:
        ids = bodies(kafka_bootstrap_servers, topic, 3)
        got = sorted(receive_until(sc, 3, 2), key=lambda m: m.body)
        longer, shorter, zero = got
        # beyond the group's lock: refused, nothing changed (the handle still acks)
        before = longer.receipt_handle
        with pytest.raises(InvalidInputError, match="cannot be extended"):
            sc.change_invisible_duration(longer, LOCK_S + 1)
        assert longer.receipt_handle == before
        # within it: a new handle, the view shows it
        new = sc.change_invisible_duration(longer, 2.2)
        assert new != before
        assert longer.receipt_handle == new
        sc.ack(longer)
        # shorter: the message is released when it runs out; a late ack is refused
        sc.change_invisible_duration(shorter, 1)
        # 0: released at once, delivered again with the attempt counted
        sc.change_invisible_duration(zero, 0)
        with pytest.raises(InvalidReceiptHandleError):
            sc.ack(zero)
        again: list[tuple[str, int]] = []
        deadline = time.monotonic() + 10
        while len(again) < 2 and time.monotonic() < deadline:
            for m in sc.receive(32, 2):  # one poll's records at a time: ack them at once
                sc.ack(m)
                again.append((m.body.decode(), m.delivery_attempt))
        assert sorted(again) == [(ids[1], 2), (ids[2], 2)]
        with pytest.raises(InvalidReceiptHandleError):
            sc.ack(shorter)
    finally:
        sc.shutdown()


def test_the_invisible_duration_runs_on_the_injected_clock(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The share backend measures a hold on ``clock=``: once the clock is past a receive's
    invisible duration, the acknowledgement is refused as run out and the message comes
    back with its attempt counted, long before that duration passed in real time (and the
    group's 30 s lock would have held it)."""
    clock = SkippingClock()
    topic = kafka_topic_factory("share-clock", partitions=1)
    sc = share(kafka_bootstrap_servers, topic, new_group(), lock_duration=30.0, clock=clock)
    try:
        [body] = bodies(kafka_bootstrap_servers, topic, 1)
        [held] = receive_until(sc, 1, 20.0)
        started = time.monotonic()
        clock.skip(21.0)
        with pytest.raises(InvalidReceiptHandleError, match=EXPIRED["share"]):
            sc.ack(held)
        [again] = receive_until(sc, 1, 20.0)
        assert (again.body.decode(), again.delivery_attempt) == (body, 2)
        assert time.monotonic() - started < 20.0
        sc.ack(again)
    finally:
        sc.shutdown()


@pytest.mark.parametrize("backend", BACKENDS)
def test_late_ack_double_ack_and_another_consumers_handle(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("share-late", partitions=1)
    group = new_group()
    sc = share(kafka_bootstrap_servers, topic, group, backend)
    # classic: a second member of the group would take a partition from ``sc`` (its handles
    # then fail as revoked, §4.13); any other consumer's handle is refused the same way
    other = share(
        kafka_bootstrap_servers, topic, group if backend == "share" else new_group(), backend
    )
    try:
        ids = bodies(kafka_bootstrap_servers, topic, 2)
        got = sorted(receive_until(sc, 2, 1), key=lambda m: m.body)
        with pytest.raises(InvalidReceiptHandleError, match="another consumer"):
            other.ack(got[0])
        sc.ack(got[0])
        sc.ack(got[0])  # harmless
        time.sleep(1.3)
        with pytest.raises(InvalidReceiptHandleError, match=EXPIRED[backend]):
            sc.ack(got[1])
        again = receive_until(sc, 1, 2)
        assert [(m.body.decode(), m.delivery_attempt) for m in again] == [(ids[1], 2)]
        sc.ack(again[0])
        if backend == "share":  # the group's lock bounds a receive (§4.13.1); classic: 12 h
            with pytest.raises(InvalidInputError):
                sc.receive(1, LOCK_S + 1)  # longer than the group's lock
        assert sc.receive(32, 1) == []
        if backend == "share":  # classic stats() are per topic (§4.13)
            assert sc.stats()["acked"] == 2
    finally:
        other.shutdown()
        sc.shutdown()


def test_ack_and_receive_raise_at_once_once_the_upkeep_thread_died(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the classic backend once its loop died: ``ack`` of a message still held, and
    ``receive``, raise the consumer's :class:`ClientLoopError` (with the cause) at once, and
    so does ``shutdown`` once it has released what was held."""
    topic = kafka_topic_factory("share-died", partitions=1)
    died = threading.Event()
    sc = share(kafka_bootstrap_servers, topic, new_group(), on_error=lambda exc: died.set())
    try:
        bodies(kafka_bootstrap_servers, topic, 2)
        held = receive_until(sc, 2, LOCK_S / 2)

        def broken(self: PollState, now: float) -> None:
            raise RuntimeError("upkeep broke")

        monkeypatch.setattr(PollState, "expire", broken)
        assert died.wait(10), "the upkeep thread did not die"
        with pytest.raises(ClientLoopError, match="upkeep broke"):
            sc.ack(held[0])
        with pytest.raises(ClientLoopError, match="upkeep broke"):
            sc.receive(1, 1)
    finally:
        monkeypatch.undo()
        with pytest.raises(ClientLoopError, match="upkeep broke"):
            sc.shutdown()
        with pytest.raises(ClientLoopError):  # and again
            sc.shutdown()
