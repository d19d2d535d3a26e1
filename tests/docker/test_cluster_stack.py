"""The Docker stack's three-broker profile (``docker/compose.cluster.yaml`` over
``docker/compose.yaml``, ``docker/up.sh --brokers 3``) end to end, plus static checks.

Opt-in like ``test_stack.py`` (``RMQ_DOCKER_TESTS=1`` and a Docker engine; skipped with the
reason otherwise).  The stack comes up with three KRaft nodes, and the single-broker
stack's pipeline tests run on it unchanged (imported below: the retry ladder into the DLQ,
the Spark job's Parquet windows, Prometheus and the metrics contract).  Then:

* the three nodes form one cluster: the metadata lists brokers 1-3 at their own 127.0.0.1
  host ports, every topic (the adapter's, the user's, the internal ones) has three
  replicas, all in sync, and ``min.insync.replicas`` 2;
* with the node coordinating the consumer group stopped, new messages still go through the
  retry ladder into the DLQ; the node then rejoins and catches up.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.docker.harness import BROKER_SERVICES, Stack, start_stack, wait_for

# the single-broker stack's pipeline checks, collected again here on the cluster's stack
from tests.docker.test_stack import (  # noqa: F401
    GROUP,
    MAX_RECONSUME_TIMES,
    TOPIC,
    test_prometheus_scrapes_the_metrics_contract,
    test_retry_ladder_then_dlq,
    test_spark_streaming_output,
    traffic,
)

BROKERS = 3


# --------------------------------------------------------------------------------------------
# static checks (no engine needed)
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# the cluster
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory, brokers=BROKERS)


def _admin(stack: Stack) -> Any:
    from confluent_kafka.admin import AdminClient

    # log_level 4: no info lines for each refused connection to a stopped node
    return AdminClient({"bootstrap.servers": stack.bootstrap, "log_level": 4})


def _replication(admin: Any) -> dict[str, tuple[set[int], set[int]]]:
    """topic -> (the replica counts, the in-sync replica counts) of its partitions."""
    md = admin.list_topics(timeout=10)
    return {
        name: (
            {len(p.replicas) for p in tm.partitions.values()},
            {len(p.isrs) for p in tm.partitions.values()},
        )
        for name, tm in md.topics.items()
    }


@pytest.mark.docker
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("traffic")  # after the pipeline tests' messages
def test_three_brokers_form_one_cluster(stack: Stack) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = _admin(stack)
    md = admin.list_topics(timeout=10)
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    assert brokers == {i + 1: ("127.0.0.1", port) for i, port in enumerate(stack.kafka_ports)}
    cluster = admin.describe_cluster(request_timeout=10).result(timeout=20)
    assert sorted(n.id for n in cluster.nodes) == [1, 2, 3]

    # the adapter's topics (retry, DLQ, delay levels, control), the user's and the internal
    # ones: three replicas each, all in sync
    replication = _replication(admin)
    names = set(replication)
    assert {TOPIC, "__consumer_offsets", "__transaction_state"} <= names, sorted(names)
    adapter_topics = {n for n in names if n.startswith("rmq.")}
    assert adapter_topics >= {f"rmq.retry.{GROUP}", f"rmq.dlq.{GROUP}"}, sorted(names)
    assert any(n.startswith("rmq.schedule.") for n in adapter_topics), sorted(names)
    assert {n: r for n, r in replication.items() if r != ({3}, {3})} == {}

    resources = [ConfigResource(ResourceType.TOPIC, t) for t in (f"rmq.retry.{GROUP}", TOPIC)]
    for resource, future in admin.describe_configs(resources).items():
        assert future.result(timeout=20)["min.insync.replicas"].value == "2", resource
    broker = ConfigResource(ResourceType.BROKER, "2")
    voters = admin.describe_configs([broker])[broker].result(timeout=20)
    assert voters["controller.quorum.voters"].value == (
        "1@broker:9093,2@broker-2:9093,3@broker-3:9093"
    )


@pytest.mark.docker
@pytest.mark.timeout(1800)
@pytest.mark.usefixtures("traffic")  # after the pipeline tests' messages
def test_delivery_with_one_broker_stopped(stack: Stack) -> None:
    admin = _admin(stack)
    group = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=20)
    # the node coordinating the consumer group: the one whose loss matters most
    stopped = BROKER_SERVICES[group.coordinator.id]
    run_id = uuid.uuid4().hex[:8]
    n_ok, n_fail = 5, 1
    stack.compose("stop", stopped)
    try:

        def two_brokers() -> bool:
            return len(admin.list_topics(timeout=10).brokers) == BROKERS - 1

        wait_for(f"{stopped} gone from the metadata", two_brokers, timeout=60)
        out = stack.exec(
            "example-consumer",
            "python",
            "/opt/example_app/app.py",
            "produce",
            "--ok",
            str(n_ok),
            "--fail",
            str(n_fail),
            "--run-id",
            run_id,
        )
        assert '"produced"' in out, out

        def dead_letters() -> list[str] | None:
            lines = stack.exec("example-consumer", "rmq-kafka", "dlq", "list", "--group", GROUP)
            mine = [line for line in lines.splitlines() if run_id in line]
            return mine if len(mine) >= n_fail else None

        wait_for(f"the dead letter with {stopped} stopped", dead_letters, timeout=180)
        deliveries: dict[str, list[int]] = {}
        for d in stack.events("example-consumer", "delivery"):
            if run_id in d["body"]:
                deliveries.setdefault(d["body"], []).append(d["reconsume_times"])
        for i in range(n_ok):
            assert 0 in deliveries.get(f"ok-{run_id}-{i}", []), deliveries
        for i in range(n_fail):
            seen = sorted(set(deliveries.get(f"fail-{run_id}-{i}", [])))
            assert seen == list(range(MAX_RECONSUME_TIMES + 1)), deliveries
    finally:
        stack.compose("start", stopped)

    def whole_again() -> bool:
        replication = _replication(admin)
        return len(replication) > 0 and all(r == ({3}, {3}) for r in replication.values())

    # the node rejoins and catches up: every partition has its three replicas in sync again
    wait_for(f"{stopped} back in every ISR", whole_again, timeout=180, interval=3)
    assert len(admin.list_topics(timeout=10).brokers) == BROKERS
