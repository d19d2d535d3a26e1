"""The pull (SimpleConsumer) engine, driven event by event with a fake ``now``.

Each test reads like the rule it checks (docs/semantics.md §4.13 and the module docstring of
``adapter.core.engine.pull``).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.core.engine import Pause, Resume, SendBack, StoreOffsets
from adapter.core.engine.pull import (
    MAX_INVISIBLE_S,
    HandleState,
    PullEngine,
    PullOptions,
    ReceiptHandle,
    receive_count,
    seconds_of,
)
from adapter.core.offsets import FlowLimits
from adapter.core.publishing import Refusal
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryNow
from adapter.errors import InvalidInputError, InvalidReceiptHandleError

pytestmark = pytest.mark.unit

TP = ("orders", 0)
TP2 = ("orders", 1)


@dataclass(frozen=True)
class Msg:
    """What the engine needs of a message."""

    queue_offset: int
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    body: bytes = b"x" * 10

    def redelivered(self) -> Msg:
        return replace(self, reconsume_times=self.reconsume_times + 1)


_ENGINES = itertools.count(1)


def engine(*tps: tuple[str, int], **kw: Any) -> PullEngine:
    """An engine over ``tps``; each one named apart (as each consumer names its own)."""
    opts: dict[str, Any] = {"store_interval_s": 0.0}
    opts.update(kw)
    eng = PullEngine(PullOptions(**opts), f"c{next(_ENGINES)}")
    for tp in tps or (TP,):
        eng.assigned(tp)
    return eng


def fetch(eng: PullEngine, tp: tuple[str, int], first: int, n: int, **kw: Any) -> list[Msg]:
    msgs = [Msg(o, **kw) for o in range(first, first + n)]
    eng.fetched(tp, msgs, first + n, 10 * n)
    return msgs


def stored(actions: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for a in actions:
        if isinstance(a, StoreOffsets):
            out.update(a.offsets)
    return out


def copies(actions: list[Any]) -> list[SendBack]:
    return [a for a in actions if isinstance(a, SendBack)]


class TestReceiveAndAck:
    def test_receive_makes_messages_invisible_and_ack_settles_them(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 3)
        handles = eng.receive(2, 30.0, now=0.0)
        assert [h.offset for h in handles] == [0, 1]
        assert eng.unacked == 2 and eng.available == 1
        assert eng.committable(TP) == 0  # invisible messages hold the offset
        eng.ack(handles[1], now=1.0)
        assert eng.committable(TP) == 0
        eng.ack(handles[0], now=1.0)
        assert eng.committable(TP) == 2  # the buffered one is still in flight
        [last] = eng.receive(5, 30.0, now=1.0)
        eng.ack(last, now=2.0)
        assert stored(eng.tick(2.0)) == {TP: 3}

    def test_nothing_is_visible_to_two_receivers(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 4)
        first = eng.receive(2, 30.0, now=0.0)
        second = eng.receive(32, 30.0, now=0.0)
        assert {h.offset for h in first}.isdisjoint(h.offset for h in second)
        assert eng.receive(1, 30.0, now=0.0) == []

    def test_receive_takes_partitions_in_turn(self) -> None:
        eng = engine(TP, TP2)
        fetch(eng, TP, 0, 10)
        fetch(eng, TP2, 0, 10)
        a = eng.receive(4, 30.0, now=0.0)
        b = eng.receive(4, 30.0, now=0.0)
        assert {h.tp for h in a} == {TP}
        assert {h.tp for h in b} == {TP2}  # the partition served first went to the back

    def test_acking_twice_is_harmless(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 30.0, now=0.0)
        eng.ack(h, now=1.0)
        eng.ack(h, now=100.0)  # even after the deadline
        assert h.state is HandleState.ACKED and eng.unacked == 0

    def test_an_expired_handle_is_refused_and_changes_nothing(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 10.0, now=0.0)
        with pytest.raises(InvalidReceiptHandleError, match="expired"):
            eng.ack(h, now=10.0)  # at the deadline: expired (never later than promised)
        assert eng.committable(TP) == 0 and h.state is HandleState.INVISIBLE
        [copy] = copies(eng.tick(10.0))
        assert copy.dest == RetryNow(1) and copy.msg.queue_offset == 0
        with pytest.raises(InvalidReceiptHandleError, match="expired"):
            eng.ack(h, now=10.5)

    def test_a_handle_of_another_consumer_is_refused(self) -> None:
        a, b = engine(), engine()
        fetch(a, TP, 0, 1)
        fetch(b, TP, 0, 1)
        [ha] = a.receive(1, 30.0, now=0.0)
        with pytest.raises(InvalidReceiptHandleError, match="another consumer"):
            b.ack(ha, now=1.0)
        assert b.available == 1 and a.unacked == 1

    def test_handles_of_a_revoked_partition_are_refused(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 2)
        [h, _] = eng.receive(2, 30.0, now=0.0)
        eng.revoked(TP)
        eng.assigned(TP)
        with pytest.raises(InvalidReceiptHandleError, match="revoked"):
            eng.ack(h, now=1.0)
        assert eng.unacked == 0 and eng.available == 0
        assert copies(eng.tick(100.0)) == []  # the new owner reads them again


class TestExpiry:
    def test_an_expired_message_goes_straight_to_the_retry_topic_with_one_more_attempt(
        self,
    ) -> None:
        eng = engine()
        fetch(eng, TP, 0, 2, reconsume_times=3)
        [h, other] = eng.receive(2, 5.0, now=0.0)
        eng.ack(other, now=1.0)
        assert copies(eng.tick(4.999)) == []  # never sooner
        [copy] = copies(eng.tick(5.0))
        assert copy.dest == RetryNow(4)
        assert copy.failure is not None and copy.failure.type == "InvisibleDurationExpired"
        assert h.state is HandleState.EXPIRED and eng.unacked == 0
        assert eng.committable(TP) == 0  # held until the copy is acknowledged
        eng.published(copy)
        assert eng.committable(TP) == 2

    def test_after_the_maximum_attempts_it_goes_to_the_dlq(self) -> None:
        eng = engine(max_delivery_attempts=3)
        fetch(eng, TP, 0, 1, reconsume_times=2)  # the third delivery
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        assert copy.dest == DeadLetter(DeadLetterReason.MAX_DELIVERY_ATTEMPTS, 3)
        assert copy.failure is not None
        assert copy.failure.message == (
            "not acknowledged within its invisible duration of 5 s (delivery attempt 3 of 3)"
        )

    def test_the_last_attempt_below_the_maximum_is_retried_and_the_maximum_dead_lettered(
        self,
    ) -> None:
        """``max_delivery_attempts=3``: the second delivery's copy is a retry (attempt 3
        follows), the third's goes to the DLQ; both sides of the bound."""
        eng = engine(max_delivery_attempts=3)
        eng.fetched(TP, [Msg(0, reconsume_times=1), Msg(1, reconsume_times=2)], 2)
        eng.receive(2, 5.0, now=0.0)
        dests = [c.dest for c in copies(eng.tick(5.0))]
        assert dests == [RetryNow(2), DeadLetter(DeadLetterReason.MAX_DELIVERY_ATTEMPTS, 3)]

    def test_a_messages_max_reconsume_times_allows_that_many_retries(self) -> None:
        """``MAX_RECONSUME_TIMES=2`` on the message (over the consumer's 10): deliveries 1
        and 2 are retried, the third goes to the DLQ."""
        eng = engine(max_delivery_attempts=10)
        eng.fetched(
            TP,
            [Msg(o, reconsume_times=o, max_reconsume_times=2) for o in range(3)],
            3,
        )
        eng.receive(3, 5.0, now=0.0)
        dests = [c.dest for c in copies(eng.tick(5.0))]
        assert dests == [
            RetryNow(1),
            RetryNow(2),
            DeadLetter(DeadLetterReason.MAX_DELIVERY_ATTEMPTS, 3),
        ]
        assert [eng.max_attempts(Msg(0, max_reconsume_times=n)) for n in (0, 2, -1)] == [1, 3, 17]

    def test_the_default_maximum_is_17_deliveries(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 2)
        eng.fetched(TP, [Msg(2, reconsume_times=15), Msg(3, reconsume_times=16)], 4)
        eng.receive(4, 5.0, now=0.0)
        dests = [c.dest for c in copies(eng.tick(5.0))]
        assert dests[2] == RetryNow(16)
        assert dests[3] == DeadLetter(DeadLetterReason.MAX_DELIVERY_ATTEMPTS, 17)

    def test_a_message_header_sets_its_own_maximum(self) -> None:
        eng = engine()
        eng.fetched(TP, [Msg(0, max_reconsume_times=0)], 1)
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        assert isinstance(copy.dest, DeadLetter)

    def test_renew_postpones_the_same_handle_under_a_new_text(self) -> None:
        """The SimpleConsumer's view is its handle: the application keeps the object."""
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 5.0, now=0.0)
        before = str(h)
        assert eng.renew(h, 20.0, now=4.0) is h
        assert h.deadline == 24.0 and h.duration == 20.0 and str(h) != before
        assert copies(eng.tick(10.0)) == []  # its first deadline passes without work
        eng.ack(h, now=23.0)
        assert eng.committable(TP) == 1
        assert eng.unacked == 0

    def test_renew_may_shorten_to_now_and_the_earlier_deadline_finds_nothing(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 60.0, now=0.0)
        eng.renew(h, 0.0, now=1.0)
        [copy] = copies(eng.tick(1.0))
        assert copy.dest == RetryNow(1)
        assert copies(eng.tick(61.0)) == []
        with pytest.raises(InvalidReceiptHandleError, match="expired"):
            eng.ack(h, now=1.0)

    def test_a_renewed_handle_of_another_consumer_or_acked_is_refused(self) -> None:
        eng, other = engine(), engine()
        fetch(eng, TP, 0, 1)
        fetch(other, TP, 0, 1)
        [h] = eng.receive(1, 60.0, now=0.0)
        [theirs] = other.receive(1, 60.0, now=0.0)
        with pytest.raises(InvalidReceiptHandleError, match="another consumer"):
            eng.renew(theirs, 10.0, now=1.0)
        eng.ack(h, now=1.0)
        with pytest.raises(InvalidReceiptHandleError, match="already acknowledged"):
            eng.renew(h, 10.0, now=1.0)

    def test_the_engine_issues_the_handle_type_it_was_given(self) -> None:
        class View(ReceiptHandle):
            __slots__ = ()

        eng = PullEngine(PullOptions(), "c1", handle_type=View)
        eng.assigned(TP)
        fetch(eng, TP, 0, 3)
        got = eng.receive(3, 5.0, now=0.0)
        assert [type(h) for h in got] == [View] * 3
        assert [h.offset for h in got] == [0, 1, 2]
        eng.ack(got[1], now=1.0)
        assert eng.unacked == 2
        assert type(eng.renew(got[0], 9.0, now=1.0)) is View

    def test_handles_of_an_assignment_replaced_without_a_revoke_are_refused(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 60.0, now=0.0)
        eng.assigned(TP)  # a new generation, the old one never revoked
        with pytest.raises(InvalidReceiptHandleError, match="revoked"):
            eng.ack(h, now=1.0)

    def test_next_due_is_the_earliest_invisible_deadline(self) -> None:
        """The loop sleeps until ``next_due``: an invisible time ends on time, not on the
        loop's next 100 ms tick."""
        eng = engine()
        fetch(eng, TP, 0, 2)
        assert eng.next_due() is None
        [late] = eng.receive(1, 30.0, now=0.0)
        [early] = eng.receive(1, 5.0, now=1.0)
        assert eng.next_due() == 6.0
        [expired] = copies(eng.tick(6.0))
        assert expired.msg.queue_offset == early.offset
        assert eng.next_due() == 30.0
        eng.ack(late, now=7.0)  # settled: its deadline passes without work
        assert eng.next_due() == 30.0
        assert copies(eng.tick(30.0)) == []
        assert eng.next_due() is None

    def test_renew_to_zero_expires_now_and_the_handle_is_then_refused(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 60.0, now=0.0)
        eng.renew(h, 0.0, now=1.0)
        [copy] = copies(eng.tick(1.0))
        assert copy.dest == RetryNow(1)
        with pytest.raises(InvalidReceiptHandleError, match="expired"):
            eng.renew(h, 10.0, now=1.0)

    def test_an_acked_message_cannot_change_its_duration(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        [h] = eng.receive(1, 60.0, now=0.0)
        eng.ack(h, now=1.0)
        with pytest.raises(InvalidReceiptHandleError, match="already acknowledged"):
            eng.renew(h, 10.0, now=1.0)

    def test_a_transient_refusal_makes_the_message_visible_again_with_its_attempt_counted(
        self,
    ) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        assert eng.publish_failed(copy, Refusal.TRANSIENT, now=5.1) == []
        assert eng.committable(TP) == 0
        [again] = eng.receive(1, 5.0, now=6.0)
        assert again.msg.reconsume_times == 1 and again.offset == 0
        eng.ack(again, now=7.0)
        assert eng.committable(TP) == 1

    def test_refusals_follow_the_shared_escalation(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 1)
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        [alone] = eng.publish_failed(copy, Refusal.TOO_LARGE, now=5.0)
        assert isinstance(alone, SendBack) and alone.alone
        [dead] = eng.publish_failed(alone, Refusal.TOO_LARGE, now=5.0)
        assert isinstance(dead, SendBack)
        assert dead.dest == DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1)
        assert eng.publish_failed(copy, Refusal.TRANSIENT, now=5.0) == []  # superseded
        eng.published(dead)
        assert eng.committable(TP) == 1

    def test_settled_handles_do_not_pile_up_in_the_deadline_heap(self) -> None:
        eng = engine()
        for i in range(20):
            fetch(eng, TP, i * 1000, 1000)
            while eng.available:
                for h in eng.receive(32, MAX_INVISIBLE_S, now=0.0):
                    eng.ack(h, now=0.0)
        assert eng.deadline_entries < 5000  # compacted (20 000 handles were pushed)

    def test_acknowledged_handles_leave_the_deadline_heap_while_young(self) -> None:
        # a receive/ack loop keeps only a few batches of settled handles (and through them
        # their messages) alive, whatever the invisible duration: kept by the thousand,
        # they outlive the garbage collector's young generations and set off full
        # collections
        eng = engine()
        kept = []
        for i in range(50):
            fetch(eng, TP, i * 200, 200)
            while eng.available:
                handles = eng.receive(32, MAX_INVISIBLE_S, now=0.0)
                kept.append(handles.pop())  # one of each batch stays invisible
                for h in handles:
                    eng.ack(h, now=0.0)
                assert eng.deadline_entries <= 2 * eng.unacked + 200
        assert eng.unacked == len(kept)
        for h in kept:
            eng.ack(h, now=0.0)  # the live ones were kept through every compaction
        assert eng.unacked == 0


