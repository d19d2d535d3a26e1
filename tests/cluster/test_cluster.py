"""The three-node embedded cluster itself, and what a cluster changes for the adapter's
clients: sends that ride out a leader move at default settings, topics replicated for a
cluster, and bad input (brokers of the bootstrap list down, a replication factor above the
broker count, ``min.insync.replicas`` not met)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from adapter import Message, Producer, PushConsumer
from adapter.cli import main as cli_main
from adapter.core import naming
from adapter.embedded import EmbeddedKafka, EmbeddedKafkaError
from adapter.errors import ConfigError, PossiblyPersistedError
from adapter.io.topics import TopicPlan, ensure_with

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _topic(cluster: EmbeddedKafka, name: str, **config: str) -> str:
    """A one-partition topic at the cluster's defaults (plus ``config``), with a leader."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    ensure_with(admin, [TopicPlan(name, name, 1, dict(config))])
    return name


def _ensure(cluster: EmbeddedKafka, *args: str) -> int:
    """``rmq-kafka topics ensure -b <the cluster> ARGS``, in a namespace of its own."""
    ns = f"rf{time.time_ns()}"
    return cli_main(["topics", "ensure", "-b", cluster.bootstrap_servers, "--namespace", ns, *args])


def test_cluster_defaults_are_productions(kafka_cluster: EmbeddedKafka) -> None:
    """Three running nodes; new topics take 3 replicas, and the adapter's own topics 3
    replicas with min.insync.replicas 2."""
    status = kafka_cluster.status()
    assert status is not None and status.running
    assert [n.node_id for n in status.nodes] == [1, 2, 3]
    assert all(n.running for n in status.nodes)
    assert len(kafka_cluster.bootstrap_servers.split(",")) == 3
    name = _topic(kafka_cluster, f"plain-{time.time_ns()}")
    assert len(kafka_cluster.partitions(name)[0].replicas) == 3
    group = f"g-rf-{time.time_ns()}"
    assert _ensure(kafka_cluster, "--group", group, "--delay-levels", "1s 2s") == 0
    retry = naming.to_kafka(naming.retry_topic(group))
    assert {len(p.replicas) for p in kafka_cluster.partitions(retry).values()} == {3}
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, retry)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    entries = admin.describe_configs([res])[res].result(30)
    assert entries["min.insync.replicas"].value == "2"


def test_leader_of_waits_for_a_topic_that_has_not_reached_every_node(
    kafka_cluster: EmbeddedKafka,
) -> None:
    """A topic just created may not yet be in the metadata of the node that answers (CI once
    asked a node that had not heard of it): ``leader_of`` asks again until its timeout instead
    of failing at once; a topic that never comes is a clear error naming it."""
    topic = f"late-{time.time_ns()}"
    creator = threading.Timer(1.0, _topic, args=(kafka_cluster, topic))
    creator.start()
    try:
        assert kafka_cluster.leader_of(topic, 0, timeout=30) in (1, 2, 3)
    finally:
        creator.join()
    with pytest.raises(EmbeddedKafkaError, match=r"no partition never-[0-9]+\[0\]"):
        kafka_cluster.leader_of(f"never-{time.time_ns()}", 0, timeout=1)


def test_a_default_send_rides_out_a_leader_kill(kafka_cluster: EmbeddedKafka) -> None:
    """Sends at the Producer's defaults while the topic's leader is killed -9: none fails
    (with RocketMQ's 3 s timeout, every send in the leader move's ~10 s failed)."""
    topic = _topic(kafka_cluster, f"ride-{time.time_ns()}")
    leader = kafka_cluster.leader_of(topic, 0)
    failures: list[str] = []
    sent = 0
    with Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers}) as producer:
        first = threading.Event()  # the producer is up (its first send is acknowledged)
        killed = threading.Event()
        sent_before_kill = 0
        killed_at = 0.0

        def kill_soon() -> None:
            nonlocal sent_before_kill, killed_at
            first.wait(60)
            time.sleep(1.0)
            kafka_cluster.node(leader).kill()
            sent_before_kill, killed_at = sent, time.monotonic()
            killed.set()

        killer = threading.Thread(target=kill_soon)
        killer.start()
        give_up = time.monotonic() + 120
        # until well past the leader move (~10 s after the kill)
        while time.monotonic() < give_up and not (
            killed.is_set() and time.monotonic() - killed_at > 19
        ):
            try:
                producer.send(Message(topic=topic, body=b"x%d" % sent))
                sent += 1
                first.set()
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.02)
        killer.join()
    assert kafka_cluster.leader_of(topic, 0) not in (leader, -1)
    assert failures == [], failures[:3]
    # sends went on across the kill and after the leader moved (a count fixed in advance
    # depends on the machine's pace: each send waits for its replicas)
    assert killed.is_set() and sent_before_kill > 0 and sent > sent_before_kill
    kafka_cluster.node(leader).start()


