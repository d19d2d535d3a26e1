"""The concurrent consume engine, driven event by event without a broker or a clock.

Each test reads like the rule it checks (docs/semantics.md, "Concurrent consumption").
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.core.codec import Failure
from adapter.core.delay import DelayLevels
from adapter.core.engine import (
    ConcurrentEngine,
    Dropped,
    EngineOptions,
    Hurry,
    Pause,
    Resume,
    RunWork,
    SendBack,
    StoreOffsets,
    Work,
)
from adapter.core.engine.actions import TimedOut, TraceInfo
from adapter.core.engine.concurrent import COPY_ALLOWANCE
from adapter.core.listener import ConsumeConcurrentlyContext, MessageQueue, Outcome, judge
from adapter.core.offsets import FlowLimits
from adapter.core.publishing import Refusal
from adapter.core.routing import (
    ConsumeConcurrentlyStatus,
    DeadLetter,
    DeadLetterReason,
    RetryLater,
)

pytestmark = pytest.mark.unit

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
TP = ("orders", 0)
LEVELS = DelayLevels.parse("1s 5s 10s 30s 1m")


@dataclass(frozen=True)
class Msg:
    """What the engine needs of a message."""

    queue_offset: int
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    body: bytes = b"x" * 10

    def redelivered(self) -> Msg:
        return replace(self, reconsume_times=self.reconsume_times + 1)

    def retry_fields(self) -> tuple[int, int | None, int, int]:
        return self.reconsume_times, self.max_reconsume_times, self.queue_offset, len(self.body)


def engine(**kw: Any) -> ConcurrentEngine:
    opts: dict[str, Any] = {
        "batch_size": 4,
        "levels": LEVELS,
        "consume_timeout_s": 60.0,
        "store_interval_s": 0.0,
    }
    opts.update(kw)
    eng = ConcurrentEngine(EngineOptions(**opts))
    eng.assigned(TP)
    return eng


def msgs(first: int, n: int, **kw: Any) -> list[Msg]:
    return [Msg(o, **kw) for o in range(first, first + n)]


def outcome(result: object, size: int, **ctx: Any) -> Outcome | None:
    c = ConsumeConcurrentlyContext(MessageQueue("orders", 0), **ctx)
    return judge(result, c, size)


def stored(actions: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for a in actions:
        if isinstance(a, StoreOffsets):
            out.update(dict(a.offsets))
    return out


def of(kind: type, actions: list[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


class TestSuccess:
    def test_all_success_commits_to_the_end_and_holds_nothing(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(100, 10), end=110)
        assert work is not None
        assert [len(b) for b in work.batches] == [4, 4, 2]  # batch_size 4
        assert eng.settle_run(work, [], now=0.0) == []
        assert stored(eng.tick(0.0)) == {TP: 110}
        assert eng.in_flight(TP) == 0

    def test_offsets_are_stored_only_when_they_move(self) -> None:
        eng = engine()
        eng.settle_run(eng.fetched(TP, msgs(0, 4), end=4), [], 0.0)  # type: ignore[arg-type]
        assert stored(eng.tick(0.0)) == {TP: 4}
        assert stored(eng.tick(0.0)) == {}

    def test_filtered_messages_settle_like_a_broker_side_filter(self) -> None:
        eng = engine()
        assert eng.fetched(TP, [], end=50) is None  # every record filtered out by tag
        assert stored(eng.tick(0.0)) == {TP: 50}


class TestAckIndex:
    def test_ack_index_sends_the_rest_back_and_holds_the_offset_until_acknowledged(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(100, 4), end=104)
        assert work is not None
        acts = eng.settle_run(work, [(0, outcome(OK, 4, ack_index=1), 0.01)], 0.0)
        backs = of(SendBack, acts)
        assert [a.msg.queue_offset for a in backs] == [102, 103]
        assert all(a.dest == RetryLater(3, 10_000, 1) for a in backs)  # level 3 + 0
        assert backs[0].failure == Failure("NotAcknowledged", "CONSUME_SUCCESS with ack_index=1")
        assert stored(eng.tick(0.0)) == {TP: 102}
        eng.published(backs[1])
        assert stored(eng.tick(0.0)) == {}  # 102 still unsettled
        eng.published(backs[0])
        assert stored(eng.tick(0.0)) == {TP: 104}

    def test_a_copy_carries_where_its_message_was_and_settles_by_what_it_carries(
        self,
    ) -> None:
        """The copy knows its message's offset and size, and where it was in its listener
        batch (for its trace); its acknowledgement settles exactly that message's count
        and bytes."""
        eng = engine(batch_size=4, flow=FlowLimits(max_count=1000, max_bytes=10**6))
        work = eng.fetched(TP, msgs(100, 6, body=b"y" * 7), end=106)
        assert work is not None
        acts = eng.settle_run(work, [(1, outcome(OK, 2, ack_index=0), 0.25)], 0.0)
        [copy] = of(SendBack, acts)
        assert (copy.msg.queue_offset, copy.offset, copy.nbytes) == (105, 105, 7)
        assert copy.trace_info == TraceInfo(batch_size=2, batch_index=1, ack_index=0, rt_ms=250.0)
        assert eng.in_flight(TP) == 1
        eng.published(copy)
        assert eng.in_flight(TP) == 0
        assert stored(eng.tick(0.0)) == {TP: 106}

    @pytest.mark.parametrize(
        ("ack_index", "failed"),
        [(None, []), (3, []), (99, []), (-1, [0, 1, 2, 3]), (-7, [0, 1, 2, 3])],
    )
    def test_ack_index_edges(self, ack_index: int | None, failed: list[int]) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        acts = eng.settle_run(work, [(0, outcome(OK, 4, ack_index=ack_index), 0.0)], 0.0)
        assert [a.msg.queue_offset for a in of(SendBack, acts)] == failed

    @pytest.mark.parametrize(
        "result", [LATER, None, "CONSUME_SUCCESS", 7, RuntimeError("boom")], ids=repr
    )
    def test_anything_but_success_fails_the_whole_batch(self, result: object) -> None:
        out = outcome(result, 3)
        assert out is not None and list(out.failed) == [0, 1, 2]

    def test_a_bad_context_field_fails_the_batch_with_a_named_error(self) -> None:
        out = outcome(OK, 2, ack_index="1")
        assert out is not None and list(out.failed) == [0, 1]
        assert out.failure.type == "ListenerResultError"
        assert "context.ack_index='1'" in out.failure.message


class TestLadder:
    @pytest.mark.parametrize(("times", "level"), [(0, 3), (1, 4), (2, 5), (3, 5), (9, 5)])
    def test_level_is_three_plus_reconsume_times_clamped(self, times: int, level: int) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=times), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        assert back.dest == RetryLater(level, LEVELS.delay_ms(level), times + 1)

    def test_the_maximum_sends_to_the_dlq(self) -> None:
        eng = engine(max_reconsume_times=3)
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=3), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        assert back.dest == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 4)

    def test_a_message_header_overrides_the_group_maximum(self) -> None:
        eng = engine(max_reconsume_times=16)
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=1, max_reconsume_times=1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        assert isinstance(back.dest, DeadLetter)

    @pytest.mark.parametrize(
        ("level", "dest"),
        [
            (-1, DeadLetter(DeadLetterReason.LISTENER_REQUESTED, 1)),
            (2, RetryLater(2, 5_000, 1)),
            (99, RetryLater(5, 60_000, 1)),
        ],
    )
    def test_delay_level_when_next_consume(self, level: int, dest: object) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        out = outcome(LATER, 1, delay_level_when_next_consume=level)
        [back] = of(SendBack, eng.settle_run(work, [(0, out, 0.0)], 0.0))
        assert back.dest == dest


class TestTimeouts:
    def test_a_pooled_batch_past_the_timeout_is_sent_back_and_its_late_result_ignored(self) -> None:
        eng = engine(consume_timeout_s=5.0)
        work = eng.fetched(TP, msgs(0, 2), end=2, pooled=True)
        assert work is not None and work.started is not None
        work.started[0] = 10.0  # a worker began it at t=10
        assert of(SendBack, eng.tick(14.0)) == []
        backs = of(SendBack, eng.tick(15.5))
        assert [b.failure.type for b in backs] == ["ConsumeTimeout", "ConsumeTimeout"]
        assert eng.completed(work, 0, None, 16.0, rt_s=6.0) == []  # late result: ignored
        for b in backs:
            eng.published(b)
        assert stored(eng.tick(16.0)) == {TP: 2}

    def test_the_timeout_counts_from_the_listener_call_not_from_the_queue(self) -> None:
        eng = engine(consume_timeout_s=5.0)
        work = eng.fetched(TP, msgs(0, 1), end=1, pooled=True)
        assert work is not None
        assert eng.tick(100.0) == [] or not of(SendBack, eng.tick(100.0))  # never started
        assert work.started is not None
        work.started[0] = 100.0
        assert eng.completed(work, 0, None, 103.0, rt_s=3.0) == []
        assert stored(eng.tick(103.0)) == {TP: 1}

    def test_an_inline_batch_that_ran_too_long_counts_as_reconsume_later(self) -> None:
        eng = engine(consume_timeout_s=5.0)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, None, 5.5)], 0.0))
        assert back.failure is not None and back.failure.type == "ConsumeTimeout"


class TestPool:
    def test_out_of_order_completion_holds_the_offset_at_the_first_running_batch(self) -> None:
        eng = engine(batch_size=2)
        work = eng.fetched(TP, msgs(0, 6), end=6, pooled=True)
        assert work is not None
        eng.completed(work, 2, None, 0.0)
        eng.completed(work, 1, None, 0.0)
        assert stored(eng.tick(0.0)) == {TP: 0}
        eng.completed(work, 0, None, 0.0)
        assert stored(eng.tick(0.0)) == {TP: 6}
        assert not eng.running()


class TestRebalance:
    def test_results_of_a_revoked_partition_are_ignored(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4, pooled=True)
        assert work is not None
        eng.revoked(TP)
        assert eng.completed(work, 0, outcome(LATER, 4), 0.0) == []
        eng.assigned(TP)  # assigned again: a new generation, fresh state
        assert eng.completed(work, 0, outcome(LATER, 4), 0.0) == []
        assert eng.committable(TP) is None

    def test_fetches_for_a_partition_not_ours_are_dropped(self) -> None:
        eng = engine()
        assert eng.fetched(("other", 0), msgs(0, 2), end=2) is None

    def test_a_send_back_acknowledged_after_revoke_changes_nothing(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        eng.revoked(TP)
        eng.assigned(TP)
        eng.published(back)
        assert eng.publish_failed(back, Refusal.TRANSIENT, 0.0) == []
        assert eng.committable(TP) is None


class TestLocalRetry:
    def test_a_failed_send_back_is_consumed_again_locally_holding_the_offset(self) -> None:
        eng = engine(send_back_retry_interval_s=5.0)
        work = eng.fetched(TP, msgs(7, 1), end=8)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        assert eng.publish_failed(back, Refusal.TRANSIENT, now=1.0) == []
        assert stored(eng.tick(1.0)) == {TP: 7}
        assert of(RunWork, eng.tick(5.9)) == []
        [run] = of(RunWork, eng.tick(6.0))
        [[again]] = run.work.batches
        assert (again.queue_offset, again.reconsume_times) == (7, 1)
        assert stored(eng.tick(6.0)) == {}  # still held
        eng.settle_run(run.work, [], 6.1)
        assert stored(eng.tick(6.1)) == {TP: 8}
        assert eng.in_flight(TP) == 0

    def test_next_due_names_when_the_local_retry_is_handed_out(self) -> None:
        """The loop sleeps until ``next_due`` instead of polling in 5 ms steps."""
        eng = engine(send_back_retry_interval_s=5.0)
        assert eng.next_due() is None
        work = eng.fetched(TP, msgs(7, 2), end=9)  # one batch of two
        assert work is not None
        first, second = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 2), 0.0)], 0.0))
        eng.publish_failed(second, Refusal.TRANSIENT, now=2.0)
        eng.publish_failed(first, Refusal.TRANSIENT, now=1.0)
        assert eng.next_due() == 6.0  # the earlier of the two
        assert of(RunWork, eng.tick(5.9)) == [] and eng.next_due() == 6.0
        assert of(RunWork, eng.tick(6.0))
        assert eng.next_due() == 7.0
        assert of(RunWork, eng.tick(7.0))
        assert eng.next_due() is None

    def test_a_local_retry_that_fails_again_goes_one_level_up(self) -> None:
        eng = engine(send_back_retry_interval_s=1.0)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        eng.publish_failed(back, Refusal.TRANSIENT, 0.0)
        [run] = of(RunWork, eng.tick(1.0))
        [again] = of(SendBack, eng.settle_run(run.work, [(0, outcome(LATER, 1), 0.0)], 1.0))
        assert again.dest == RetryLater(4, 30_000, 2)
        eng.published(again)
        assert stored(eng.tick(1.0)) == {TP: 1}

    def test_a_local_retry_of_a_revoked_partition_is_dropped(self) -> None:
        eng = engine(send_back_retry_interval_s=1.0)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        eng.publish_failed(back, Refusal.TRANSIENT, 0.0)
        eng.revoked(TP)
        assert of(RunWork, eng.tick(2.0)) == []


class TestRefusals:
    def _back(self, eng: ConcurrentEngine, times: int = 0) -> SendBack:
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=times), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        return back  # type: ignore[no-any-return]

    def test_too_large_in_a_batch_is_sent_again_alone(self) -> None:
        eng = engine()
        back = self._back(eng)
        [alone] = eng.publish_failed(back, Refusal.TOO_LARGE, 0.0)
        assert isinstance(alone, SendBack) and alone.alone and alone.dest == back.dest

    def test_a_retry_copy_refused_alone_goes_to_the_dlq(self) -> None:
        eng = engine()
        [alone] = eng.publish_failed(self._back(eng), Refusal.TOO_LARGE, 0.0)
        [dead] = eng.publish_failed(alone, Refusal.PERMANENT, 0.0)  # type: ignore[arg-type]
        assert dead.dest == DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1)  # type: ignore[union-attr]

    def test_a_dead_letter_too_large_alone_goes_without_its_body_and_then_holds(self) -> None:
        eng = engine(max_reconsume_times=0, send_back_retry_interval_s=1.0)
        back = self._back(eng)
        assert isinstance(back.dest, DeadLetter)
        [alone] = eng.publish_failed(back, Refusal.TOO_LARGE, 0.0)
        [bodiless] = eng.publish_failed(alone, Refusal.TOO_LARGE, 0.0)  # type: ignore[arg-type]
        assert bodiless.omit_body and not bodiless.alone  # type: ignore[union-attr]
        [last] = eng.publish_failed(bodiless, Refusal.TOO_LARGE, 0.0)  # type: ignore[arg-type]
        assert last.omit_body and last.alone  # type: ignore[union-attr]
        assert eng.publish_failed(last, Refusal.TOO_LARGE, 0.0) == []  # type: ignore[arg-type]
        assert of(RunWork, eng.tick(1.0))  # held: consumed again locally
        assert eng.committable(TP) == 0

    def test_a_superseded_copy_is_ignored(self) -> None:
        eng = engine()
        back = self._back(eng)
        eng.publish_failed(back, Refusal.TOO_LARGE, 0.0)
        assert eng.publish_failed(back, Refusal.TOO_LARGE, 0.0) == []
        eng.published(back)  # the old copy's ack does not settle the message
        assert eng.committable(TP) == 0


class TestStoreInterval:
    def test_offsets_are_handed_out_at_most_every_store_interval(self) -> None:
        eng = engine(batch_size=1, store_interval_s=0.02)
        eng.settle_run(eng.fetched(TP, msgs(0, 2), end=2), [], 0.0)  # type: ignore[arg-type]
        assert stored(eng.tick(1.000)) == {TP: 2}
        eng.settle_run(eng.fetched(TP, msgs(2, 2), end=4), [], 1.0)  # type: ignore[arg-type]
        assert stored(eng.tick(1.010)) == {}  # too soon
        assert stored(eng.tick(1.021)) == {TP: 4}  # not lost: handed out next time
        assert eng.committable(TP) == 4  # revoke and shutdown read it at once


class TestBroadcasting:
    def test_failures_are_dropped_and_the_offset_moves(self) -> None:
        eng = engine(clustering=False)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        acts = eng.settle_run(work, [(0, outcome(LATER, 2), 0.0)], 0.0)
        assert [a.msg.queue_offset for a in of(Dropped, acts)] == [0, 1]
        assert of(SendBack, acts) == []
        assert stored(eng.tick(0.0)) == {TP: 2}


class TestFlowControl:
    def test_pause_above_the_count_limit_and_resume_below_half_of_it(self) -> None:
        """Resuming discards what librdkafka fetched ahead: a partition that dips just
        under the limit stays paused until it is below half of it, or it would pause and
        resume (and fetch everything twice) at every batch."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=4, max_bytes=10**9, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 6), end=6, pooled=True)
        assert work is not None
        [pause] = of(Pause, eng.tick(0.0))
        assert pause.tp == TP and "6 messages in flight > 4" in pause.reason
        for i in range(2):
            eng.completed(work, i, None, 0.0)
        assert of(Resume, eng.tick(0.0)) == []  # 4 in flight: at the limit, not below half
        assert eng.paused() == [TP]
        eng.completed(work, 2, None, 0.0)
        eng.completed(work, 3, None, 0.0)
        assert of(Resume, eng.tick(0.0)) == [Resume(TP)]  # 2 in flight: half
        assert eng.paused() == []

    def test_a_copy_in_flight_holds_the_span_up_to_its_allowance_then_is_hurried(self) -> None:
        """A copy awaiting the broker's verdict is answered within a round trip or two: the
        partition goes on fetching up to COPY_ALLOWANCE times its span limit; past that the
        copies are hurried, and the partition pauses only if they are still unanswered."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        eng.tick(0.0)
        eng.settle_run(eng.fetched(TP, msgs(1, 10), end=11), [], 0.0)  # type: ignore[arg-type]
        assert eng.tick(0.0) == []  # span 10 > 5: no pause, no hurry
        end = 12 + 5 * COPY_ALLOWANCE
        eng.settle_run(eng.fetched(TP, msgs(11, end - 11), end=end), [], 0.0)  # type: ignore[arg-type]
        actions = eng.tick(0.0)
        assert of(Hurry, actions) == [Hurry((TP,))] and of(Pause, actions) == []
        [pause] = of(Pause, eng.tick(0.0))  # still unanswered at the next tick
        assert pause.tp == TP and f"span {end - 1} > 5" in pause.reason
        eng.published(back)
        assert of(Resume, eng.tick(0.0)) == [Resume(TP)]
        assert eng.committable(TP) == end

    def test_a_hurried_copy_answered_in_time_spares_the_pause(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        end = 12 + 5 * COPY_ALLOWANCE
        eng.settle_run(eng.fetched(TP, msgs(1, end - 1), end=end), [], 0.0)  # type: ignore[arg-type]
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]
        eng.published(back)  # the hurried copy's verdict
        assert eng.tick(0.0) == [StoreOffsets(((TP, end),))]
        assert eng.paused() == []

    def test_pause_on_the_offset_span_of_a_message_waiting_for_its_local_retry(self) -> None:
        """A copy the broker refused is consumed again locally later: nothing answers it
        soon, so the span limit holds as it is."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0))
        assert eng.publish_failed(back, Refusal.TRANSIENT, 0.0) == []
        eng.settle_run(eng.fetched(TP, msgs(1, 10), end=11), [], 0.0)  # type: ignore[arg-type]
        [pause] = of(Pause, eng.tick(0.0))
        assert pause.tp == TP and of(Hurry, eng.tick(0.0)) == []

    def test_bytes_of_held_messages_count(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6))
        work = eng.fetched(TP, [Msg(0, body=b"y" * 20)], end=1, nbytes=20)
        assert work is not None
        eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0)
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]  # no allowance for bytes
        assert of(Pause, eng.tick(0.0))

    def test_a_held_message_and_its_bytes_are_let_go_when_its_copy_is_acknowledged(
        self,
    ) -> None:
        eng = engine(batch_size=2, flow=FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6))
        work = eng.fetched(TP, [Msg(0, body=b"y" * 20), Msg(1, body=b"z" * 20)], end=2, nbytes=40)
        assert work is not None
        backs = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 2), 0.0)], 0.0))
        assert [b.msg.queue_offset for b in backs] == [0, 1]
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]  # 40 bytes held, over 15
        eng.published(backs[1])
        assert eng.in_flight(TP) == 1 and eng.committable(TP) == 0  # offset 0 still held
        eng.published(backs[0])
        eng.published(backs[0])  # a second report of the same copy changes nothing
        assert eng.in_flight(TP) == 0 and eng.committable(TP) == 2
        actions = eng.tick(0.0)
        assert of(Hurry, actions) == [] and of(Pause, actions) == []
        assert of(StoreOffsets, actions) == [StoreOffsets(((TP, 2),))]