class TestFlowAndOffsets:
    def test_pause_while_too_much_is_in_flight_and_resume_below_half(self) -> None:
        eng = engine(flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=100))
        fetch(eng, TP, 0, 4)
        assert Pause(TP, "4 messages in flight > 3") in eng.tick(0.0)
        handles = eng.receive(4, 30.0, now=0.0)
        eng.ack(handles[0], now=0.1)
        assert not [a for a in eng.tick(0.1) if isinstance(a, Resume)]  # 3: not below half
        eng.ack(handles[1], now=0.1)
        eng.ack(handles[2], now=0.1)
        assert Resume(TP) in eng.tick(0.1)

    def test_acks_between_stores_reach_the_next_store(self) -> None:
        """Offsets are stored every ``store_interval_s``: what is acknowledged between two
        stores (ticks that store nothing) is stored by the next one, and acks after a store
        by the one after it."""
        eng = engine(store_interval_s=5.0)
        fetch(eng, TP, 0, 4)
        handles = eng.receive(4, 30.0, now=0.0)
        eng.ack(handles[0], now=0.0)
        assert stored(eng.tick(0.0)) == {TP: 1}  # the first tick stores
        eng.ack(handles[1], now=1.0)
        assert stored(eng.tick(1.0)) == {}  # within the interval
        eng.ack(handles[2], now=2.0)
        assert stored(eng.tick(2.0)) == {}
        assert stored(eng.tick(5.0)) == {TP: 3}
        eng.ack(handles[3], now=6.0)
        assert stored(eng.tick(6.0)) == {}
        assert stored(eng.tick(10.0)) == {TP: 4}

    def test_an_invisible_message_holds_the_offset_span(self) -> None:
        eng = engine(flow=FlowLimits(max_count=1000, max_bytes=10**9, max_span=7))
        fetch(eng, TP, 0, 8)
        handles = eng.receive(8, 30.0, now=0.0)
        for h in handles[1:]:
            eng.ack(h, now=0.0)
        actions = eng.tick(0.0)
        assert stored(actions) == {TP: 0}
        assert not any(isinstance(a, Pause) for a in actions)  # span 7 - 0 = 7
        fetch(eng, TP, 8, 1)
        assert Pause(TP, "in-flight offset span 8 > 7") in eng.tick(0.1)

    def test_a_fetch_with_gaps_keeps_each_message_at_its_offset(self) -> None:
        """Records filtered out by tag (or never there: compaction, transaction markers)
        leave gaps: each message keeps its own offset, and so does the committed one."""
        eng = engine()
        eng.fetched(TP, [Msg(0), Msg(2), Msg(5)], 7, 30)
        assert eng.committable(TP) == 0
        first, second = eng.receive(2, 5.0, now=0.0)
        assert [first.offset, second.offset] == [0, 2]
        eng.ack(first, now=1.0)
        assert eng.committable(TP) == 2
        eng.ack(second, now=1.0)
        assert eng.committable(TP) == 5
        [last] = eng.receive(1, 5.0, now=1.0)
        assert last.offset == 5 and last.msg.queue_offset == 5
        eng.ack(last, now=2.0)
        assert eng.committable(TP) == 7

    def test_filtered_fetches_move_the_offset(self) -> None:
        eng = engine()
        eng.fetched(TP, [], 10)
        assert stored(eng.tick(0.0)) == {TP: 10}


