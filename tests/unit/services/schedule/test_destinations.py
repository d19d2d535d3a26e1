"""Destinations and partition_count: the ScheduleService's destination checks, with a fake
consumer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.core import naming
from adapter.core.schedule import Forward
from adapter.services.schedule.destinations import Destinations, partition_count

pytestmark = pytest.mark.unit


# -- destinations ----------------------------------------------------------------------------
class MetadataConsumer:
    """Answers ``list_topics`` from a dict of Kafka topic -> partition count."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.lookups: list[str] = []
        self.fail = 0

    def list_topics(self, *, topic: str, timeout: float) -> Any:
        self.lookups.append(topic)
        if self.fail:
            self.fail -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))
        if topic not in self.topics:
            return SimpleNamespace(topics={})
        parts = {p: object() for p in range(self.topics[topic])}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=parts)})


def test_a_destination_is_looked_up_once_while_fresh() -> None:
    orders = naming.to_kafka("orders")
    consumer = MetadataConsumer({orders: 3})
    dest = Destinations({}, ttl_s=3600)
    assert dest.check(Forward("orders", None), consumer) == (None, 3)
    assert dest.check(Forward("orders", 2), consumer) == (None, 3)
    assert consumer.lookups == [orders]
    dest.forget()
    dest.check(Forward("orders", None), consumer)
    assert consumer.lookups == [orders, orders]


def test_a_missing_destination_or_partition_is_a_problem() -> None:
    consumer = MetadataConsumer({naming.to_kafka("orders"): 2})
    dest = Destinations({}, ttl_s=3600)
    assert dest.check(Forward("gone", None), consumer) == ("REAL_TOPIC 'gone' does not exist", 0)
    assert dest.check(Forward("orders", 2), consumer) == (
        "REAL_QID=2 but 'orders' has 2 partitions",
        2,
    )
    problem, partitions = dest.check(Forward("", None), consumer)
    assert partitions == 0 and problem and "non-empty" in problem


def test_a_partition_count_lookup_is_tried_again() -> None:
    orders = naming.to_kafka("orders")
    consumer = MetadataConsumer({orders: 4})
    consumer.fail = 1
    assert partition_count(consumer, orders) == 4
    assert consumer.lookups == [orders, orders]