class TestLettingGo:
    """A finished run keeps no message it does not need (a failing stream's garbage then
    dies young instead of driving the collector at the allocation rate)."""

    def test_a_run_with_a_held_copy_keeps_only_the_held_message(self) -> None:
        eng = engine(batch_size=4)
        batch = msgs(0, 4)
        refs = [weakref.ref(m) for m in batch]
        work = eng.fetched(TP, batch, end=4)
        assert work is not None
        del batch
        backs = of(SendBack, eng.settle_run(work, [(0, outcome(OK, 4, ack_index=1), 0.0)], 0.0))
        assert [b.msg.queue_offset for b in backs] == [2, 3]
        assert [r() is None for r in refs] == [True, True, False, False]  # 0, 1 succeeded
        assert work.batch_len(0) == 4 and eng.committable(TP) == 2
        for b in backs:
            eng.published(b)
        assert eng.committable(TP) == 4

    def test_a_settled_run_behind_a_held_one_is_let_go_at_once(self) -> None:
        eng = engine(batch_size=2)
        first = eng.fetched(TP, msgs(0, 2), end=2)
        assert first is not None
        backs = of(SendBack, eng.settle_run(first, [(0, outcome(LATER, 2), 0.0)], 0.0))
        later = msgs(2, 2)
        refs = [weakref.ref(m) for m in later]
        work = eng.fetched(TP, later, end=4)
        assert work is not None
        del later
        assert eng.settle_run(work, [], 0.0) == []
        del work
        assert all(r() is None for r in refs)  # settled: nothing of it is needed any more
        assert eng.committable(TP) == 0
        for b in backs:
            eng.published(b)
        assert eng.committable(TP) == 4

    def test_a_late_result_after_the_timeout_still_knows_its_batch_size(self) -> None:
        eng = engine(consume_timeout_s=5.0, batch_size=2)
        work = eng.fetched(TP, msgs(0, 3), end=3, pooled=True)
        assert work is not None and work.started is not None
        eng.completed(work, 1, None, 1.0)
        work.started[0] = 10.0
        backs = of(SendBack, eng.tick(15.5))  # batch 0 timed out: the run is done
        assert [b.msg.queue_offset for b in backs] == [0, 1]
        assert work.batch_len(0) == 2 and work.batch_len(1) == 1  # for the late result
        assert eng.completed(work, 0, None, 16.0, rt_s=6.0) == []


