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


class _TickingClock:
    """A clock that moves a second each time it is read."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t

    def now_ms(self) -> int:
        return 1_700_000_000_000 + int(self.t * 1000)


def test_close_stops_waiting_for_copies_in_flight_when_its_clock_passes_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A copy no broker acknowledges (none listens): close() serves its delivery until the
    consumer's clock, not the system's, passes FLUSH_TIMEOUT_S."""
    import time

    from confluent_kafka import Message

    from adapter.kafka import FLUSH_TIMEOUT_S, Consumer

    consumer = Consumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "orders-group"}, clock=_TickingClock()
    )
    msg = Message(topic="orders", partition=0, offset=5, value=b"body", timestamp=(1, 1))
    consumer.reconsume_later(msg)
    began = time.monotonic()
    with caplog.at_level("WARNING", logger="adapter"):
        consumer.close()
    assert time.monotonic() - began < FLUSH_TIMEOUT_S  # the system's clock: far less
    assert "1 copies unacknowledged at close" in caplog.text
