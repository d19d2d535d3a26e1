"""Brokers bounced under a produce-consume-validate workload (``bounce.py``) on a three-node
cluster (replication factor 3, ``min.insync.replicas=2``), every client at its defaults.

Each scenario ends with: every send succeeded, every message handled or in the DLQ (0 lost),
0 duplicates out of exactly-once forwarding, per-key order kept by the orderly consumer,
nothing delivered before its due time; and prints what the bounce cost (retry lateness p99,
the longest stall of each consumer), which README's cluster section reports.

``test_user_partition_leader_killed`` (one leader kill, exactly-once) runs in the default
suite; the rest is the opt-in cluster tier (``./run.sh test-cluster``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from adapter.core import naming
from adapter.embedded import EmbeddedKafka
from adapter.services.schedule import DeliveryGuarantee
from adapter.services.schedule.txn import TXN_CALL_GRACE_S, TXN_CALL_TIMEOUT_S
from tests.support.bounce import Report, Workload
from tests.support.raw_txn import RawTransactionLoop

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

WARMUP_S = 6.0
SETTLE_S = 6.0
EOS, ALO = DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.AT_LEAST_ONCE
#: Exactly-once forwarding resumes after its coordinator's node is killed within this, or
#: within RAW_MARGIN_S of raw confluent-kafka's transactional loop that lost the same
#: coordinator in the same run, whichever is later (a slower machine slows both). The
#: margin is what the adapter's own recovery adds when a forward's record timed out: the
#: abort is refused, a fresh producer fences the old one and the partitions are read again
#: from their committed offsets (BENCHMARKS.md, "Cluster failover": up to 8.4 s measured).
#: The fixed bound is the adapter's slowest path: a transactional call that stays blocked
#: until its own deadline (TXN_CALL_TIMEOUT_S + TXN_CALL_GRACE_S, 12 s), then a fresh
#: producer that finds the new coordinator (up to 12 s). It was 20 s until a CI run measured
#: 20.1 s on that path, with raw confluent-kafka at 11.4 s.
STALL_BOUND_S = TXN_CALL_TIMEOUT_S + TXN_CALL_GRACE_S + 12.0
RAW_MARGIN_S = 8.0


@pytest.fixture
def cluster_topics(kafka_cluster: EmbeddedKafka) -> Iterator[Any]:
    from confluent_kafka.admin import AdminClient

    from adapter.testing import create_topic

    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    created: list[str] = []

    def factory(prefix: str = "t", partitions: int = 1, config: Any = None) -> str:
        name = create_topic(admin, prefix, partitions, config)
        created.append(name)
        return name

    yield factory
    if created:
        admin.delete_topics(created, operation_timeout=0)


def _run(
    cluster: EmbeddedKafka, topics: Any, delivery: DeliveryGuarantee, bounce: Any, protocol: str
) -> tuple[Workload, Report]:
    work = Workload(cluster.bootstrap_servers, topics, delivery=delivery, protocol=protocol)
    try:
        work.start()
        time.sleep(WARMUP_S)  # traffic, retries and forwards under way before the bounce
        began = time.monotonic()
        work.mark()
        bounce(work)
        work.mark()
        took = time.monotonic() - began
        time.sleep(SETTLE_S)  # traffic goes on after the cluster healed
        report = work.verify(took)
    finally:
        work.close()
    print(f"\nBOUNCE {delivery.value} ({protocol}): {report.summary()}")
    return work, report


def _assert_nothing_lost(work: Workload, report: Report) -> None:
    assert work.errors == [], work.errors
    assert report.send_failures == [], report.send_failures[:5]
    assert report.lost == [], f"{len(report.lost)} lost: {report.lost[:10]}; {report.extra}"
    assert report.simple_lost == [], f"SimpleConsumer lost {report.simple_lost[:10]}"
    assert report.early == [], report.early[:10]
    assert report.order_violations == [], report.order_violations
    assert report.dead_lettered == 0  # one failure each, far below the maximum
    if work.delivery is EOS:
        assert report.duplicates_forwarded == 0
    # the workload ran before, during and after the bounce, and forwarded retries: sends
    # are synchronous (each waits for 2 of 3 replicas), so their pace is the cluster's
    # latency, not ``rate``: 56 a second measured on this 2-core machine with three
    # brokers, down to 17 a second in CI and 6 a second with a second cluster beside it
    # (159 in a scenario whose leader was frozen for 12 s); a count fixed in advance
    # failed there, so the check is that sending never stopped for good
    assert report.forwarded > 0 and report.sent_during > 0 and report.sent_after > 0


def _kill_and_restart(cluster: EmbeddedKafka, node_id: int) -> None:
    node = cluster.node(node_id)
    node.kill()
    time.sleep(8)  # the workload runs on without it: leadership moves after its session
    node.start()
    cluster.wait_in_sync()


def _leader_kills(cluster: EmbeddedKafka, *, only_first: bool = False) -> Any:
    def bounce(work: Workload) -> None:
        # the busiest user partition's leader, then a retry and a delay-level partition's
        _kill_and_restart(cluster, cluster.leader_of(work.topic, 0))
        if only_first:
            return
        retry = naming.to_kafka(naming.retry_topic(work.group))
        _kill_and_restart(cluster, cluster.leader_of(retry, 0))
        # a first failure waits on level 3
        delay = naming.to_kafka(naming.schedule_topic(3, work.levels, work.ns))
        _kill_and_restart(cluster, cluster.leader_of(delay, 0))

    return bounce


@pytest.mark.timeout(600)
def test_user_partition_leader_killed(
    kafka_cluster: EmbeddedKafka, cluster_topics: Any, group_protocol: str
) -> None:
    """The default suite's scenario: one leader kill -9 and restart, exactly-once."""
    bounce = _leader_kills(kafka_cluster, only_first=True)
    work, report = _run(kafka_cluster, cluster_topics, EOS, bounce, group_protocol)
    _assert_nothing_lost(work, report)


