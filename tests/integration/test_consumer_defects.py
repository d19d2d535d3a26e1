"""Regression tests for consumer defects found in review (each fixed in the consume engine).

One test (or a few) per defect, on the session's real broker, each on its own topic, group
and namespace.  Every docstring names the defect and what the code before the fix
(1225f20) did.  Waits poll with deadlines; nothing sleeps for a topic.

* #2  broadcasting keeps its place across restarts, finds new partitions, honours
      ``consume_from_where`` and persists its offsets file periodically and on shutdown;
* #3  out-of-range offsets restart at the earliest retained offset; a new group starts
      where ``consume_from_where`` says; the retry topic always from its beginning;
* #7  a missing delay-level topic is a transient send-back failure (held, retried locally),
      never a reason to dead-letter;
* #12 another group can subscribe to ``%DLQ%<group>`` and read the dead letters.

(#8, a failed ``committed()`` lookup rewinding the retry topic, cannot be provoked on a
real broker within a test's time; see the unit tests in ``tests/unit/core/test_offsets_start.py``
for the start rule it falls back on.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient, NewPartitions

from adapter import (
    Message,
    MessageModel,
    PushConsumer,
    ScheduleService,
    ensure_group_topics,
    naming,
)
from adapter.cli import main as cli_main
from adapter.services.dlq import read_dlq
from tests.support.consumer_helpers import (
    LADDER,
    LATER,
    LEVELS,
    OK,
    RecordingListener,
    committed_offsets,
    delay_kafka_topic,
    end_offsets,
    new_group,
    new_namespace,
    partitions_of,
    produce_raw,
    read_dlq_raw,
    retry_kafka_topic,
    running_pair,
    send,
    send_bodies,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: Commit stored offsets often, so tests can watch the committed offset move.
FAST_COMMIT = {"auto.commit.interval.ms": 100}
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def _bodies(listener: RecordingListener) -> list[bytes]:
    return [d.body for d in listener.snapshot()]


def _offsets_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.json"))


def _file_offsets(path: Path) -> dict[str, int]:
    """A broadcasting offsets file: ``{"topic:partition": next offset}``."""
    data: dict[str, int] = json.loads(path.read_text("utf-8"))
    return data


def _expected_file(topic: str, ends: dict[int, int]) -> dict[str, int]:
    return {f"{topic}:{p}": o for p, o in ends.items()}


def _broadcaster(
    bootstrap: str,
    group: str,
    topic: str,
    listener: RecordingListener,
    store: Path,
    *,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> PushConsumer:
    c = PushConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, **(config or {})},
        message_model=MessageModel.BROADCASTING,
        offset_store_dir=str(store),
        **options,
    )
    c.subscribe(topic)
    c.register_message_listener(listener)
    return c


class SlowClock:
    """Wall time as it is, intervals at 1/1000 speed: the 5 s periodic persist of the
    broadcasting offsets file (and any other interval) does not come round during a test."""

    def __init__(self) -> None:
        self.origin = time.monotonic()

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return self.origin + (time.monotonic() - self.origin) / 1000


# #2 broadcasting ------------------------------------------------------------------------------
def test_broadcasting_restart_without_instance_name_resumes_from_its_offsets_file(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    """#2: a broadcasting consumer restarted without ``instance_name`` must find its offsets
    file again (RocketMQ's instance name ``DEFAULT``) and read what was sent while it was
    down; the file is also written periodically while it runs.

    Old code (1225f20): the default instance name was ``<hostname>@<random>``, so every
    start wrote a fresh offsets file and began at the log end: the 4 messages sent while the
    instance was down were never delivered."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcrestart", partitions=2)
    group = new_group()
    first = RecordingListener()
    c = _broadcaster(bootstrap, group, topic, first, tmp_path)
    c.start()
    try:
        # the start position (the log end) is stored at start; then it is safe to send
        wait_until(lambda: _offsets_files(tmp_path), what="the offsets file")
        send(bootstrap, [Message(topic=topic, body=b"a", partition=0)])
        send(bootstrap, [Message(topic=topic, body=b"b", partition=1)])
        wait_until(lambda: {b"a", b"b"} <= set(_bodies(first)), what="a and b")
        # persisted periodically (every 5 s) while running, not only on shutdown
        [path] = _offsets_files(tmp_path)
        wait_until(
            lambda: _file_offsets(path) == _expected_file(topic, {0: 1, 1: 1}),
            12,
            "the periodic write of the offsets file",
        )
    finally:
        c.shutdown()
    assert sorted(_bodies(first)) == [b"a", b"b"]

    down = [Message(topic=topic, body=b"down-%d" % i, partition=i % 2) for i in range(4)]
    send(bootstrap, down)
    again = RecordingListener()
    c = _broadcaster(bootstrap, group, topic, again, tmp_path)  # no instance_name again
    c.start()
    try:
        wait_until(lambda: len(again) >= 4, 20, "the 4 messages sent while it was down")
        send(bootstrap, [Message(topic=topic, body=b"after", partition=0)])
        wait_until(lambda: again.of("after"), what="a message after the restart")
    finally:
        c.shutdown()
    assert sorted(_bodies(again)) == sorted([m.body for m in down] + [b"after"])
    # one file, the stable default instance name, and it holds the ends: partition 0 got
    # a, down-0, down-2 and after (4 records), partition 1 b, down-1 and down-3 (3 records)
    assert [p.name for p in _offsets_files(tmp_path)] == ["DEFAULT.json"]
    assert _file_offsets(tmp_path / group / "DEFAULT.json") == _expected_file(topic, {0: 4, 1: 3})


