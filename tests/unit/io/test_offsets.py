"""The one retry policy for offset lookups (retrying_lookup, committed_offsets)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from adapter.io.offsets import committed_offsets, retrying_lookup
from tests.unit.kafka_fakes import FakeConsumer

pytestmark = pytest.mark.unit

TP0 = ("t", 0)


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