class TestInputs:
    @pytest.mark.parametrize(
        ("value", "seconds"), [(1, 1.0), (2.5, 2.5), (timedelta(minutes=2), 120.0)]
    )
    def test_durations_in_seconds_or_timedelta(self, value: object, seconds: float) -> None:
        assert seconds_of("invisible_duration", value, minimum=1.0) == seconds

    @pytest.mark.parametrize(
        "value", [0.5, 12 * 3600 + 1, -1, float("nan"), "10", True, None, timedelta(hours=13)]
    )
    def test_bad_durations_name_the_value(self, value: object) -> None:
        with pytest.raises(InvalidInputError) as info:
            seconds_of("invisible_duration", value, minimum=1.0)
        assert info.value.field == "invisible_duration" and "invisible_duration=" in str(info.value)

    def test_receive_count_is_capped_at_32(self) -> None:
        assert receive_count(1) == 1 and receive_count(100) == 32

    @pytest.mark.parametrize("value", [0, -3, 2.0, "5", True])
    def test_bad_receive_counts_name_the_value(self, value: object) -> None:
        with pytest.raises(InvalidInputError, match="max_message_num="):
            receive_count(value)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("fetch"), st.integers(0, 1), st.integers(0, 5)),
        st.tuples(st.just("gapped fetch"), st.integers(0, 1), st.integers(1, 4)),
        st.tuples(st.just("receive"), st.integers(1, 6), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.integers(0, 50), st.integers(0, 0)),
        st.tuples(st.just("renew"), st.integers(0, 50), st.integers(0, 4)),
        st.tuples(st.just("time"), st.integers(1, 3), st.integers(0, 0)),
        st.tuples(st.just("publish"), st.integers(0, 20), st.integers(0, 3)),
        st.tuples(st.just("rebalance"), st.integers(0, 1), st.integers(0, 0)),
    ),
    max_size=80,
)
_REFUSALS = [None, Refusal.TRANSIENT, Refusal.TOO_LARGE, Refusal.PERMANENT]


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_offsets_never_pass_an_unsettled_message_and_nothing_is_visible_twice(
    ops: list[tuple[str, int, int]],
) -> None:
    """Model: per partition, the offsets fetched in this generation and not settled (acked,
    or its copy acknowledged).  Whatever happens, every stored offset and every committable
    offset stays at or below the smallest of them, no offset has two live handles, and
    every copy of an expired message counts one more delivery."""
    tps = [TP, TP2]
    eng = engine(*tps, max_delivery_attempts=3)
    now = 0.0
    nxt = dict.fromkeys(tps, 0)
    unsettled: dict[tuple[str, int], set[int]] = {tp: set() for tp in tps}
    handles: list[ReceiptHandle] = []
    pending: list[SendBack] = []

    latest: dict[tuple[tuple[str, int], int], SendBack] = {}

    def current(tp: tuple[str, int], generation: int) -> bool:
        return eng.generation_of(tp) == generation

    def track(found: list[Any]) -> None:
        for a in found:
            if isinstance(a, SendBack):
                latest[(a.tp, a.msg.queue_offset)] = a
                pending.append(a)

    def check(actions: list[Any]) -> None:
        for tp, offset in stored(actions).items():
            assert not unsettled[tp] or offset <= min(unsettled[tp]), (tp, offset)
        for tp in tps:
            c = eng.committable(tp)
            assert c is None or not unsettled[tp] or c <= min(unsettled[tp])
        live: set[tuple[tuple[str, int], int]] = set()
        for h in handles:
            if (
                h.state is HandleState.INVISIBLE
                and current(h.tp, h.generation)
                and h.deadline > now
            ):
                key = (h.tp, h.offset)
                assert key not in live, key
                live.add(key)
        for a in actions:
            if isinstance(a, SendBack):  # an expired message: one more delivery counted
                assert isinstance(a.dest, RetryNow | DeadLetter)
                assert a.dest.reconsume_times == a.msg.reconsume_times + 1
        track(actions)

    for op, a, b in ops:
        actions: list[Any] = []
        if op == "fetch":
            tp = tps[a]
            first = nxt[tp]
            eng.fetched(tp, [Msg(o) for o in range(first, first + b)], first + b)
            unsettled[tp].update(range(first, first + b))
            nxt[tp] = first + b
        elif op == "gapped fetch":  # every other offset filtered out
            tp = tps[a]
            first = nxt[tp]
            offsets = range(first, first + 2 * b, 2)
            eng.fetched(tp, [Msg(o) for o in offsets], first + 2 * b)
            unsettled[tp].update(offsets)
            nxt[tp] = first + 2 * b
        elif op == "receive":
            handles.extend(eng.receive(a, float(b), now))
        elif op == "ack" and handles:
            h = handles[a % len(handles)]
            try:
                eng.ack(h, now)
            except InvalidReceiptHandleError:
                pass
            else:
                if current(h.tp, h.generation):
                    unsettled[h.tp].discard(h.offset)
        elif op == "renew" and handles:
            h = handles[a % len(handles)]
            with contextlib.suppress(InvalidReceiptHandleError):
                eng.renew(h, float(b), now)
        elif op == "time":
            now += a
            actions = eng.tick(now)
        elif op == "publish" and pending:
            action = pending.pop(a % len(pending))
            refusal = _REFUSALS[b]
            key = (action.tp, action.msg.queue_offset)
            if refusal is None:
                eng.published(action)
                if current(action.tp, action.generation) and latest.get(key) is action:
                    unsettled[action.tp].discard(action.msg.queue_offset)
            else:
                track(eng.publish_failed(action, refusal, now))
        elif op == "rebalance":
            tp = tps[a]
            eng.revoked(tp)
            eng.assigned(tp)
            unsettled[tp] = set()
            pending[:] = [p for p in pending if p.tp != tp]
        check(actions)
        check(eng.tick(now))
        # every handle still invisible is counted once (a renewed one too), none twice
        live = {id(h) for h in handles if h.state is HandleState.INVISIBLE}
        assert eng.unacked == len(live)