# --- the invariant ------------------------------------------------------------------------
_events = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "complete", "publish", "refuse", "tick", "rebalance"]),
        st.integers(0, 1000),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(_events, st.integers(1, 4), st.booleans())
def test_the_stored_offset_never_passes_an_unsettled_message(
    events: list[tuple[str, int]], batch_size: int, pooled: bool
) -> None:
    """Whatever happens, an offset handed out for storing is never past a message that is
    in flight, never moves back within a generation, and reaches the end once all settle."""
    eng = engine(batch_size=batch_size, send_back_retry_interval_s=1.0, max_reconsume_times=2)
    unsettled: set[int] = set()
    next_offset = 0
    now = 0.0
    works: list[Work] = []
    copies: list[SendBack] = []
    last_stored = -1

    def run(actions: list[Any]) -> None:
        nonlocal last_stored
        for a in actions:
            if isinstance(a, SendBack):
                copies.append(a)
            elif isinstance(a, RunWork):
                works.append(a.work)
            elif isinstance(a, StoreOffsets):
                for _, offset in a.offsets:
                    assert all(offset <= u for u in unsettled), (offset, sorted(unsettled))
                    assert offset > last_stored
                    last_stored = offset

    def settle_from(work: Work, index: int, out: Outcome | None) -> None:
        batch = work.batches[index]
        failed = set() if out is None else set(out.failed)
        for i, m in enumerate(batch):
            if i not in failed:
                unsettled.discard(m.queue_offset)

    for kind, n in events:
        now += 0.3
        if kind == "fetch":
            size = 1 + n % 7
            batch = msgs(next_offset, size)
            unsettled.update(m.queue_offset for m in batch)
            next_offset += size
            work = eng.fetched(TP, batch, end=next_offset, pooled=pooled)
            if work is not None:
                works.append(work)
        elif kind == "complete" and works:
            work = works.pop(n % len(works))
            result = [OK, LATER][n % 2]
            failures = []
            for i, b in enumerate(work.batches):
                out = outcome(result, len(b), ack_index=(n % 3) - 1)
                if out is not None:
                    failures.append((i, out, 0.0))
                if eng.is_current(work):
                    settle_from(work, i, out)
            run(eng.settle_run(work, failures, now))
        elif kind == "publish" and copies:
            copy = copies.pop(n % len(copies))
            holder = copy.work.holder(copy.msg.queue_offset)
            eng.published(copy)
            if holder is copy:
                unsettled.discard(copy.msg.queue_offset)
        elif kind == "refuse" and copies:
            copy = copies.pop(n % len(copies))
            run(eng.publish_failed(copy, list(Refusal)[n % 3], now))
        elif kind == "rebalance":
            eng.revoked(TP)
            eng.assigned(TP)
            unsettled.clear()
            works.clear()
            copies.clear()
            last_stored = -1
        run(eng.tick(now))


