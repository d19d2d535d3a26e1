"""``adapter.kafka.Consumer`` on a real broker: an existing confluent-kafka poll loop runs
unchanged, plus ``reconsume_later``.

Every test uses its own topic, group and namespace (delay topics) and the short ladder
``100ms 200ms 300ms 400ms 500ms 600ms`` (the first retry waits 300 ms); the ScheduleService
runs beside the consumer wherever a retry has to come back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from adapter import ScheduleService
from adapter.errors import ConfigError, InvalidInputError
from adapter.io.topics import ensure_topics, plan_topics
from adapter.kafka import Consumer
from tests.support.consumer_helpers import (
    LADDER,
    LEVELS,
    committed_offsets,
    end_offsets,
    new_group,
    new_ids,
    new_namespace,
    produce,
    read_dlq_raw,
    retry_kafka_topic,
    wait_until,
)
from tests.support.group_protocol import member_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def conf_of(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 100,
        **extra,
    }


@contextlib.contextmanager
def service(bootstrap: str, namespace: str) -> Iterator[ScheduleService]:
    with ScheduleService(
        {"bootstrap.servers": bootstrap}, delay_levels=LEVELS, namespace=namespace, partitions=1
    ) as svc:
        yield svc


def header(msg: Any, key: str) -> str | None:
    for k, v in msg.headers() or []:
        if k == key:
            return None if v is None else bytes(v).decode()
    return None


def test_an_existing_poll_loop_runs_unchanged(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The loop below is plain confluent-kafka code; only the class comes from the adapter."""
    topic = kafka_topic_factory("dropin", partitions=2)
    ids = new_ids(50)
    produce(kafka_bootstrap_servers, topic, ids)
    group = new_group()
    seen: list[str] = []
    assigned: list[Any] = []

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        assert isinstance(consumer, confluent_kafka.Consumer)
        assigned.extend(partitions)

    c = Consumer(conf_of(kafka_bootstrap_servers, group), partitions=1)
    assert isinstance(c, confluent_kafka.Consumer)
    c.subscribe([topic], on_assign=on_assign)
    deadline = time.monotonic() + 30
    try:
        while len(seen) < len(ids) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise confluent_kafka.KafkaException(msg.error())
            seen.append(msg.value().decode())
    finally:
        c.close()
    assert sorted(seen) == sorted(ids)
    assert {p.topic for p in assigned} == {topic, retry_kafka_topic(group)}
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    # close() committed what the loop handed out (the default enable.auto.offset.store)
    assert committed_offsets(conf, group, topic) == end_offsets(conf, topic)


def test_reconsume_later_brings_the_message_back_through_the_retry_path(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, group_protocol: str
) -> None:
    topic = kafka_topic_factory("dropin")
    produce(kafka_bootstrap_servers, topic, ["ok", "flaky", "poison", "dead"])
    group, ns = new_group(), new_namespace()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    got: list[tuple[str, str, int, str | None]] = []
    with (
        service(kafka_bootstrap_servers, ns),
        Consumer(
            conf_of(kafka_bootstrap_servers, group, **{"group.protocol": group_protocol}),
            delay_levels=LEVELS,
            namespace=ns,
            partitions=1,
            max_reconsume_times=2,
        ) as c,
    ):
        c.subscribe([topic])
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                if len(read_dlq_raw(conf, group)) == 2 and ("flaky", topic, 1, "1") in got:
                    break
                continue
            assert isinstance(msg, confluent_kafka.Message)
            body = msg.value().decode()
            times = c.reconsume_times(msg)
            got.append((body, msg.topic(), times, header(msg, "RECONSUME_TIME")))
            if body == "flaky" and times == 0:
                c.reconsume_later(msg)  # back after level 3 (300 ms)
            elif body == "poison":
                c.reconsume_later(msg)  # every time: the DLQ after max_reconsume_times=2
            elif body == "dead":
                c.reconsume_later(msg, delay_level=-1)  # straight to the DLQ
            c.commit(message=msg)
    assert ("flaky", topic, 1, "1") in got  # the original topic, one more reconsume time
    assert [t for b, _, t, _ in got if b == "poison"] == [0, 1, 2]
    assert [b for b, *_ in got].count("ok") == 1
    dead = {r.value: r.text("RMQ_DLQ_REASON") for r in read_dlq_raw(conf, group)}
    assert dead == {b"poison": "MAX_RECONSUME_TIMES", b"dead": "LISTENER_REQUESTED"}
    retry = retry_kafka_topic(group)
    wait_until(
        lambda: (
            committed_offsets(conf, group, retry) == end_offsets(conf, retry)
            and committed_offsets(conf, group, topic) == end_offsets(conf, topic)
        ),
        what="every offset committed",
    )


