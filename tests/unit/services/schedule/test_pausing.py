"""The ScheduleService's smaller parts, with fake consumers: pausing, destination checks,
committed positions and level-topic names."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException

from adapter.core import naming
from adapter.core.engine.actions import Pause, Resume
from adapter.core.engine.schedule import Rewind
from adapter.core.schedule import Forward
from adapter.services.schedule import ScheduleStats, level_delay_ms, level_topics_pattern
from adapter.services.schedule.delivery import committed_position
from adapter.services.schedule.destinations import Destinations, partition_count
from adapter.services.schedule.pausing import PartitionPauser

pytestmark = pytest.mark.unit

TP = ("rmq.schedule.L01-1s", 0)


class PausingConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def _log(self, what: str, tps: list[Any]) -> None:
        self.calls.append((what, [(t.topic, t.partition, t.offset) for t in tps]))

    def pause(self, tps: list[Any]) -> None:
        self._log("pause", tps)

    def resume(self, tps: list[Any]) -> None:
        self._log("resume", tps)

    def seek(self, tp: Any) -> None:
        self._log("seek", [tp])


# -- pausing ---------------------------------------------------------------------------------
def test_a_rewind_pauses_and_seeks_and_counts_a_pause() -> None:
    consumer, stats = PausingConsumer(), ScheduleStats()
    pauser = PartitionPauser(consumer, stats)
    pauser.apply(Rewind(TP, 42))
    assert consumer.calls == [("pause", [(*TP, 42)]), ("seek", [(*TP, 42)])]
    assert stats.pauses == 1
    assert pauser.paused() == {TP: "rewound to 42, held"}
    pauser.apply(Resume(TP))
    assert consumer.calls[-1][0] == "resume"
    assert pauser.paused() == {}


def test_flow_control_pauses_with_its_reason_until_resumed() -> None:
    consumer, stats = PausingConsumer(), ScheduleStats()
    pauser = PartitionPauser(consumer, stats)
    other = (TP[0], 1)
    pauser.apply(Pause(TP, "5000 entries buffered"))
    pauser.apply(Pause(other, "full"))
    assert stats.pauses == 2
    assert pauser.paused() == {TP: "5000 entries buffered", other: "full"}
    pauser.forget([other])  # revoked: a partition never inherits a pause
    assert pauser.paused() == {TP: "5000 entries buffered"}
    snapshot = pauser.paused()
    pauser.apply(Resume(TP))
    assert snapshot == {TP: "5000 entries buffered"}  # a copy, not a live view
    assert pauser.paused() == {}


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


# -- committed positions ---------------------------------------------------------------------
class CommittedConsumer:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        return [SimpleNamespace(offset=self.offset)]


@pytest.mark.parametrize(("committed", "expected"), [(17, 17), (-1001, OFFSET_BEGINNING)])
def test_committed_position(committed: int, expected: int) -> None:
    """The committed offset; the beginning when none is committed."""
    assert committed_position(CommittedConsumer(committed), TP, 5) == expected


# -- level topics ----------------------------------------------------------------------------
def test_level_topic_names() -> None:
    topic = naming.to_kafka(naming.schedule_topic(3, naming_levels(), "ns"))
    assert level_delay_ms(topic) == (3, 10_000)
    assert level_delay_ms("orders") is None
    import re

    assert re.match(level_topics_pattern("ns"), topic)
    assert not re.match(level_topics_pattern("other"), topic)
    assert not re.match(level_topics_pattern(None), topic)


def naming_levels() -> Any:
    from adapter.core.delay import DelayLevels

    return DelayLevels.coerce("1s 5s 10s")
