"""SimpleConsumer behaviour on a real broker, one test per rule (docs/semantics.md §4.13).

Every test uses its own topic and group, and waits by polling with deadlines (``receive``
itself waits up to its ``await_duration``).  Invisible durations are short (1-3 s), the
adapter's minimum being 1 s.

Tests whose rule holds on both backends run on both (``[classic]``, ``[share]``; the share
backend's group lock is then long enough for the 30 s invisible durations, which costs no
time: nothing here crashes while holding).  Assertions about what only the classic backend
has (committed offsets, the retry topic, partition assignment) are guarded by
``backend == "classic"``; docs/semantics.md §4.13.1 says why the share backend differs.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from adapter import ConfigError, InvalidInputError, Message
from adapter.clients.member.group_consumer import GroupConsumer
from adapter.clients.simple.simple_consumer import FilterExpression, MessageView, SimpleConsumer
from adapter.errors import (
    ClientClosedError,
    ClientLoopError,
    InvalidReceiptHandleError,
    UnackedLimitError,
)
from tests.support.consumer_helpers import (
    committed_offsets,
    end_offsets,
    new_group,
    new_ids,
    produce,
    read_dlq_raw,
    retry_kafka_topic,
    send,
    wait_until,
)
from tests.support.simple_backends import BACKENDS, EXPIRED, FAST, simple_consumer
from tests.support.simple_procs import SimpleConsumerProcess, read_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: The share group's lock where a test runs on both backends: room for the 30 s invisible
#: durations (a receive may take up to the lock less two 1 s margins, §4.13.1).
SHARE_LOCK_S = 33.0


def simple(
    bootstrap: str,
    topic: str | None,
    group: str | None = None,
    backend: str = "classic",
    **options: Any,
) -> SimpleConsumer:
    options.setdefault("await_duration", 2.0)
    options.setdefault("lock_duration", SHARE_LOCK_S)
    return simple_consumer(backend, bootstrap, topic, group or new_group(), **options)


def receive_all(
    sc: SimpleConsumer, n: int, invisible: float, timeout: float = 30.0, *, ack: bool = False
) -> list[MessageView]:
    """Receive until ``n`` messages came (fails after ``timeout``).  On the share backend
    a receive waits while the previous poll's messages are held (§4.13.1): to receive more
    than one poll, acknowledge each (``ack``)."""
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


def body_of(view: MessageView) -> str:
    return view.body.decode()


@pytest.mark.parametrize("backend", BACKENDS)
def test_receive_gives_the_message_view_and_ack_moves_the_committed_offset(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc", partitions=2)
    before_ms = int(time.time() * 1000)
    send(
        kafka_bootstrap_servers,
        [
            Message(
                topic=topic,
                body=f"m{i}".encode(),
                tags="TagA",
                keys=["k1", f"k{i}"],
                properties={"color": "red"},
            )
            for i in range(6)
        ],
    )
    with simple(kafka_bootstrap_servers, topic, backend=backend) as sc:
        views = receive_all(sc, 6, 30, ack=True)
        assert sorted(body_of(v) for v in views) == [f"m{i}" for i in range(6)]
        v = views[0]
        assert v.topic == topic and v.tag == "TagA" and "k1" in v.keys
        assert v.properties == {"color": "red"}
        assert v.delivery_attempt == 1 and len(v.message_id) == 32
        assert v.born_timestamp is not None and v.born_timestamp >= before_ms - 1000
        assert v.receipt_handle and v.message.queue_offset >= 0
        for view in views:
            sc.ack(view)  # again: harmless
        if backend == "share":  # no committed offsets: the broker keeps each record's state
            assert sc.receive(32, 30) == []
            return
        conf = {"bootstrap.servers": kafka_bootstrap_servers}
        ends = end_offsets(conf, topic)
        seen: list[dict[int, int]] = []

        def at_end() -> bool:
            # a partition none of the messages went to has nothing to commit (the
            # partitioner may put all six on one: librdkafka's sticky partitioning)
            seen.append(committed_offsets(conf, sc.consumer_group, topic))
            return all(
                seen[-1].get(p) == end or (end == 0 and seen[-1].get(p, -1) < 0)
                for p, end in ends.items()
            )

        try:
            wait_until(at_end, what="committed offsets at the end")
        except AssertionError:
            info = sc.running_info()
            raise AssertionError(f"committed {seen[-1]}, ends {ends}; {info}") from None
        assert sc.receive(32, 30) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unacked_message_comes_back_after_its_invisible_duration_with_one_more_attempt(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["only"])
    with simple(kafka_bootstrap_servers, topic, backend=backend) as sc:
        t0 = time.monotonic()
        [first] = receive_all(sc, 1, 2.0)
        again: list[MessageView] = []
        while not again:
            again = sc.receive(32, 30)
            assert time.monotonic() - t0 < 30, "never delivered again"
        assert time.monotonic() - t0 >= 2.0  # never sooner than the invisible duration
        [second] = again
        assert body_of(second) == "only" and second.delivery_attempt == 2
        assert second.topic == topic  # the original topic, though read from the retry topic
        if backend == "classic":  # share: the record itself is released (§4.13.1)
            assert second.message.kafka_topic == retry_kafka_topic(sc.consumer_group)
        assert second.message_id == first.message_id
        with pytest.raises(InvalidReceiptHandleError, match=EXPIRED[backend]):
            sc.ack(first)
        sc.ack(second)
        assert sc.receive(32, 30) == []  # acknowledged: it does not come back


def test_the_committed_offset_stops_at_the_first_message_neither_acked_nor_handed_back(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The committed offset is the smallest offset neither acknowledged nor handed to the
    retry path.  Also: the group comes from ``group.id`` when ``consumer_group`` is not
    given, and ``startup()`` / ``shutdown()`` work by those names."""
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["m0", "m1", "m2"])
    group = new_group()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    sc = SimpleConsumer({**conf, "group.id": group, **FAST}, partitions=1, await_duration=2.0)
    assert sc.consumer_group == group
    sc.subscribe(topic)
    sc.startup()
    try:
        views = {body_of(v): v for v in receive_all(sc, 3, 30)}
        sc.ack(views["m1"])
        sc.ack(views["m2"])
        [part] = [p for name, p in sc.running_info()["partitions"].items() if topic in name]
        assert part["committable"] == 0  # m0 is still invisible: nothing past it
        # none yet (< 0) or the start position: never past m0
        assert committed_offsets(conf, group, topic)[0] <= 0
        sc.ack(views["m0"])
        wait_until(
            lambda: committed_offsets(conf, group, topic) == {0: 3},
            what="the offset committed past the three acknowledged messages",
        )
        # a message whose invisible duration runs out is settled once its copy is in the
        # retry topic, acknowledged or not
        produce(kafka_bootstrap_servers, topic, ["m3"])
        [m3] = receive_all(sc, 1, 1.0)
        wait_until(
            lambda: committed_offsets(conf, group, topic) == {0: 4},
            what="the expired message's offset committed after its copy",
        )
        [again] = receive_all(sc, 1, 30)
        assert body_of(again) == "m3" and again.delivery_attempt == 2
        assert again.message_id == m3.message_id
        sc.ack(again)
    finally:
        sc.shutdown()