def test_an_offset_the_client_refused_to_store_is_handed_out_again() -> None:
    """``store_offsets`` fails for a partition between assignments; taken as stored, the
    offset was never stored again and the group's committed offset stayed behind."""
    eng = engine()
    eng.fetched(TP, [], 10)  # filtered out: settled at once
    assert stored(eng.tick(0.0)) == {TP: 10}
    assert stored(eng.tick(1.0)) == {}
    eng.store_failed([TP])
    assert stored(eng.tick(2.0)) == {TP: 10}


# --- bookkeeping seen through the public surface ------------------------------------------
TP2 = ("orders", 1)


def failed_copy(eng: ConcurrentEngine, tp: tuple[str, int], first: int, n: int = 1) -> list[Any]:
    """The copies of ``n`` messages fetched from ``first`` on, all failed (RECONSUME_LATER)."""
    work = eng.fetched(tp, msgs(first, n), end=first + n)
    assert work is not None
    failures = [(i, outcome(LATER, work.batch_len(i)), 0.0) for i in range(work.nbatches)]
    return of(SendBack, eng.settle_run(work, failures, 0.0))


class TestPartitions:
    def test_a_fetch_returns_its_run_in_the_current_generation(self) -> None:
        eng = engine()
        batch = msgs(4, 3)
        work = eng.fetched(TP, batch, end=9, nbytes=30)
        assert work is not None
        assert (work.tp, work.generation, work.msgs, work.end, work.nbytes) == (TP, 1, batch, 9, 30)
        default = eng.fetched(TP, msgs(9, 1), end=10)
        assert default is not None and default.nbytes == 0
        eng.revoked(TP)
        eng.revoked(TP2)  # never ours: harmless
        eng.assigned(TP)
        eng.assigned(TP2)
        again = eng.fetched(TP, msgs(0, 1), end=1)
        other = eng.fetched(TP2, msgs(0, 1), end=1)
        assert again is not None and other is not None
        assert (again.generation, other.generation) == (3, 2)
        eng.assigned(TP)
        assert eng.is_current(again) is False and eng.is_current(other) is True
        eng.revoked(TP2)
        assert eng.is_current(other) is False and not eng.owns(TP2) and eng.owns(TP)
        assert eng.committable(TP2) is None and eng.in_flight(TP2) == 0

    def test_running_names_the_partitions_with_a_batch_not_completed(self) -> None:
        eng = engine()
        eng.assigned(TP2)
        work = eng.fetched(TP, msgs(0, 2), end=2, pooled=True)
        assert work is not None
        assert eng.running() and eng.running([TP]) and not eng.running([TP2])
        assert not eng.running([("other", 0)])
        eng.completed(work, 0, None, 0.0)
        assert not eng.running() and not eng.running([TP])

    def test_results_and_verdicts_for_a_partition_no_longer_ours_are_ignored(self) -> None:
        eng = engine()
        [back] = failed_copy(eng, TP, 0)
        work = eng.fetched(TP, msgs(1, 1), end=2)
        assert work is not None
        eng.revoked(TP)
        assert eng.settle_run(work, [(0, outcome(LATER, 1), 0.0)], 0.0) == []
        assert eng.publish_failed(back, Refusal.TOO_LARGE, 0.0) == []
        assert eng.rerun([back]) is None
        eng.published_all([back])
        assert eng.tick(0.0) == []