def test_broadcasting_offsets_are_persisted_on_shutdown(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    """#2: the broadcasting offsets file is written on shutdown, so a restart resumes exactly
    after what was consumed (no duplicates) even when the periodic 5 s write never ran.

    The first instance runs on a clock whose intervals pass 1000 times slower, so its
    periodic write never comes round: what the restart reads can only come from the write
    at shutdown.  Old code (1225f20): wrote the file whenever an offset moved (no periodic
    write to isolate), so the precondition below fails there; its restart itself worked
    when ``instance_name`` was given."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcpersist")
    group = new_group()
    first = RecordingListener()
    c = _broadcaster(bootstrap, group, topic, first, tmp_path, clock=SlowClock())
    c.start()
    try:
        wait_until(lambda: _offsets_files(tmp_path), what="the offsets file")
        [path] = _offsets_files(tmp_path)
        assert _file_offsets(path) == _expected_file(topic, {0: 0})  # the start position
        send_bodies(bootstrap, topic, ["a", "b", "c"])
        wait_until(lambda: len(first) >= 3, what="a, b and c")
        # precondition: nothing but the shutdown can have written the new position
        assert _file_offsets(path) == _expected_file(topic, {0: 0})
    finally:
        c.shutdown()
    assert _file_offsets(path) == _expected_file(topic, {0: 3})  # written on shutdown
    assert _bodies(first) == [b"a", b"b", b"c"]

    send_bodies(bootstrap, topic, ["d"])
    again = RecordingListener()
    c = _broadcaster(bootstrap, group, topic, again, tmp_path)
    c.start()
    try:
        wait_until(lambda: again.of("d"), what="the message sent while it was down")
        send_bodies(bootstrap, topic, ["e"])
        wait_until(lambda: again.of("e"), what="a message after the restart")
    finally:
        c.shutdown()
    assert _bodies(again) == [b"d", b"e"]  # resumed after c: nothing twice, nothing lost


def test_broadcasting_reads_a_partition_added_later(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#2: a partition added to a subscribed topic while a broadcasting consumer runs is
    found and read (RocketMQ's rebalance looks every 20 s).

    The interval is ``adapter.clients.member.group_consumer.REDISCOVER_INTERVAL_S`` (20 s), a module
    constant rather than an option, so the test shortens it to 0.5 s.  Old code (1225f20):
    partitions were listed once at start and never again; a message on the new partition
    was never delivered (and the constant does not exist there)."""
    from adapter.clients.member import group_consumer

    monkeypatch.setattr(group_consumer, "REDISCOVER_INTERVAL_S", 0.5)
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcgrow")
    group = new_group()
    listener = RecordingListener()
    c = _broadcaster(bootstrap, group, topic, listener, tmp_path, instance_name="grow")
    c.start()
    try:
        wait_until(lambda: c.assignment == {(topic, 0)}, what="the first partition")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
        # found within a few rediscovery rounds; its start (the log end) is fixed then
        wait_until(lambda: (topic, 1) in c.assignment, 15, "the new partition")
        send(
            bootstrap,
            [
                Message(topic=topic, body=b"new-partition", partition=1),
                Message(topic=topic, body=b"old-partition", partition=0),
            ],
        )
        wait_until(lambda: len(listener) >= 2, what="both messages")
    finally:
        c.shutdown()
    assert sorted(_bodies(listener)) == [b"new-partition", b"old-partition"]
    assert {d.queue_id for d in listener.of("new-partition")} == {1}
    [path] = _offsets_files(tmp_path)
    assert _file_offsets(path) == _expected_file(topic, {0: 1, 1: 1})


@pytest.mark.parametrize(
    ("config", "options"),
    [
        ({}, {"consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}),
        ({"auto.offset.reset": "earliest"}, {}),
    ],
    ids=["consume_from_where", "auto.offset.reset"],
)
def test_broadcasting_new_instance_honours_consume_from_first_offset(
    kafka_bootstrap_servers: str,
    kafka_topic_factory: Any,
    tmp_path: Path,
    config: dict[str, Any],
    options: dict[str, Any],
) -> None:
    """#2: a broadcasting instance without an offsets file starts where
    ``consume_from_where`` says; CONSUME_FROM_FIRST_OFFSET (also chosen by the Kafka
    setting ``auto.offset.reset=earliest``) reads what the topic already holds.

    Old code (1225f20): a new broadcasting instance always started at the log end: the
    ``consume_from_where`` option did not exist (ConfigError) and ``auto.offset.reset`` was
    ignored, so the messages already there were never delivered."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("bcfirst", partitions=2)
    send(bootstrap, [Message(topic=topic, body=b"old-%d" % i, partition=i % 2) for i in range(4)])
    listener = RecordingListener()
    c = _broadcaster(bootstrap, new_group(), topic, listener, tmp_path, config=config, **options)
    c.start()
    try:
        wait_until(lambda: len(listener) >= 4, 20, "the messages already in the topic")
        send(bootstrap, [Message(topic=topic, body=b"new", partition=1)])
        wait_until(lambda: listener.of("new"), what="a new message")
    finally:
        c.shutdown()
    assert sorted(_bodies(listener)) == [b"new", b"old-0", b"old-1", b"old-2", b"old-3"]


# #3 start positions and out-of-range offsets --------------------------------------------------
def _clustering(
    bootstrap: str,
    group: str,
    namespace: str,
    topic: str,
    listener: RecordingListener,
    *,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> PushConsumer:
    """A PushConsumer with the user's config as given (no ``auto.offset.reset`` added)."""
    c = PushConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, **FAST_COMMIT, **(config or {})},
        namespace=namespace,
        delay_levels=LEVELS,
        partitions=1,
        shutdown_await=10.0,
        **options,
    )
    c.subscribe(topic)
    c.register_message_listener(listener)
    return c


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for an empty group, as an earlier run of it would have left them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


def _low_watermark(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": new_group()})
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low)
    finally:
        c.close()


def test_out_of_range_committed_offset_restarts_at_the_earliest_retained_offset(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """#3: the group committed offset 10, then the log start moved to 15 (records deleted);
    the restarted consumer must read from 15, the earliest retained record, not jump to
    the end (RocketMQ corrects an illegal offset to the queue's minimum).

    Old code (1225f20): an out-of-range offset followed ``auto.offset.reset``, which the
    adapter left at librdkafka's default ``latest``: offsets 15..19 were skipped."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("oor")
    group = new_group()
    produce_raw(bootstrap, topic, [(b"m%d" % i, None) for i in range(20)])
    _commit(bootstrap, group, topic, {0: 10})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    gone = TopicPartition(topic, 0, 15)
    admin.delete_records([gone])[gone].result(timeout=30)
    assert _low_watermark(bootstrap, topic, 0) == 15
    assert committed_offsets({"bootstrap.servers": bootstrap}, group, topic) == {0: 10}

    listener = RecordingListener()
    c = _clustering(bootstrap, group, new_namespace(), topic, listener)
    c.start()
    try:
        wait_until(lambda: (topic, 0) in c.assignment, what="the assignment")
        produce_raw(bootstrap, topic, [(b"m20", None)])
        wait_until(lambda: listener.of("m20"), 20, "a message after the restart")
        wait_until(
            lambda: committed_offsets({"bootstrap.servers": bootstrap}, group, topic) == {0: 21},
            what="the commit at the end",
        )
    finally:
        c.shutdown()
    assert _bodies(listener) == [b"m%d" % i for i in range(15, 21)]
    assert [d.queue_offset for d in listener.snapshot()] == list(range(15, 21))


def test_new_group_starts_at_the_end_keeps_that_start_and_reads_its_retry_topic_from_0(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """#3: a new group without ``consume_from_where`` (CONSUME_FROM_LAST_OFFSET, RocketMQ's
    default) does not read what was sent before its first start; that start position is
    committed at once, so a restart before anything arrived still reads what was sent
    while it was down; and records already waiting in the group's retry topic are read
    from its beginning (every one is a retry owed to this group).

    Old code (1225f20): the start followed ``auto.offset.reset`` (``latest``) lazily and
    nothing was committed until a message was consumed, so the restarted consumer began at
    the end again and never saw the message sent while it was down (the wait for the
    committed start position times out)."""
    bootstrap = kafka_bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    topic = kafka_topic_factory("last")
    group, ns = new_group(), new_namespace()
    send_bodies(bootstrap, topic, ["before-1", "before-2"])
    ensure_group_topics(conf, group, delay_levels=LADDER, namespace=ns, partitions=1)
    retry = retry_kafka_topic(group)
    produce_raw(
        bootstrap,
        retry,
        [(b"owed-retry", [("RETRY_TOPIC", topic.encode()), ("RECONSUME_TIME", b"1")])],
    )

    first = RecordingListener()
    c = _clustering(bootstrap, group, ns, topic, first)
    c.start()
    try:
        wait_until(lambda: first.of("owed-retry"), 20, "the record owed in the retry topic")
        wait_until(
            lambda: committed_offsets(conf, group, topic) == {0: 2}, 20, "the start committed"
        )
    finally:
        c.shutdown()
    [owed] = first.snapshot()  # and not the two sent before the group's first start
    assert owed.kafka_topic == retry and owed.topic == topic and owed.reconsume_times == 1

    send_bodies(bootstrap, topic, ["while-down"])
    again = RecordingListener()
    c = _clustering(bootstrap, group, ns, topic, again)
    c.start()
    try:
        wait_until(lambda: again.of("while-down"), 20, "the message sent while it was down")
        send_bodies(bootstrap, topic, ["after"])
        wait_until(lambda: again.of("after"), what="a message after the restart")
    finally:
        c.shutdown()
    assert _bodies(again) == [b"while-down", b"after"]  # the retry record is not read twice


def test_new_group_consume_from_first_offset_reads_what_is_there(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """#3: ``consume_from_where=CONSUME_FROM_FIRST_OFFSET`` starts a new group at the first
    retained offset.

    Old code (1225f20): no ``consume_from_where`` option (ConfigError: unknown option)."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("first")
    send_bodies(bootstrap, topic, ["old-1", "old-2", "old-3"])
    listener = RecordingListener()
    c = _clustering(
        bootstrap,
        new_group(),
        new_namespace(),
        topic,
        listener,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    c.start()
    try:
        wait_until(lambda: len(listener) >= 3, 20, "the messages already there")
        send_bodies(bootstrap, topic, ["new"])
        wait_until(lambda: listener.of("new"), what="a new message")
    finally:
        c.shutdown()
    assert _bodies(listener) == [b"old-1", b"old-2", b"old-3", b"new"]


def _produce_at(bootstrap: str, topic: str, records: list[tuple[bytes, int]]) -> None:
    """Records with explicit create times (epoch ms), in order, to partition 0."""
    producer = RawProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for value, ts in records:
        producer.produce(
            topic,
            value,
            partition=0,
            timestamp=ts,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
        producer.flush(10)
    assert producer.flush(10) == 0 and not errors, errors


@pytest.mark.parametrize("explicit", [True, False], ids=["consume_timestamp", "default-30min"])
def test_new_group_consume_from_timestamp(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any, explicit: bool
) -> None:
    """#3: CONSUME_FROM_TIMESTAMP starts a new group at the first record stored at or after
    ``consume_timestamp`` (default: 30 minutes before the start, like RocketMQ).

    Old code (1225f20): neither ``consume_from_where`` nor ``consume_timestamp`` existed
    (ConfigError: unknown option)."""
    bootstrap = kafka_bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    topic = kafka_topic_factory("ts")
    group = new_group()
    now = int(time.time() * 1000)
    _produce_at(
        bootstrap,
        topic,
        [
            (b"2h-ago", now - 2 * HOUR_MS),
            (b"40min-ago", now - 40 * MINUTE_MS),
            (b"10min-ago", now - 10 * MINUTE_MS),
        ],
    )
    options: dict[str, Any] = {"consume_from_where": "CONSUME_FROM_TIMESTAMP"}
    if explicit:
        options["consume_timestamp"] = now - HOUR_MS
    expected = [b"40min-ago", b"10min-ago"] if explicit else [b"10min-ago"]
    listener = RecordingListener()
    c = _clustering(bootstrap, group, new_namespace(), topic, listener, **options)
    c.start()
    try:
        wait_until(lambda: len(listener) >= len(expected), 20, "the records after the timestamp")
        wait_until(lambda: committed_offsets(conf, group, topic) == {0: 3}, what="the end commit")
    finally:
        c.shutdown()
    assert _bodies(listener) == expected


# #7 a missing delay-level topic is transient ---------------------------------------------------
def test_send_back_to_a_missing_delay_topic_is_held_and_retried_not_dead_lettered(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """#7: a failed message whose send-back goes to a delay-level topic that does not exist
    (deleted) is held: its offset stays, it is consumed again locally (``reconsume_times``
    + 1) after ``send_back_retry_interval``, and once the topic exists again (``rmq-kafka
    topics ensure``) its copy goes there and the ScheduleService brings it back.  It never
    goes to ``%DLQ%<group>``, and the adapter never re-creates the topic itself (a
    broker's auto-creation would give it the broker's defaults).

    Old code (1225f20): an unknown topic counted as a permanent refusal, so the message
    went straight to the DLQ (``SEND_BACK_REFUSED``) where brokers do not auto-create
    topics; where they do (the test broker), the send-back producer silently re-created the
    delay topic with the broker's defaults."""
    bootstrap = kafka_bootstrap_servers
    topic = kafka_topic_factory("gone")
    level = 3

    def decide(msgs: list[Any], ctx: Any) -> Any:
        if msgs[0].kafka_topic == retry_kafka_topic(pair.group):
            return OK  # came back through the delay topic: done
        ctx.delay_level_when_next_consume = level  # always the missing topic
        return LATER

    listener = RecordingListener(decide)
    with running_pair(
        bootstrap,
        topic,
        listener,
        service=False,
        send_back_retry_interval=0.5,
        config=FAST_COMMIT,
    ) as pair:
        delay_topic = delay_kafka_topic(level, pair.namespace)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([delay_topic], operation_timeout=30)[delay_topic].result(timeout=35)
        wait_until(lambda: not partitions_of(pair.conf, delay_topic), what="the topic gone")

        send_bodies(bootstrap, topic, ["x"])
        wait_until(lambda: len(listener.of("x")) >= 3, 25, "two local retries")
        assert pair.topic_stats().dead_lettered == 0
        assert not partitions_of(pair.conf, delay_topic)  # not re-created behind our back
        assert pair.committed().get(0, -1) <= 0  # the offset is held

        rc = cli_main(
            [
                "topics",
                "ensure",
                "--delay-levels",
                LEVELS,
                "--namespace",
                pair.namespace,
                "--partitions",
                "1",
                "-b",
                bootstrap,
            ]
        )
        assert rc == 0
        with ScheduleService(
            {"bootstrap.servers": bootstrap}, delay_levels=LEVELS, namespace=pair.namespace
        ):
            wait_until(
                lambda: any(
                    d.kafka_topic == retry_kafka_topic(pair.group) for d in listener.of("x")
                ),
                30,
                "the copy back through the re-created delay topic",
            )
            wait_until(lambda: pair.committed() == {0: 1}, what="the offset released")
        stats = pair.topic_stats()
    seen = listener.of("x")
    assert [d.reconsume_times for d in seen] == list(range(len(seen)))
    assert seen[-1].kafka_topic == retry_kafka_topic(pair.group) and seen[-1].topic == topic
    assert all(d.kafka_topic == topic for d in seen[:-1])  # the holds were local
    assert stats.sent_back == 1 and stats.dead_lettered == 0
    assert stats.send_back_failed >= 2 and stats.local_retries >= 2
    assert read_dlq_raw(pair.conf, pair.group) == []


# #12 reading another group's DLQ -------------------------------------------------------------
def test_another_group_can_subscribe_to_a_dlq_and_read_the_dead_letters(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """#12: ``subscribe("%DLQ%<group>", "*")`` from a PushConsumer of another group reads
    that group's dead letters (RocketMQ 4.9.2+ lets consumers subscribe to DLQ topics).

    Old code (1225f20): ``subscribe`` accepted only user topic names and raised
    ``TopicNameError`` for ``%DLQ%<group>``."""
    bootstrap = kafka_bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    topic = kafka_topic_factory("dead")
    send_bodies(bootstrap, topic, ["dead-1", "dead-2"], tags="T")
    failing = RecordingListener(lambda msgs, ctx: LATER)
    with running_pair(bootstrap, topic, failing, service=False, max_reconsume_times=0) as source:
        wait_until(
            lambda: source.topic_stats() and source.topic_stats().dead_lettered == 2,
            what="two dead letters",
        )
    dead_group = source.group
    dlq = naming.dlq_topic(dead_group)
    assert {e.message.body for e in read_dlq(conf, dead_group)} == {b"dead-1", b"dead-2"}

    reader_group = new_group()
    reader = RecordingListener()
    c = PushConsumer(
        {**conf, "group.id": reader_group, "auto.offset.reset": "earliest", **FAST_COMMIT},
        namespace=new_namespace(),
        delay_levels=LEVELS,
        partitions=1,
    )
    c.subscribe(dlq, "*")
    c.register_message_listener(reader)
    c.start()
    try:
        wait_until(lambda: len(reader) >= 2, 20, "the dead letters")
        dlq_kafka = naming.to_kafka(dlq)
        wait_until(
            lambda: (
                committed_offsets(conf, reader_group, dlq_kafka) == end_offsets(conf, dlq_kafka)
            ),
            what="the reader's commit at the DLQ's end",
        )
    finally:
        c.shutdown()
    seen = reader.snapshot()
    assert sorted(d.body for d in seen) == [b"dead-1", b"dead-2"]
    for d in seen:
        assert d.topic == dlq and d.kafka_topic == naming.to_kafka(dlq)
        assert d.properties["RMQ_DLQ_REASON"] == "MAX_RECONSUME_TIMES"
        assert d.properties["DLQ_ORIGIN_TOPIC"] == topic
        assert d.tags == "T"
    # reading it changed nothing: the dead letters are still there, once
    assert len(read_dlq_raw(conf, dead_group)) == 2
    assert read_dlq_raw(conf, reader_group) == []