def test_change_invisible_duration_postpones_and_replaces_the_handle(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["later", "now"])
    with simple(kafka_bootstrap_servers, topic) as sc:
        views = {body_of(v): v for v in receive_all(sc, 2, 1.0)}
        old = views["later"].receipt_handle
        t0 = time.monotonic()
        new = sc.change_invisible_duration(views["later"], 4.0)
        assert new == views["later"].receipt_handle != old
        sc.change_invisible_duration(views["now"], 0)  # visible again at once
        seen: list[tuple[float, MessageView]] = []
        while len(seen) < 2:
            seen.extend((time.monotonic(), m) for m in sc.receive(32, 30))
            assert time.monotonic() - t0 < 30
        (t_now, m_now), (t_later, m_later) = sorted(seen, key=lambda s: s[0])
        assert body_of(m_now) == "now" and m_now.delivery_attempt == 2
        assert t_now - t0 < 3.5
        assert body_of(m_later) == "later" and m_later.delivery_attempt == 2
        assert t_later - t0 >= 4.0  # postponed past the first deadline (1 s)
        sc.ack(m_now)
        sc.ack(m_later)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ack_stops_redelivery_and_acking_twice_is_harmless(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["a", "b"])
    with simple(kafka_bootstrap_servers, topic, await_duration=3.5, backend=backend) as sc:
        views = receive_all(sc, 2, 1.0)
        for v in views:
            sc.ack(v)
            sc.ack(v)
            asyncio.run(_await(sc.ack_async(v)))
        assert sc.receive(32, 30) == []  # waited 3.5 s: past the 1 s duration
        with pytest.raises(InvalidReceiptHandleError, match="already acknowledged"):
            sc.change_invisible_duration(views[0], 10)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def test_a_dead_loop_fails_ack_and_receive_at_once_not_after_its_close(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the classic consumer's loop dies, ``ack`` and ``receive`` raise its error from
    then on, also while the loop still drains and closes (which may take up to the
    shutdown wait): they used to go on accepting acks and handing out buffered messages
    until the close was done.  The user's ``on_error`` stands in for a slow close here: the
    loop waits in it."""
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["a", "b", "c", "d"])
    died, go_on = threading.Event(), threading.Event()

    def on_error(exc: BaseException) -> None:
        died.set()
        go_on.wait(30)

    sc = simple(kafka_bootstrap_servers, topic, on_error=on_error).start()
    try:
        views = receive_all(sc, 1, 30.0)

        def boom(self: GroupConsumer) -> None:
            raise RuntimeError("injected loop failure")

        monkeypatch.setattr(GroupConsumer, "step", boom)
        assert died.wait(30), "the loop did not die"
        with pytest.raises(ClientLoopError, match="injected loop failure"):
            sc.ack(views[0])
        with pytest.raises(ClientLoopError, match="injected loop failure"):
            sc.receive(32, 30)
    finally:
        go_on.set()
        monkeypatch.undo()
        with pytest.raises(ClientLoopError):
            sc.shutdown()


def test_a_messages_max_reconsume_times_sends_it_to_the_dlq_after_that_many_retries(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """``MAX_RECONSUME_TIMES=1`` on a message, under the consumer's maximum of 5: it is
    delivered twice (attempts 1 and 2), then dead-lettered; its neighbour without the
    property is delivered again past that (the consumer's maximum holds for it)."""
    topic = kafka_topic_factory("sc-max")
    send(
        kafka_bootstrap_servers,
        [
            Message(topic=topic, body=b"own", properties={"MAX_RECONSUME_TIMES": "1"}),
            Message(topic=topic, body=b"group"),
        ],
    )
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    with simple(kafka_bootstrap_servers, topic, max_delivery_attempts=5) as sc:
        attempts: dict[str, list[int]] = defaultdict(list)
        deadline = time.monotonic() + 60
        while len(attempts["group"]) < 3:
            assert time.monotonic() < deadline, attempts
            for v in sc.receive(32, 1.0):
                attempts[body_of(v)].append(v.delivery_attempt)  # never acknowledged
        dlq = wait_until(lambda: read_dlq_raw(conf, sc.consumer_group), what="a dead letter")
        assert attempts["own"] == [1, 2]
        [dead] = dlq
        assert dead.value == b"own"
        assert dead.text("RMQ_DLQ_REASON") == "MAX_DELIVERY_ATTEMPTS"
        assert dead.text("RECONSUME_TIME") == "2"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_dlq_after_max_delivery_attempts(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc")
    produce(kafka_bootstrap_servers, topic, ["poison", "fine"])
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    with simple(kafka_bootstrap_servers, topic, max_delivery_attempts=3, backend=backend) as sc:
        attempts: list[int] = []
        deadline = time.monotonic() + 40
        while len(attempts) < 3:
            assert time.monotonic() < deadline, attempts
            for v in sc.receive(32, 1.0):
                if body_of(v) == "fine":
                    sc.ack(v)
                else:
                    attempts.append(v.delivery_attempt)  # never acknowledged
        assert attempts == [1, 2, 3]
        dlq = wait_until(lambda: read_dlq_raw(conf, sc.consumer_group), what="a dead letter")
        [dead] = dlq
        assert dead.value == b"poison"
        assert dead.text("RMQ_DLQ_REASON") == "MAX_DELIVERY_ATTEMPTS"
        assert dead.text("RECONSUME_TIME") == "3"
        assert dead.text("DLQ_ORIGIN_TOPIC") == topic
        assert dead.text("RMQ_FAILURE_TYPE") == "InvisibleDurationExpired"
        assert sc.receive(32, 30) == []  # nothing comes back from the DLQ
        if backend == "share":  # no committed offsets, no retry topic (§4.13.1)
            return
        retry = retry_kafka_topic(sc.consumer_group)
        wait_until(
            lambda: (
                committed_offsets(conf, sc.consumer_group, retry) == end_offsets(conf, retry)
                and committed_offsets(conf, sc.consumer_group, topic) == end_offsets(conf, topic)
            ),
            what="every offset committed",
        )


def test_two_instances_share_a_group_without_a_message_visible_to_both(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("sc", partitions=4)
    group = new_group()
    a = simple(kafka_bootstrap_servers, topic, group, partitions=2, await_duration=1.0)
    b = simple(kafka_bootstrap_servers, topic, group, partitions=2, await_duration=1.0)
    with a, b:
        wait_until(
            lambda: (
                {t for t, _ in a.assignment} >= {topic}
                and {t for t, _ in b.assignment} >= {topic}
                and len(a.assignment | b.assignment) == 6
            ),
            what="both members assigned",
        )
        ids = new_ids(120)
        produce(kafka_bootstrap_servers, topic, ids)
        # id -> (who, delivery attempt, before receive, after receive) per delivery
        deliveries: dict[str, list[tuple[str, int, float, float]]] = defaultdict(list)
        lock = threading.Lock()
        acked: set[str] = set()
        stop = threading.Event()

        def work(name: str, sc: SimpleConsumer) -> None:
            while not stop.is_set():
                before = time.monotonic()
                views = sc.receive(16, 2.0)
                after = time.monotonic()
                for v in views:
                    msg_id = body_of(v)
                    with lock:
                        deliveries[msg_id].append((name, v.delivery_attempt, before, after))
                    # every third message is left to expire on its first delivery
                    if v.delivery_attempt == 1 and zlib.crc32(v.body) % 3 == 0:
                        continue
                    sc.ack(v)
                    with lock:
                        acked.add(msg_id)

        threads = [
            threading.Thread(target=work, args=("a", a)),
            threading.Thread(target=work, args=("b", b)),
        ]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(acked) == len(ids), timeout=60, what="every id acknowledged")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert {who for d in deliveries.values() for who, *_ in d} == {"a", "b"}
        for msg_id in ids:
            seen = sorted(deliveries[msg_id], key=lambda d: d[2])
            expired = zlib.crc32(msg_id.encode()) % 3 == 0
            assert [d[1] for d in seen] == ([1, 2] if expired else [1]), (msg_id, seen)
            # the second delivery came only after the first one's invisible duration: the
            # message was never visible to two receivers at once
            for first, second in itertools.pairwise(seen):
                assert second[3] >= first[2] + 2.0, (msg_id, seen)


def test_handles_of_revoked_partitions_become_invalid_and_the_new_owner_reads_them(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory("sc", partitions=4)  # with 1 retry partition: b gets 2 of 5
    group = new_group()
    ids = new_ids(20)
    produce(kafka_bootstrap_servers, topic, ids)
    a = simple(kafka_bootstrap_servers, topic, group, await_duration=1.0)
    with a:
        held = receive_all(a, 20, 60)
        b = simple(kafka_bootstrap_servers, topic, group, await_duration=1.0)
        with b:
            wait_until(lambda: any(t == topic for t, _ in b.assignment), what="b owns a partition")
            moved = {p for t, p in b.assignment if t == topic}
            for v in held:
                if v.message.queue_id in moved:
                    with pytest.raises(InvalidReceiptHandleError, match="revoked"):
                        a.ack(v)
                else:
                    a.ack(v)
            again = {
                body_of(v)
                for v in receive_all(b, sum(v.message.queue_id in moved for v in held), 30)
            }
            assert again == {body_of(v) for v in held if v.message.queue_id in moved}


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_variants_are_awaitable_and_wait_for_messages(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc")

    async def scenario(sc: SimpleConsumer) -> list[str]:
        pending = sc.receive_async(8, 10)  # nothing there yet: it waits
        await asyncio.sleep(0.2)
        assert not pending.done()
        await asyncio.to_thread(produce, kafka_bootstrap_servers, topic, ["x", "y"])
        views = await pending
        while len(views) < 2:
            views += await sc.receive_async(8, 10)
        handle = await sc.change_invisible_duration_async(views[0], 20)
        assert handle == views[0].receipt_handle
        for v in views:
            await sc.ack_async(v)
        with pytest.raises(InvalidInputError, match="max_message_num"):
            await sc.receive_async(0, 10)
        return sorted(body_of(v) for v in views)

    with simple(kafka_bootstrap_servers, topic, await_duration=10.0, backend=backend) as sc:
        assert asyncio.run(scenario(sc)) == ["x", "y"]
        # the concurrent.futures side, as RocketMQ's client returns it
        sc.await_duration = 0.5
        assert sc.receive_async(1, 10).result(timeout=15) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_subscriptions_change_while_running_and_tags_filter(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    first, second = kafka_topic_factory("sc"), kafka_topic_factory("sc")
    send(
        kafka_bootstrap_servers,
        [Message(topic=first, body=b"a", tags="A"), Message(topic=first, body=b"b", tags="B")],
    )
    produce(kafka_bootstrap_servers, second, ["s"])
    sc = simple(
        kafka_bootstrap_servers, None, subscription={first: FilterExpression("A")}, backend=backend
    )
    with sc:
        [a] = receive_all(sc, 1, 30)
        assert body_of(a) == "a"
        sc.ack(a)
        sc.subscribe(second)
        [s] = receive_all(sc, 1, 30)
        assert body_of(s) == "s" and s.topic == second
        sc.ack(s)
        sc.unsubscribe(first)
        # (share: ``assignment`` is always empty, §4.13.1)
        wait_until(lambda: all(t != first for t, _ in sc.assignment), what="first revoked")
        assert sc.subscriptions == {second: "*"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_bounds_and_bad_input_name_the_value(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, backend: str
) -> None:
    topic = kafka_topic_factory("sc")
    with pytest.raises(ClientClosedError, match="startup"):
        simple(kafka_bootstrap_servers, topic, backend=backend).receive(1, 10)
    with pytest.raises(ConfigError, match="max_unacked_messages=0"):
        simple(kafka_bootstrap_servers, topic, max_unacked_messages=0, backend=backend)
    with pytest.raises(ConfigError, match=r"group\.id"):
        SimpleConsumer(
            {"bootstrap.servers": kafka_bootstrap_servers, "group.id": "x"}, "y", backend=backend
        )
    produce(kafka_bootstrap_servers, topic, new_ids(5))
    with (
        simple(kafka_bootstrap_servers, topic, max_unacked_messages=3, backend=backend) as sc,
        simple(kafka_bootstrap_servers, topic, backend=backend) as other,
    ):
        for bad, field in [
            ((0, 10), "max_message_num=0"),
            ((1, 0.5), "invisible_duration=0.5"),
            ((1, 12 * 3600 + 1), "invisible_duration=43201"),
            ((1, "10"), "invisible_duration='10'"),
        ]:
            with pytest.raises(InvalidInputError, match=field):
                sc.receive(*bad)
        views = receive_all(sc, 3, 30)
        with pytest.raises(UnackedLimitError, match="max_unacked_messages=3"):
            sc.receive(1, 30)
        with pytest.raises(InvalidInputError, match="invisible_duration=-1"):
            sc.change_invisible_duration(views[0], -1)
        with pytest.raises(InvalidInputError, match="message="):
            sc.ack("not a view")  # type: ignore[arg-type]
        with pytest.raises(InvalidReceiptHandleError, match="another consumer"):
            other.ack(views[0])
        sc.ack(views[0])
        assert len(sc.receive(32, 30)) == 1  # room for one more
    with (
        simple(kafka_bootstrap_servers, None, backend=backend) as empty,
        pytest.raises(InvalidInputError, match="subscription"),
    ):
        empty.receive(1, 10)


def test_kill_9_while_messages_are_invisible_loses_nothing(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    """A child process receives everything, acknowledges half, lets some expire (their
    copies go through the retry topic and are received again) and holds the rest invisible;
    it is killed with SIGKILL.  A new member of the group then receives every message that
    was not acknowledged: nothing is lost."""
    topic = kafka_topic_factory("sc", partitions=3)
    group = new_group()
    ids = new_ids(90)
    produce(kafka_bootstrap_servers, topic, ids)
    log = tmp_path / "events.log"
    with SimpleConsumerProcess(
        bootstrap=kafka_bootstrap_servers, topic=topic, group=group, log=log
    ) as child:
        child.wait_for(
            lambda s: s.get("received", 0) >= len(ids) and s.get("retried", 0) >= 5,
            timeout=60,
            what="everything received and some retried",
        )
        child.kill()
    events = read_events(log)
    acked = {e[1] for e in events if e[0] == "ack"}
    held = {e[1] for e in events if e[0] == "hold"}
    assert held and acked and len(acked) < len(ids)
    with simple(kafka_bootstrap_servers, topic, group, partitions=3) as sc:
        recovered: set[str] = set()
        deadline = time.monotonic() + 60
        while not set(ids) <= acked | recovered:
            assert time.monotonic() < deadline, sorted(set(ids) - acked - recovered)[:5]
            for v in sc.receive(32, 30):
                sc.ack(v)
                recovered.add(body_of(v))
        assert held <= recovered  # every message held invisible came back