def test_an_offset_the_client_refused_to_store_is_handed_out_again() -> None:
    eng = engine()
    eng.fetched(TP, [], 10)
    assert stored(eng.tick(0.0)) == {TP: 10}
    assert stored(eng.tick(1.0)) == {}
    eng.store_failed([TP])
    assert stored(eng.tick(2.0)) == {TP: 10}


def receive_count_of(value: object) -> Any:
    return lambda: receive_count(value)


class TestErrorsNameTheHandleValueAndCause:
    """The exact texts: an error names the field, the value and the cause (a receipt handle
    by its text form)."""

    @pytest.mark.parametrize(
        ("call", "value", "text"),
        [
            (
                lambda: seconds_of("invisible_duration", "10", minimum=1.0),
                "10",
                "invisible_duration='10': expected seconds (int or float) or a timedelta",
            ),
            (
                lambda: seconds_of("invisible_duration", 0.5, minimum=1.0),
                0.5,
                "invisible_duration=0.5: must be between 1 s and 43200 s",
            ),
            (receive_count_of(2.0), 2.0, "max_message_num=2.0: must be an int"),
            (receive_count_of(0), 0, "max_message_num=0: must be greater than 0"),
        ],
    )
    def test_bad_inputs(self, call: Any, value: object, text: str) -> None:
        with pytest.raises(InvalidInputError) as info:
            call()
        assert str(info.value) == text
        assert info.value.value == value

    def test_the_longest_invisible_duration_is_allowed(self) -> None:
        assert seconds_of("invisible_duration", MAX_INVISIBLE_S, minimum=1.0) == MAX_INVISIBLE_S

    def test_handle_texts_name_consumer_partition_offset_generation_and_token(self) -> None:
        eng = PullEngine(PullOptions(), "texts")
        eng.assigned(TP)
        fetch(eng, TP, 0, 3)
        first = eng.receive(2, 30.0, now=0.0)
        [second] = eng.receive(1, 30.0, now=0.0)
        assert [str(h) for h in first] == ["texts:orders:0:0:1:1", "texts:orders:0:1:1:1"]
        assert second.handle_text() == "texts:orders:0:2:1:2"
        eng.renew(second, 10.0, now=1.0)
        assert str(second) == "texts:orders:0:2:1:3"

    def test_refused_handles_say_why(self) -> None:
        eng = PullEngine(PullOptions(), "why")
        other = PullEngine(PullOptions(), "other")
        for e in (eng, other):
            e.assigned(TP)
            fetch(e, TP, 0, 3)
        [theirs] = other.receive(1, 30.0, now=0.0)
        acked, expiring, revoked = eng.receive(3, 5.0, now=0.0)
        eng.ack(acked, now=1.0)

        def refusal(handle: Any, now: float, *, renew: bool = False) -> str:
            with pytest.raises(InvalidReceiptHandleError) as info:
                if renew:
                    eng.renew(handle, 10.0, now=now)
                else:
                    eng.ack(handle, now=now)
            return str(info.value)

        assert refusal(theirs, 1.0) == (
            "invalid receipt handle other:orders:0:0:1:1: the receipt handle belongs to "
            "another consumer"
        )
        assert refusal("why:orders:0:0:1:1", 1.0) == (
            "invalid receipt handle why:orders:0:0:1:1: the receipt handle belongs to "
            "another consumer"
        )
        assert refusal(acked, 1.0, renew=True) == (
            "invalid receipt handle why:orders:0:0:1:1: the message was already acknowledged"
        )
        assert refusal(expiring, 5.0) == (
            "invalid receipt handle why:orders:0:1:1:1: receipt handle is expired (invisible "
            "duration 5 s); the message is delivered again"
        )
        eng.tick(5.0)  # both expire; one of them is then revoked with its partition
        eng.revoked(TP)
        assert revoked.state is HandleState.EXPIRED
        assert refusal(revoked, 6.0) == (
            "invalid receipt handle why:orders:0:2:1:1: partition orders[0] was revoked; its "
            "new owner delivers the message again"
        )