class TestCopiesAndTheirVerdicts:
    def test_a_copy_is_sent_in_a_batch_with_its_body(self) -> None:
        eng = engine()
        [back] = failed_copy(eng, TP, 0)
        assert back.alone is False and back.omit_body is False

    def test_the_escalation_of_a_copy_too_large(self) -> None:
        """Alone, then to the DLQ (in a batch, with its body), alone, without its body."""
        eng = engine()
        [action] = failed_copy(eng, TP, 0)
        steps = []
        for _ in range(4):
            [action] = eng.publish_failed(action, Refusal.TOO_LARGE, 0.0)
            steps.append((action.dest, action.alone, action.omit_body))
        dead = DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, 1)
        assert steps == [
            (RetryLater(3, 10_000, 1), True, False),
            (dead, False, False),
            (dead, True, False),
            (dead, False, True),
        ]

    def test_verdicts_in_one_call_skip_stale_copies_and_settle_the_rest(self) -> None:
        eng = engine(batch_size=1)
        eng.assigned(TP2)
        [stale] = failed_copy(eng, TP2, 0)
        eng.revoked(TP2)
        first, second = failed_copy(eng, TP, 0, 2)
        eng.published_all([stale, first, second])
        assert eng.in_flight(TP) == 0 and eng.committable(TP) == 2

    def test_the_destination_of_each_failed_message_follows_its_own_counts(self) -> None:
        eng = engine(max_reconsume_times=3, batch_size=8)
        batch = [
            Msg(0, reconsume_times=0),
            Msg(1, reconsume_times=0, max_reconsume_times=0),
            Msg(2, reconsume_times=0),
            Msg(3, reconsume_times=1),
            Msg(4, reconsume_times=3),
            Msg(5, reconsume_times=3, max_reconsume_times=5),
            Msg(6, reconsume_times=3, max_reconsume_times=5),
        ]
        work = eng.fetched(TP, batch, end=7)
        assert work is not None
        backs = of(SendBack, eng.settle_run(work, [(0, outcome(LATER, 7), 0.0)], 0.0))
        assert [b.dest for b in backs] == [
            RetryLater(3, 10_000, 1),
            DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1),
            RetryLater(3, 10_000, 1),
            RetryLater(4, 30_000, 2),
            DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 4),
            RetryLater(5, 60_000, 4),
            RetryLater(5, 60_000, 4),
        ]