def test_no_offset_passes_a_message_whose_copy_is_not_acknowledged(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The delay-level topics are missing, so the copy of the first message is refused (for
    now); committing the last message stops at the first.  Once the topics exist the copy
    goes through and the commit that was asked for is applied."""
    topic = kafka_topic_factory("dropin")
    produce(kafka_bootstrap_servers, topic, ["first", "second", "third"])
    group, ns = new_group(), new_namespace()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], include_schedule=False, partitions=1))
    with Consumer(
        conf_of(kafka_bootstrap_servers, group, **{"enable.auto.offset.store": False}),
        delay_levels=LEVELS,
        namespace=ns,
        auto_create_topics=False,
        send_back_retry_interval=0.5,
    ) as c:
        c.subscribe([topic])
        msgs = []
        while len(msgs) < 3:
            msgs.extend(m for m in c.consume(10, 1.0) if not m.error())
        c.reconsume_later(msgs[0])
        done = c.commit(message=msgs[2], asynchronous=False)
        assert [(p.topic, p.offset) for p in done] == [(topic, 0)]  # held at the first
        c.store_offsets(message=msgs[2])
        assert committed_offsets(conf, group, topic) == {0: 0}
        ensure_topics(conf, plan_topics(delay_levels=LADDER, namespace=ns, partitions=1))
        deadline = time.monotonic() + 30
        while committed_offsets(conf, group, topic) != {0: 3}:
            assert time.monotonic() < deadline, committed_offsets(conf, group, topic)
            c.poll(0.2)  # serves the copy's verdict, then the held-back commit
    delay = [r for r in _delay_records(conf, ns) if r.value == b"first"]
    assert len(delay) == 1  # sent again after each refusal, written once


def _delay_records(conf: dict[str, Any], ns: str) -> list[Any]:
    from tests.support.consumer_helpers import delay_records

    return [r for records in delay_records(conf, ns).values() for r in records]


def test_a_consume_loop_storing_offsets_and_a_revoke_commit_what_was_handled(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, group_protocol: str
) -> None:
    """A batch loop: ``consume(500)`` and ``store_offsets`` with auto-commit, one message
    handed to the retry path.  The periodic auto-commit never comes round (60 s), so only the
    revoke can commit: a second member joins, the first gives its partitions up (its
    ``on_revoke`` is called) and what it handled, the retried message included, is
    committed.  Under the classic protocol librdkafka commits every stored offset on a
    revoke; under the consumer protocol (KIP-848) those of the revoked partitions, and the
    broker's ``range`` assignor is asked for so that one of the topic's partitions moves
    (its default, ``uniform``, may hand the newcomer only the retry topic's)."""
    topic = kafka_topic_factory("dropin", partitions=2)
    ids = new_ids(200)
    produce(kafka_bootstrap_servers, topic, ids, partition=lambda i: int(i, 16) % 2)
    group = new_group()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    extra = {
        "enable.auto.offset.store": False,
        **member_config(group_protocol),
        "auto.commit.interval.ms": 60_000,
    }
    if group_protocol == "consumer":
        extra["group.remote.assignor"] = "range"
    revoked: list[Any] = []
    first = Consumer(conf_of(kafka_bootstrap_servers, group, **extra), partitions=1)
    first.subscribe([topic], on_revoke=lambda _c, parts: revoked.extend(parts))
    seen = 0
    retried = None
    deadline = time.monotonic() + 30
    while seen < len(ids) and time.monotonic() < deadline:
        msgs = first.consume(500, 0.5)
        records = [m for m in msgs if m.error() is None]
        seen += len(records)
        for m in records:  # a fetch may mix both partitions: store each record
            if retried is None:
                retried = m.value()
                first.reconsume_later(m)  # its copy waits in the delay topic (10 s)
            first.store_offsets(message=m)
    assert seen == len(ids) and retried is not None
    ends = end_offsets(conf, topic)
    # precondition: nothing has been committed yet, the revoke below is what commits
    assert all(o < 0 for o in committed_offsets(conf, group, topic).values())
    second = Consumer(conf_of(kafka_bootstrap_servers, group, **extra), partitions=1)
    second.subscribe([topic])

    def handled_committed() -> bool:
        got = committed_offsets(conf, group, topic)
        if group_protocol == "classic":
            return got == ends
        gone = {p.partition for p in revoked if p.topic == topic}
        return bool(gone) and all(got.get(p) == ends[p] for p in gone)

    try:
        wait_until(
            lambda: (
                (first.poll(0.1), second.poll(0.1)) and second.assignment() and handled_committed()
            ),
            what="the second member assigned, the first's offsets committed",
        )
        assert topic in {p.topic for p in revoked}
    finally:
        second.close()
        first.close()


def test_auto_offset_store_and_close_never_pass_a_message_whose_copy_is_not_acknowledged(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The textbook poll loop with the default ``enable.auto.offset.store``: the first
    message is handed to ``reconsume_later`` but the delay-level topics are missing, so its
    copy is never acknowledged.  Auto-commits and ``close()`` commit up to it and no
    further, and the group's next member reads it again."""
    topic = kafka_topic_factory("dropin")
    produce(kafka_bootstrap_servers, topic, ["first", "second", "third"])
    group, ns = new_group(), new_namespace()
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], include_schedule=False, partitions=1))
    options: dict[str, Any] = {
        "delay_levels": LEVELS,
        "namespace": ns,
        "auto_create_topics": False,
    }
    c = Consumer(conf_of(kafka_bootstrap_servers, group), **options)
    try:
        c.subscribe([topic])
        bodies: list[str] = []
        deadline = time.monotonic() + 30
        while len(bodies) < 3:
            assert time.monotonic() < deadline, bodies
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            bodies.append(msg.value().decode())
            if bodies[-1] == "first":
                c.reconsume_later(msg)
        assert bodies == ["first", "second", "third"]
        # the loop goes on: positions are stored (3) and auto-committed, held at "first"
        wait_until(
            lambda: c.poll(0.1) is None and committed_offsets(conf, group, topic) == {0: 0},
            what="the auto-committed offset held at the first message",
        )
    finally:
        c.close()  # waits (bounded) for the copy, which never comes through
    assert committed_offsets(conf, group, topic) == {0: 0}
    with Consumer(conf_of(kafka_bootstrap_servers, group), **options) as again:
        again.subscribe([topic])
        msg = wait_until(lambda: again.poll(0.5), what="the held message read again")
        assert msg.error() is None and msg.value() == b"first" and msg.offset() == 0


