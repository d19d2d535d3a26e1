"""``adapter.kafka`` stands in for ``confluent_kafka``."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_the_drop_in_module_stands_in_for_confluent_kafka() -> None:
    """``from adapter.kafka import KafkaError`` failed: the names a confluent-kafka consumer
    module imports are there, and are confluent-kafka's own."""
    import confluent_kafka

    import adapter.kafka as ck

    for name in (
        "KafkaError",
        "KafkaException",
        "TopicPartition",
        "Message",
        "Producer",
        "OFFSET_BEGINNING",
        "OFFSET_END",
        "OFFSET_STORED",
        "OFFSET_INVALID",
        "TIMESTAMP_CREATE_TIME",
    ):
        assert getattr(ck, name) is getattr(confluent_kafka, name), name
    assert issubclass(ck.Consumer, confluent_kafka.Consumer)
