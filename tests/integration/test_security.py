"""Security passes through: a SASL/SCRAM broker with ACLs, and every client the project
creates (producer, consumer + its send-back producer, ScheduleService, admin, DLQ tools,
CLI) works with the same credentials; wrong credentials fail fast with a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from adapter import (
    AuthenticationError,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    ScheduleService,
    naming,
)
from adapter.embedded import EmbeddedKafka
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.services.dlq import read_dlq

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"
USERS = {"admin": "admin-secret", "writer": "writer-secret"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka(
        f"sasl-{uuid.uuid4().hex[:6]}",
        scram_users=USERS,
        authorizer=True,
        instances_dir=tmp_path_factory.mktemp("sasl"),
    )
    broker.start(fresh=True)
    try:
        yield broker
    finally:
        broker.stop()


def _conf(broker: EmbeddedKafka, user: str = "admin", **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap_servers, **broker.client_security(user), **extra}


def _wait(cond: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_every_client_works_with_credentials(sasl_broker: EmbeddedKafka, tmp_path: Path) -> None:
    conf = _conf(sasl_broker)
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    ensure_topics(conf, [TopicPlan(topic, topic, 1)])
    deliveries: list[int] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        deliveries.extend(m.reconsume_times for m in msgs)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    consumer = PushConsumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"},
        delay_levels=LEVELS,
        namespace=ns,
        max_reconsume_times=2,
        partitions=1,
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with ScheduleService(conf, delay_levels=LEVELS, namespace=ns, partitions=1), consumer:
        with Producer(conf) as producer:
            producer.send(Message(topic=topic, body=b"secret order", keys=["k"]))
        _wait(lambda: len(read_dlq(conf, group)) == 1)
    assert deliveries == [0, 1, 2]  # the ladder ran: retries went through the ScheduleService
    [entry] = read_dlq(conf, group)
    assert entry.message.body == b"secret order" and entry.reason == "MAX_RECONSUME_TIMES"

    # the CLI takes the same settings with -X / --config-file
    props = tmp_path / "client.properties"
    props.write_text("\n".join(f"{k}={v}" for k, v in sasl_broker.client_security().items()))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            "dlq",
            "list",
            "--group",
            group,
            "-b",
            sasl_broker.bootstrap_servers,
            "--config-file",
            str(props),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert entry.message.msg_id in out.stdout


def test_wrong_credentials_fail_fast_with_a_clear_error(sasl_broker: EmbeddedKafka) -> None:
    bad = _conf(sasl_broker, **{"sasl.password": "not-the-password"})
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info, Producer(bad) as producer:
        producer.send(Message(topic="anything", body=b"x"))
    assert time.monotonic() - started < 15
    assert "invalid credentials" in str(info.value) or "Authentication failed" in str(info.value)


def test_a_principal_that_may_write_the_dlq_but_not_read_it(sasl_broker: EmbeddedKafka) -> None:
    admin_conf = _conf(sasl_broker)
    group = f"g-{uuid.uuid4().hex[:6]}"
    dlq_kafka = naming.to_kafka(naming.dlq_topic(group))
    ensure_topics(admin_conf, [TopicPlan(naming.dlq_topic(group), dlq_kafka, 1)])
    admin = AdminClient(admin_conf)
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            dlq_kafka,
            ResourcePatternType.LITERAL,
            "User:writer",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ] + [
        AclBinding(
            ResourceType.BROKER,  # librdkafka names the CLUSTER resource BROKER (4)
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:writer",
            "*",
            AclOperation.IDEMPOTENT_WRITE,
            AclPermissionType.ALLOW,
        )
    ]
    for fut in admin.create_acls(acls).values():
        fut.result(timeout=10)
    writer = _conf(sasl_broker, "writer")
    # writing is allowed (ACLs propagate asynchronously: retry briefly)
    deadline = time.monotonic() + 20
    while True:
        try:
            with Producer(writer) as producer:
                result = producer.send(Message(topic=naming.dlq_topic(group), body=b"dead"))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert result.topic == naming.dlq_topic(group)
    # reading is not: a clear authorization error, never a silently empty list
    with pytest.raises(AuthenticationError) as info:
        read_dlq(writer, group, timeout_s=5)
    assert "authoriz" in str(info.value).lower() or "not allowed" in str(info.value).lower()
    # the super user still sees the entry
    assert [e.message.body for e in read_dlq(admin_conf, group)] == [b"dead"]


# --- the admin commands (group progress / reset-offset, msg show, schedule status) -----------
def _admin_cli(
    broker: EmbeddedKafka, props: Path, *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            *args,
            "-b",
            broker.bootstrap_servers,
            "--config-file",
            str(props),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _props(tmp_path: Path, settings: dict[str, str], name: str = "client.properties") -> Path:
    props = tmp_path / name
    props.write_text("\n".join(f"{k}={v}" for k, v in settings.items()))
    return props


def test_admin_commands_work_with_credentials(sasl_broker: EmbeddedKafka, tmp_path: Path) -> None:
    """group progress / reset-offset (also --force through rmq.control), msg show and schedule
    status, all with the credentials from --config-file."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka import Producer as RawProducer

    from adapter.core.delay import DelayLevels
    from adapter.io.control import ControlChannel
    from adapter.io.topics import plan_topics

    conf = _conf(sasl_broker)
    props = _props(tmp_path, sasl_broker.client_security())
    topic = f"sec-admin-{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    ns = f"ns{uuid.uuid4().hex[:6]}"
    levels = DelayLevels.parse("1s 5s")
    ensure_topics(
        conf, [TopicPlan(topic, topic, 1), *plan_topics(delay_levels=levels, namespace=ns)]
    )
    producer = RawProducer(conf)
    for i in range(3):
        producer.produce(topic, value=b"x", headers=[("UNIQ_KEY", f"sec-{group}-{i}".encode())])
    producer.produce(
        naming.to_kafka(naming.schedule_topic(2, levels, ns)),
        value=b"x",
        partition=0,
        headers=[("REAL_TOPIC", topic.encode()), ("RMQ_DUE_MS", b"1")],
    )
    assert producer.flush(30) == 0

    def commit(group_: str, kafka_topic: str, offset: int) -> None:
        c = Consumer({**conf, "group.id": group_, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(kafka_topic, 0, offset)], asynchronous=False)
        finally:
            c.close()

    commit(group, topic, 1)
    commit(f"rmq-schedule-service.{ns}", naming.to_kafka(naming.schedule_topic(2, levels, ns)), 0)

    out = _admin_cli(sasl_broker, props, "group", "progress", "--group", group, "--json")
    assert out.returncode == 0, out.stderr
    [row] = [r for r in json.loads(out.stdout)["partitions"] if r["topic"] == topic]
    assert (row["committed"], row["end"], row["lag"]) == (1, 3, 2)
    out = _admin_cli(
        sasl_broker,
        props,
        "group",
        "reset-offset",
        "--group",
        group,
        "--topic",
        topic,
        "--to-earliest",
    )
    assert out.returncode == 0, out.stderr
    assert f"{topic}[0]  1  →  0" in out.stdout
    out = _admin_cli(sasl_broker, props, "msg", "show", "--id", f"sec-{group}-2", "--topic", topic)
    assert out.returncode == 0, out.stderr
    assert f"sent to {topic}[0]@2" in out.stdout
    out = _admin_cli(sasl_broker, props, "schedule", "status", "--namespace", ns, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["waiting"] == 1

    # --force: a live member with a ControlChannel on the same credentials acknowledges
    stop = threading.Event()
    acked: list[Any] = []

    def member() -> None:
        c = Consumer(
            {
                **conf,
                "group.id": group,
                "client.id": "sec-member",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
            }
        )
        c.subscribe([topic])
        channel = None
        try:
            while not stop.is_set():
                c.poll(0.05)
                if not c.assignment():
                    continue
                if channel is None:
                    channel = ControlChannel(conf, group, c.memberid())
                    channel.open()
                    ready.set()
                for request in channel.poll():
                    targets = request.offsets_for(
                        [(tp.topic, tp.partition) for tp in c.assignment()]
                    )
                    c.commit(
                        offsets=[TopicPartition(t, p, o) for (t, p), o in targets.items()],
                        asynchronous=False,
                    )
                    channel.acknowledge(request, targets)
                    acked.append(request)
        finally:
            if channel is not None:
                channel.close()
            c.close()

    ready = threading.Event()
    thread = threading.Thread(target=member, daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        out = _admin_cli(
            sasl_broker,
            props,
            "group",
            "reset-offset",
            "--group",
            group,
            "--topic",
            topic,
            "--to-latest",
            "--force",
            "--timeout",
            "20",
        )
        assert out.returncode == 0, out.stderr
        assert "by sec-member@" in out.stdout and len(acked) == 1
    finally:
        stop.set()
        thread.join(30)


def test_admin_commands_fail_fast_naming_the_user_never_the_password(
    sasl_broker: EmbeddedKafka, tmp_path: Path
) -> None:
    wrong = "not-the-password-4711"
    props = _props(tmp_path, {**sasl_broker.client_security(), "sasl.password": wrong})
    commands = [
        ("group", "progress", "--group", "g"),
        ("group", "reset-offset", "--group", "g", "--topic", "t", "--to-earliest"),
        ("msg", "show", "--id", "x"),
        ("schedule", "status"),
    ]
    for command in commands:
        started = time.monotonic()
        out = _admin_cli(sasl_broker, props, *command)
        elapsed = time.monotonic() - started
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (command, out)
        assert len(lines) == 1 and lines[0].startswith("rmq-kafka: error: "), (command, out.stderr)
        assert "user 'admin'" in lines[0] and "SCRAM-SHA-256" in lines[0], lines[0]
        assert "Traceback" not in out.stderr
        assert wrong not in out.stderr + out.stdout
        assert elapsed < 15, (command, elapsed)
        print(f"{elapsed:.1f}s {lines[0]}")  # pytest -s: the messages as users see them


def test_admin_commands_name_the_principal_without_an_acl(
    sasl_broker: EmbeddedKafka, tmp_path: Path
) -> None:
    """A principal that may not describe the group gets an authorization error naming it."""
    conf = _conf(sasl_broker)
    group = f"g-{uuid.uuid4().hex[:6]}"
    topic = f"acl-{uuid.uuid4().hex[:6]}"
    ensure_topics(conf, [TopicPlan(topic, topic, 1)])
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    props = _props(tmp_path, sasl_broker.client_security("writer"), "writer.properties")
    out = _admin_cli(sasl_broker, props, "group", "progress", "--group", group, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out
    assert "user 'writer'" in lines[0] and "authoriz" in lines[0].lower(), lines[0]
    assert USERS["writer"] not in out.stderr
    print(lines[0])
