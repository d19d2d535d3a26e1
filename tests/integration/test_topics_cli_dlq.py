"""Topic provisioning, the CLI, DLQ list/redrive and the demo, on the real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from adapter import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, ScheduleService
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.message import MessageExt
from adapter.demo import run_demo
from adapter.errors import BrokerUnavailableError, DeadLetterBodyError, MalformedHeaderError
from adapter.io.topics import ensure_group_topics, ensure_topics, plan_topics
from adapter.services.dlq import DeadLetterEntry, read_dlq
from adapter.services.redrive import RedriveError, redrive
from tests.support.consumer_helpers import end_offsets, ensure_configured, set_topic_config

pytestmark = pytest.mark.integration

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


def _wait(cond: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_ensure_group_topics_is_idempotent_with_retention_above_longest_delay(
    kafka_bootstrap_servers: str,
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    group = f"grp.{uuid.uuid4().hex[:6]}_x %|/ 组"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    levels = DelayLevels.parse("1s 2h 3d")
    first = ensure_group_topics(conf, group, delay_levels=levels, namespace=ns, partitions=2)
    assert set(first) == {
        p.logical for p in plan_topics(groups=[group], delay_levels=levels, namespace=ns)
    }
    assert all(first.values())
    second = ensure_group_topics(conf, group, delay_levels=levels, namespace=ns, partitions=2)
    assert not any(second.values())  # idempotent: all existed

    admin = AdminClient(conf)
    md = admin.list_topics(timeout=10)
    retry_kafka = naming.to_kafka(naming.retry_topic(group))
    assert len(md.topics[retry_kafka].partitions) == 2
    schedule = naming.to_kafka(naming.schedule_topic(3, levels, ns))
    res = ConfigResource("topic", schedule)
    cfg = admin.describe_configs([res])[res].result(timeout=10)
    assert int(cfg["retention.ms"].value) >= 2 * 3 * 86_400_000


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_topics_ensure_speaks_logical_names(kafka_bootstrap_servers: str) -> None:
    group = f"cli-{uuid.uuid4().hex[:6]}"
    out = _cli(
        "topics",
        "ensure",
        "--group",
        group,
        "--delay-levels",
        "1s 2s",
        "--namespace",
        group,
        "-b",
        kafka_bootstrap_servers,
        "-X",
        "client.id=cli-test",
    )
    assert out.returncode == 0, out.stderr
    assert f"created  %RETRY%{group}" in out.stdout
    assert f"->  {naming.to_kafka(naming.dlq_topic(group))}" in out.stdout
    again = _cli(
        "topics",
        "ensure",
        "--group",
        group,
        "--delay-levels",
        "1s 2s",
        "--namespace",
        group,
        "-b",
        kafka_bootstrap_servers,
    )
    assert again.returncode == 0 and "created" not in again.stdout


def test_cli_rejects_bad_input_with_the_field_named(kafka_bootstrap_servers: str) -> None:
    out = _cli(
        "topics", "ensure", "--group", "g", "--delay-levels", "1s 5x", "-b", kafka_bootstrap_servers
    )
    assert out.returncode == 2
    assert "'5x'" in out.stderr and "messageDelayLevel" in out.stderr
    out = _cli(
        "topics", "ensure", "--group", "g", "-b", kafka_bootstrap_servers, "-X", "no.such.key=1"
    )
    assert out.returncode == 2 and "no.such.key" in out.stderr


def test_dlq_list_and_redrive_round_trip(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """Dead letters keep body and headers, say why; redrive sends them back to the group."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("dlq")
    group = f"g-{uuid.uuid4().hex[:8]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    healed = threading.Event()
    seen: list[tuple[str, int, str]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            seen.append((m.body.decode(), m.reconsume_times, m.topic))
        if not healed.is_set():
            raise ValueError("downstream says no")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        max_reconsume_times=1,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1), consumer:
        with Producer(conf) as p:
            p.send(
                Message(
                    topic=topic,
                    body=b"order-1",
                    keys=["k1"],
                    tags="TagA",
                    properties={"tenant": "t1"},
                )
            )
        _wait(lambda: len(read_dlq(conf, group)) == 1, what="the DLQ entry")
        [entry] = read_dlq(conf, group)
        assert entry.message.body == b"order-1"
        assert entry.message.keys == "k1" and entry.message.tags == "TagA"
        assert entry.message.properties["tenant"] == "t1"
        assert entry.origin_topic == topic
        assert entry.reason == "MAX_RECONSUME_TIMES"
        assert entry.failure_type == "ValueError" and entry.failure_message == "downstream says no"
        assert entry.message.reconsume_times == 2
        # the CLI lists the same entry as JSON
        out = _cli("dlq", "list", "--group", group, "-b", kafka_bootstrap_servers)
        assert out.returncode == 0, out.stderr
        listed = [json.loads(line) for line in out.stdout.splitlines()]
        assert [e["msg_id"] for e in listed] == [entry.message.msg_id]
        healed.set()
        assert redrive(conf, group, [entry]).sent == 1
        _wait(lambda: ("order-1", 0, topic) in seen[2:], what="the redriven message")
    assert seen[:2] == [("order-1", 0, topic), ("order-1", 1, topic)]