def visible_again(eng: PullEngine, tp: tuple[str, int], first: int, n: int) -> None:
    """``n`` messages fetched from ``first`` on, received, expired and their copies refused
    for a transient reason: visible again here."""
    fetch(eng, tp, first, n)
    eng.receive(n, 1.0, now=0.0)
    for copy in copies(eng.tick(1.0)):
        assert eng.publish_failed(copy, Refusal.TRANSIENT, now=1.0) == []


class TestAccounting:
    def test_a_fetch_returns_its_run(self) -> None:
        eng = engine()
        msgs = [Msg(o) for o in range(4, 7)]
        work = eng.fetched(TP, msgs, 9, 30)
        assert work is not None
        assert (work.tp, work.generation, work.msgs, work.size, work.end, work.nbytes) == (
            TP,
            1,
            msgs,
            3,
            9,
            30,
        )
        default = eng.fetched(TP, [Msg(9)], 10)
        assert default is not None and default.nbytes == 0
        assert eng.available == 4

    def test_generations_count_assignments_and_revokes(self) -> None:
        """The generation a handle names (its text too) moves on with every assignment and
        revoke, so no later assignment's handles or copies are taken for an earlier one's."""
        eng = PullEngine(PullOptions(), "gen")
        eng.revoked(TP2)  # never ours: harmless
        assert eng.generation_of(TP2) is None and not eng.owns(TP2)
        eng.assigned(TP2)
        eng.assigned(TP)
        assert (eng.generation_of(TP), eng.generation_of(TP2)) == (1, 2)
        eng.assigned(TP)
        assert eng.generation_of(TP) == 2
        eng.revoked(TP)
        eng.assigned(TP)
        assert eng.generation_of(TP) == 4 and eng.owns(TP)
        assert eng.committable(("orders", 9)) is None and eng.in_flight(("orders", 9)) == 0
        assert not eng.running() and not eng.running([TP])

    def test_in_flight_and_local_retries_count_what_is_held(self) -> None:
        eng = engine(TP, TP2)
        visible_again(eng, TP, 0, 2)
        fetch(eng, TP, 2, 3)
        fetch(eng, TP2, 0, 1)
        eng.receive(1, 30.0, now=2.0)
        assert (eng.in_flight(TP), eng.in_flight(TP2)) == (5, 1)
        assert eng.local_retries() == 1 and eng.available == 5

    def test_a_revoke_forgets_the_partitions_messages_and_handles(self) -> None:
        eng = engine(TP, TP2)
        visible_again(eng, TP, 0, 2)  # two visible again
        fetch(eng, TP, 2, 3)
        [h] = eng.receive(1, 30.0, now=2.0)  # one of those, received again
        assert h.offset in (0, 1)
        eng.receive(1, 30.0, now=2.0)  # TP2 has nothing: TP's other one
        [h3] = eng.receive(1, 30.0, now=2.0)  # then the buffered ones
        eng.receive(1, 3.0, now=2.0)
        [copy] = copies(eng.tick(5.0))  # one expired: its copy is held
        fetch(eng, TP2, 0, 2)
        assert eng.available == 1 + 2 and eng.unacked == 3
        eng.revoked(TP)
        assert eng.available == 2 and eng.unacked == 0
        assert h.state is HandleState.REVOKED and h3.state is HandleState.REVOKED
        assert [x.tp for x in eng.receive(5, 30.0, now=6.0)] == [TP2, TP2]
        assert eng.publish_failed(copy, Refusal.TOO_LARGE, now=6.0) == []
        eng.published(copy)
        assert eng.committable(TP) is None

    def test_a_revoke_takes_both_buffered_and_visible_again_messages_out(self) -> None:
        eng = engine(TP, TP2)
        visible_again(eng, TP, 0, 1)
        fetch(eng, TP, 1, 2)
        fetch(eng, TP2, 0, 2)
        assert eng.available == 5
        eng.revoked(TP)
        assert eng.available == 2

    def test_bytes_in_flight_pause_and_resume(self) -> None:
        """Bodies count from fetch until acknowledged or their copy is (10 bytes each)."""
        eng = engine(flow=FlowLimits(max_count=1000, max_bytes=40, max_span=1000))
        fetch(eng, TP, 0, 2)
        fetch(eng, TP, 2, 2)
        assert not [a for a in eng.tick(0.0) if isinstance(a, Pause)]  # 40: at the limit
        fetch(eng, TP, 4, 1)
        assert Pause(TP, "50 bytes in flight > 40") in eng.tick(0.0)
        handles = eng.receive(5, 30.0, now=0.0)
        for h in handles[:2]:
            eng.ack(h, now=0.0)
        assert Resume(TP) not in eng.tick(0.0)  # 30 > half
        eng.ack(handles[2], now=0.0)
        assert Resume(TP) in eng.tick(0.0)  # 20
        assert copies(eng.tick(30.0)) and eng.tick(30.0) == []
        fetch(eng, TP, 5, 3)  # 20 held by copies + 30
        assert Pause(TP, "50 bytes in flight > 40") in eng.tick(30.0)

    def test_an_acknowledged_copy_settles_its_bytes_and_stores_its_offset(self) -> None:
        eng = engine(flow=FlowLimits(max_count=1000, max_bytes=20, max_span=1000))
        fetch(eng, TP, 0, 3)
        eng.receive(3, 5.0, now=0.0)
        assert Pause(TP, "30 bytes in flight > 20") in eng.tick(0.0)
        sent = copies(eng.tick(5.0))
        eng.published(sent[0])
        actions = eng.tick(5.0)
        assert Resume(TP) not in actions and stored(actions) == {TP: 1}  # 20: not below half
        eng.published(sent[1])
        actions = eng.tick(5.0)
        assert Resume(TP) in actions and stored(actions) == {TP: 2}

    def test_an_offset_is_handed_out_once(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 3)
        a, b, c = eng.receive(3, 30.0, now=0.0)
        eng.ack(b, now=0.0)
        assert stored(eng.tick(0.0)) == {TP: 0}
        eng.ack(c, now=0.0)
        assert stored(eng.tick(0.0)) == {}  # still 0: not again
        eng.ack(a, now=0.0)
        assert stored(eng.tick(0.0)) == {TP: 3}


