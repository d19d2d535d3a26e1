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
from adapter.core.engine.actions import TraceInfo
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
