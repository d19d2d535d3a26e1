"""The console on a broker that requires SASL credentials (SCRAM, with an authorizer): given
the same settings every client takes, its reads, a redrive and the audit log work; without
them it answers a clear 502, never a traceback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from adapter.console.server import start_background
from adapter.console.service import ConsoleSettings
from adapter.core import naming
from adapter.embedded import EmbeddedKafka
from adapter.io.topics import ensure_topics, plan_topics

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret"}
TOKEN = "sasl-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka(
        f"console-sasl-{uuid.uuid4().hex[:6]}",
        scram_users=USERS,
        authorizer=True,
        instances_dir=tmp_path_factory.mktemp("console-sasl"),
    )
    broker.start(fresh=True)
    try:
        yield broker
    finally:
        broker.stop()


def _conf(broker: EmbeddedKafka, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap_servers, **broker.client_security(), **extra}


def _end(conf: dict[str, Any], kafka_topic: str) -> int:
    c = Consumer({**conf, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(kafka_topic, 0), timeout=15)[1])
    finally:
        c.close()


def test_console_reads_and_redrives_with_credentials(sasl_broker: EmbeddedKafka) -> None:
    conf = _conf(sasl_broker)
    group = f"sec-{uuid.uuid4().hex[:8]}"
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    producer = KafkaProducer(conf)
    for i in range(2):
        producer.produce(
            naming.to_kafka(naming.dlq_topic(group)),
            value=b"dead",
            headers=[("UNIQ_KEY", f"s{i}".encode())],
        )
    assert producer.flush(15) == 0
    running = start_background(ConsoleSettings(config=conf, token=TOKEN, timeout_s=15))
    try:
        with httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        ) as api:
            groups = api.get("/api/groups")
            assert groups.status_code == 200, groups.text
            assert [g["group"] for g in groups.json()["groups"]] == [group]
            page = api.get(f"/api/groups/{group}/dlq").json()
            assert [e["msg_id"] for e in page["entries"]] == ["s0", "s1"]
            url = f"/api/groups/{group}/dlq/redrive"
            dry = api.post(url, json={"all": True, "dry_run": True}).json()
            assert dry["would_send"] == 2
            sent = api.post(url, json={"all": True}).json()
            assert sent["sent"] == 2
            retry = naming.to_kafka(naming.retry_topic(group))
            assert _end(conf, retry) == 2
            audit = api.get("/api/audit", params={"group": group}).json()["records"]
            assert [a["sent"] for a in audit] == [2, 0]
    finally:
        running.stop()

    # the same console without the credentials: a clear error, not a traceback
    plain = ConsoleSettings(
        config={"bootstrap.servers": sasl_broker.bootstrap_servers}, token=TOKEN, timeout_s=5
    )
    refused = start_background(plain)
    try:
        r = httpx.get(
            f"{refused.url}/api/groups/{group}/dlq",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=120,
        )
        # a SASL listener closes a connection that does not authenticate: Kafka unreachable
        assert r.status_code == 502 and "Traceback" not in r.text, r.text
        assert "cannot reach any broker" in r.json()["error"]
    finally:
        refused.stop()
