"""StartPositions: where the partitions of an assignment start, and that a member told to stop
looks nothing up."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from adapter.clients.member.start_positions import StartPositions
from adapter.core.offsets import ConsumeFromWhere
from adapter.io.offsets import retrying_lookup
from tests.unit.kafka_fakes import FakeConsumer

pytestmark = pytest.mark.unit


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
