"""The admin commands on the real broker: ``group progress``, ``group reset-offset`` (empty
groups, refused live groups, and ``--force`` through the control topic to live members),
``msg show`` and ``schedule status``; logical names in and out, ``--json``, and one clear line
on stderr for every failure.

A live member is emulated with a plain confluent-kafka ``Consumer`` subscribed in the group
plus a :class:`ControlChannel` through which it applies forced resets itself (seek, commit,
acknowledge): the protocol end to end on the broker, without the PushConsumer."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import tenacity
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from adapter.core import naming
from adapter.core.control import CONTROL_TOPIC, ResetAck, ResetRequest, ResetTarget, decode, encode
from adapter.core.delay import DelayLevels
from adapter.core.timespec import format_time
from adapter.io.control import ControlChannel
from adapter.io.topics import ensure_topics, plan_topics
from adapter.services.dlq import read_dlq
from adapter.services.redrive import redrive

pytestmark = pytest.mark.integration

TopicFactory = Callable[..., str]


# --- helpers ---------------------------------------------------------------------------------
def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2, exactly one line on stderr naming the problem, no traceback."""
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("rmq-kafka: error: "), lines
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_until(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def produce(
    bootstrap: str,
    records: list[tuple[str, int, dict[str, str], int | None]],
    **conf: Any,
) -> None:
    """``(kafka topic, partition, headers, timestamp ms)`` records, acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    errors: list[Any] = []
    for topic, partition, headers, ts in records:
        producer.produce(
            topic,
            value=b"body",
            partition=partition,
            headers=[(k, v.encode()) for k, v in headers.items()],
            timestamp=ts or 0,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not errors, errors


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in fut.result(timeout=15).topic_partitions
        if tp.offset >= 0
    }


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for ``group`` as a (momentary) simple consumer, leaving it empty."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    # a new group's coordinator may still be loading or moving: NOT_COORDINATOR is retriable
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(30),
        wait=tenacity.wait_exponential(multiplier=0.1, max=2),
        retry=tenacity.retry_if_exception_type(KafkaException),
        reraise=True,
    )
    try:
        retrying(
            c.commit,
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


#: a describe answered by a broker that is not (yet) the group's coordinator
_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=15)


def wait_stable(bootstrap: str, group: str, members: int, partitions: int) -> None:
    """Until the group has ``members`` members sharing all ``partitions`` partitions."""

    def stable() -> bool:
        try:
            d = describe(bootstrap, group)
        except KafkaException as exc:  # a new group's coordinator loading or moving
            err = exc.args[0]
            if err.retriable() or err.code() in _COORDINATOR_MOVING:
                return False
            raise
        owned = sum(len(m.assignment.topic_partitions) for m in d.members)
        return (
            d.state.name == "STABLE"
            and len(d.members) == members
            and all(m.assignment.topic_partitions for m in d.members)
            and owned == partitions
        )

    wait_until(stable, 60, f"group {group} stable with {members} members")


class LiveMember:
    """A live member of ``group``: a plain Consumer subscribed to ``topic`` (it consumes but
    never commits by itself), and, when ``respond``, a ControlChannel through which it applies
    forced resets: seek + commit its owned partitions with that consumer, then acknowledge."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, client_id: str, *, respond: bool = True
    ) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.client_id, self.respond = client_id, respond
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.requests: list[ResetRequest] = []
        self.failure: BaseException | None = None
        self.member_id: str | None = None
        self.thread = threading.Thread(target=self._run, name=client_id, daemon=True)

    def __enter__(self) -> LiveMember:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.failure is not None:
            raise AssertionError(f"member {self.client_id} failed") from self.failure

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.failure = exc

    def _loop(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": self.client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
            }
        )
        consumer.subscribe([self.topic])
        channel: ControlChannel | None = None
        try:
            while not self.stop.is_set():
                consumer.poll(0.05)
                if not consumer.assignment():
                    continue
                self.member_id = consumer.memberid()
                if self.respond and channel is None:
                    channel = ControlChannel(
                        {"bootstrap.servers": self.bootstrap}, self.group, self.member_id
                    )
                    channel.open()
                self.ready.set()
                if channel is None:
                    continue
                for request in channel.poll():
                    self.requests.append(request)
                    owned = [(tp.topic, tp.partition) for tp in consumer.assignment()]
                    targets = request.offsets_for(owned)
                    offsets = [TopicPartition(t, p, o) for (t, p), o in targets.items()]
                    for tp in offsets:
                        # not fetching yet: the committed offset is where it starts anyway
                        with contextlib.suppress(KafkaException):
                            consumer.seek(tp)
                    if offsets:
                        consumer.commit(offsets=offsets, asynchronous=False)
                    channel.acknowledge(request, targets)
        finally:
            if channel is not None:
                channel.close()
            consumer.close()