@pytest.mark.cluster_tier
def test_bootstrap_list_with_brokers_down_still_serves(kafka_cluster: EmbeddedKafka) -> None:
    """A bootstrap list whose first entries are down (a closed port, a stopped node): the
    producer and the PushConsumer use the brokers that answer."""
    stopped = kafka_cluster.nodes[0]
    stopped.stop()
    bootstrap = f"127.0.0.1:{_closed_port()}," + kafka_cluster.bootstrap_servers
    conf = {"bootstrap.servers": bootstrap}
    topic = _topic(kafka_cluster, f"boot-{time.time_ns()}")
    got: list[bytes] = []
    consumer = PushConsumer(
        {**conf, "group.id": f"g-boot-{time.time_ns()}", "auto.offset.reset": "earliest"},
        delay_levels="1s 2s",
        namespace=f"boot{time.time_ns()}",
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(lambda msgs, ctx: got.extend(m.body for m in msgs))
    with consumer, Producer(conf) as producer:
        for i in range(20):
            producer.send(Message(topic=topic, body=b"b%d" % i))
        deadline = time.monotonic() + 60
        while len(set(got)) < 20 and time.monotonic() < deadline:
            consumer.check_alive()
            time.sleep(0.1)
    assert sorted(set(got)) == sorted(b"b%d" % i for i in range(20))


def test_replication_factor_above_the_brokers_is_refused_clearly(
    kafka_cluster: EmbeddedKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _ensure(kafka_cluster, "--group", "g-rf4", "--replication-factor", "4")
    err = capsys.readouterr().err
    assert code == 2
    assert "replication_factor" in err and "4" in err and "3 broker(s)" in err


@pytest.mark.cluster_tier
def test_min_insync_not_met_is_a_bounded_retry_then_a_clear_error(
    kafka_cluster: EmbeddedKafka,
) -> None:
    """A topic that needs 3 in-sync replicas while one node is down: a send with a short
    timeout fails with an error that says what to change; a send at the default timeout
    waits and succeeds once the node is back (nothing lost)."""
    topic = _topic(kafka_cluster, f"isr-{time.time_ns()}", **{"min.insync.replicas": "3"})
    node = kafka_cluster.node(next(i for i in (1, 2, 3) if i != kafka_cluster.leader_of(topic)))
    node.stop()
    conf = {"bootstrap.servers": kafka_cluster.bootstrap_servers}
    short = Producer(conf, send_msg_timeout_ms=4000, retry_times_when_send_failed=0)
    with short, pytest.raises(PossiblyPersistedError) as err:
        short.send(Message(topic=topic, body=b"short"))
    assert "send_msg_timeout_ms" in str(err.value)
    result: list[Any] = []
    with Producer(conf) as producer:
        sender = threading.Thread(
            target=lambda: result.append(producer.send(Message(topic=topic, body=b"waits")))
        )
        sender.start()
        time.sleep(3)
        assert result == []  # held back, not failed
        node.start()
        sender.join(120)
    assert len(result) == 1 and result[0].queue_offset >= 0


def test_an_unreplicated_adapter_topic_is_warned_about(
    kafka_cluster: EmbeddedKafka, caplog: pytest.LogCaptureFixture
) -> None:
    group = f"g-rf1-{time.time_ns()}"
    retry = naming.to_kafka(naming.retry_topic(group))
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(retry, 1, replication_factor=1)])[retry].result(30)
    with caplog.at_level(logging.WARNING, logger="adapter.topics"):
        assert _ensure(kafka_cluster, "--group", group, "--delay-levels", "1s") == 0
    warned = [r.getMessage() for r in caplog.records if retry in r.getMessage()]
    assert len(warned) == 1 and "replication factor 1" in warned[0]


def test_bad_broker_count_names_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        EmbeddedKafka("x", brokers=0)
    assert "brokers" in str(err.value)
