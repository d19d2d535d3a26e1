"""Replication of the adapter's topics on a cluster, and a principal that may not describe a
topic: pure logic, no broker."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from adapter.errors import ConfigError
from adapter.io.topics import Replication, plan_replication, unreplicated

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("brokers", "broker_factor", "broker_min_isr", "want"),
    [
        (1, 1, 1, Replication(1)),  # a single broker: as before
        (2, 1, 1, Replication(2)),  # two: both copies, no stricter minimum than the broker's
        (3, 1, 1, Replication(3, 2)),  # Kafka's defaults on 3 brokers: 3 copies, 2 in sync
        (5, 1, 1, Replication(3, 2)),
        (5, 5, 1, Replication(5, 2)),  # a higher cluster default is kept
        (3, 3, 2, Replication(3)),  # the broker's own minimum already survives one down
        (3, 3, 3, Replication(3)),  # a stricter broker minimum is not lowered
        (1, 3, 1, Replication(1)),  # a default above the broker count cannot apply
    ],
)
def test_adapter_topics_take_the_clusters_replication(
    brokers: int, broker_factor: int, broker_min_isr: int, want: Replication
) -> None:
    got = plan_replication(brokers, broker_factor=broker_factor, broker_min_insync=broker_min_isr)
    assert got == want


def test_explicit_replication_is_kept_and_goes_into_the_topic_config() -> None:
    rep = plan_replication(3, factor=2, min_insync=1)
    assert rep == Replication(2, 1)
    assert rep.topic_config() == {"min.insync.replicas": "1"}
    assert Replication(1).topic_config() == {}


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"factor": 4}, "replication_factor", "above the 3 broker(s)"),
        ({"factor": 0}, "replication_factor", ">= 1"),
        ({"factor": True}, "replication_factor", "int"),
        ({"factor": 3, "min_insync": 4}, "min_insync_replicas", "NOT_ENOUGH_REPLICAS"),
        ({"min_insync": "2"}, "min_insync_replicas", "int"),
    ],
)
def test_impossible_replication_names_the_field_and_value(
    kwargs: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        plan_replication(3, **kwargs)  # type: ignore[arg-type]
    assert field in str(err.value)
    assert words in str(err.value)


def _md(brokers: int, replicas: dict[str, int]) -> SimpleNamespace:
    return SimpleNamespace(
        brokers={i: None for i in range(1, brokers + 1)},
        topics={
            name: SimpleNamespace(
                partitions={0: SimpleNamespace(replicas=list(range(n)))},
            )
            for name, n in replicas.items()
        },
    )


def test_a_single_replica_is_flagged_only_on_a_multi_broker_cluster() -> None:
    md = _md(3, {"%RETRY%g": 1, "%DLQ%g": 3})
    assert unreplicated(md, ["%RETRY%g", "%DLQ%g", "missing"]) == [("%RETRY%g", 3)]
    assert unreplicated(_md(1, {"%RETRY%g": 1}), ["%RETRY%g"]) == []


class _Metadata:
    """An ``AdminClient`` whose metadata shows ``topic`` refused to this principal."""

    def __init__(self, topic: str, code: int) -> None:
        from confluent_kafka import KafkaError

        self.topic = topic
        self.error = KafkaError(code)
        self.calls = 0

    def list_topics(self, timeout: float, topic: str | None = None) -> SimpleNamespace:
        self.calls += 1
        if topic is None:  # a listing of every topic leaves out those it may not describe
            return SimpleNamespace(topics={})
        return SimpleNamespace(topics={topic: SimpleNamespace(error=self.error, partitions={})})

    def poll(self, timeout: float) -> int:
        return 0


def test_a_topic_the_principal_may_not_describe_is_named_with_the_permission() -> None:
    """Created (CREATE allowed) but not visible: metadata refuses it as unauthorized.  The
    error names the topic and the permission at once, not 'not visible after 30s'."""
    from confluent_kafka import KafkaError

    from adapter.errors import AuthenticationError
    from adapter.io.topics import wait_visible

    admin = _Metadata("rmq.schedule.ns.L03-10s", KafkaError.TOPIC_AUTHORIZATION_FAILED)
    clock = iter(float(i) for i in range(1000))
    with pytest.raises(AuthenticationError) as info:
        wait_visible(admin, ["rmq.schedule.ns.L03-10s"], 30.0, monotonic=lambda: next(clock))
    text = str(info.value)
    assert "missing permission: DESCRIBE" in text and "'rmq.schedule.ns.L03-10s'" in text
    assert admin.calls < 10  # a grace of seconds for ACLs to propagate, not the 30 s timeout
