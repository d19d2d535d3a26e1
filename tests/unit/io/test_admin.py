"""The admin commands' session (:class:`adapter.io.admin.AdminSession`) on a fake clock: the
"no broker can be reached" verdict and the bound of a wait are measured on the injected
clock, not on the system's (the admin client itself is real, pointed at a closed port)."""

from __future__ import annotations

import concurrent.futures

import pytest
from confluent_kafka import KafkaError

from adapter.errors import BrokerUnavailableError
from adapter.io.admin import AdminSession
from adapter.io.errors import UNREACHABLE_S
from tests.unit.kafka_fakes import FakeClock

pytestmark = pytest.mark.unit

#: a port nothing listens on: librdkafka finds every broker down
NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}


def test_no_broker_is_reported_unreachable_before_the_clock_passes_unreachable_s() -> None:
    clock = FakeClock()
    session = AdminSession(NOWHERE, timeout_s=30.0, clock=clock)
    session.watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    clock.advance(UNREACHABLE_S - 0.5)
    session.check("listing topics")  # not yet: the clock has not passed UNREACHABLE_S
    clock.advance(1.0)
    session.watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    with pytest.raises(BrokerUnavailableError, match=r"cannot reach any broker at 127\.0\.0\.1:1"):
        session.check("listing topics")


class _SlowFuture:
    """A future that never answers within a step; each step takes a second of the clock.
    It answers after ``answer_after`` steps (a wait bound by the system's clock got it)."""

    def __init__(self, clock: FakeClock, answer_after: int) -> None:
        self.clock = clock
        self.steps = 0
        self.answer_after = answer_after

    def result(self, timeout: float) -> str:
        self.steps += 1
        self.clock.advance(1.0)
        if self.steps >= self.answer_after:
            return "late answer"
        raise concurrent.futures.TimeoutError


def test_a_wait_gives_up_when_the_clock_passes_timeout_s() -> None:
    clock = FakeClock()
    session = AdminSession(NOWHERE, timeout_s=5.0, clock=clock)
    session.answered(None)  # brokers answered once: only timeout_s bounds the wait
    future = _SlowFuture(clock, answer_after=50)
    with pytest.raises(BrokerUnavailableError, match=r"no answer from 127\.0\.0\.1:1 within 5 s"):
        session.wait(future, "describing group 'G'")
    assert 5 <= future.steps <= 7