def test_bad_input_names_the_value(kafka_bootstrap_servers: str, kafka_topic_factory: Any) -> None:
    topic = kafka_topic_factory("dropin")
    produce(kafka_bootstrap_servers, topic, ["x"])
    with Consumer(conf_of(kafka_bootstrap_servers, new_group()), partitions=1) as c:
        with pytest.raises(InvalidInputError, match="topics="):
            c.subscribe(topic)  # type: ignore[arg-type]
        c.subscribe([topic])
        msg = None
        while msg is None or msg.error():
            msg = c.poll(1.0)
        with pytest.raises(InvalidInputError, match="delay_level=True"):
            c.reconsume_later(msg, delay_level=True)
        with pytest.raises(InvalidInputError, match="msg="):
            c.reconsume_later("x")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="delay_level='3'"):
            c.reconsume_later(msg, delay_level="3")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="on_revoke='x'"):
            c.subscribe([topic], on_revoke="x")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="message="):
            c.store_offsets(message=msg, offsets=[])
        with pytest.raises(InvalidInputError, match="message="):
            c.commit(message=msg, offsets=[])
        assert c.reconsume_times(msg) == 0
    bootstrap = kafka_bootstrap_servers
    with pytest.raises(ConfigError, match=r"group\.id=None"):
        Consumer({"bootstrap.servers": bootstrap})
    with pytest.raises(ConfigError, match="partitions=0"):
        Consumer(conf_of(bootstrap, new_group()), partitions=0)
    with pytest.raises(ConfigError, match="max_reconsume_time=3"):
        Consumer(conf_of(bootstrap, new_group()), max_reconsume_time=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidInputError, match="max_reconsume_times=-2"):
        Consumer(conf_of(bootstrap, new_group()), max_reconsume_times=-2)