class TestReceiveLimits:
    def test_a_receive_of_nothing_changes_nothing(self) -> None:
        eng = engine(TP, TP2)
        fetch(eng, TP, 0, 2)
        fetch(eng, TP2, 0, 2)
        assert eng.receive(0, 30.0, now=0.0) == []
        assert {h.tp for h in eng.receive(2, 30.0, now=0.0)} == {TP}  # still TP's turn

    @pytest.mark.parametrize("n", [1, 2, 3, 4])
    def test_never_more_than_asked_from_messages_visible_again_and_buffered(self, n: int) -> None:
        eng = engine(TP, TP2)
        visible_again(eng, TP, 0, 2)
        fetch(eng, TP, 2, 1)
        fetch(eng, TP2, 0, 5)
        got = eng.receive(n, 30.0, now=2.0)
        assert [(h.tp, h.offset) for h in got] == [(TP, 0), (TP, 1), (TP, 2), (TP2, 0)][:n]
        assert eng.available == 8 - n
        eng.revoked(TP)
        assert all(h.state is HandleState.REVOKED for h in got if h.tp == TP)


class TestDeadlineHeap:
    def test_entries_count_handles_until_compacted_beyond_twice_the_live_ones(self) -> None:
        """Two handles stay invisible; one more is received and acknowledged at a time: the
        heap is compacted once it refers to more than 2 x 3 live handles + 64."""
        eng = engine()
        assert eng.deadline_entries == 0
        fetch(eng, TP, 0, 200)
        kept = eng.receive(2, 50.0, now=0.0)
        for i in range(68):
            [h] = eng.receive(1, 50.0, now=0.0)
            eng.ack(h, now=0.0)
            assert eng.deadline_entries == 3 + i
        [last] = eng.receive(1, 50.0, now=0.0)
        assert eng.deadline_entries == 3  # 71 > 70: the two kept and the last one
        eng.ack(last, now=1.0)
        assert eng.deadline_entries == 3
        assert [c.msg.queue_offset for c in copies(eng.tick(50.0))] == [h.offset for h in kept]
        assert eng.deadline_entries == 0

    def test_a_deadline_is_kept_however_many_receives_came_before(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 9)
        for _ in range(8):
            [h] = eng.receive(1, 1.0, now=0.0)
            eng.ack(h, now=0.0)
        assert copies(eng.tick(1.0)) == []
        eng.receive(1, 1.0, now=1.0)
        assert [c.msg.queue_offset for c in copies(eng.tick(2.0))] == [8]

    def test_expiry_goes_on_past_revoked_and_settled_handles(self) -> None:
        eng = engine(TP, TP2)
        fetch(eng, TP, 0, 1)
        fetch(eng, TP2, 0, 3)
        eng.receive(1, 5.0, now=0.0)  # TP's, revoked below
        settled, expiring, also = eng.receive(3, 5.0, now=0.0)
        eng.ack(settled, now=1.0)
        eng.revoked(TP)
        got = copies(eng.tick(5.0))
        assert [(c.tp, c.msg.queue_offset) for c in got] == [(TP2, 1), (TP2, 2)]
        assert [c.work.tp for c in got] == [TP2, TP2]
        assert [c.work.generation for c in got] == [c.generation for c in got]
        assert also.state is HandleState.EXPIRED and expiring.state is HandleState.EXPIRED