class TestBytesInFlight:
    """Bodies count from fetch until settled; a failed message's body until its copy is
    acknowledged (every body here is 10 bytes; the pause names the bytes in flight)."""

    def test_runs_add_up_and_let_go_of_their_bytes_when_done(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=25, max_span=10**6))
        first = eng.fetched(TP, msgs(0, 2), end=2, nbytes=20, pooled=True)
        second = eng.fetched(TP, msgs(2, 1), end=3, nbytes=10, pooled=True)
        assert first is not None and second is not None
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 25")]
        eng.completed(first, 0, None, 0.0)
        eng.completed(first, 1, None, 0.0)  # the run is done: its 20 bytes go
        assert of(Resume, eng.tick(0.0)) == [Resume(TP)]
        eng.fetched(TP, msgs(3, 2), end=5, nbytes=20)
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 25")]

    def test_failed_messages_keep_their_bodies_until_their_copies_are_acknowledged(
        self,
    ) -> None:
        eng = engine(batch_size=4, flow=FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 4), end=4, nbytes=40)
        assert work is not None
        backs = of(SendBack, eng.settle_run(work, [(0, outcome(OK, 4, ack_index=0), 0.0)], 0.0))
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 15")]
        eng.published(backs[0])
        eng.published(backs[2])
        assert of(Resume, eng.tick(0.0)) == []  # 10 bytes: not below half of 15
        eng.published(backs[1])
        assert of(Resume, eng.tick(0.0)) == [Resume(TP)]

    def test_a_local_retry_lets_go_of_its_body_when_it_succeeds(self) -> None:
        eng = engine(
            send_back_retry_interval_s=1.0,
            flow=FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6),
        )
        backs = failed_copy(eng, TP, 0, 2)
        for b in backs:
            eng.publish_failed(b, Refusal.TRANSIENT, 0.0)
        actions = eng.tick(1.0)
        runs = of(RunWork, actions)
        assert [len(r.work.msgs) for r in runs] == [1, 1]
        assert of(Pause, actions) == [Pause(TP, "20 bytes in flight > 15")]
        assert eng.completed(runs[0].work, 0, None, 1.5) == []  # pooled: settles one
        assert eng.in_flight(TP) == 1 and eng.committable(TP) == 1
        assert of(Resume, eng.tick(1.5)) == []
        eng.settle_run(runs[1].work, [], 1.5)
        actions = eng.tick(1.5)
        assert of(Resume, actions) == [Resume(TP)] and stored(actions) == {TP: 2}
        assert eng.in_flight(TP) == 0


class TestBroadcastingDrops:
    def test_a_dropped_message_names_its_partition_failure_and_place(self) -> None:
        eng = engine(clustering=False, batch_size=3)
        work = eng.fetched(TP, msgs(0, 3), end=3, pooled=True)
        assert work is not None
        out = outcome(OK, 3, ack_index=0)
        assert out is not None
        acts = eng.completed(work, 0, out, 1.0, rt_s=0.5)
        assert acts == [
            Dropped(TP, Msg(1), out.failure, TraceInfo(3, 1, 0, 500.0)),
            Dropped(TP, Msg(2), out.failure, TraceInfo(3, 2, 0, 500.0)),
        ]
        assert eng.in_flight(TP) == 0 and stored(eng.tick(1.0)) == {TP: 3}

    def test_a_pooled_batch_dropped_in_part_leaves_the_rest_in_flight(self) -> None:
        eng = engine(clustering=False, batch_size=2)
        work = eng.fetched(TP, msgs(0, 4), end=4, pooled=True)
        assert work is not None
        eng.completed(work, 0, outcome(LATER, 2), 0.0)
        assert eng.in_flight(TP) == 2 and eng.committable(TP) == 2


