"""The circuit breaker: its states on a fake clock (:mod:`adapter.core.breaker`)."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core.breaker import Breaker, CircuitBreaker, CircuitState, OpenCircuit
from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    MessageQueue,
)
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit

OPEN, CLOSED, HALF = CircuitState.OPEN, CircuitState.CLOSED, CircuitState.HALF_OPEN


# -- the state machine ---------------------------------------------------------------------
class TestBreaker:
    def test_the_defaults_open_within_ten_seconds_of_everything_failing_at_100_per_second(
        self,
    ) -> None:
        breaker = Breaker(CircuitBreaker())
        t = 0.0
        while t < 30.0:  # a healthy full window first: 100 batches of one a second
            breaker.record(t, 1, 0)
            t += 0.01
        failing_since = t
        while breaker.state is CLOSED:
            breaker.record(t, 0, 1)
            t += 0.01
            assert t - failing_since < 10.0
        assert breaker.state is OPEN
        assert 4.0 < t - failing_since < 6.5  # half of a ten-second window failed

    def test_from_a_cold_start_it_opens_once_the_window_holds_minimum_batches(self) -> None:
        breaker = Breaker(CircuitBreaker(minimum_batches=10))
        for i in range(9):
            assert breaker.record(float(i) / 100, 0, 1) is CLOSED
        assert breaker.record(0.1, 0, 1) is OPEN
        assert breaker.changes[0][:2] == (CLOSED, OPEN)

    def test_a_rate_below_the_threshold_keeps_it_closed(self) -> None:
        breaker = Breaker(CircuitBreaker(failure_rate_threshold=0.5, minimum_batches=4))
        for i in range(100):
            now = i * 0.1
            breaker.record(now, 2, 0)
            assert breaker.record(now, 0, 1) is CLOSED  # one in three fails

    def test_old_failures_leave_the_window(self) -> None:
        breaker = Breaker(CircuitBreaker(window_s=2.0, minimum_batches=5))
        for _ in range(4):
            breaker.record(0.0, 0, 1)
        breaker.record(5.0, 1, 0)  # the failures at 0 s are out of the window
        for _ in range(3):
            assert breaker.record(5.5, 0, 1) is CLOSED  # 3 of 4 in the window, under 5
        assert breaker.record(5.5, 0, 1) is OPEN

    def test_open_turns_half_open_after_open_s_and_a_good_probe_closes_it(self) -> None:
        breaker = Breaker(CircuitBreaker(minimum_batches=1, open_s=5.0))
        breaker.record(100.0, 0, 1)
        assert breaker.due() == 105.0
        assert breaker.advance(104.9) is OPEN
        assert breaker.record(104.9, 1, 0) is OPEN  # results while open change nothing
        assert breaker.advance(105.0) is HALF
        assert breaker.record(106.0, 1, 0) is CLOSED
        assert breaker.open_for(200.0) == pytest.approx(6.0)
        assert [c[1] for c in breaker.changes] == [OPEN, HALF, CLOSED]

    def test_a_failed_probe_opens_it_again_for_open_s(self) -> None:
        breaker = Breaker(CircuitBreaker(minimum_batches=1, open_s=5.0, half_open_probes=2))
        breaker.record(0.0, 0, 1)
        breaker.advance(5.0)
        assert breaker.record(5.1, 1, 0) is HALF  # one of two probes
        assert breaker.record(5.2, 0, 1) is OPEN
        assert breaker.due() == pytest.approx(10.2)
        assert breaker.open_for(7.2) == pytest.approx(7.2)

    def test_named_exceptions_and_open_circuit_trip_it_at_once(self) -> None:
        breaker = Breaker(CircuitBreaker(trip_on=(ConnectionError,)))
        assert breaker.tripped_by(ConnectionRefusedError())  # a subclass counts
        assert breaker.tripped_by(OpenCircuit())
        assert not breaker.tripped_by(ValueError())
        assert not breaker.tripped_by(None)
        with pytest.raises(OpenCircuit):
            ConsumeConcurrentlyContext(MessageQueue("t", 0)).open_circuit()
        with pytest.raises(OpenCircuit):
            ConsumeOrderlyContext(MessageQueue("t", 0)).open_circuit()

    @pytest.mark.parametrize(
        "kw",
        [
            {"failure_rate_threshold": 0},
            {"failure_rate_threshold": 1.5},
            {"window_s": 0},
            {"open_s": float("inf")},
            {"minimum_batches": 0},
            {"half_open_probes": True},
            {"trip_on": (ValueError, "x")},
            {"on_circuit_change": 3},
        ],
    )
    def test_bad_settings_are_refused(self, kw: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            CircuitBreaker(**kw)