@pytest.fixture
def bootstrap(kafka_bootstrap_servers: str) -> str:
    return kafka_bootstrap_servers


# --- group progress --------------------------------------------------------------------------
def test_group_progress_per_partition_with_members_retry_topic_and_dlq(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    group = kafka_group_id
    topic = kafka_topic_factory("orders", partitions=2)
    ensure_topics(
        {"bootstrap.servers": bootstrap},
        plan_topics(groups=[group], partitions=1, include_schedule=False),
    )
    retry = naming.to_kafka(naming.retry_topic(group))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    produce(bootstrap, [(topic, i % 2, {"UNIQ_KEY": f"m{i}"}, None) for i in range(10)])
    produce(bootstrap, [(retry, 0, {"RECONSUME_TIME": "1"}, None)] * 3)
    produce(bootstrap, [(dlq, 0, {"RMQ_DLQ_REASON": "MAX_RECONSUME_TIMES"}, None)] * 2)
    commit(bootstrap, group, {(topic, 0): 2, (topic, 1): 5, (retry, 0): 1})

    out = cli("group", "progress", "--group", group, "-b", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {(r["topic"], r["partition"]): r for r in data["partitions"]}
    assert set(rows) == {(topic, 0), (topic, 1), (f"%RETRY%{group}", 0)}
    assert (rows[(topic, 0)]["committed"], rows[(topic, 0)]["end"], rows[(topic, 0)]["lag"]) == (
        2,
        5,
        3,
    )
    assert rows[(topic, 1)]["lag"] == 0
    assert rows[(f"%RETRY%{group}", 0)]["lag"] == 2
    assert rows[(f"%RETRY%{group}", 0)]["kafka_topic"] == retry
    assert data["lag"] == 5 and data["state"] == "EMPTY" and data["members"] == []
    assert data["dlq"] == {
        "topic": f"%DLQ%{group}",
        "kafka_topic": dlq,
        "exists": True,
        "size": 2,
        "partitions": 1,
    }

    # with a live member: its client id, host and assignment (logical names)
    with LiveMember(bootstrap, group, topic, "progress-member", respond=False) as member:
        wait_stable(bootstrap, group, 1, 2)
        out = cli("group", "progress", "--group", group, "-b", bootstrap)
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert "state STABLE  members 1" in text
        assert f"member progress-member@127.0.0.1  {topic}[0,1]  ({member.member_id})" in text
        assert f"%RETRY%{group}[0]" in text and "rmq.retry" not in text
        assert f"%DLQ%{group}: 2 message(s) in 1 partition(s)" in text
        assert "total lag 5" in text
    print(out.stdout)  # an example for the docs (pytest -s)


def test_group_progress_lag_skips_a_trailing_transaction_marker(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    """Exactly-once forwarding leaves a commit marker after the last record: a group that read
    everything has end - committed = 1 but nothing left to read, so its lag is 0."""
    topic = kafka_topic_factory("txn")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"x%d" % i, partition=0)
    producer.commit_transaction(30)
    commit(bootstrap, kafka_group_id, {(topic, 0): 3})
    out = cli("group", "progress", "--group", kafka_group_id, "-b", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    [row] = [r for r in json.loads(out.stdout)["partitions"] if r["topic"] == topic]
    assert (row["committed"], row["end"], row["lag"]) == (3, 4, 0)


def test_group_progress_counts_a_redriven_message_on_a_retry_topic_never_committed(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    """A group that read its topic but never its retry topic (nothing had failed) gets a
    message redriven there: the retry topic has no committed offset, and the group reads it
    from its start, so the message is owed (it printed ``-`` and ``total lag 0``).  Its
    other topics start by ``--consume-from``: ``last`` (the default) owes nothing of a
    partition without a committed offset, ``first`` its whole log."""
    group = kafka_group_id
    conf = {"bootstrap.servers": bootstrap}
    topic = kafka_topic_factory("redriven", partitions=2)
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    produce(bootstrap, [(topic, 0, {}, None)] * 4 + [(topic, 1, {}, None)] * 3)
    commit(bootstrap, group, {(topic, 0): 4})  # partition 1: no committed offset
    produce(bootstrap, [(dlq, 0, {"UNIQ_KEY": "d0", "DLQ_ORIGIN_TOPIC": topic}, None)])
    assert redrive(conf, group, read_dlq(conf, group)).sent == 1

    out = cli("group", "progress", "--group", group, "-b", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {(r["topic"], r["partition"]): r for r in data["partitions"]}
    retry_row = rows[(f"%RETRY%{group}", 0)]
    assert (retry_row["committed"], retry_row["lag"]) == (None, 1)
    assert rows[(topic, 1)]["lag"] == 0  # consume_from_where last: starts at the end
    assert data["lag"] == 1
    out = cli("group", "progress", "--group", group, "-b", bootstrap, "--consume-from", "first")
    assert out.returncode == 0, out.stderr
    assert "total lag 4" in out.stdout  # the whole of partition 1, and the redriven message


# --- reset-offset ----------------------------------------------------------------------------
def test_reset_offset_on_an_empty_group_to_a_time_earliest_and_latest(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    group = kafka_group_id
    topic = kafka_topic_factory("reset", partitions=2)
    t0 = now_ms() - 60_000
    # partition 0: t0, t0+10s, t0+20s, t0+30s; partition 1: t0+5s, t0+15s
    produce(bootstrap, [(topic, 0, {}, t0 + 10_000 * i) for i in range(4)])
    produce(bootstrap, [(topic, 1, {}, t0 + 5_000 + 10_000 * i) for i in range(2)])
    commit(bootstrap, group, {(topic, 0): 4, (topic, 1): 2})

    when = format_time(t0 + 12_000)
    out = cli(
        "group",
        "reset-offset",
        "--group",
        group,
        "--topic",
        topic,
        "--to-time",
        when,
        "-b",
        bootstrap,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"reset group {group} on {topic} to {when} (group empty: offsets altered)"
    assert lines[1].split() == [f"{topic}[0]", "4", "→", "2"]
    assert lines[2].split() == [f"{topic}[1]", "2", "→", "1"]
    assert committed(bootstrap, group) == {(topic, 0): 2, (topic, 1): 1}
    print(out.stdout)

    # a time after every record: the end; an offset in another zone is the same instant
    later = format_time(t0 + 59_000).replace("Z", "+00:00")
    out = cli(
        "group",
        "reset-offset",
        "--group",
        group,
        "--topic",
        topic,
        "--to-time",
        later,
        "-b",
        bootstrap,
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mode"] == "admin" and data["target"]["kind"] == "time"
    assert [(r["partition"], r["old"], r["new"]) for r in data["partitions"]] == [
        (0, 2, 4),
        (1, 1, 2),
    ]
    print(out.stdout)

    out = cli(
        "group",
        "reset-offset",
        "--group",
        group,
        "--topic",
        topic,
        "--to-earliest",
        "-b",
        bootstrap,
    )
    assert out.returncode == 0, out.stderr
    assert committed(bootstrap, group) == {(topic, 0): 0, (topic, 1): 0}
    out = cli(
        "group", "reset-offset", "--group", group, "--topic", topic, "--to-latest", "-b", bootstrap
    )
    assert out.returncode == 0, out.stderr
    assert committed(bootstrap, group) == {(topic, 0): 4, (topic, 1): 2}


def test_reset_offset_refuses_a_live_group_naming_its_members(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    topic = kafka_topic_factory("live")
    produce(bootstrap, [(topic, 0, {}, None)] * 3)
    with LiveMember(bootstrap, kafka_group_id, topic, "busy-member", respond=False):
        wait_stable(bootstrap, kafka_group_id, 1, 1)
        before = committed(bootstrap, kafka_group_id)
        out = cli(
            "group",
            "reset-offset",
            "--group",
            kafka_group_id,
            "--topic",
            topic,
            "--to-earliest",
            "-b",
            bootstrap,
        )
        line = assert_one_line_error(
            out,
            f"group {kafka_group_id!r} has 1 live member(s)",
            "busy-member@127.0.0.1",
            "--force",
        )
        assert committed(bootstrap, kafka_group_id) == before
    print(line)


def test_forced_reset_is_applied_and_acknowledged_by_every_live_member(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    group = kafka_group_id
    topic = kafka_topic_factory("force", partitions=4)
    produce(bootstrap, [(topic, i % 4, {}, None) for i in range(40)])
    commit(bootstrap, group, {(topic, p): 10 for p in range(4)})
    with (
        LiveMember(bootstrap, group, topic, "member-a") as a,
        LiveMember(bootstrap, group, topic, "member-b") as b,
    ):
        wait_until(lambda: a.ready.is_set() and b.ready.is_set(), 60, "members ready")
        wait_stable(bootstrap, group, 2, 4)
        out = cli(
            "group",
            "reset-offset",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--force",
            "--timeout",
            "20",
            "-b",
            bootstrap,
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith(
            f"reset group {group} on {topic} to earliest (applied by the live members, request "
        )
        rows = [line.split() for line in lines[1:]]
        assert sorted(r[0] for r in rows) == [f"{topic}[{p}]" for p in range(4)]
        assert all(r[1:5] == ["10", "→", "0", "by"] for r in rows), rows
        assert {r[5] for r in rows} == {"member-a@127.0.0.1", "member-b@127.0.0.1"}
        assert committed(bootstrap, group) == {(topic, p): 0 for p in range(4)}
        print(out.stdout)

        # --json, to a time, through the same members
        out = cli(
            "group",
            "reset-offset",
            "--group",
            group,
            "--topic",
            topic,
            "--to-latest",
            "--force",
            "--json",
            "-b",
            bootstrap,
        )
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["mode"] == "members" and data["not_applied"] == []
        assert {r["partition"]: (r["old"], r["new"]) for r in data["partitions"]} == {
            p: (0, 10) for p in range(4)
        }
        assert {r["by_client_id"] for r in data["partitions"]} == {"member-a", "member-b"}
        assert committed(bootstrap, group) == {(topic, p): 10 for p in range(4)}
        print(out.stdout)
        assert len(a.requests) == len(b.requests) == 2


def test_a_running_push_consumer_applies_a_forced_reset_and_reads_again(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    """The PushConsumer itself answers ``reset-offset --force``: its running member waits for
    its batches, seeks, commits and acknowledges, and the messages are delivered again."""
    from adapter import ConsumeConcurrentlyStatus, PushConsumer

    group = kafka_group_id
    topic = kafka_topic_factory("pushreset", partitions=2)
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], _ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            seen.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "pusher",
            "auto.offset.reset": "earliest",
        },
        namespace=f"r{uuid.uuid4().hex[:10]}",
        delay_levels="1s",
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    bodies = [b"m-%d" % i for i in range(20)]
    with consumer:
        producer = Producer({"bootstrap.servers": bootstrap})
        for i, body in enumerate(bodies):
            producer.produce(topic, value=body, partition=i % 2)
        assert producer.flush(30) == 0
        wait_until(lambda: len(seen) >= 20, 60, "the first delivery")
        wait_until(
            lambda: (
                committed(bootstrap, group).get((topic, 0)) == 10
                and committed(bootstrap, group).get((topic, 1)) == 10
            ),
            30,
            "offsets committed",
        )
        out = cli(
            "group",
            "reset-offset",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--force",
            "--json",
            "--timeout",
            "30",
            "-b",
            bootstrap,
        )
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["mode"] == "members" and data["not_applied"] == [], data
        assert {r["partition"]: (r["old"], r["new"]) for r in data["partitions"]} == {
            0: (10, 0),
            1: (10, 0),
        }
        assert {r["by_client_id"] for r in data["partitions"]} == {"pusher"}
        wait_until(lambda: len(seen) >= 40, 60, "the second delivery after the reset")
        consumer.check_alive()
    assert sorted(seen) == sorted(bodies * 2)
    assert committed(bootstrap, group)[(topic, 0)] == 10


def test_forced_reset_fails_clearly_when_a_member_does_not_acknowledge(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    group = kafka_group_id
    topic = kafka_topic_factory("silent", partitions=2)
    produce(bootstrap, [(topic, i % 2, {}, None) for i in range(10)])
    with (
        LiveMember(bootstrap, group, topic, "talker") as talker,
        LiveMember(bootstrap, group, topic, "mute", respond=False),
    ):
        wait_until(talker.ready.is_set, 60, "the talker ready")
        wait_stable(bootstrap, group, 2, 2)
        started = time.monotonic()
        out = cli(
            "group",
            "reset-offset",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--force",
            "--timeout",
            "3",
            "-b",
            bootstrap,
        )
        assert time.monotonic() - started < 60
        line = assert_one_line_error(
            out, "not confirmed", "no acknowledgement within 3 s from mute@127.0.0.1"
        )
        # what was applied is still reported
        assert "by talker@127.0.0.1" in out.stdout and "NOT reset" in out.stdout
    print(out.stdout + line)


def test_control_channel_sees_only_new_requests_of_its_group(bootstrap: str) -> None:
    group = f"g-{uuid.uuid4().hex}"
    other = f"g-{uuid.uuid4().hex}"
    conf = {"bootstrap.servers": bootstrap}

    def request(group_: str, expires_in_ms: int = 30_000) -> ResetRequest:
        now = now_ms()
        return ResetRequest(
            uuid.uuid4().hex,
            group_,
            "orders",
            "orders",
            ResetTarget.earliest(),
            {0: 0},
            now,
            now + expires_in_ms,
        )

    def publish(key: str, value: bytes) -> None:
        producer = Producer(conf)
        producer.produce(CONTROL_TOPIC, key=key.encode(), value=value)
        assert producer.flush(10) == 0

    early = request(group)
    ControlChannel(conf, group, "member-1").open()  # creates the topic if missing
    publish(group, encode(early))  # before the channel below opened: not seen
    with ControlChannel(conf, group, "member-1") as channel:
        mine, theirs = request(group), request(other)
        expired = request(group, expires_in_ms=0)
        publish(group, encode(ResetAck("x", group, "m", {})))
        publish(group, b"{not json")
        publish(other, encode(theirs))
        publish(group, encode(expired))
        publish(group, encode(mine))
        publish(group, encode(mine))  # a duplicate
        seen: list[ResetRequest] = []

        def polled() -> bool:
            seen.extend(channel.poll())
            return mine in seen

        wait_until(polled, 20, "the request")
        quiet_until = time.monotonic() + 1.0  # nothing more comes: no duplicate, no other
        while time.monotonic() < quiet_until:
            polled()
            time.sleep(0.05)
        assert seen == [mine]
        assert channel.malformed == 1
        channel.acknowledge(mine, {("orders", 0): 0})
    # the acknowledgement is on the topic, keyed by the group
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        reader.assign([TopicPartition(CONTROL_TOPIC, 0, 0)])
        acks: list[Any] = []

        def find() -> bool:
            m = reader.poll(0.2)
            if m is not None and not m.error() and m.key() == group.encode():
                with_ack = decode(m.value()) if m.value() != b"{not json" else None
                if isinstance(with_ack, ResetAck) and with_ack.request_id == mine.request_id:
                    acks.append(with_ack)
            return bool(acks)

        wait_until(find, 20, "the acknowledgement")
        assert acks[0] == ResetAck(mine.request_id, group, "member-1", {("orders", 0): 0})
    finally:
        reader.close()


# --- msg show --------------------------------------------------------------------------------
@pytest.fixture
def journey_topics(bootstrap: str, kafka_topic_factory: TopicFactory) -> Iterator[dict[str, str]]:
    group = f"svc-{uuid.uuid4().hex[:8]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    levels = DelayLevels.parse("1s 5s 10s 30s")
    ensure_topics(
        {"bootstrap.servers": bootstrap},
        plan_topics(groups=[group], delay_levels=levels, namespace=ns, partitions=1),
    )
    yield {
        "group": group,
        "ns": ns,
        "topic": kafka_topic_factory("orders", partitions=2),
        "l3": naming.to_kafka(naming.schedule_topic(3, levels, ns)),
        "l4": naming.to_kafka(naming.schedule_topic(4, levels, ns)),
        "retry": naming.to_kafka(naming.retry_topic(group)),
        "dlq": naming.to_kafka(naming.dlq_topic(group)),
    }


def test_msg_show_prints_the_journey_through_retries_to_the_dlq(
    bootstrap: str, journey_topics: dict[str, str]
) -> None:
    """The hop records a failing message leaves (produced directly, with the documented
    headers): sent, parked on level 3, forwarded to the retry topic, parked on level 4,
    forwarded again, dead-lettered."""
    j = journey_topics
    group, ns, topic = j["group"], j["ns"], j["topic"]
    t0 = now_ms() - 30_000
    msg_id = f"ID-{uuid.uuid4().hex}"
    key = f"order-{uuid.uuid4().hex[:6]}"
    user = {"UNIQ_KEY": msg_id, "KEYS": f"{key} other", "TAGS": "TagA"}
    hop = {**user, "ORIGIN_MESSAGE_ID": msg_id, "RMQ_GROUP": group, "RETRY_TOPIC": topic}
    failure = {"RMQ_FAILURE_TYPE": "ValueError", "RMQ_FAILURE_MESSAGE": "downstream says no"}
    produce(
        bootstrap,
        [  # not in time order: the journey is ordered by time
            (
                j["dlq"],
                0,
                {
                    **hop,
                    **failure,
                    "RECONSUME_TIME": "3",
                    "RMQ_DLQ_REASON": "MAX_RECONSUME_TIMES",
                    "RMQ_DLQ_TIME_MS": str(t0 + 20_000),
                },
                t0 + 20_000,
            ),
            (topic, 1, user, t0),
            (
                j["l3"],
                0,
                {
                    **hop,
                    **failure,
                    "RECONSUME_TIME": "1",
                    "REAL_TOPIC": f"%RETRY%{group}",
                    "DELAY": "3",
                    "RMQ_DUE_MS": str(t0 + 1_010),
                },
                t0 + 10,
            ),
            (
                j["retry"],
                0,
                {
                    **hop,
                    "RECONSUME_TIME": "1",
                    "REAL_TOPIC": f"%RETRY%{group}",
                    "RMQ_DUE_MS": str(t0 + 1_010),
                },
                t0 + 1_020,
            ),
            (
                j["l4"],
                0,
                {
                    **hop,
                    **failure,
                    "RECONSUME_TIME": "2",
                    "REAL_TOPIC": f"%RETRY%{group}",
                    "DELAY": "4",
                    "RMQ_DUE_MS": str(t0 + 4_030),
                },
                t0 + 1_030,
            ),
            (
                j["retry"],
                0,
                {
                    **hop,
                    "RECONSUME_TIME": "2",
                    "REAL_TOPIC": f"%RETRY%{group}",
                    "RMQ_DUE_MS": str(t0 + 4_030),
                },
                t0 + 4_040,
            ),
            (topic, 0, {"UNIQ_KEY": f"other-{uuid.uuid4().hex}", "KEYS": key}, t0 + 5),  # same key
        ],
    )
    since = format_time(t0 - 1000)
    out = cli("msg", "show", "--id", msg_id, "--topic", topic, "--since", since, "-b", bootstrap)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    texts = [line.split("  ", 2)[2] for line in lines[1:7]]
    why = "ValueError: downstream says no"
    assert lines[0] == f"message {msg_id} (keys {key} other, tags TagA): 6 hop(s), dead-lettered"
    assert texts == [
        f"sent to {topic}[1]@0",
        f"failed in group {group} (RECONSUME_TIME=1, {why}) → parked on level 3 "
        f"({ns}%SCHEDULE_TOPIC_XXXX/L03-10s[0]@0) due at {format_time(t0 + 1_010)}",
        f"forwarded to %RETRY%{group}[0]@0 (RECONSUME_TIME=1)",
        f"failed in group {group} (RECONSUME_TIME=2, {why}) → parked on level 4 "
        f"({ns}%SCHEDULE_TOPIC_XXXX/L04-30s[0]@0) due at {format_time(t0 + 4_030)}",
        f"forwarded to %RETRY%{group}[0]@1 (RECONSUME_TIME=2)",
        f"dead-lettered to %DLQ%{group}[0]@0 (MAX_RECONSUME_TIMES, RECONSUME_TIME=3, {why})",
    ]
    assert lines[1].startswith(f"  {format_time(t0)}  ")
    assert lines[-1].startswith("scanned ") and f"since {since}" in lines[-1]
    assert "rmq." not in out.stdout  # logical names only
    print(out.stdout)

    # --json; without --topic the journey starts at the first failure
    out = cli("msg", "show", "--id", msg_id, "--since", since, "-b", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    [journey] = data["journeys"]
    assert [h["kind"] for h in journey["hops"]] == [
        "failed",
        "retry",
        "failed",
        "retry",
        "dead-lettered",
    ]
    assert journey["hops"][0]["topic"] == f"{ns}%SCHEDULE_TOPIC_XXXX/L03-10s"
    assert (
        journey["hops"][0]["level"] == 3 and journey["hops"][-1]["reason"] == "MAX_RECONSUME_TIMES"
    )
    assert topic not in data["topics"] and f"%DLQ%{group}" in data["topics"]
    print(out.stdout)

    # by key: both messages that carry it
    out = cli(
        "msg", "show", "--key", key, "--topic", topic, "--since", since, "-b", bootstrap, "--json"
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)["journeys"]
    assert len(found) == 2 and found[0]["msg_id"] == msg_id
    assert [h["kind"] for h in found[1]["hops"]] == ["sent"]


def test_msg_show_window_bound_and_not_found(
    bootstrap: str, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory("old")
    hours_ago = now_ms() - 3 * 3_600_000
    plain = f"{topic}:0:0"  # a plain Kafka record: its id is topic:partition:offset
    # two records: the bound below stops the scan before its end
    produce(bootstrap, [(topic, 0, {"tenant": "t1"}, hours_ago)] * 2)
    out = cli("msg", "show", "--id", plain, "--topic", topic, "--since", "1h", "-b", bootstrap)
    assert out.returncode == 1 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert f"no record of message {plain!r}" in out.stderr
    out = cli("msg", "show", "--id", plain, "--topic", topic, "--since", "4h", "-b", bootstrap)
    assert out.returncode == 0, out.stderr
    assert f"sent to {topic}[0]@0" in out.stdout
    # the bound: after one record the scan stops and says so
    out = cli(
        "msg",
        "show",
        "--id",
        "nothing-like-it",
        "--topic",
        topic,
        "--since",
        "4h",
        "--max-records",
        "1",
        "-b",
        bootstrap,
    )
    assert out.returncode == 1 and "stopped at --max-records 1" in out.stderr


# --- schedule status -------------------------------------------------------------------------
def test_schedule_status_per_delay_level(bootstrap: str) -> None:
    ns = f"ns{uuid.uuid4().hex[:6]}"
    levels = DelayLevels.parse("1s 5s")
    ensure_topics(
        {"bootstrap.servers": bootstrap},
        plan_topics(delay_levels=levels, namespace=ns, partitions=1),
    )
    l2 = naming.to_kafka(naming.schedule_topic(2, levels, ns))
    service = f"rmq-schedule-service.{ns}"
    now = now_ms()
    dues = [now - 9_000, now - 4_000, now + 60_000]
    produce(
        bootstrap, [(l2, 0, {"REAL_TOPIC": "orders", "RMQ_DUE_MS": str(d)}, None) for d in dues]
    )
    # no service has run yet: every entry waits, and the status says why
    out = cli("schedule", "status", "--namespace", ns, "-b", bootstrap)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == (
        f"no ScheduleService has run in group {service}: what waits here is forwarded once "
        "one starts (rmq-kafka schedule-service run)"
    )
    assert "total waiting 3" in out.stdout
    out = cli("schedule", "status", "--namespace", ns, "-b", bootstrap, "--json")
    assert json.loads(out.stdout)["service_seen"] is False
    commit(bootstrap, service, {(l2, 0): 1})
    out = cli("schedule", "status", "--namespace", ns, "-b", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["group"] == service and data["namespace"] == ns and data["waiting"] == 2
    level1, level2 = data["levels"]
    assert (level1["level"], level1["topic"], level1["waiting"]) == (
        1,
        f"{ns}%SCHEDULE_TOPIC_XXXX/L01-1s",
        0,
    )
    assert (level2["level"], level2["delay"], level2["waiting"]) == (2, "5s", 2)
    assert level2["oldest_due_ms"] == dues[1] and level2["lag_ms"] >= 4_000
    print(out.stdout)
    out = cli("schedule", "status", "--namespace", ns, "-b", bootstrap)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert (
        lines[0] == f"ScheduleService group {service}  namespace {ns}  state EMPTY  members: none"
    )
    row = lines[3].split()
    assert row[:4] == ["2", f"{ns}%SCHEDULE_TOPIC_XXXX/L02-5s", "2", format_time(dues[1])]
    print(out.stdout)

    # another group name; a namespace without delay-level topics
    commit(bootstrap, "custom-svc-" + ns, {(l2, 0): 3})
    out = cli(
        "schedule",
        "status",
        "--namespace",
        ns,
        "--group",
        "custom-svc-" + ns,
        "-b",
        bootstrap,
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["waiting"] == 0
    out = cli("schedule", "status", "--namespace", "no-such-" + ns, "-b", bootstrap)
    assert_one_line_error(out, "no delay-level topics")


# --- failures --------------------------------------------------------------------------------
def test_every_command_fails_with_one_clear_line(
    bootstrap: str, kafka_topic_factory: TopicFactory, kafka_group_id: str
) -> None:
    topic = kafka_topic_factory("bad")
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    b = ("-b", bootstrap)
    assert_one_line_error(
        cli("group", "progress", "--group", missing, *b),
        f"group {missing!r} has no committed offsets and no members",
    )
    assert_one_line_error(
        cli("group", "reset-offset", "--group", missing, "--topic", topic, "--to-earliest", *b),
        f"group {missing!r} has no committed offsets and no members",
    )
    assert_one_line_error(cli("group", "progress", "--group", "", *b), "group=''")
    assert_one_line_error(
        cli("group", "reset-offset", "--group", "g", "--topic", "rmq.retry.x", "--to-latest", *b),
        "topic='rmq.retry.x'",
        "reserved",
    )
    assert_one_line_error(
        cli("group", "reset-offset", "--group", "g", "--topic", "no such!", "--to-latest", *b),
        "topic='no such!'",
    )
    assert_one_line_error(
        cli(
            "group",
            "reset-offset",
            "--group",
            "g",
            "--topic",
            f"nope-{uuid.uuid4().hex}",
            "--to-latest",
            *b,
        ),
        "does not exist",
    )
    assert_one_line_error(
        cli(
            "group",
            "reset-offset",
            "--group",
            "g",
            "--topic",
            topic,
            "--to-time",
            "2026-11-23 10:00",
            *b,
        ),
        "--to-time='2026-11-23 10:00'",
        "no UTC offset",
    )
    assert_one_line_error(
        cli("msg", "show", "--id", "x", "--since", "yesterday", *b), "--since='yesterday'"
    )
    assert_one_line_error(cli("msg", "show", "--key", "a b", *b), "--key='a b'")
    assert_one_line_error(cli("msg", "show", "--id", "x", "--topic", "%RETRY%", *b), "topic=")
    assert_one_line_error(cli("schedule", "status", "--namespace", "%DLQ", *b), "namespace='%DLQ'")
    # no topic was created by looking names up
    assert not [
        t
        for t in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        if t.startswith("nope-")
    ]

    with socket.socket() as s:  # nothing listens here
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    out = cli("group", "progress", "--group", "g", "-b", dead, "--timeout", "3")
    assert_one_line_error(out, dead)
    assert time.monotonic() - started < 30


def test_dlq_redrive_twice_sends_each_dead_letter_once(bootstrap: str, kafka_group_id: str) -> None:
    """A redrive marks what it sent (the DLQ's redrive group); a second one sends nothing new,
    the list says which were redriven, and again=True redrives on purpose."""
    group = kafka_group_id
    conf = {"bootstrap.servers": bootstrap}
    ensure_topics(conf, plan_topics(groups=[group], partitions=2, include_schedule=False))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    retry = naming.to_kafka(naming.retry_topic(group))

    def retry_count() -> int:
        admin = AdminClient(conf)
        md = admin.list_topics(retry, timeout=10)
        probe = Consumer({**conf, "group.id": f"probe-{uuid.uuid4().hex}"})
        try:
            return sum(
                probe.get_watermark_offsets(TopicPartition(retry, p), timeout=10)[1]
                for p in md.topics[retry].partitions
            )
        finally:
            probe.close()

    headers = [{"UNIQ_KEY": f"d{i}", "DLQ_ORIGIN_TOPIC": "orders"} for i in range(6)]
    produce(bootstrap, [(dlq, i % 2, h, None) for i, h in enumerate(headers)])
    entries = read_dlq(conf, group)
    assert [e.redriven for e in entries] == [False] * 6
    first = redrive(conf, group, entries)
    assert (first.sent, first.already) == (6, 0)
    assert retry_count() == 6

    # run again, with the same list or a fresh read: nothing is sent twice
    again = redrive(conf, group, entries)
    assert (again.sent, again.already) == (0, 6)
    assert redrive(conf, group, read_dlq(conf, group)).sent == 0
    assert retry_count() == 6
    assert [e.redriven for e in read_dlq(conf, group)] == [True] * 6

    # new dead letters: only they go
    produce(bootstrap, [(dlq, 0, {"UNIQ_KEY": "d6", "DLQ_ORIGIN_TOPIC": "orders"}, None)])
    later = redrive(conf, group, read_dlq(conf, group))
    assert (later.sent, later.already) == (1, 6)
    assert retry_count() == 7

    # on purpose: everything again
    assert redrive(conf, group, read_dlq(conf, group), again=True).sent == 7
    assert retry_count() == 14


def test_dlq_read_and_redrive_report_progress(bootstrap: str, kafka_group_id: str) -> None:
    group = kafka_group_id
    conf = {"bootstrap.servers": bootstrap}
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    produce(
        bootstrap,
        [(dlq, 0, {"UNIQ_KEY": f"d{i}", "DLQ_ORIGIN_TOPIC": "orders"}, None) for i in range(5)],
    )
    seen: list[tuple[int, int | None]] = []
    entries = read_dlq(conf, group, progress=lambda done, total: seen.append((done, total)))
    assert len(entries) == 5 and seen[-1] == (5, 5)
    sent: list[tuple[int, int | None]] = []
    assert (
        redrive(conf, group, entries, progress=lambda done, total: sent.append((done, total))).sent
        == 5
    )
    assert sent == [(i, 5) for i in range(1, 6)]