def _first_message(c: Consumer, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            return msg
    raise AssertionError(f"no message within {timeout}s")


def test_reconsume_later_after_close_raises_and_the_message_is_not_lost(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A message handed to a worker while the poll loop closes the consumer: handing it
    back afterwards used to return ``None`` and write no copy, so the application
    believed it retried.  Now it raises ``ClientClosedError`` like every other client used
    after shutdown, and (offsets stored by the application once a message is handled) the
    message is read again by the next consumer of the group."""
    from adapter.errors import ClientClosedError

    topic = kafka_topic_factory("dropin-closed")
    produce(kafka_bootstrap_servers, topic, ["only"])
    group = new_group()
    c = Consumer(
        conf_of(kafka_bootstrap_servers, group, **{"enable.auto.offset.store": False}),
        partitions=1,
    )
    c.subscribe([topic])
    msg = _first_message(c)
    c.close()
    with pytest.raises(ClientClosedError, match="closed"):
        c.reconsume_later(msg)
    with pytest.raises(ClientClosedError, match="closed"):
        c.open_circuit(msg)
    again = Consumer(conf_of(kafka_bootstrap_servers, group), partitions=1)
    again.subscribe([topic])
    try:
        msg = _first_message(again)
        assert (msg.topic(), msg.value()) == (topic, b"only")
    finally:
        again.close()


def test_a_with_block_left_by_an_exception_does_not_commit_the_message_being_handled(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Ctrl-C (or SIGTERM) inside the handler leaves ``with consumer:`` by an exception:
    the message being handled did not finish, so it is delivered again; what the loop
    finished before (it came back for more) is committed."""
    topic = kafka_topic_factory("dropin-interrupted")
    produce(kafka_bootstrap_servers, topic, ["a", "b", "c"])
    group = new_group()
    conf = conf_of(kafka_bootstrap_servers, group)
    with pytest.raises(KeyboardInterrupt), Consumer(conf, partitions=1) as c:
        c.subscribe([topic])
        handled = 0
        while True:
            _first_message(c)
            if handled == 1:
                raise KeyboardInterrupt  # the second message's handler is interrupted
            handled += 1
    # never past the interrupted message ("a" is committed once its store was due: the
    # emulated offset store runs at most every few hundred milliseconds)
    assert committed_offsets(conf, group, topic).get(0, -1) <= 1
    again = Consumer(conf, partitions=1)
    again.subscribe([topic])
    try:
        first = _first_message(again)
        assert first.value() in (b"a", b"b")  # the interrupted "b" is delivered again
    finally:
        again.close()
