"""The parts GroupConsumer delegates to, each on its own: lag, broadcasting's local
offsets, and the one retry policy for offset lookups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from adapter.clients.member.broadcast_offsets import BroadcastOffsets
from adapter.clients.member.lag_tracker import LagTracker, partition_lag
from adapter.clients.member.start_positions import StartPositions
from adapter.core.offsets import ConsumeFromWhere
from adapter.io.offset_store import LocalFileOffsetStore
from adapter.io.offsets import committed_offsets, retrying_lookup
from tests.unit.kafka_fakes import Factory, FakeAdmin, FakeConsumer

pytestmark = pytest.mark.unit

TP0 = ("t", 0)
TP1 = ("t", 1)


# -- lag ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ends", "committable", "start", "fetched", "lag"),
    [
        ((0, 10), 4, None, None, 6),  # end minus the committable offset
        ((0, 10), None, 7, None, 3),  # nothing fetched yet: from where it starts
        ((5, 10), None, -2, None, 5),  # a logical start: from the log start
        ((5, 10), 2, None, None, 5),  # below the log start (retention): from the log start
        ((0, 10), 9, None, 10, 0),  # settled: the fetch position is past a txn marker
        ((0, 10), 12, None, None, 0),  # never negative
    ],
)
def test_partition_lag(
    ends: tuple[int, int], committable: int | None, start: int | None, fetched: int | None, lag: int
) -> None:
    assert partition_lag(ends, committable, start, fetched) == lag


class _Engine:
    def __init__(self, committable: dict[tuple[str, int], int], in_flight: int = 0) -> None:
        self._committable = committable
        self._in_flight = in_flight

    def committable(self, tp: tuple[str, int]) -> int | None:
        return self._committable.get(tp)

    def in_flight(self, tp: tuple[str, int]) -> int:
        return self._in_flight


def _admin(config: dict[str, Any]) -> FakeAdmin:
    admin = FakeAdmin(config)
    admin.ends = {TP0: (0, 100), TP1: (50, 60)}
    return admin


def test_lag_tracker_asks_asynchronously_and_refreshes_at_its_interval() -> None:
    admins = Factory(_admin)
    tracker = LagTracker({"bootstrap.servers": "x"}, what="m", admin_factory=admins)
    consumer = FakeConsumer({})
    tracker.started(TP1, -1)  # a logical start
    engine = _Engine({TP0: 30}, in_flight=1)
    tracker.refresh(10.0, consumer, {TP0, TP1}, engine)
    assert tracker.snapshot() == {}  # asked only now
    [admin] = admins.made
    assert admin.requests == 2  # log starts and ends, both in flight at once
    tracker.refresh(10.5, consumer, {TP0, TP1}, engine)  # before the interval: nothing
    assert tracker.snapshot() == {}
    tracker.refresh(11.0, consumer, {TP0, TP1}, engine)
    assert tracker.snapshot() == {TP0: 70, TP1: 10}
    assert admin.config["bootstrap.servers"] == "x"


def test_lag_tracker_waits_for_an_unanswered_round() -> None:
    admins = Factory(FakeAdmin)
    tracker = LagTracker({}, what="m", admin_factory=admins, interval_s=0.0)
    consumer = FakeConsumer({})
    tracker.refresh(1.0, consumer, {TP0}, _Engine({}))
    [admin] = admins.made
    admin.hold = True
    tracker.refresh(2.0, consumer, {TP0}, _Engine({}))  # the next round stays pending
    tracker.refresh(3.0, consumer, {TP0}, _Engine({}))
    assert admin.requests == 4  # no third round while the second is unanswered


# -- broadcasting -----------------------------------------------------------------------------
class _Store:
    def __init__(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self.saved: list[dict[tuple[str, int], int]] = []
        self._offsets = dict(offsets or {})

    def load(self) -> dict[tuple[str, int], int]:
        return dict(self._offsets)

    def save(self, offsets: dict[tuple[str, int], int]) -> None:
        self.saved.append(dict(offsets))


def test_broadcast_offsets_persist_only_what_moved_at_the_interval() -> None:
    store = _Store({TP0: 3})
    offsets = BroadcastOffsets(store, persist_s=5.0, rediscover_s=20.0)
    looked: list[float] = []
    offsets.upkeep(100.0, lambda: looked.append(100.0))
    assert store.saved == []  # nothing moved
    offsets.store([(TP0, 5), (TP1, 1)])
    offsets.upkeep(101.0, lambda: looked.append(101.0))
    assert store.saved == []  # not due yet
    offsets.upkeep(105.0, lambda: looked.append(105.0))
    assert store.saved == [{TP0: 5, TP1: 1}]
    offsets.upkeep(120.0, lambda: looked.append(120.0))
    assert looked == [120.0]  # not at the first call: the member looked when it opened
    assert offsets.offsets() == {TP0: 5, TP1: 1}


def test_broadcast_offsets_round_trip_through_the_local_file(tmp_path: Path) -> None:
    first = BroadcastOffsets(LocalFileOffsetStore(tmp_path, "g", "i"))
    first.store([(("a:b", 0), 12), (TP1, 4)])
    first.persist()
    again = BroadcastOffsets(LocalFileOffsetStore(tmp_path, "g", "i"))
    assert again.offsets() == {("a:b", 0): 12, TP1: 4}


def test_new_partitions_start_at_their_stored_offset_else_the_first_one() -> None:
    consumer = FakeConsumer({})
    consumer.topics = {"t": 3}
    offsets = BroadcastOffsets(_Store({TP1: 8}))
    new = offsets.new_partitions(
        consumer.list_topics(), ["t"], {TP0}, lambda topic, partition: 40 + partition
    )
    assert [(p.topic, p.partition, p.offset) for p in new] == [("t", 1, 8), ("t", 2, 42)]
    assert offsets.offsets() == {TP1: 8, ("t", 2): 42}  # the first offset is kept at once


# -- the retry policy of offset lookups --------------------------------------------------------
def test_a_lookup_is_retried_with_back_off_and_then_answers() -> None:
    answers: list[Any] = [KafkaException(KafkaError(KafkaError._TRANSPORT)), "answer"]
    slept: list[float] = []

    def call() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert retrying_lookup(call, sleep=slept.append) == "answer"
    assert slept == [0.2]


def test_a_lookup_that_keeps_failing_raises_after_four_tries() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def call() -> Any:
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    with pytest.raises(KafkaException):
        retrying_lookup(call, sleep=slept.append)
    assert len(calls) == 4
    assert slept == [0.2, 0.4, 0.8]


def test_committed_offsets_none_when_unknown_after_retries() -> None:
    class Down(FakeConsumer):
        def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    assert committed_offsets(Down({}), [TopicPartition("t", 0)], sleep=lambda s: None) is None
    consumer = FakeConsumer({})
    consumer.group_offsets[TP0] = 17
    [found] = committed_offsets(consumer, [TopicPartition("t", 0)]) or []
    assert (found.topic, found.partition, found.offset) == ("t", 0, 17)


# -- a member that is stopping does not wait out its lookups -----------------------------------
class _Stuck(FakeConsumer):
    """A consumer whose coordinator does not answer (every committed-offsets lookup times out)."""

    def __init__(self) -> None:
        super().__init__({})
        self.lookups = 0

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        self.lookups += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


def _starts() -> StartPositions:
    return StartPositions(
        name="m",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms=None,
        retry_kafka=None,
    )


def test_a_lookup_is_not_tried_again_once_the_caller_gives_up() -> None:
    stopping: list[bool] = []
    consumer = _Stuck()

    def call() -> Any:
        stopping.append(True)  # the member is told to stop during the first try
        return consumer.committed([TopicPartition("t", 0)], 10)

    with pytest.raises(KafkaException):
        retrying_lookup(call, sleep=lambda s: None, give_up=lambda: bool(stopping))
    assert consumer.lookups == 1


def test_an_assignment_met_while_stopping_looks_nothing_up() -> None:
    consumer = _Stuck()
    partitions = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert _starts().resolve(consumer, partitions, stopping=lambda: True) == []
    assert consumer.lookups == 0
    assert [p.offset for p in partitions] == [OFFSET_INVALID, OFFSET_INVALID]  # the committed ones


def test_a_stop_during_the_lookup_of_an_assignment_ends_its_retries() -> None:
    # a rebalance storm: the member's coordinator lookups time out (10 s a try) while it is
    # told to stop; four tries would outlast the shutdown's grace period
    consumer = _Stuck()
    stopping = lambda: consumer.lookups > 0  # noqa: E731 - told to stop during the first try
    partitions = [TopicPartition("t", 0)]
    assert _starts().resolve(consumer, partitions, stopping=stopping) == []
    assert consumer.lookups == 1
    assert partitions[0].offset == OFFSET_INVALID  # left for librdkafka: nothing is guessed
