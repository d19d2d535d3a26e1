"""The admin commands on a three-node cluster (replication factor 3, ``min.insync.replicas``
2) with one node down: ``group progress`` and ``schedule status`` answer promptly and report
the partitions it replicated as under-replicated, then ``ok`` once it is back in sync.

(A leaderless partition -- no leader, its offsets cannot be asked -- needs every replica down;
with three replicas and two survivors it cannot happen here: the unit tests cover it.)"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import tenacity
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.cli import main
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.embedded import EmbeddedKafka

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.cluster_tier]

#: how long one admin command may take with a node down
PROMPT_S = 20.0


def create_topic(bootstrap: str, topic: str) -> list[int]:
    """One partition, the cluster's default replication factor (3); its replicas' node ids."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        part = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
        if part is not None and part.leader >= 0 and len(part.isrs) == len(part.replicas):
            return list(part.replicas)
        assert time.monotonic() < deadline, f"{topic} has no leader / full ISR"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, headers: list[dict[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[Any] = []
    for h in headers:
        producer.produce(
            topic,
            value=b"body",
            partition=0,
            headers=[(k, v.encode()) for k, v in h.items()],
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not errors, errors


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` on ``topic[0]`` for ``group`` as a momentary simple consumer."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    retrying = tenacity.Retrying(  # a new group's coordinator may still be loading
        stop=tenacity.stop_after_delay(30),
        wait=tenacity.wait_exponential(multiplier=0.1, max=2),
        retry=tenacity.retry_if_exception_type(KafkaException),
        reraise=True,
    )
    try:
        retrying(consumer.commit, offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``rmq-kafka <args>`` in this process: its stdout; it must succeed within PROMPT_S."""
    capsys.readouterr()
    started = time.monotonic()
    rc = main(list(args))
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert took < PROMPT_S, f"rmq-kafka {' '.join(args)} took {took:.1f} s"
    return out


def until(what: str, probe: Any, timeout: float = 30.0) -> Any:
    """Call ``probe()`` until it returns something truthy (each call is itself bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_progress_and_schedule_status_report_an_under_replicated_partition(
    kafka_cluster: EmbeddedKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"health-{suffix}", f"health-g-{suffix}"
    ns = f"ns{suffix}"
    level = naming.to_kafka(naming.schedule_topic(1, DelayLevels.parse("1s"), ns))
    service = f"rmq-schedule-service.{ns}"

    replicas = create_topic(bootstrap, topic)
    assert len(replicas) == 3, replicas
    create_topic(bootstrap, level)
    produce(bootstrap, topic, [{}] * 5)
    due = time.time_ns() // 1_000_000 - 2_000
    produce(bootstrap, level, [{"REAL_TOPIC": topic, "RMQ_DUE_MS": str(due)}] * 3)
    commit(bootstrap, group, topic, 2)
    commit(bootstrap, service, level, 1)
    cluster.wait_in_sync(topics=[topic, level])

    def progress() -> dict[str, Any]:
        data = json.loads(
            run_cli(capsys, "group", "progress", "--group", group, "-b", bootstrap, "--json")
        )
        [row] = [r for r in data["partitions"] if r["topic"] == topic]
        return dict(row)

    def level_partition() -> dict[str, Any]:
        out = run_cli(capsys, "schedule", "status", "--namespace", ns, "-b", bootstrap, "--json")
        [lvl] = json.loads(out)["levels"]
        [part] = lvl["partitions"]
        return dict(part)

    healthy = progress()
    assert (healthy["status"], healthy["replicas"], healthy["isr"]) == ("ok", 3, 3)
    assert (healthy["committed"], healthy["end"], healthy["lag"]) == (2, 5, 3)

    # a node that replicates both topics but leads neither (and, if it can be, coordinates
    # neither group): its controlled shutdown only shrinks the ISRs
    leaders = {cluster.leader_of(topic, 0), cluster.leader_of(level, 0)}
    candidates = [n for n in replicas if n not in leaders]
    coordinators = {cluster.group_coordinator(group), cluster.group_coordinator(service)}
    victim = next((n for n in candidates if n not in coordinators), candidates[0])
    cluster.node(victim).stop()
    until(
        f"{topic} and {level} under-replicated",
        lambda: {(topic, 0), (level, 0)} <= set(cluster.under_replicated([topic, level])),
    )

    row = until(
        "group progress to report under-replicated",
        lambda: (r := progress())["status"] == "under-replicated" and r,
    )
    assert (row["replicas"], row["isr"]) == (3, 2)
    assert row["leader"] in leaders and row["leader"] != victim
    assert (row["committed"], row["end"], row["lag"]) == (2, 5, 3)  # still read: it has a leader
    text = run_cli(capsys, "group", "progress", "--group", group, "-b", bootstrap)
    lines = text.splitlines()
    [table_row] = [line for line in lines if line.startswith(f"{topic}[0] ")]
    assert table_row.split() == [f"{topic}[0]", "2", "5", "3", "-", "under-replicated"]
    assert "unhealthy partitions (1):" in lines
    assert any(
        line.split()[:2] == [f"{topic}[0]", "under-replicated:"]
        and "2 of 3 replicas in sync" in line
        for line in lines
    ), text
    with capsys.disabled():
        print(text)  # an example for the docs (pytest -s)

    part = until(
        "schedule status to report under-replicated",
        lambda: (p := level_partition())["status"] == "under-replicated" and p,
    )
    assert (part["replicas"], part["isr"], part["waiting"]) == (3, 2, 2)
    text = run_cli(capsys, "schedule", "status", "--namespace", ns, "-b", bootstrap)
    assert text.splitlines()[2].split()[-1] == "under-replicated", text
    assert f"{ns}%SCHEDULE_TOPIC_XXXX/L01-1s[0]  under-replicated: 2 of 3 replicas" in text
    with capsys.disabled():
        print(text)

    # back in sync: ok again, and the tables look as they always did
    cluster.node(victim).start()
    cluster.wait_in_sync(topics=[topic, level])
    row = until("group progress to report ok", lambda: (r := progress())["status"] == "ok" and r)
    assert (row["replicas"], row["isr"], row["lag"]) == (3, 3, 3)
    part = until(
        "schedule status to report ok", lambda: (p := level_partition())["status"] == "ok" and p
    )
    assert (part["isr"], part["waiting"]) == (3, 2)
    text = run_cli(capsys, "group", "progress", "--group", group, "-b", bootstrap)
    assert "unhealthy" not in text and "under-replicated" not in text, text