class TestConsumeTimeouts:
    def test_a_result_at_the_timeout_counts_and_past_it_is_a_timeout(self) -> None:
        eng = engine(consume_timeout_s=5.0, batch_size=1)
        work = eng.fetched(TP, msgs(0, 3), end=3, pooled=True)
        assert work is not None
        assert eng.completed(work, 0, None, 5.0, rt_s=5.0) == []
        [late] = of(SendBack, eng.completed(work, 1, None, 5.1, rt_s=5.1))
        assert late.failure == Failure("ConsumeTimeout", "listener ran longer than 5.0s")
        [back] = of(SendBack, eng.completed(work, 2, outcome(LATER, 1), 6.0))
        assert back.trace_info is not None and back.trace_info.rt_ms == 0.0

    def test_an_inline_run_at_the_timeout_counts_and_past_it_is_a_timeout(self) -> None:
        eng = engine(consume_timeout_s=5.0, batch_size=1)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        [back] = of(SendBack, eng.settle_run(work, [(0, None, 5.0), (1, None, 5.5)], 6.0))
        assert back.msg.queue_offset == 1
        assert back.failure == Failure("ConsumeTimeout", "listener ran longer than 5.0s")

    def test_every_batch_past_the_timeout_is_reported_at_the_tick(self) -> None:
        """Batches that completed, of a revoked partition or of a run settled inline are
        passed over; the timeout is exact (not before ``started + consume_timeout``)."""
        eng = engine(consume_timeout_s=5.0, batch_size=1)
        eng.assigned(TP2)
        gone = eng.fetched(TP2, msgs(0, 1), end=1, pooled=True)
        done = eng.fetched(TP, msgs(0, 1), end=1, pooled=True)
        inline = eng.fetched(TP, msgs(1, 1), end=2, pooled=True)
        slow = eng.fetched(TP, msgs(2, 1), end=3, pooled=True)
        assert gone and done and inline and slow
        assert done.started is not None and slow.started is not None
        eng.revoked(TP2)
        eng.completed(done, 0, None, 1.0)
        assert inline.started is not None
        eng.settle_run(inline, [], 1.0)
        slow.started[0] = 10.0
        assert of(TimedOut, eng.tick(15.0)) == []
        actions = eng.tick(15.5)
        assert actions[0] == TimedOut(TP, (Msg(2),), 5.0)
        [back] = of(SendBack, actions)
        assert back.msg == Msg(2) and back.trace_info is not None
        assert back.trace_info.rt_ms == 5500.0
        assert back.failure == Failure("ConsumeTimeout", "listener ran longer than 5.0s")

    def test_a_local_retry_and_a_rerun_time_out_too(self) -> None:
        eng = engine(consume_timeout_s=5.0, send_back_retry_interval_s=1.0, batch_size=2)
        first, second = failed_copy(eng, TP, 0, 2)
        eng.publish_failed(first, Refusal.TRANSIENT, 0.0)
        [run] = of(RunWork, eng.tick(1.0))
        assert run.work.end == 1 and run.work.batch_len(0) == 1
        rerun = eng.rerun([second])
        assert rerun is not None and rerun.work.end == 2
        assert run.work.started is not None and rerun.work.started is not None
        run.work.started[0] = 2.0
        rerun.work.started[0] = 2.0
        actions = eng.tick(7.5)
        assert of(TimedOut, actions) == [
            TimedOut(TP, (Msg(0, reconsume_times=1),), 5.0),
            TimedOut(TP, (Msg(1),), 5.0),
        ]


class TestLocalRetriesDue:
    def test_every_retry_due_is_handed_out_past_stale_ones(self) -> None:
        eng = engine(send_back_retry_interval_s=1.0, batch_size=1)
        eng.assigned(TP2)
        [gone] = failed_copy(eng, TP2, 0)
        a, b, c = failed_copy(eng, TP, 0, 3)
        eng.publish_failed(gone, Refusal.TRANSIENT, 0.0)
        eng.publish_failed(a, Refusal.TRANSIENT, 0.0)
        eng.publish_failed(b, Refusal.TRANSIENT, 0.0)
        eng.publish_failed(c, Refusal.TRANSIENT, 0.0)
        eng.revoked(TP2)
        eng.published(a)  # a late acknowledgement of the first copy: b, c still wait
        assert eng.local_retries() == 4
        runs = of(RunWork, eng.tick(1.0))
        assert [r.work.msgs[0].queue_offset for r in runs] == [1, 2]

    def test_a_retry_is_due_at_its_time_however_many_came_before(self) -> None:
        eng = engine(send_back_retry_interval_s=1.0, batch_size=1)
        backs = failed_copy(eng, TP, 0, 6)
        for b in backs[:5]:
            eng.publish_failed(b, Refusal.TRANSIENT, 0.0)
        assert len(of(RunWork, eng.tick(1.0))) == 5
        eng.publish_failed(backs[5], Refusal.TRANSIENT, 1.0)
        [run] = of(RunWork, eng.tick(2.0))
        assert run.work.msgs == [Msg(5, reconsume_times=1)]

    def test_a_timeout_and_a_retry_in_one_tick_are_both_reported(self) -> None:
        eng = engine(consume_timeout_s=5.0, send_back_retry_interval_s=10.0, batch_size=1)
        [back] = failed_copy(eng, TP, 0)
        eng.publish_failed(back, Refusal.TRANSIENT, 0.0)
        slow = eng.fetched(TP, msgs(1, 1), end=2, pooled=True)
        assert slow is not None and slow.started is not None
        slow.started[0] = 4.0
        actions = eng.tick(10.0)
        assert of(TimedOut, actions) and of(RunWork, actions)


