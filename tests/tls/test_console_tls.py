"""The retry console over SASL_SSL: given the TLS settings every client takes, it lists a
group, pages its dead letters, dry-runs and runs a redrive and records both in the audit
log; with a CA that did not sign the broker's certificate it answers a clear 502 naming
``ssl.ca.location``, never a traceback."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from adapter.console.server import start_background
from adapter.console.service import ConsoleSettings
from adapter.core import naming
from adapter.embedded import EmbeddedKafka
from adapter.embedded.tls import make_certificates
from adapter.io.topics import ensure_topics, plan_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKEN = "tls-" + uuid.uuid4().hex


def test_console_reads_and_redrives_over_sasl_ssl(kafka_tls: EmbeddedKafka) -> None:
    conf = kafka_tls.client_config("SASL_SSL")
    group = f"tls-console-{uuid.uuid4().hex[:8]}"
    ensure_topics(conf, plan_topics(groups=[group], partitions=1, include_schedule=False))
    producer = KafkaProducer(conf)
    for i in range(3):
        producer.produce(
            naming.to_kafka(naming.dlq_topic(group)),
            value=b"dead",
            headers=[("UNIQ_KEY", f"t{i}".encode())],
        )
    assert producer.flush(30) == 0
    running = start_background(ConsoleSettings(config=conf, token=TOKEN, timeout_s=30))
    try:
        with httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        ) as api:
            groups = api.get("/api/groups")
            assert groups.status_code == 200, groups.text
            assert group in [g["group"] for g in groups.json()["groups"]]
            page = api.get(f"/api/groups/{group}/dlq").json()
            assert [e["msg_id"] for e in page["entries"]] == ["t0", "t1", "t2"]
            url = f"/api/groups/{group}/dlq/redrive"
            assert api.post(url, json={"all": True, "dry_run": True}).json()["would_send"] == 3
            assert api.post(url, json={"all": True}).json()["sent"] == 3
            assert api.post(url, json={"all": True}).json()["sent"] == 0  # idempotent
            retry = naming.to_kafka(naming.retry_topic(group))
            probe = Consumer({**conf, "group.id": f"probe-{uuid.uuid4().hex}"})
            try:
                ends = probe.get_watermark_offsets(TopicPartition(retry, 0), timeout=30)
            finally:
                probe.close()
            assert ends[1] == 3
            audit = api.get("/api/audit", params={"group": group}).json()["records"]
            assert [a["sent"] for a in audit] == [0, 3, 0]
    finally:
        running.stop()


def test_console_with_a_wrong_ca_answers_a_clear_error(
    kafka_tls: EmbeddedKafka, tmp_path: Path
) -> None:
    other = make_certificates(tmp_path / "other-ca")
    conf = {**kafka_tls.client_config("SASL_SSL"), "ssl.ca.location": str(other.ca)}
    running = start_background(ConsoleSettings(config=conf, token=TOKEN, timeout_s=10))
    try:
        r = httpx.get(
            f"{running.url}/api/groups",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=120,
        )
        assert r.status_code == 502 and "Traceback" not in r.text, r.text
        assert "ssl.ca.location" in r.json()["error"], r.text
    finally:
        running.stop()
