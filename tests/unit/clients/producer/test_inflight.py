"""The heap of delayed resends (``adapter.clients.producer.inflight.ResendHeap``) over an
injected clock: order, the poll timeout it returns, and what is left at shutdown."""

from __future__ import annotations

import pytest

from adapter.clients.producer.inflight import POLL_INTERVAL_S, ResendHeap

pytestmark = pytest.mark.unit


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def now_ms(self) -> int:
        return int(self.now * 1000)


class Attempt:
    """A resend that notes when it was attempted."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def attempt(self) -> None:
        self.log.append(self.name)


def test_due_resends_run_earliest_first_and_in_order_of_scheduling_on_a_tie() -> None:
    clock = ManualClock()
    heap: ResendHeap[Attempt] = ResendHeap(clock)
    ran: list[str] = []
    for name, delay in [("c", 0.03), ("a", 0.01), ("b1", 0.02), ("b2", 0.02), ("late", 5.0)]:
        heap.push(delay, Attempt(name, ran))
    assert len(heap) == 5
    assert heap.run_due() == pytest.approx(0.01)  # nothing due yet: poll until "a"
    assert ran == []
    clock.now += 0.025
    assert heap.run_due() == pytest.approx(0.005)  # "c" is next
    assert ran == ["a", "b1", "b2"]
    clock.now += 0.005
    assert heap.run_due() == POLL_INTERVAL_S  # "late" is far: poll at most this long
    assert ran == ["a", "b1", "b2", "c"]
    assert len(heap) == 1


def test_an_empty_heap_polls_the_longest_interval() -> None:
    heap: ResendHeap[Attempt] = ResendHeap(ManualClock())
    assert heap.run_due() == POLL_INTERVAL_S
    assert heap.drain() == []


def test_a_resend_scheduled_while_running_waits_for_its_own_time() -> None:
    clock = ManualClock()
    heap: ResendHeap[Attempt] = ResendHeap(clock)
    ran: list[str] = []

    class Again(Attempt):
        def attempt(self) -> None:
            super().attempt()
            heap.push(0.05, Attempt("again", ran))

    heap.push(0.0, Again("first", ran))
    assert heap.run_due() == pytest.approx(0.05)
    assert ran == ["first"]
    clock.now += 0.05
    heap.run_due()
    assert ran == ["first", "again"]


def test_drain_takes_every_waiting_resend_without_running_it() -> None:
    clock = ManualClock()
    heap: ResendHeap[Attempt] = ResendHeap(clock)
    ran: list[str] = []
    waiting = [Attempt(n, ran) for n in ("x", "y", "z")]
    for delay, item in zip((3.0, 1.0, 2.0), waiting, strict=True):
        heap.push(delay, item)
    taken = heap.drain()
    assert taken[0] is waiting[1]  # the earliest first
    assert sorted(a.name for a in taken) == ["x", "y", "z"]
    assert ran == [] and len(heap) == 0
    clock.now += 10
    assert heap.run_due() == POLL_INTERVAL_S and ran == []