def test_redrive_fetches_an_omitted_body_back_and_refuses_when_it_is_gone(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """A DLQ that refuses a large dead letter gets it without its body (RMQ_BODY_OMITTED);
    redrive reads the body back from the record it names, and when that record has been
    deleted it refuses (naming the message) instead of sending an empty body."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("dlq-big")
    group = f"g-{uuid.uuid4().hex[:8]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    # the retry topic and the DLQ take the same size: the dead-letter copy is refused for
    # its extra headers (reason, time, a 512-character failure message), the redriven copy
    # (without them) fits.  They are created with it: a broker applies a config change a
    # moment after the admin call returns (a record produced at once was judged by the old
    # limit 3 times in 40 and once in 60 here); configs given at creation hold from the start.
    dlq, retry = (naming.to_kafka(t) for t in (naming.dlq_topic(group), naming.retry_topic(group)))
    plans = plan_topics(groups=[group], delay_levels=DelayLevels.coerce(LEVELS), namespace=ns)
    ensure_configured(conf, plans, [dlq, retry], {"max.message.bytes": "8000"})
    big = bytes(range(256)) * 29  # 7424 bytes
    healed = threading.Event()
    seen: list[tuple[bytes, int, str, dict[str, str]]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        m = msgs[0]
        seen.append((m.body, m.reconsume_times, m.topic, dict(m.properties)))
        if healed.is_set():
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        ctx.delay_level_when_next_consume = -1  # straight to the DLQ
        raise ValueError("downstream refused: " + "why " * 200)

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer:
        with Producer(conf) as p:
            p.send(Message(topic=topic, body=big, keys=["big"]))
            p.send(Message(topic=topic, body=b"small", keys=["small"]))
        _wait(lambda: len(read_dlq(conf, group)) == 2, what="the two DLQ entries")
        entries = sorted(read_dlq(conf, group), key=lambda e: e.message.keys or "")
        large, small = entries
        assert large.message.body == b"" and large.message.keys == "big"
        omitted = large.omitted_body
        assert omitted is not None and omitted.size == len(big)
        assert (omitted.kafka_topic, omitted.partition, omitted.offset) == (topic, 0, 0)
        assert small.omitted_body is None and small.message.body == b"small"

        healed.set()
        result = redrive(conf, group, entries)
        assert (result.sent, result.skipped, result.failed) == (2, (), ())
        _wait(lambda: len(seen) == 4, what="the two redriven messages")
        redriven = {body: (times, t, props) for body, times, t, props in seen[2:]}
        assert set(redriven) == {big, b"small"}  # the whole body, byte for byte
        assert redriven[big][:2] == (0, topic)
        assert "RMQ_BODY_OMITTED" not in redriven[big][2]

    # a retry topic too small for the redriven copy: the others are still sent, and the
    # refused one is named
    set_topic_config(kafka_bootstrap_servers, [retry], "max.message.bytes", "2000")
    with pytest.raises(RedriveError) as refused:
        redrive(conf, group, entries, again=True)
    assert refused.value.result.sent == 1
    [(msg_id, _, why)] = refused.value.result.failed
    assert msg_id == large.message.msg_id and "too large" in why, why

    # the original record is deleted (retention): redrive refuses, naming the message
    gone = TopicPartition(topic, 0, 2)
    admin = AdminClient(conf)  # kept: a collected client never completes its futures
    admin.delete_records([gone])[gone].result(timeout=10)
    with pytest.raises(DeadLetterBodyError) as info:
        redrive(conf, group, entries, again=True)
    [(msg_id, where, why)] = info.value.missing
    assert msg_id == large.message.msg_id and where == f"{topic}[0]@0"
    assert "no longer there" in why and large.message.msg_id in str(info.value)

    def retry_end() -> int:  # records in the retry topic, all partitions
        return sum(end_offsets(conf, retry).values())

    before = retry_end()
    # the CLI says the same and exits non-zero; --skip-missing-bodies sends the rest (--all:
    # both entries were redriven once already)
    out = _cli("dlq", "redrive", "--group", group, "--all", "-b", kafka_bootstrap_servers)
    assert out.returncode != 0 and large.message.msg_id in out.stderr, out
    out = _cli(
        "dlq",
        "redrive",
        "--group",
        group,
        "--all",
        "--skip-missing-bodies",
        "-b",
        kafka_bootstrap_servers,
    )
    assert out.returncode == 0 and "redrove 1 of 2" in out.stdout, out
    assert f"skipped {large.message.msg_id}" in out.stderr, out
    assert retry_end() == before + 1


def test_redrive_refuses_an_omitted_body_that_does_not_match_or_cannot_be_read(
    kafka_bootstrap_servers: str, kafka_topic_factory: Any
) -> None:
    """The record an omitted body points at must be the same message (size, message id);
    a malformed RMQ_BODY_OMITTED names the header and its value.  Nothing is sent."""
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    topic = kafka_topic_factory("dlq-point")
    group = f"g-{uuid.uuid4().hex[:8]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    ensure_group_topics(conf, group, delay_levels=DelayLevels.coerce(LEVELS), namespace=ns)
    with Producer(conf) as p:
        sent = p.send(Message(topic=topic, body=b"abc"))

    def entry(omitted: str, msg_id: str) -> DeadLetterEntry:
        props = {"RMQ_BODY_OMITTED": omitted, "UNIQ_KEY": msg_id}
        raw = tuple((k, v.encode()) for k, v in props.items())
        msg = MessageExt(
            topic=topic,
            body=b"",
            msg_id=msg_id,
            queue_id=0,
            queue_offset=0,
            kafka_topic="elsewhere",
            properties=props,
            raw_headers=raw,
        )
        return DeadLetterEntry.of(msg)

    cases = {
        f"9 bytes; body at {topic}[0]@0": (sent.msg_id, "has 3 bytes, not 9"),
        f"3 bytes; body at {topic}[0]@0": ("OTHER", f"is message {sent.msg_id}"),
        f"3 bytes; body at {topic}[0]@7": (sent.msg_id, "no longer there"),
    }
    for omitted, (msg_id, why) in cases.items():
        with pytest.raises(DeadLetterBodyError) as info:
            redrive(conf, group, [entry(omitted, msg_id)], timeout_s=10)
        [(_, where, said)] = info.value.missing
        assert why in said and where == omitted.split(" at ")[1], said
    with pytest.raises(MalformedHeaderError) as bad:
        redrive(conf, group, [entry("3 bytes at the usual place", sent.msg_id)])
    assert bad.value.field == "RMQ_BODY_OMITTED"
    assert bad.value.value == "3 bytes at the usual place"
    # the right pointer works
    assert redrive(conf, group, [entry(f"3 bytes; body at {topic}[0]@0", sent.msg_id)]).sent == 1


def test_demo_runs_green_on_the_broker(
    kafka_bootstrap_servers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(kafka_bootstrap_servers) == 0
    out = capsys.readouterr().out
    assert "RESULT: OK" in out
    assert "poison: reason=MAX_RECONSUME_TIMES" in out
    assert "dlq-now: reason=LISTENER_REQUESTED" in out


def test_ensure_topics_reports_unreachable_broker_clearly() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "socket.connection.setup.timeout.ms": 1000}
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        ensure_topics(
            conf, plan_topics(groups=["g"], delay_levels=DelayLevels.parse("1s")), timeout_s=3
        )
    assert time.monotonic() - started < 20
    assert f"127.0.0.1:{port}" in str(info.value)  # the error says where it looked


def test_cli_kafka_start_is_idempotent_and_stops(tmp_path: Any) -> None:
    import os

    name = f"cli-{uuid.uuid4().hex[:6]}"
    env = {**os.environ}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "adapter.cli", "kafka", *args, "--name", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )

    try:
        first = run("start")
        assert first.returncode == 0, first.stderr
        bootstrap = first.stdout.strip().splitlines()[-1]
        assert bootstrap.startswith("127.0.0.1:")
        again = run("start")
        assert again.stdout.strip().splitlines()[-1] == bootstrap  # reused, not restarted
        status = json.loads(run("status").stdout)
        assert status["bootstrap.servers"] == bootstrap and status["pid"] > 0
    finally:
        stopped = run("stop")
    assert stopped.stdout.strip() == "stopped"
    assert run("status").returncode == 1


def test_cli_redrive_twice_sends_once_and_list_says_what_was_redriven(
    kafka_bootstrap_servers: str,
) -> None:
    """``dlq redrive`` run twice delivered the same dead letters twice; ``dlq list`` did not
    say which were redriven; ``dlq list`` of a group that never ran said "0 dead letters"."""
    group = f"cli-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": kafka_bootstrap_servers}
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    dlq = naming.to_kafka(naming.dlq_topic(group))
    producer = KafkaProducer(conf)
    for i in range(3):
        producer.produce(dlq, value=b"dead", headers=[("UNIQ_KEY", f"d{i}".encode())])
    assert producer.flush(15) == 0
    b = ("-b", kafka_bootstrap_servers)
    first = _cli("dlq", "redrive", "--group", group, *b)
    assert first.returncode == 0 and "redrove 3 of 3" in first.stdout, first
    second = _cli("dlq", "redrive", "--group", group, *b)
    assert second.returncode == 0 and "redrove 0 of 3" in second.stdout, second
    assert "3 were redriven before" in second.stderr, second
    listed = _cli("dlq", "list", "--group", group, "-v", *b)  # -v after the subcommand too
    assert listed.returncode == 0, listed
    assert [json.loads(line)["redriven"] for line in listed.stdout.splitlines()] == [True] * 3
    again = _cli("dlq", "redrive", "--group", group, "--all", *b)
    assert again.returncode == 0 and "redrove 3 of 3" in again.stdout, again
    assert end_offsets(conf, naming.to_kafka(naming.retry_topic(group))) == {0: 6}

    missing = _cli("dlq", "list", "--group", f"never-{group}", *b)
    assert missing.returncode == 2 and "does not exist" in missing.stderr, missing