class TestRefusedCopies:
    def test_the_whole_escalation_of_a_copy_too_large(self) -> None:
        """Alone, then to the DLQ, alone, without its body, alone, then visible again."""
        eng = engine()
        fetch(eng, TP, 0, 1)
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        steps = []
        action = copy
        for _ in range(5):
            [action] = eng.publish_failed(action, Refusal.TOO_LARGE, now=5.0)
            assert isinstance(action, SendBack)
            steps.append((action.dest, action.alone, action.omit_body))
        dead = DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1)
        assert steps == [
            (RetryNow(1), True, False),
            (dead, False, False),
            (dead, True, False),
            (dead, False, True),
            (dead, True, True),
        ]
        assert eng.publish_failed(action, Refusal.TOO_LARGE, now=5.0) == []
        assert eng.available == 1 and eng.local_retries() == 1

    def test_a_transient_refusal_adds_one_message_to_receive(self) -> None:
        eng = engine()
        fetch(eng, TP, 0, 3)
        eng.receive(1, 5.0, now=0.0)
        [copy] = copies(eng.tick(5.0))
        eng.publish_failed(copy, Refusal.TRANSIENT, now=5.0)
        assert eng.available == 3
        assert [h.offset for h in eng.receive(3, 5.0, now=5.0)] == [0, 1, 2]
