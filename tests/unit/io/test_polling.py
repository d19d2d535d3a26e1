"""Watermark lookups: a partition without a leader yet is retried, not reported."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from adapter.errors import AdapterError, KafkaClientError
from adapter.io.polling import watermarks


class FlakyConsumer:
    """Answers ``get_watermark_offsets`` with the given errors first, then (3, 9)."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.calls = 0

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.codes:
            raise KafkaException(KafkaError(self.codes.pop(0)))
        return 3, 9


def test_a_partition_without_a_leader_yet_is_asked_again() -> None:
    """A DLQ created a moment ago answered NOT_LEADER_FOR_PARTITION: the raw
    ``KafkaException`` used to escape ``read_dlq`` (seen under load in the test suite)."""
    consumer = FlakyConsumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert watermarks(consumer, TopicPartition("t", 0), 5.0) == (3, 9)
    assert consumer.calls == 3


def test_other_errors_become_adapter_errors_at_once() -> None:
    consumer = FlakyConsumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(AdapterError) as info:
        watermarks(consumer, TopicPartition("t", 0), 5.0)
    assert isinstance(info.value, KafkaClientError)
    assert "t[0]" in str(info.value)
    assert consumer.calls == 1


def test_a_leader_that_never_comes_is_reported_after_the_timeout() -> None:
    consumer = FlakyConsumer(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 100)
    with pytest.raises(KafkaClientError):
        watermarks(consumer, TopicPartition("t", 0), 0.3)
    assert 1 < consumer.calls < 100
