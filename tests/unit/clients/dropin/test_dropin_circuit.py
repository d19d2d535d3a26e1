"""The drop-in's circuit breaker (:mod:`adapter.clients.dropin.dropin_circuit`) on a fake clock, and
the status a member publishes for ``group progress`` (:mod:`adapter.core.circuit_status`,
:class:`adapter.clients.member.circuit_reporter.CircuitReporter`) with a fake sink."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.clients.dropin.dropin_circuit import DropInCircuit, Fate, Turn
from adapter.clients.member.circuit_reporter import CircuitReporter
from adapter.core.breaker import Breaker, CircuitBreaker, CircuitState
from adapter.core.circuit_status import (
    REFRESH_CLOSED_S,
    REFRESH_OPEN_S,
    CircuitStatus,
    decode_status,
    encode_status,
    is_status_key,
    latest_statuses,
    status_key,
)
from adapter.core.control import ControlMessageError, ResetAck, encode
from adapter.core.engine.circuit import CircuitSnapshot
from adapter.errors import AdapterError, KafkaClientError

TP0 = ("orders", 0)


def gate(**knobs: Any) -> tuple[DropInCircuit, list[tuple[str, str]]]:
    changes: list[tuple[str, str]] = []
    settings = CircuitBreaker(**{"minimum_batches": 3, "open_s": 5.0, **knobs})
    circuit = DropInCircuit(
        Breaker(settings), lambda old, new, reason, at: changes.append((old.value, new.value))
    )
    return circuit, changes


def fail_n(circuit: DropInCircuit, now: float, offsets: range) -> list[Fate]:
    circuit.handed_out(len(offsets))
    return [circuit.failed(now, TP0, o, f"m{o}") for o in offsets]


def test_failures_take_the_ladder_until_it_opens_then_are_held_and_it_pauses() -> None:
    circuit, changes = gate()
    assert circuit.step(0.0) == (Turn.NONE, [])
    fates = fail_n(circuit, 0.1, range(5))
    # two go back, the third opens it (it is held), the rest are held
    assert fates == [Fate.SEND, Fate.SEND, Fate.HOLD, Fate.HOLD, Fate.HOLD]
    turn, released = circuit.step(0.2)
    assert (turn, released) == (Turn.PAUSE, [])
    assert changes == [("closed", "open")]
    assert circuit.hand_out() is None  # nothing is returned while open
    snap = circuit.snapshot(1.0)
    assert (snap.state, snap.held_messages, snap.opened) == (CircuitState.OPEN, 3, 1)


def test_a_probe_is_a_held_message_returned_again_and_its_success_closes_and_resumes() -> None:
    circuit, changes = gate()
    fail_n(circuit, 0.0, range(4))  # offsets 2 and 3 held
    circuit.step(0.0)
    assert circuit.step(4.9) == (Turn.NONE, [])  # still open
    assert circuit.step(5.0) == (Turn.NONE, [])  # half-open: the probe is due, still paused
    probe = circuit.hand_out()
    assert probe == (TP0, 2, "m2")
    assert circuit.hand_out() is None  # one probe only
    # it fails: held again, open again
    assert circuit.failed(5.1, TP0, 2, "m2") is Fate.HOLD_AGAIN
    circuit.step(5.2)
    assert changes[-2:] == [("open", "half_open"), ("half_open", "open")]
    assert circuit.snapshot(5.2).held_messages == 2
    # next probe (the oldest held first) succeeds: the loop came back without handing it back
    circuit.step(10.2)
    assert circuit.hand_out() == (TP0, 3, "m3")
    turn, released = circuit.step(10.3)
    assert changes[-1] == ("half_open", "closed")
    assert turn is Turn.RESUME
    assert released == [(TP0, 3, "m3")]  # its offset is free
    assert [circuit.hand_out(), circuit.hand_out()] == [(TP0, 2, "m2"), None]
    # the re-run message succeeds; once closed, a re-run failure takes the ladder
    assert circuit.step(10.4) == (Turn.NONE, [(TP0, 2, "m2")])
    assert circuit.snapshot(10.4).held_messages == 0


def test_a_held_message_that_fails_again_once_closed_takes_the_ladder_without_a_new_hold() -> None:
    circuit, _ = gate(half_open_probes=1)
    fail_n(circuit, 0.0, range(3))  # offset 2 held
    circuit.step(0.0)
    fail_n(circuit, 0.5, range(3, 5))  # still in the loop's batch: held
    circuit.step(5.0)
    circuit.hand_out()  # probe: offset 2
    circuit.step(5.1)  # succeeded: closed, 3 and 4 queued
    item = circuit.hand_out()
    assert item is not None and item[1] == 3
    assert circuit.failed(5.2, TP0, 3, "m3") is Fate.SEND_HELD


def test_with_nothing_held_half_open_resumes_and_the_next_fetched_message_is_the_probe() -> None:
    circuit, changes = gate()
    circuit.failed(0.0, TP0, 0, "m0", trip="open_circuit()")  # opened on purpose: held
    assert circuit.step(0.0)[0] is Turn.PAUSE
    circuit.revoked([TP0])  # what was held is forgotten (its next owner reads it again)
    assert circuit.snapshot(0.0).held_messages == 0
    assert circuit.step(5.0)[0] is Turn.RESUME
    circuit.handed_out(1)
    assert circuit.step(5.5)[0] is Turn.NONE
    assert changes[-1] == ("half_open", "closed")


def test_messages_succeeding_keep_it_closed() -> None:
    circuit, changes = gate()
    for i in range(20):
        circuit.handed_out(10)
        circuit.failed(i * 0.1, TP0, i, "m")
        circuit.step(i * 0.1)
    assert changes == []


def test_a_reopen_puts_what_was_queued_back_in_front_of_the_held_messages() -> None:
    circuit, _ = gate()
    fail_n(circuit, 0.0, range(5))  # 2, 3, 4 held
    circuit.step(0.0)
    circuit.step(5.0)
    circuit.hand_out()  # probe 2
    circuit.step(5.1)  # closed: 3, 4 queued
    circuit.hand_out()  # 3 handed out again, fails with a trip: open again
    assert circuit.failed(5.2, TP0, 3, "m3", trip="down") is Fate.HOLD_AGAIN
    assert circuit.step(5.3)[0] is Turn.PAUSE
    circuit.step(10.3)
    assert circuit.hand_out() == (TP0, 4, "m4")  # 4 was queued before 3 was held again


# --- the status on the control topic ---------------------------------------------------------
def status(member: str = "m-1", state: CircuitState = CircuitState.OPEN, at: int = 0) -> Any:
    return CircuitStatus("G", member, state, at, 7, 1.5, 1, at)


def test_a_status_round_trips_and_a_bad_one_names_the_field() -> None:
    s = status()
    assert decode_status(encode_status(s)) == s
    assert is_status_key(status_key("G", "m-1"), "G")
    assert not is_status_key(b"G", "G")  # reset requests and acks are keyed by the group
    assert not is_status_key(status_key("G2", "m"), "G")
    with pytest.raises(ControlMessageError, match="type"):
        decode_status(encode(ResetAck("r", "G", "m")))
    bad = encode_status(s).replace(b'"open"', b'"ajar"')
    with pytest.raises(ControlMessageError, match=r"circuit\.state"):
        decode_status(bad)


def test_progress_shows_the_latest_status_of_live_members_only_and_flags_stale_ones() -> None:
    now = 1_000_000
    records = [
        status("m-1", CircuitState.OPEN, now - 20_000),
        status("m-1", CircuitState.CLOSED, now - 2_000),
        status("m-2", CircuitState.OPEN, now - 1_000 * int(4 * REFRESH_OPEN_S)),
        status("gone", CircuitState.OPEN, now - 1_000),
    ]
    out = latest_statuses(records, ["m-1", "m-2", "m-3"], "G", now)
    assert set(out) == {"m-1", "m-2"}
    assert out["m-1"].status.state is CircuitState.CLOSED and not out["m-1"].stale
    assert out["m-2"].stale
    assert "stale" in out["m-2"].text()
    assert "7 message(s) held" in out["m-2"].text()


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def now_ms(self) -> int:
        return 1_700_000_000_000 + int(self.t * 1000)


class FakeSink:
    def __init__(self, member: str, fail: bool = False) -> None:
        self.member = member
        self.fail = fail
        self.sent: list[CircuitStatus] = []
        self.closed = False
        self.attempts = 0

    def publish(self, status: CircuitStatus) -> None:
        self.attempts += 1
        if self.fail:
            raise KafkaClientError("control topic unreachable")
        self.sent.append(status)

    def close(self) -> None:
        self.closed = True


def test_the_reporter_publishes_on_change_and_refreshes_per_state() -> None:
    clock = FakeClock()
    sinks: list[FakeSink] = []
    state = [CircuitState.CLOSED]
    member = ["m-1"]

    def open_sink(member_id: str) -> FakeSink:
        sinks.append(FakeSink(member_id))
        return sinks[-1]

    reporter = CircuitReporter("G", "consumer G", clock, open_sink)
    reporter.bind(lambda: member[0], lambda now: CircuitSnapshot(state[0], 0.0, 3, 3, 0))
    reporter.step(clock.t)
    assert [s.state for s in sinks[0].sent] == [CircuitState.CLOSED]
    clock.t += 10
    reporter.step(clock.t)
    assert len(sinks[0].sent) == 1  # closed: refreshed every REFRESH_CLOSED_S
    state[0] = CircuitState.OPEN
    reporter.changed(clock.t - 0.5)
    reporter.step(clock.t)
    sent = sinks[0].sent[-1]
    assert sent.state is CircuitState.OPEN
    assert sent.since_ms == clock.now_ms() - 500
    assert sent.held_messages == 3
    clock.t += REFRESH_OPEN_S
    reporter.step(clock.t)
    assert len(sinks[0].sent) == 3  # open: refreshed every REFRESH_OPEN_S
    member[0] = "m-2"  # rejoined: the old publisher leaves (tombstone), a new one publishes
    clock.t += 1
    reporter.step(clock.t)
    assert sinks[0].closed and sinks[1].sent[0].member_id == "m-2"
    assert REFRESH_CLOSED_S > REFRESH_OPEN_S


def test_the_reporter_backs_off_when_the_control_topic_is_unreachable() -> None:
    clock = FakeClock()
    opened: list[FakeSink] = []

    def open_sink(member_id: str) -> FakeSink:
        opened.append(FakeSink(member_id, fail=True))
        return opened[-1]

    reporter = CircuitReporter("G", "consumer G", clock, open_sink)
    reporter.bind(lambda: "m-1", lambda now: CircuitSnapshot(CircuitState.OPEN, 0.0, 0, 0, 1))
    reporter.step(clock.t)  # raises nothing into the loop
    clock.t += 2
    reporter.step(clock.t)
    assert opened[0].attempts == 1  # waits out its back-off (5 s)
    clock.t += 3
    reporter.step(clock.t)
    assert opened[0].attempts == 2
    clock.t += 5
    reporter.step(clock.t)
    assert opened[0].attempts == 2  # doubled: 10 s
    assert issubclass(KafkaClientError, AdapterError)
