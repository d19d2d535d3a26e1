"""The ScheduleService's own deadline around transactional calls (librdkafka#5456): one
long-lived caller thread, replaced only when a call wedges."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.services.schedule.txn import TxnCaller


def test_a_call_that_returns_in_time_returns() -> None:
    seen: list[int] = []
    call = TxnCaller("t")
    call(lambda: seen.append(1), 1.0)
    call(lambda: seen.append(2), 1.0)
    assert seen == [1, 2]
    assert call.abandoned == 0
    call.close()


def test_calls_share_one_thread() -> None:
    names: set[str] = set()
    call = TxnCaller("txn-caller")
    for _ in range(20):
        call(lambda: names.add(threading.current_thread().name), 1.0)
    assert names == {"txn-caller"}
    before = threading.active_count()
    for _ in range(20):
        call(lambda: None, 1.0)
    assert threading.active_count() == before  # no thread per call
    call.close()


def test_a_call_that_raises_reraises_the_same_error() -> None:
    err = KafkaException(KafkaError(KafkaError._TIMED_OUT, "coordinator away"))

    def fail() -> None:
        raise err

    call = TxnCaller("t")
    with pytest.raises(KafkaException) as info:
        call(fail, 1.0)
    assert info.value is err
    call.close()


def test_a_call_blocked_past_the_deadline_becomes_a_fatal_timeout() -> None:
    release = threading.Event()
    call = TxnCaller("t")
    try:
        with pytest.raises(KafkaException) as info:
            call(lambda: release.wait(30), 0.05)
        assert call.abandoned == 1
        seen: list[int] = []
        call(lambda: seen.append(1), 1.0)  # a fresh thread serves the next call
        assert seen == [1]
    finally:
        release.set()
        call.close()
    err = info.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT
    assert err.fatal() and not err.retriable()
    assert "fencing" in err.str()
