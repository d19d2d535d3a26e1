"""Security passes through: a SASL/SCRAM broker with ACLs, and every client the project
creates (producer, consumer + its send-back producer, ScheduleService, admin, DLQ tools,
CLI) works with the same credentials; wrong credentials fail fast with a clear error."""

from __future__ import annotations

import subprocess
import sys
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
    with pytest.raises(Exception) as info:
        read_dlq(writer, group, timeout_s=5)
    assert "authoriz" in str(info.value).lower() or "not allowed" in str(info.value).lower()
    # the super user still sees the entry
    assert [e.message.body for e in read_dlq(admin_conf, group)] == [b"dead"]
