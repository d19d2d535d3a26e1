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

    def test_every_change_is_recorded_with_its_reason_and_time(self) -> None:
        # what on_circuit_change is told, through a whole life: rate, probes, trip
        breaker = Breaker(
            CircuitBreaker(
                failure_rate_threshold=0.5, minimum_batches=4, open_s=5.0, half_open_probes=2
            )
        )
        assert breaker.record(10.0, 2, 0) is CLOSED
        assert breaker.record(10.2, 0, 2) is OPEN  # exactly the threshold opens it
        assert breaker.advance(15.2) is HALF
        assert breaker.due() is None  # only an open breaker is due
        assert breaker.record(15.5, 1, 0) is HALF
        assert breaker.record(15.7, 0, 1) is OPEN
        assert breaker.advance(20.7) is HALF
        assert breaker.record(21.0, 1, 0) is HALF  # one probe of two
        assert breaker.record(21.5, 1, 0) is CLOSED  # the second one, in its own batch
        breaker.trip(40.0, "listener asked")
        breaker.trip(40.5, "asked again")  # already open: nothing changes
        assert breaker.advance(45.0) is HALF
        assert breaker.record(45.5, 0, 1) is OPEN
        assert breaker.changes == [
            (CLOSED, OPEN, "50% of 4 batches failed", 10.2),
            (OPEN, HALF, "open for 5s", 15.2),
            (HALF, OPEN, "a probe failed", 15.7),
            (OPEN, HALF, "open for 5s", 20.7),
            (HALF, CLOSED, "2 probe(s) succeeded", 21.5),
            (CLOSED, OPEN, "listener asked", 40.0),
            (OPEN, HALF, "open for 5s", 45.0),
            (HALF, OPEN, "a probe failed", 45.5),
        ]

    def test_open_for_adds_up_every_spell_open_or_half_open(self) -> None:
        breaker = Breaker(CircuitBreaker(minimum_batches=1, open_s=5.0))
        assert breaker.open_for(1.0) == 0.0
        breaker.record(10.0, 0, 1)  # open 10.0 .. 15.0, half-open .. 15.5, open again
        assert breaker.open_for(10.0) == 0.0  # nothing yet at the moment it opens
        breaker.advance(15.0)
        breaker.record(15.5, 0, 1)
        assert breaker.open_for(15.5) == pytest.approx(5.5)
        breaker.advance(20.5)
        breaker.record(21.0, 1, 0)  # closed at 21.0: 11 s in all
        assert breaker.open_for(30.0) == pytest.approx(11.0)
        breaker.trip(40.0, "listener asked")
        assert breaker.open_for(40.0) == pytest.approx(11.0)
        breaker.advance(45.0)
        breaker.record(45.5, 0, 1)
        assert breaker.open_for(46.0) == pytest.approx(17.0)

    def test_closing_starts_a_fresh_window(self) -> None:
        breaker = Breaker(CircuitBreaker(minimum_batches=4, open_s=5.0))
        for _ in range(4):
            breaker.record(0.0, 0, 1)
        breaker.advance(5.0)
        assert breaker.record(5.0, 1, 0) is CLOSED
        # the failures before are gone: three more are under minimum_batches
        assert breaker.record(5.5, 0, 3) is CLOSED
        assert breaker.record(5.5, 0, 1) is OPEN


