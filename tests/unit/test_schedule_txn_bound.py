"""The ScheduleService's own deadline around transactional calls (librdkafka#5456)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.services.schedule_service import _bounded


def test_a_call_that_returns_in_time_returns() -> None:
    seen: list[int] = []
    _bounded(lambda: seen.append(1), 1.0)
    assert seen == [1]


def test_a_call_that_raises_reraises_the_same_error() -> None:
    err = KafkaException(KafkaError(KafkaError._TIMED_OUT, "coordinator away"))

    def call() -> None:
        raise err

    with pytest.raises(KafkaException) as info:
        _bounded(call, 1.0)
    assert info.value is err


def test_a_call_blocked_past_the_deadline_becomes_a_fatal_timeout() -> None:
    release = threading.Event()
    try:
        with pytest.raises(KafkaException) as info:
            _bounded(lambda: release.wait(30), 0.05)
    finally:
        release.set()
    err = info.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT
    assert err.fatal() and not err.retriable()
    assert "fencing the producer" in err.str()
