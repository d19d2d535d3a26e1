"""The classic SimpleConsumer's member turns: a receiving thread reads librdkafka itself only
while the loop sleeps at the top of a step, never while it is mid-step or inside a
rebalance callback (which a consume serves on whichever thread calls it)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from adapter.clients.simple.member_turns import MemberTurns

WAIT_S = 5.0


class _Gate:
    """An event the loop sleeps on: tells the test it sleeps, wakes when the test says so."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.entered.set()
        return self.go.wait(WAIT_S if timeout is None else timeout)


class _Member:
    """A group member whose step runs what the test gives it; counts direct reads."""

    def __init__(self) -> None:
        self.draining: frozenset[tuple[str, int]] = frozenset()
        self.body: Callable[[], None] = lambda: None
        self.fetched: list[int] = []
        self.fail: Exception | None = None

    def open(self) -> None:
        pass

    def step(self) -> None:
        self.body()

    def close(self) -> None:
        pass

    def fetch_now(self, size: int) -> None:
        if self.fail is not None:
            raise self.fail
        self.fetched.append(size)


def _turns() -> tuple[MemberTurns, _Member]:
    member = _Member()
    return MemberTurns(member), member  # type: ignore[arg-type]


def _in_loop(turns: MemberTurns) -> threading.Thread:
    thread = threading.Thread(target=turns.step, daemon=True)
    thread.start()
    return thread


def test_a_receive_reads_while_the_loop_sleeps_at_the_top_of_a_step() -> None:
    turns, member = _turns()
    gate = _Gate()
    member.body = lambda: turns.wait(gate, WAIT_S)  # type: ignore[arg-type,assignment]
    loop = _in_loop(turns)
    assert gate.entered.wait(WAIT_S)
    assert turns.fetch(32) is True
    assert member.fetched == [32]
    gate.go.set()
    loop.join(WAIT_S)
    assert not loop.is_alive()


def test_no_read_while_the_loop_is_mid_step() -> None:
    turns, member = _turns()
    inside, go = threading.Event(), threading.Event()

    def busy() -> None:
        inside.set()
        go.wait(WAIT_S)

    member.body = busy
    loop = _in_loop(turns)
    assert inside.wait(WAIT_S)
    assert turns.fetch(32) is False
    assert member.fetched == []
    go.set()
    loop.join(WAIT_S)
    assert turns.fetch(32) is True  # between steps


def _no_read_while_the_step_waits(turns: MemberTurns, member: _Member, gate: _Gate) -> None:
    """Run one loop step whose body sleeps on ``gate``: a read meanwhile is refused."""
    loop = _in_loop(turns)
    assert gate.entered.wait(WAIT_S)
    assert turns.fetch(32) is False
    gate.go.set()
    loop.join(WAIT_S)
    assert member.fetched == []


def test_no_read_while_a_rebalance_callback_waits() -> None:
    turns, member = _turns()
    gate = _Gate()
    callback = turns.guard(lambda cb: cb)(lambda: turns.wait(gate, WAIT_S))  # type: ignore[arg-type]
    member.body = callback
    _no_read_while_the_step_waits(turns, member, gate)


def test_no_read_while_the_loop_drains_partitions_it_resets() -> None:
    turns, member = _turns()
    gate = _Gate()

    def reset() -> None:
        member.draining = frozenset({("t", 0)})
        try:
            turns.wait(gate, WAIT_S)  # type: ignore[arg-type]
        finally:
            member.draining = frozenset()

    member.body = reset
    _no_read_while_the_step_waits(turns, member, gate)


def test_closing_keeps_its_turn_while_it_waits() -> None:
    turns, member = _turns()
    gate = _Gate()
    member.close = lambda: turns.wait(gate, WAIT_S)  # type: ignore[method-assign,assignment,arg-type]
    closer = threading.Thread(target=turns.close, daemon=True)
    closer.start()
    assert gate.entered.wait(WAIT_S)
    assert turns.fetch(32) is False
    gate.go.set()
    closer.join(WAIT_S)


def test_what_a_read_raised_stops_the_next_step() -> None:
    turns, member = _turns()
    member.fail = RuntimeError("fatal consume error")
    steps: list[int] = []
    member.body = lambda: steps.append(1)
    assert turns.fetch(32) is True  # the receive goes on with what it has
    with pytest.raises(RuntimeError, match="fatal consume error"):
        turns.step()
    assert steps == []
    turns.step()  # raised once
    assert steps == [1]