@pytest.mark.cluster_tier
@pytest.mark.timeout(600)
def test_leader_kills(
    kafka_cluster: EmbeddedKafka, cluster_topics: Any, group_protocol: str
) -> None:
    work, report = _run(
        kafka_cluster, cluster_topics, EOS, _leader_kills(kafka_cluster), group_protocol
    )
    _assert_nothing_lost(work, report)


@pytest.mark.cluster_tier
@pytest.mark.timeout(600)
def test_leader_kills_at_least_once(
    kafka_cluster: EmbeddedKafka, cluster_topics: Any, group_protocol: str
) -> None:
    work, report = _run(
        kafka_cluster, cluster_topics, ALO, _leader_kills(kafka_cluster), group_protocol
    )
    _assert_nothing_lost(work, report)


@pytest.mark.cluster_tier
@pytest.mark.timeout(900)
@pytest.mark.parametrize("delivery", [EOS, ALO], ids=["exactly_once", "at_least_once"])
def test_rolling_restart(
    kafka_cluster: EmbeddedKafka,
    cluster_topics: Any,
    delivery: DeliveryGuarantee,
    group_protocol: str,
) -> None:
    def bounce(work: Workload) -> None:
        for node in kafka_cluster.nodes:  # as an operator does: one at a time, controlled
            node.stop()
            node.start()
            kafka_cluster.wait_in_sync()

    work, report = _run(kafka_cluster, cluster_topics, delivery, bounce, group_protocol)
    _assert_nothing_lost(work, report)


@pytest.mark.cluster_tier
@pytest.mark.timeout(600)
@pytest.mark.parametrize("delivery", [EOS, ALO], ids=["exactly_once", "at_least_once"])
def test_frozen_broker(
    kafka_cluster: EmbeddedKafka,
    cluster_topics: Any,
    delivery: DeliveryGuarantee,
    group_protocol: str,
) -> None:
    def bounce(work: Workload) -> None:
        node = kafka_cluster.node(kafka_cluster.leader_of(work.topic, 0))
        node.pause()  # past its broker session timeout (6 s): the controller fences it
        time.sleep(12)
        node.resume()
        kafka_cluster.wait_in_sync()

    work, report = _run(kafka_cluster, cluster_topics, delivery, bounce, group_protocol)
    _assert_nothing_lost(work, report)


@pytest.mark.cluster_tier
@pytest.mark.timeout(600)
def test_transaction_coordinator_killed(
    kafka_cluster: EmbeddedKafka, cluster_topics: Any, group_protocol: str
) -> None:
    resumed: list[float] = []
    raw_resumed: list[float | None] = []
    raw_errors: list[str] = []

    def bounce(work: Workload) -> None:
        # the baseline in the same run: raw confluent-kafka, same coordinator, same kill
        raw = RawTransactionLoop(
            kafka_cluster.bootstrap_servers, cluster_topics("raw-twin", 3), 3, work.transactional_id
        ).start()
        try:
            started = time.monotonic() + 60
            while not raw.commits and time.monotonic() < started:
                time.sleep(0.05)
            assert raw.commits, f"the raw transactional loop never committed: {raw.errors[:5]}"
            coordinator = kafka_cluster.transaction_coordinator(work.transactional_id)
            assert kafka_cluster.transaction_coordinator(raw.transactional_id) == coordinator
            before = work.service.stats.transactions_committed
            node = kafka_cluster.node(coordinator)
            node.kill()
            killed = time.monotonic()
            deadline = killed + 60
            # the forwarding stream (about 5 entries a second) must move on: the first
            # transaction committed after the kill
            while not resumed and time.monotonic() < deadline:
                if work.service.stats.transactions_committed > before:
                    resumed.append(time.monotonic() - killed)
                time.sleep(0.02)
            resumed.append(float("inf"))  # (only read when the loop above found none)
            while raw.resumed_after(killed) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            raw_resumed.append(raw.resumed_after(killed))
        finally:
            raw.stop()
            raw_errors.extend(raw.errors[:10] + (["hung: killed after 30 s"] if raw.hung else []))
        node.start()
        kafka_cluster.wait_in_sync()

    work, report = _run(kafka_cluster, cluster_topics, EOS, bounce, group_protocol)
    raw_s = raw_resumed[0]
    print(
        f"BOUNCE exactly-once forwarding resumed {resumed[0]:.1f} s after its coordinator died;"
        " raw confluent-kafka's transactional loop on the same coordinator"
        f" {'never' if raw_s is None else f'{raw_s:.1f} s'}"
        f"{'; it hung in a call and was killed' if 'hung' in ' '.join(raw_errors) else ''}"
    )
    _assert_nothing_lost(work, report)
    # the floor is the cluster's own failover, which raw confluent-kafka meets too: the
    # coordinator's partition gets a new leader, which loads the transaction log, and a
    # transaction whose partitions could not be added meanwhile has its records time out
    # (transaction.timeout.ms) and is aborted. So the bound also follows the raw loop that
    # lost the same coordinator in the same run (BENCHMARKS.md, "Cluster failover").
    # (a raw loop that never resumed, or hung in a librdkafka call and was killed, only
    # matters when the adapter took longer than STALL_BOUND_S)
    if resumed[0] > STALL_BOUND_S:
        assert raw_s is not None, f"raw confluent-kafka's transactions never resumed: {raw_errors}"
        assert resumed[0] <= raw_s + RAW_MARGIN_S, (resumed[0], raw_s)