class TestHurryBeforePausing:
    def test_the_allowance_is_whole_multiples_of_the_limits(self) -> None:
        """A copy awaiting its verdict holds the partition: up to 10 x the count and span
        limits (rounded down: 59 // 10 = 5 is within a limit of 5) it fetches on."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=5, max_bytes=10**9, max_span=5))
        [back] = failed_copy(eng, TP, 0)
        work = eng.fetched(TP, msgs(1, 58), end=59, pooled=True)
        assert work is not None
        actions = eng.tick(0.0)  # 59 in flight, span 58
        assert of(Pause, actions) == [] and of(Hurry, actions) == []
        assert eng.in_flight(TP) == 59
        eng.fetched(TP, msgs(59, 1), end=60, pooled=True)
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]  # 60 // 10 > 5
        del back

    def test_actions_after_a_partition_at_its_limit_are_kept(self) -> None:
        """Whatever a partition at its limit gets (a pause, the allowance, a hurry), what
        comes after it in the same tick (the offsets to store) is not lost, and a hurry
        comes first."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        eng.assigned(TP2)
        failed_copy(eng, TP, 0)
        eng.settle_run(eng.fetched(TP, msgs(1, 10), end=11), [], 0.0)  # type: ignore[arg-type]
        eng.settle_run(eng.fetched(TP2, msgs(0, 3), end=3), [], 0.0)  # type: ignore[arg-type]
        assert stored(eng.tick(0.0)) == {TP: 0, TP2: 3}
        # within the allowance: TP fetches on; TP2's offset moved in the same tick
        eng.settle_run(eng.fetched(TP2, msgs(3, 2), end=5), [], 0.0)  # type: ignore[arg-type]
        eng.settle_run(eng.fetched(TP, msgs(11, 2), end=13), [], 0.0)  # type: ignore[arg-type]
        assert eng.tick(0.0) == [StoreOffsets(((TP2, 5),))]
        # past the allowance: the hurry first, then the offsets
        eng.settle_run(eng.fetched(TP2, msgs(5, 1), end=6), [], 0.0)  # type: ignore[arg-type]
        eng.settle_run(eng.fetched(TP, msgs(13, 50), end=63), [], 0.0)  # type: ignore[arg-type]
        assert eng.tick(0.0) == [Hurry((TP,)), StoreOffsets(((TP2, 6),))]
        # still over at the next tick: the pause, then the offsets
        eng.settle_run(eng.fetched(TP2, msgs(6, 1), end=7), [], 0.0)  # type: ignore[arg-type]
        assert eng.tick(0.0) == [
            Pause(TP, "in-flight offset span 62 > 5"),
            StoreOffsets(((TP2, 7),)),
        ]

    def test_a_plain_pause_and_a_resume_keep_the_offsets_of_their_tick(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=4, max_bytes=10**9, max_span=10**6))
        eng.assigned(TP2)
        work = eng.fetched(TP, msgs(0, 6), end=6, pooled=True)
        assert work is not None
        eng.settle_run(eng.fetched(TP2, msgs(0, 1), end=1), [], 0.0)  # type: ignore[arg-type]
        actions = eng.tick(0.0)
        assert actions[0] == Pause(TP, "6 messages in flight > 4")
        assert stored(actions) == {TP: 0, TP2: 1}
        for i in range(4):
            eng.completed(work, i, None, 0.0)
        assert eng.tick(0.0) == [Resume(TP), StoreOffsets(((TP, 4),))]

    def test_a_second_partition_is_hurried_the_tick_after_the_first(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        eng.assigned(TP2)
        for tp in (TP, TP2):
            failed_copy(eng, tp, 0)
        eng.settle_run(eng.fetched(TP, msgs(1, 60), end=61), [], 0.0)  # type: ignore[arg-type]
        assert of(Hurry, eng.tick(0.0)) == [Hurry((TP,))]
        eng.settle_run(eng.fetched(TP2, msgs(1, 60), end=61), [], 0.0)  # type: ignore[arg-type]
        actions = eng.tick(0.0)
        assert of(Hurry, actions) == [Hurry((TP2,))] and of(Pause, actions) == [
            Pause(TP, "in-flight offset span 60 > 5")
        ]

    def test_a_run_whose_copies_were_all_answered_does_not_hide_a_later_copy(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5))
        [first] = failed_copy(eng, TP, 0)
        [second] = failed_copy(eng, TP, 1)
        eng.published(first)  # the first run has nothing in flight any more
        eng.settle_run(eng.fetched(TP, msgs(2, 10), end=12), [], 0.0)  # type: ignore[arg-type]
        actions = eng.tick(0.0)
        assert of(Pause, actions) == [] and of(Hurry, actions) == []  # the allowance
        del second


def test_a_batch_that_completed_in_time_never_times_out() -> None:
    eng = engine(consume_timeout_s=5.0, batch_size=1)
    work = eng.fetched(TP, msgs(0, 2), end=2, pooled=True)
    assert work is not None and work.started is not None
    work.started[0] = 1.0
    eng.completed(work, 0, None, 2.0)
    work.started[1] = 10.0
    assert of(TimedOut, eng.tick(15.5)) == [TimedOut(TP, (Msg(1),), 5.0)]


def test_a_rerun_settles_what_succeeds_and_sends_back_the_rest() -> None:
    """Copies a circuit breaker held are consumed again as one batch: its successes settle
    their messages, its failures make new copies."""
    eng = engine(batch_size=2)
    held = failed_copy(eng, TP, 0, 2)
    rerun = eng.rerun(held)
    assert rerun is not None
    [again] = of(SendBack, eng.settle_run(rerun.work, [(0, outcome(OK, 2, ack_index=0), 0.0)], 0.0))
    assert again.msg.queue_offset == 1
    assert eng.in_flight(TP) == 1 and eng.committable(TP) == 1
    eng.published(again)
    assert eng.in_flight(TP) == 0 and stored(eng.tick(0.0)) == {TP: 2}