class TestWindow:
    @pytest.mark.parametrize(
        ("window_s", "later", "expected"),
        [
            (3.0, 2.9, OPEN),  # second 0 is still one of the last three
            (3.0, 3.0, CLOSED),  # second 0 has left the window
            (2.5, 2.9, OPEN),  # a part second counts as a whole bucket
            (2.5, 3.0, CLOSED),
        ],
    )
    def test_the_window_holds_the_last_window_s_whole_seconds(
        self, window_s: float, later: float, expected: CircuitState
    ) -> None:
        breaker = Breaker(
            CircuitBreaker(failure_rate_threshold=1, window_s=window_s, minimum_batches=2)
        )
        assert breaker.record(0.0, 0, 1) is CLOSED
        assert breaker.record(later, 0, 1) is expected

    def test_a_second_with_several_results_leaves_the_window_whole(self) -> None:
        breaker = Breaker(CircuitBreaker(window_s=1.0, minimum_batches=4))
        assert breaker.record(0.0, 3, 0) is CLOSED
        assert breaker.record(0.1, 0, 1) is CLOSED
        assert breaker.record(0.2, 0, 1) is CLOSED  # 2 of 5 failed
        assert breaker.record(5.0, 3, 0) is CLOSED  # second 0 is gone, failures and all
        assert breaker.record(5.1, 0, 1) is CLOSED  # 1 of 4 failed

    def test_each_second_leaves_the_window_on_its_own(self) -> None:
        breaker = Breaker(
            CircuitBreaker(failure_rate_threshold=0.5, window_s=2.0, minimum_batches=3)
        )
        assert breaker.record(0.0, 1, 0) is CLOSED
        assert breaker.record(1.0, 0, 1) is CLOSED
        assert breaker.record(2.0, 0, 1) is CLOSED  # second 0 left, second 1 stays
        assert breaker.record(2.5, 0, 1) is OPEN  # 3 of 3 in seconds 1 and 2


class TestSettings:
    def test_edge_values_are_accepted(self) -> None:
        def on_change(change: object) -> None:
            pass

        settings = CircuitBreaker(
            failure_rate_threshold=1,
            window_s=0.5,
            open_s=0.5,
            minimum_batches=1,
            half_open_probes=1,
            trip_on=ConnectionError,  # one type, not a tuple
            on_circuit_change=on_change,
        )
        assert settings.trip_on == (OpenCircuit, ConnectionError)
        assert settings.on_circuit_change is on_change
        breaker = Breaker(settings)
        assert breaker.tripped_by(ConnectionResetError())
        assert breaker.record(3.0, 1, 0) is CLOSED
        assert breaker.record(3.1, 0, 1) is CLOSED  # 1 of 2: under a threshold of 1
        assert breaker.record(4.0, 0, 1) is OPEN  # second 3 left the window: 1 of 1
        assert breaker.due() == pytest.approx(4.5)

    @pytest.mark.parametrize(
        ("kw", "message"),
        [
            ({"failure_rate_threshold": 0}, "failure_rate_threshold=0: must be > 0 and <= 1"),
            (
                {"failure_rate_threshold": 1.5},
                "failure_rate_threshold=1.5: must be > 0 and <= 1",
            ),
            (
                {"failure_rate_threshold": True},
                "failure_rate_threshold=True: must be > 0 and <= 1",
            ),
            (
                {"failure_rate_threshold": "0.5"},
                "failure_rate_threshold='0.5': must be > 0 and <= 1",
            ),
            ({"window_s": 0}, "window_s=0: must be a number of seconds > 0"),
            ({"window_s": True}, "window_s=True: must be a number of seconds > 0"),
            ({"window_s": "10"}, "window_s='10': must be a number of seconds > 0"),
            ({"window_s": float("nan")}, "window_s=nan: must be a number of seconds > 0"),
            ({"open_s": float("inf")}, "open_s=inf: must be a number of seconds > 0"),
            ({"open_s": -1.0}, "open_s=-1.0: must be a number of seconds > 0"),
            ({"minimum_batches": 0}, "minimum_batches=0: must be an int >= 1"),
            ({"minimum_batches": 2.0}, "minimum_batches=2.0: must be an int >= 1"),
            ({"half_open_probes": True}, "half_open_probes=True: must be an int >= 1"),
            (
                {"trip_on": (ValueError, "x")},
                "trip_on=(<class 'ValueError'>, 'x'): must be exception types",
            ),
            ({"trip_on": int}, "trip_on=<class 'int'>: must be exception types"),
            ({"on_circuit_change": 3}, "on_circuit_change=3: must be callable"),
        ],
    )
    def test_bad_settings_are_refused_naming_field_value_and_cause(
        self, kw: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(ConfigError) as info:
            CircuitBreaker(**kw)
        ((field, value),) = kw.items()
        assert info.value.field == field
        assert info.value.value is value
        assert str(info.value) == message
