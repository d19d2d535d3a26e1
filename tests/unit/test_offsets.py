"""Unit tests for :mod:`adapter.core.offsets`: committable offsets and flow-control figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from adapter.constants import (
    DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
)
from adapter.core.offsets import FlowLimits, PartitionTracker

pytestmark = pytest.mark.unit


def tracker_with(*offsets: int, size: int = 0, start: int | None = None) -> PartitionTracker:
    t = PartitionTracker(start)
    for o in offsets:
        t.add(o, size)
    return t


class TestCommittable:
    def test_nothing_seen(self) -> None:
        t = PartitionTracker()
        assert t.committable() is None
        assert t.take_commit() is None
        assert t.count == 0
        assert t.span == 0
        assert t.bytes == 0

    def test_start_offset_without_messages(self) -> None:
        t = PartitionTracker(start_offset=42)
        assert t.committable() == 42

    def test_smallest_in_flight(self) -> None:
        t = tracker_with(10, 11, 12)
        assert t.committable() == 10

    def test_next_when_none_in_flight(self) -> None:
        t = tracker_with(10, 11, 12)
        for o in (10, 11, 12):
            assert t.settle(o)
        assert t.committable() == 13

    def test_settle_out_of_order(self) -> None:
        t = tracker_with(10, 11, 12, 13)
        assert t.settle(12)
        assert t.committable() == 10  # 10 still in flight
        assert t.settle(11)
        assert t.committable() == 10
        assert t.settle(10)
        assert t.committable() == 13  # 11 and 12 were done already
        assert t.settle(13)
        assert t.committable() == 14

    def test_gaps_in_offsets(self) -> None:
        # compacted topics / transaction markers leave gaps
        t = tracker_with(5, 9, 20)
        assert t.settle(5)
        assert t.committable() == 9
        assert t.settle(9)
        assert t.settle(20)
        assert t.committable() == 21

    def test_settle_twice_or_unknown(self) -> None:
        t = tracker_with(1, 2)
        assert t.settle(1) is True
        assert t.settle(1) is False
        assert t.settle(99) is False
        assert t.count == 1
        assert t.committable() == 2

    def test_is_inflight(self) -> None:
        t = tracker_with(1, 2)
        assert t.is_inflight(1)
        t.settle(1)
        assert not t.is_inflight(1)
        assert t.is_inflight(2)
        assert not t.is_inflight(3)

    def test_refetch_below_next_is_ignored(self) -> None:
        t = tracker_with(10, 11)
        t.settle(10)
        t.add(10, 100)  # a re-fetch after a seek back
        assert not t.is_inflight(10)
        assert t.count == 1
        assert t.bytes == 0
        assert t.committable() == 11

    def test_add_below_start_offset_ignored(self) -> None:
        t = PartitionTracker(start_offset=50)
        t.add(49)
        assert t.count == 0
        assert t.committable() == 50

    def test_never_moves_backward_after_mark_committed(self) -> None:
        t = tracker_with(10, 11)
        t.mark_committed(20)
        assert t.committable() == 20
        t.mark_committed(15)  # lower: ignored
        assert t.committable() == 20
        assert t.take_commit() is None

    def test_never_moves_backward_after_take_commit(self) -> None:
        t = tracker_with(10)
        t.settle(10)
        assert t.take_commit() == 11
        t.add(5)  # ignored, below next
        assert t.committable() == 11


class TestTakeCommit:
    def test_only_moved_offsets(self) -> None:
        t = tracker_with(0, 1, 2)
        assert t.take_commit() == 0
        assert t.take_commit() is None  # unchanged
        t.settle(1)
        assert t.take_commit() is None  # 0 still in flight
        t.settle(0)
        assert t.take_commit() == 2
        assert t.take_commit() is None
        t.settle(2)
        assert t.take_commit() == 3
        t.add(3)
        assert t.take_commit() is None  # 3 in flight: committable stays 3
        t.settle(3)
        assert t.take_commit() == 4

    def test_mark_committed_suppresses_same_offset(self) -> None:
        t = tracker_with(0)
        t.settle(0)
        t.mark_committed(1)
        assert t.take_commit() is None

    def test_start_offset_is_taken_once(self) -> None:
        t = PartitionTracker(start_offset=7)
        assert t.take_commit() == 7
        assert t.take_commit() is None


class TestFigures:
    def test_bytes_count_span(self) -> None:
        t = PartitionTracker()
        t.add(100, 10)
        t.add(101, 20)
        t.add(150, 30)
        assert t.count == 3
        assert t.bytes == 60
        assert t.span == 50
        t.settle(101)
        assert (t.count, t.bytes, t.span) == (2, 40, 50)
        t.settle(100)
        assert (t.count, t.bytes, t.span) == (1, 30, 0)
        t.settle(150)
        assert (t.count, t.bytes, t.span) == (0, 0, 0)

    def test_single_in_flight_has_zero_span(self) -> None:
        assert tracker_with(5).span == 0


class TestFlowLimits:
    def test_defaults_are_rocketmq(self) -> None:
        limits = FlowLimits()
        assert limits.max_count == DEFAULT_PULL_THRESHOLD_FOR_QUEUE == 1000
        assert limits.max_bytes == DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB * 1024 * 1024
        assert limits.max_span == DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN == 2000

    def test_within_limits(self) -> None:
        limits = FlowLimits(max_count=3, max_bytes=100, max_span=10)
        assert limits.exceeded(PartitionTracker()) is None
        assert limits.exceeded(tracker_with(0, 1, 2, size=33)) is None  # all at the limit or below

    def test_count(self) -> None:
        limits = FlowLimits(max_count=3, max_bytes=10**9, max_span=10**9)
        t = tracker_with(0, 1, 2)
        assert limits.exceeded(t) is None  # == is not >
        t.add(3)
        reason = limits.exceeded(t)
        assert reason is not None
        assert "4 messages" in reason
        t.settle(3)
        assert limits.exceeded(t) is None

    def test_bytes(self) -> None:
        limits = FlowLimits(max_count=10**9, max_bytes=100, max_span=10**9)
        t = tracker_with(0, size=100)
        assert limits.exceeded(t) is None
        t.add(1, 1)
        reason = limits.exceeded(t)
        assert reason is not None
        assert "101 bytes" in reason

    def test_span(self) -> None:
        limits = FlowLimits(max_count=10**9, max_bytes=10**9, max_span=10)
        t = tracker_with(0, 10)
        assert limits.exceeded(t) is None
        t.add(11)
        reason = limits.exceeded(t)
        assert reason is not None
        assert "span 11" in reason
        t.settle(0)
        assert limits.exceeded(t) is None  # the head left: span is 1 now

    def test_default_limits(self) -> None:
        limits = FlowLimits()
        t = PartitionTracker()
        for o in range(1000):
            t.add(o)
        assert limits.exceeded(t) is None
        t.add(1000)
        assert limits.exceeded(t) is not None  # 1001 messages

        big = tracker_with(0, size=100 * 1024 * 1024)
        assert limits.exceeded(big) is None
        big.add(1, 1)
        assert limits.exceeded(big) is not None

        spread = tracker_with(0, 2000)
        assert limits.exceeded(spread) is None
        spread.add(2001)
        assert limits.exceeded(spread) is not None

    @pytest.mark.parametrize(
        ("count", "nbytes", "span", "below"),
        [
            (0, 0, 0, True),
            (2, 50, 5, True),  # half of every limit, exactly
            (3, 0, 0, False),  # more than half of the messages
            (0, 51, 0, False),  # ... of the bytes
            (0, 0, 6, False),  # ... of the span
        ],
    )
    def test_below_half_of_every_limit(
        self, count: int, nbytes: int, span: int, below: bool
    ) -> None:
        limits = FlowLimits(max_count=4, max_bytes=100, max_span=10)
        assert limits.below_half(count, nbytes, span) is below


# --- properties ---------------------------------------------------------------------------
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(min_value=1, max_value=3), st.integers(0, 50)),
        st.tuples(st.just("settle"), st.integers(min_value=0, max_value=10**6), st.just(0)),
        st.tuples(st.just("take"), st.just(0), st.just(0)),
    ),
    max_size=80,
)


@given(st.one_of(st.none(), st.integers(min_value=0, max_value=100)), ops)
@settings(max_examples=200)
def test_committable_bounded_and_monotonic(
    start: int | None, program: list[tuple[str, int, int]]
) -> None:
    t = PartitionTracker(start)
    inflight: dict[int, int] = {}
    next_offset = start if start is not None else 0
    last: int | None = None
    seen = start is not None
    for op, a, b in program:
        if op == "add":
            offset = next_offset + a - 1  # gaps of 0..2
            t.add(offset, b)
            inflight[offset] = b
            next_offset = offset + 1
            seen = True
        elif op == "settle" and inflight:
            victim = sorted(inflight)[a % len(inflight)]
            assert t.settle(victim)
            del inflight[victim]
        elif op == "take":
            before = t.committable()
            taken = t.take_commit()
            assert taken is None or taken == before
        committable = t.committable()
        if inflight:
            assert committable == min(inflight)
        elif seen:
            assert committable == next_offset
        else:
            assert committable is None
        if committable is not None:
            assert all(committable <= o for o in inflight)
        if last is not None:
            assert committable is not None
            assert committable >= last
        last = committable
        assert t.count == len(inflight)
        assert t.bytes == sum(inflight.values())
        assert t.span == (max(inflight) - min(inflight) if inflight else 0)


class TrackerMachine(RuleBasedStateMachine):
    """Random add/settle/commit sequences against a simple model."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = PartitionTracker()
        self.inflight: set[int] = set()
        self.next = 0
        self.last_committable: int | None = None
        self.last_taken: int | None = None

    @initialize(start=st.integers(min_value=0, max_value=1000))
    def start(self, start: int) -> None:
        self.tracker = PartitionTracker(start)
        self.next = start

    @rule(gap=st.integers(min_value=0, max_value=3), size=st.integers(min_value=0, max_value=99))
    def add(self, gap: int, size: int) -> None:
        offset = self.next + gap
        self.tracker.add(offset, size)
        self.inflight.add(offset)
        self.next = offset + 1

    @rule(back=st.integers(min_value=1, max_value=5))
    def refetch(self, back: int) -> None:
        self.tracker.add(self.next - back)  # below next: ignored

    @precondition(lambda self: bool(self.inflight))
    @rule(pick=st.integers(min_value=0))
    def settle(self, pick: int) -> None:
        offset = sorted(self.inflight)[pick % len(self.inflight)]
        assert self.tracker.settle(offset)
        self.inflight.discard(offset)

    @rule(offset=st.integers(min_value=0, max_value=2000))
    def settle_unknown(self, offset: int) -> None:
        if offset not in self.inflight:
            assert not self.tracker.settle(offset)

    @rule()
    def take(self) -> None:
        taken = self.tracker.take_commit()
        if taken is not None:
            assert self.last_taken is None or taken > self.last_taken
            self.last_taken = taken

    @invariant()
    def committable_is_safe_and_monotonic(self) -> None:
        c = self.tracker.committable()
        assert c is not None
        assert all(c <= o for o in self.inflight)
        assert c == (min(self.inflight) if self.inflight else self.next)
        if self.last_committable is not None:
            assert c >= self.last_committable
        self.last_committable = c

    @invariant()
    def count_matches(self) -> None:
        assert self.tracker.count == len(self.inflight)


TrackerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestTrackerMachine = TrackerMachine.TestCase
