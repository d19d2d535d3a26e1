"""The orderly consume engine, driven event by event without a broker or a clock.

Each test reads like the rule it checks (RocketMQ's ``MessageListenerOrderly`` on a Kafka
partition, and per key with ``ordering=KEY``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.core.engine import (
    Drain,
    Dropped,
    EngineOptions,
    Pause,
    Resume,
    RunWork,
    SendBack,
    StoreOffsets,
    Work,
)
from adapter.core.engine.orderly import (
    ORDERLY_UNLIMITED,
    BatchVerdict,
    Ordering,
    OrderlyEngine,
    OrderlyOptions,
    OrderlyWork,
    judge_orderly,
    orderly_max_reconsume_times,
    suspend_ms_of,
)
from adapter.core.listener import ConsumeOrderlyStatus
from adapter.core.offsets import FlowLimits
from adapter.core.publishing import Refusal
from adapter.core.routing import DeadLetter, DeadLetterReason
from adapter.errors import ConfigError

pytestmark = pytest.mark.unit

SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
TP = ("orders", 0)


@dataclass(frozen=True)
class Msg:
    """What the engine needs of a message."""

    queue_offset: int
    sharding_key: bytes | None = None
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    body: bytes = b"x" * 10

    def redelivered(self) -> Msg:
        return replace(self, reconsume_times=self.reconsume_times + 1)


def engine(
    *, ordering: Ordering = Ordering.PARTITION, suspend_ms: int = 1000, keys: int = 100, **kw: Any
) -> OrderlyEngine:
    opts: dict[str, Any] = {
        "batch_size": 2,
        "max_reconsume_times": ORDERLY_UNLIMITED,
        "consume_timeout_s": 60.0,
        "store_interval_s": 0.0,
    }
    opts.update(kw)
    eng = OrderlyEngine(
        EngineOptions(**opts),
        OrderlyOptions(suspend_ms=suspend_ms, ordering=ordering, max_suspended_keys=keys),
    )
    eng.assigned(TP)
    return eng


def msgs(first: int, n: int, **kw: Any) -> list[Msg]:
    return [Msg(o, **kw) for o in range(first, first + n)]


def keyed(*pairs: tuple[int, str]) -> list[Msg]:
    return [Msg(o, k.encode()) for o, k in pairs]


def stored(actions: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for a in actions:
        if isinstance(a, StoreOffsets):
            out.update(dict(a.offsets))
    return out


def of(kind: type, actions: list[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def offsets(work: Work) -> list[int]:
    return [m.queue_offset for m in work.msgs]


def run_of(actions: list[Any]) -> Work:
    [run] = of(RunWork, actions)
    return run.work  # type: ignore[no-any-return]


def suspend(ms: object = -1, rt: float = 0.01) -> BatchVerdict:
    return BatchVerdict(SUSPEND, ms, rt)


class TestSuccess:
    def test_a_fetch_runs_at_once_and_the_offset_reaches_its_end(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(100, 5), end=105)
        assert work is not None and offsets(work) == [100, 101, 102, 103, 104]
        assert [len(b) for b in work.batches] == [2, 2, 1]  # batch_size 2, in order
        assert eng.running()
        assert eng.completed(work, 3, None, now=0.0) == []
        assert stored(eng.tick(0.0)) == {TP: 105}
        assert eng.in_flight(TP) == 0 and not eng.running()

    def test_one_run_per_partition_the_next_fetch_waits_for_it(self) -> None:
        eng = engine()
        first = eng.fetched(TP, msgs(0, 2), end=2)
        assert first is not None
        assert eng.fetched(TP, msgs(2, 3), end=5) is None  # waits its turn
        assert eng.fetched(TP, msgs(5, 1), end=6) is None
        assert stored(eng.tick(0.0)) == {TP: 0}
        nxt = run_of(eng.completed(first, 1, None, 0.0))
        assert offsets(nxt) == [2, 3, 4, 5]  # everything that waited, in order
        assert stored(eng.tick(0.0)) == {TP: 2}
        assert eng.completed(nxt, 2, None, 0.0) == []
        assert stored(eng.tick(0.0)) == {TP: 6}

    def test_filtered_messages_settle_like_a_broker_side_filter(self) -> None:
        eng = engine()
        assert eng.fetched(TP, [], end=50) is None
        assert stored(eng.tick(0.0)) == {TP: 50}

    def test_other_partitions_are_independent(self) -> None:
        eng = engine()
        other = ("orders", 1)
        eng.assigned(other)
        a = eng.fetched(TP, msgs(0, 1), end=1)
        b = eng.fetched(other, msgs(0, 1), end=1)
        assert a is not None and b is not None  # both run at once
        assert eng.running([TP]) and eng.running([other])

    def test_a_run_is_capped_and_the_rest_follows(self) -> None:
        eng = OrderlyEngine(
            EngineOptions(batch_size=3, store_interval_s=0.0), OrderlyOptions(work_max=7)
        )
        eng.assigned(TP)
        first = eng.fetched(TP, msgs(0, 1), end=1)
        assert first is not None
        eng.fetched(TP, msgs(1, 10), end=11)
        nxt = run_of(eng.completed(first, 1, None, 0.0))
        assert offsets(nxt) == [1, 2, 3, 4, 5, 6]  # whole batches: 7 // 3 * 3
        assert offsets(run_of(eng.completed(nxt, 2, None, 0.0))) == [7, 8, 9, 10]


class TestSuspend:
    def test_the_same_messages_come_back_after_the_suspend_time_holding_the_partition(
        self,
    ) -> None:
        eng = engine(suspend_ms=1000)
        work = eng.fetched(TP, msgs(10, 4), end=14)
        assert work is not None
        # batch 0 (10, 11) succeeded, batch 1 (12, 13) suspended at t=5
        assert eng.completed(work, 1, suspend(), now=5.0) == []
        assert eng.fetched(TP, msgs(14, 2), end=16) is None  # nothing later is delivered
        assert stored(eng.tick(5.0)) == {TP: 12}
        assert of(RunWork, eng.tick(5.999)) == []
        retry = run_of(eng.tick(6.0))
        assert offsets(retry) == [12, 13]
        assert [m.reconsume_times for m in retry.msgs] == [1, 1]
        assert len(retry.batches) == 1  # the same batch, alone
        nxt = run_of(eng.completed(retry, 1, None, 6.1))
        assert offsets(nxt) == [14, 15]
        assert [m.reconsume_times for m in nxt.msgs] == [0, 0]
        eng.completed(nxt, 1, None, 6.2)
        assert stored(eng.tick(6.2)) == {TP: 16}

    def test_unrun_batches_after_the_failed_one_follow_the_retry(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 6), end=6)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)  # batch 0 failed; 2..5 never ran
        retry = run_of(eng.tick(1.0))
        assert offsets(retry) == [0, 1]
        assert offsets(run_of(eng.completed(retry, 1, None, 1.0))) == [2, 3, 4, 5]

    def test_it_is_suspended_again_with_one_more_reconsume_time_each_time(self) -> None:
        eng = engine(suspend_ms=100)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        now = 0.0
        for times in range(1, 6):
            eng.completed(work, 0, suspend(), now)
            now += 0.1
            work = run_of(eng.tick(now))
            assert work.msgs[0].reconsume_times == times
        assert eng.local_retries() == 1  # the suspended batch, being retried
        eng.completed(work, 1, None, now)
        assert eng.in_flight(TP) == 0 and eng.local_retries() == 0

    @pytest.mark.parametrize(
        ("ctx_ms", "wait_s"),
        [(-1, 1.0), (250, 0.25), (0, 0.01), (-7, 0.01), (5, 0.01), (99_999, 30.0)],
    )
    def test_the_context_suspend_time_overrides_and_is_clamped(
        self, ctx_ms: int, wait_s: float
    ) -> None:
        eng = engine(suspend_ms=1000)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.completed(work, 0, suspend(ctx_ms), now=10.0)
        assert of(RunWork, eng.tick(10.0 + wait_s - 0.001)) == []
        assert of(RunWork, eng.tick(10.0 + wait_s))

    @pytest.mark.parametrize(
        ("result", "failure_type"),
        [
            (SUSPEND, "SUSPEND_CURRENT_QUEUE_A_MOMENT"),
            (RuntimeError("boom"), "RuntimeError"),
            (None, "NoneReturned"),
            ("SUCCESS", "ListenerResultError"),
            (7, "ListenerResultError"),
        ],
        ids=repr,
    )
    def test_anything_but_success_suspends(self, result: object, failure_type: str) -> None:
        judged = judge_orderly(BatchVerdict(result), timeout_s=10, default_suspend_ms=1000)
        assert judged.failure is not None and judged.failure.type == failure_type
        assert judged.suspend_ms == 1000

    def test_a_batch_past_the_consume_timeout_counts_as_suspended(self) -> None:
        eng = engine(consume_timeout_s=5.0)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        late = BatchVerdict(SUCCESS, -1, 6.0)
        assert judge_orderly(late, timeout_s=5.0, default_suspend_ms=1000).failure is not None
        eng.completed(work, 0, late, now=20.0)
        assert eng.committable(TP) == 0
        retry = run_of(eng.tick(21.0))
        assert retry.msgs[0].reconsume_times == 1

    def test_a_late_success_holds_what_follows_until_its_retry_succeeded(self) -> None:
        """The integration test's case, event by event: batch 1, ``t:0`` returns SUCCESS
        past the timeout, ``t:1`` waits; then ``t:0`` again (reconsume 1), then ``t:1``."""
        eng = engine(consume_timeout_s=0.5, suspend_ms=100, batch_size=1)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        assert eng.completed(work, 0, BatchVerdict(SUCCESS, -1, 1.2), now=10.0) == []
        assert eng.fetched(TP, msgs(2, 1), end=3) is None  # nothing later meanwhile
        assert of(RunWork, eng.tick(10.099)) == []
        assert eng.committable(TP) == 0
        retry = run_of(eng.tick(10.1))
        assert [(m.queue_offset, m.reconsume_times) for m in retry.msgs] == [(0, 1)]
        assert of(RunWork, eng.tick(10.2)) == []  # one run of the partition at a time
        nxt = run_of(eng.completed(retry, 1, None, 10.2))
        assert [(m.queue_offset, m.reconsume_times) for m in nxt.msgs] == [(1, 0), (2, 0)]
        eng.completed(nxt, 2, None, 10.3)
        assert stored(eng.tick(10.3)) == {TP: 3}

    def test_a_verdict_that_is_a_success_in_time_counts_as_one(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        eng.completed(work, 1, BatchVerdict(SUCCESS, -1, 0.1), now=0.0)
        assert stored(eng.tick(0.0)) == {TP: 4}

    def test_a_bad_context_value_uses_the_consumers_suspend_time_and_is_named(self) -> None:
        assert suspend_ms_of("5", 700) == (700, suspend_ms_of("5", 700)[1])
        problem = suspend_ms_of(True, 700)[1]
        assert problem is not None and "suspend_current_queue_time_millis=True" in problem

    def test_unlimited_by_default_for_an_orderly_consumer(self) -> None:
        assert orderly_max_reconsume_times(-1) == ORDERLY_UNLIMITED
        assert orderly_max_reconsume_times(3) == 3
        with pytest.raises(ConfigError, match="max_reconsume_times=-2"):
            orderly_max_reconsume_times(-2)
        eng = engine()
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=10_000), end=1)
        assert work is not None
        assert of(SendBack, eng.completed(work, 0, suspend(), 0.0)) == []


class TestDeadLetter:
    def test_at_the_maximum_it_goes_to_the_dlq_and_the_partition_moves_on_once_acknowledged(
        self,
    ) -> None:
        eng = engine(max_reconsume_times=3, batch_size=1)
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=3), end=1)
        assert work is not None
        eng.fetched(TP, msgs(1, 1), end=2)
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        # RocketMQ's orderly send-back: the last delivery's count (3, not 4), the consumer's
        # maximum in MAX_RECONSUME_TIMES, and the DLQ as its own last hop
        assert copy.dest == DeadLetter(
            DeadLetterReason.MAX_RECONSUME_TIMES, 3, orderly=True, max_reconsume_times=3
        )
        assert copy.failure.type == "SUSPEND_CURRENT_QUEUE_A_MOMENT"
        assert of(RunWork, eng.tick(100.0)) == []  # the copy holds the partition
        assert eng.committable(TP) == 0
        eng.published(copy)
        nxt = run_of(eng.tick(100.0))  # no suspend wait: nothing of the batch is left
        assert offsets(nxt) == [1]
        assert eng.committable(TP) == 1

    def test_the_rest_of_the_batch_is_retried_without_the_dead_letter(self) -> None:
        eng = engine(max_reconsume_times=2, batch_size=3)
        batch = [Msg(0, reconsume_times=1), Msg(1, reconsume_times=2), Msg(2, reconsume_times=0)]
        work = eng.fetched(TP, batch, end=3)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        assert copy.msg.queue_offset == 1
        assert of(RunWork, eng.tick(2.0)) == []  # due, but the copy is not acknowledged
        eng.published(copy)
        retry = run_of(eng.tick(2.0))
        assert [(m.queue_offset, m.reconsume_times) for m in retry.msgs] == [(0, 2), (2, 1)]
        eng.completed(retry, 1, None, 2.0)
        assert stored(eng.tick(2.0)) == {TP: 3}

    def test_a_message_header_bounds_its_own_retries(self) -> None:
        eng = engine(batch_size=1)  # the group's maximum: unlimited
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=1, max_reconsume_times=1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        # its own MAX_RECONSUME_TIMES travels as it is: no consumer's maximum written over it
        assert copy.dest == DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1, orderly=True)

    def test_a_transient_refusal_keeps_the_partition_and_sends_the_copy_again(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1, suspend_ms=500)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        assert eng.publish_failed(copy, Refusal.TRANSIENT, now=1.0) == []
        assert of(SendBack, eng.tick(1.4)) == []
        [again] = of(SendBack, eng.tick(1.5))
        assert again.dest == copy.dest and again is not copy
        eng.published(copy)  # the old copy's late acknowledgement settles nothing
        assert eng.committable(TP) == 0
        eng.published(again)
        assert eng.committable(TP) == 1

    def test_a_superseded_copy_due_in_a_tick_does_not_hold_back_the_next_one(self) -> None:
        """Copies of a partition no longer ours are dropped; the copies due with them that
        are still current are sent in the same tick."""
        eng = engine(max_reconsume_times=0, batch_size=1, suspend_ms=500)
        gone, kept = ("gone", 0), ("kept", 0)
        copies = {}
        for tp in (gone, kept):
            eng.assigned(tp)
            work = eng.fetched(tp, msgs(0, 1), end=1)
            assert work is not None
            [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
            eng.publish_failed(copy, Refusal.TRANSIENT, now=1.0)  # both due at 1.5
            copies[tp] = copy
        eng.revoked(gone)
        [again] = of(SendBack, eng.tick(1.5))
        assert again.tp == kept and again.dest == copies[kept].dest

    def test_next_due_is_the_earliest_suspend_end_or_resend(self) -> None:
        """The loop sleeps until ``next_due`` (not in 5 ms steps) while a batch is suspended
        or a refused copy waits: it must name the moment ``tick`` has work."""
        eng = engine(batch_size=1, suspend_ms=500)
        assert eng.next_due() is None
        other = (TP[0], TP[1] + 1)
        eng.assigned(other)
        # TP's message may not be retried again (its header): it is sent back
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=1, max_reconsume_times=1), end=1)
        held = eng.fetched(other, msgs(0, 1), end=1)
        assert work is not None and held is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        eng.publish_failed(copy, Refusal.TRANSIENT, now=1.0)  # sent again at 1.5
        assert eng.next_due() == 1.5
        eng.completed(held, 0, suspend(200), 1.1)  # other's batch resumes at 1.3
        assert eng.next_due() == pytest.approx(1.3)
        assert of(RunWork, eng.tick(1.29)) == [] and eng.next_due() == pytest.approx(1.3)
        assert of(RunWork, eng.tick(1.3))
        assert eng.next_due() == 1.5
        assert of(SendBack, eng.tick(1.5))
        assert eng.next_due() is None

    def test_too_large_is_sent_alone_then_without_its_body(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        [alone] = eng.publish_failed(copy, Refusal.TOO_LARGE, 0.0)
        assert isinstance(alone, SendBack) and alone.alone
        [bodiless] = eng.publish_failed(alone, Refusal.TOO_LARGE, 0.0)
        assert isinstance(bodiless, SendBack) and bodiless.omit_body
        eng.published(bodiless)
        assert eng.committable(TP) == 1

    def test_broadcasting_dead_letters_it_too(self) -> None:
        """RocketMQ 4.9.7's orderly path sends the message back in broadcasting too."""
        eng = engine(max_reconsume_times=1, batch_size=1, clustering=False)
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=1), end=1)
        assert work is not None
        eng.fetched(TP, msgs(1, 1), end=2)
        acts = eng.completed(work, 0, suspend(), 0.0)
        assert of(Dropped, acts) == []
        [copy] = of(SendBack, acts)
        assert copy.msg.queue_offset == 0 and isinstance(copy.dest, DeadLetter)
        assert eng.committable(TP) == 0  # held until the broker has it
        eng.published(copy)
        assert offsets(run_of(eng.tick(0.0))) == [1]

    def test_a_group_reading_its_own_dlq_drops_it_instead(self) -> None:
        options = EngineOptions(batch_size=1, max_reconsume_times=1, store_interval_s=0.0)
        eng = OrderlyEngine(options, OrderlyOptions(dead_letters=False))
        eng.assigned(TP)
        work = eng.fetched(TP, msgs(0, 1, reconsume_times=1), end=1)
        assert work is not None
        eng.fetched(TP, msgs(1, 1), end=2)
        acts = eng.completed(work, 0, suspend(), 0.0)
        assert [a.msg.queue_offset for a in of(Dropped, acts)] == [0]
        assert of(SendBack, acts) == []
        assert offsets(run_of(acts)) == [1]


class TestRebalance:
    def test_a_revoked_partition_drops_its_suspended_batch_uncommitted(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(5, 2), end=7)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)
        assert stored(eng.tick(0.0)) == {TP: 5}
        eng.revoked(TP)
        assert eng.tick(10.0) == []  # no retry of a partition no longer ours
        assert eng.committable(TP) is None and eng.local_retries() == 0

    def test_results_of_an_older_generation_are_ignored(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        eng.revoked(TP)
        eng.assigned(TP)
        assert eng.completed(work, 0, suspend(), 0.0) == []
        assert not eng.running()
        fresh = eng.fetched(TP, msgs(0, 2), end=2)
        assert fresh is not None  # the new generation starts clean

    def test_a_copy_acknowledged_after_revoke_changes_nothing(self) -> None:
        eng = engine(max_reconsume_times=0)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        eng.revoked(TP)
        eng.assigned(TP)
        eng.published(copy)
        assert eng.publish_failed(copy, Refusal.TRANSIENT, 0.0) == []
        assert eng.committable(TP) is None

    def test_while_draining_nothing_new_starts_until_a_tick(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        eng.fetched(TP, msgs(4, 1), end=5)
        # the run was told to stop after its first batch (a revoke is waiting for it)
        assert eng.completed(work, 1, None, 0.0, chain=False) == []
        assert not eng.running()
        assert stored(eng.tick(0.0)) == {TP: 2}  # the unrun messages were never consumed
        eng.revoked(TP)

    def test_the_rest_of_a_stopped_run_runs_again_in_order(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        eng.completed(work, 1, None, 0.0, chain=False)
        assert offsets(run_of(eng.tick(0.0))) == [2, 3]


class TestKeyOrdering:
    def test_other_keys_go_on_while_one_key_is_suspended(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1)
        work = eng.fetched(TP, keyed((0, "a"), (1, "b"), (2, "a"), (3, "c")), end=4)
        assert work is not None
        nxt = run_of(eng.completed(work, 0, suspend(), 0.0))  # a@0 failed: b and c go on
        assert offsets(nxt) == [1, 3]
        assert eng.completed(nxt, 2, None, 0.1) == []
        later = eng.fetched(TP, keyed((4, "b"), (5, "a")), end=6)
        assert later is not None and offsets(later) == [4]  # a@2 and a@5 wait behind a@0
        assert stored(eng.tick(0.2)) == {TP: 0}  # the smallest unsettled offset
        eng.completed(later, 1, None, 0.3)
        retry = run_of(eng.tick(1.0))
        assert [(m.queue_offset, m.reconsume_times) for m in retry.msgs] == [(0, 1)]
        after = run_of(eng.completed(retry, 1, None, 1.0))
        assert offsets(after) == [2, 5]
        eng.completed(after, 2, None, 1.1)
        assert stored(eng.tick(1.1)) == {TP: 6}

    def test_a_failed_batch_holds_every_key_in_it(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=2)
        work = eng.fetched(TP, keyed((0, "a"), (1, "b"), (2, "c"), (3, "a")), end=4)
        assert work is not None
        # batch {a@0, b@1} failed: only c goes on
        assert offsets(run_of(eng.completed(work, 0, suspend(), 0.0))) == [2]
        assert eng.suspended(TP) == 1 and eng.suspended_keys(TP) == 2

    def test_keyless_messages_share_one_key(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1)
        work = eng.fetched(TP, [Msg(0), Msg(1, b"k"), Msg(2)], end=3)
        assert work is not None
        assert offsets(run_of(eng.completed(work, 0, suspend(), 0.0))) == [1]

    def test_suspended_keys_pause_the_partition_above_the_limit(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1, keys=1)
        now = 0.0
        for offset, key in enumerate("ab"):
            work = eng.fetched(TP, keyed((offset, key)), end=offset + 1)
            assert work is not None
            eng.completed(work, 0, suspend(), now)
            now += 0.01
        assert of(Pause, eng.tick(now)) == [Pause(TP, "2 keys suspended > 1")]
        retry = run_of(eng.tick(1.0))
        eng.completed(retry, 1, None, 1.0)
        assert of(Resume, eng.tick(1.0)) == [Resume(TP)]


class TestWake:
    def test_every_free_partition_woken_in_a_tick_runs_whichever_others_are_busy(self) -> None:
        """Suspend times of many partitions end in one tick: those still running another
        key's batch are skipped, every free one runs its retry at once."""
        eng = engine(ordering=Ordering.KEY, batch_size=1, suspend_ms=1000)
        busy = [("busy", p) for p in range(10)]
        free = [("free", p) for p in range(10)]
        for tp in busy:  # a@0 suspended until 1.0 while b@1 runs
            eng.assigned(tp)
            work = eng.fetched(tp, keyed((0, "a"), (1, "b")), end=2)
            assert work is not None
            assert offsets(run_of(eng.completed(work, 0, suspend(), 0.0))) == [1]
        for tp in free:  # a@0 suspended until 1.0, nothing else
            eng.assigned(tp)
            work = eng.fetched(tp, keyed((0, "a")), end=1)
            assert work is not None
            assert of(RunWork, eng.completed(work, 0, suspend(), 0.0)) == []
        runs = [a.work for a in of(RunWork, eng.tick(1.0))]
        assert sorted(w.tp for w in runs) == free
        assert all(offsets(w) == [0] for w in runs)


class TestFlowControl:
    def test_pause_above_the_count_limit_while_suspended_and_resume_below(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)
        eng.fetched(TP, msgs(1, 3), end=4)
        [pause] = of(Pause, eng.tick(0.0))
        assert "4 messages in flight > 3" in pause.reason
        retry = run_of(eng.tick(1.0))
        nxt = run_of(eng.completed(retry, 1, None, 1.0))
        eng.completed(nxt, 3, None, 1.0)
        assert of(Resume, eng.tick(1.0)) == [Resume(TP)]

    def test_bytes_of_waiting_messages_count(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.fetched(TP, [Msg(1, body=b"y" * 20)], end=2)
        assert eng.tick(0.0)[0] == Drain((TP,))  # only its run's backlog: drained first
        assert of(Pause, eng.tick(0.05)) == [Pause(TP, "20 bytes in flight > 15")]

    def test_over_a_limit_behind_its_own_run_it_drains_before_it_pauses(self) -> None:
        """Messages fetched ahead of a running batch (nothing suspended) are drained by the
        run first; the partition pauses only if still over a limit at the next tick."""
        eng = engine(batch_size=1, flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.fetched(TP, msgs(1, 3), end=4)  # 4 in flight > 3, all behind the run
        first = eng.tick(0.0)
        assert first[0] == Drain((TP,)) and of(Pause, first) == []
        assert of(Pause, eng.tick(0.05)) == [Pause(TP, "4 messages in flight > 3")]
        nxt = run_of(eng.completed(work, 1, None, 0.1))
        eng.completed(nxt, 3, None, 0.2)
        assert of(Resume, eng.tick(0.2)) == [Resume(TP)]

    def test_every_partition_behind_its_run_drains_and_offsets_are_stored_beside(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=10**6))
        tps = [("orders", p) for p in range(1, 9)]
        for tp in tps:
            eng.assigned(tp)
            assert eng.fetched(tp, msgs(0, 1), end=1) is not None
            eng.fetched(tp, msgs(1, 3), end=4)
        actions = eng.tick(0.0)
        [drain] = of(Drain, actions)
        assert sorted(drain.tps) == tps
        assert stored(actions) == dict.fromkeys(tps, 0)
        assert of(Pause, actions) == []

    def test_a_drained_partition_under_its_limit_after_the_wait_keeps_fetching(self) -> None:
        eng = engine(batch_size=1, flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=10**6))
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.fetched(TP, msgs(1, 3), end=4)
        assert of(Drain, eng.tick(0.0)) == [Drain((TP,))]
        nxt = run_of(eng.completed(work, 1, None, 0.01))  # the run took one: 3 in flight
        assert eng.tick(0.02) == [StoreOffsets(((TP, 1),))]  # no pause, no second drain
        assert offsets(nxt) == [1, 2, 3]
        eng.fetched(TP, msgs(4, 1), end=5)  # over again later: drained again, not paused
        assert eng.tick(0.03) == [Drain((TP,))]

    def test_a_suspended_partition_over_a_limit_pauses_at_once(self) -> None:
        eng = engine(
            ordering=Ordering.KEY,
            batch_size=1,
            flow=FlowLimits(max_count=3, max_bytes=10**9, max_span=10**6),
        )
        work = eng.fetched(TP, keyed((0, "a"), (1, "b")), end=2)
        assert work is not None
        run_of(eng.completed(work, 0, suspend(), 0.0))  # a@0 suspended while b@1 runs
        eng.fetched(TP, keyed((2, "b"), (3, "b")), end=4)
        actions = eng.tick(0.0)
        assert of(Drain, actions) == []
        assert of(Pause, actions) == [Pause(TP, "4 messages in flight > 3")]


# --- the invariants -----------------------------------------------------------------------
_events = st.lists(
    st.tuples(
        st.sampled_from(
            ["fetch", "ok", "fail", "stop", "publish", "refuse", "tick", "rebalance", "filter"]
        ),
        st.integers(0, 1000),
    ),
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(_events, st.integers(1, 3), st.sampled_from(list(Ordering)), st.booleans())
def test_offsets_never_pass_an_unsettled_message_and_order_never_goes_back(
    events: list[tuple[str, int]], batch_size: int, ordering: Ordering, bounded: bool
) -> None:
    """Whatever happens: an offset handed out for storing never passes a message that is
    not settled and never moves back within a generation; at most one run per partition is
    out; and per partition (per key with ``ordering=KEY``) the messages reach the listener
    in offset order, where going back is only ever a redelivery of the same messages of a
    suspended batch, with ``reconsume_times + 1``."""
    eng = engine(
        ordering=ordering,
        batch_size=batch_size,
        suspend_ms=300,
        max_reconsume_times=2 if bounded else ORDERLY_UNLIMITED,
    )
    by_key = ordering is Ordering.KEY
    unsettled: set[int] = set()
    next_offset = 0
    now = 0.0
    out: list[Work] = []  # runs handed out and not completed
    copies: list[SendBack] = []
    last_stored = -1
    # per lane (key, or the partition): the offsets delivered, in order
    delivered: dict[Any, list[tuple[int, int]]] = {}
    suspended_batches: list[list[tuple[int, int]]] = []  # (offset, times) of failed batches
    fetched_any = False  # since the last rebalance

    def lane(m: Any) -> Any:
        return m.sharding_key if by_key else None

    def deliver(batch: list[Any]) -> None:
        for m in batch:
            seen = delivered.setdefault(lane(m), [])
            if seen and m.queue_offset <= seen[-1][0]:
                # back: only a redelivery of a suspended batch's message, one time more
                assert any(
                    (m.queue_offset, m.reconsume_times - 1) in b for b in suspended_batches
                ), (m, seen)
            seen.append((m.queue_offset, m.reconsume_times))

    def handle(actions: list[Any]) -> None:
        nonlocal last_stored
        for a in actions:
            if isinstance(a, SendBack):
                copies.append(a)
            elif isinstance(a, RunWork):
                assert not any(w.tp == a.work.tp for w in out), "two runs of one partition"
                out.append(a.work)
            elif isinstance(a, Dropped):
                unsettled.discard(a.msg.queue_offset)
            elif isinstance(a, StoreOffsets):
                for _, offset in a.offsets:
                    assert all(offset <= u for u in unsettled), (offset, sorted(unsettled))
                    assert offset > last_stored
                    last_stored = offset

    def complete(n: int, verdict: BatchVerdict | None) -> None:
        work = out.pop(0)
        if not eng.is_current(work):
            return
        # no verdict: all ran, or the run was told to stop after some batches
        succeeded = n % (work.nbatches + (verdict is None))
        for i in range(succeeded):
            batch = work.batch(i)
            deliver(batch)
            unsettled.difference_update(m.queue_offset for m in batch)
        if verdict is not None:
            failed = work.batch(succeeded)
            deliver(failed)
            suspended_batches.append([(m.queue_offset, m.reconsume_times) for m in failed])
        handle(eng.completed(work, succeeded, verdict, now, chain=n % 3 != 0))

    for kind, n in events:
        now += 0.1
        if kind in ("fetch", "filter"):
            size = 0 if kind == "filter" else 1 + n % 5
            batch = [
                Msg(o, f"k{(o * 7 + n) % 3}".encode() if n % 4 else None)
                for o in range(next_offset, next_offset + size)
            ]
            unsettled.update(m.queue_offset for m in batch)
            fetched_any = True
            next_offset += size + (n % 2)  # sometimes a filtered record in between
            work = eng.fetched(TP, batch, end=next_offset)
            if work is not None:
                handle([RunWork(work)])
        elif kind in ("ok", "stop") and out:
            complete(n, None)
        elif kind == "fail" and out:
            complete(n, BatchVerdict([SUSPEND, None, RuntimeError("x")][n % 3], -1, 0.0))
        elif kind == "publish" and copies:
            copy = copies.pop(n % len(copies))
            current = eng.holds(copy)
            eng.published(copy)
            if current:
                unsettled.discard(copy.msg.queue_offset)
        elif kind == "refuse" and copies:
            copy = copies.pop(n % len(copies))
            handle(eng.publish_failed(copy, list(Refusal)[n % 3], now))
        elif kind == "rebalance":
            eng.revoked(TP)
            eng.assigned(TP)
            unsettled.clear()
            out.clear()
            copies.clear()
            delivered.clear()
            suspended_batches.clear()
            last_stored = -1
            fetched_any = False
        handle(eng.tick(now))
        committable = eng.committable(TP)
        if committable is not None:  # None: nothing fetched yet
            assert all(committable <= u for u in unsettled), (committable, sorted(unsettled))
    # in the end, with every run done and every copy acknowledged, the offset is the end
    for _ in range(200):
        now += 1.0
        while out:
            complete(out[0].nbatches, None)
        for copy in list(copies):
            copies.remove(copy)
            current = eng.holds(copy)
            eng.published(copy)
            if current:
                unsettled.discard(copy.msg.queue_offset)
        handle(eng.tick(now))
        if not out and not copies and not eng.local_retries():
            break
    assert not unsettled, sorted(unsettled)
    assert eng.committable(TP) == (next_offset if fetched_any else None)


def test_an_offset_the_client_refused_to_store_is_handed_out_again() -> None:
    eng = engine()
    work = eng.fetched(TP, msgs(100, 5), end=105)
    assert work is not None
    eng.completed(work, 3, None, now=0.0)
    assert stored(eng.tick(0.0)) == {TP: 105}
    assert stored(eng.tick(1.0)) == {}
    eng.store_failed([TP])
    assert stored(eng.tick(2.0)) == {TP: 105}


class TestWhatTheNextLayerReads:
    """What the runner and the client read of the engine: a run's attributes, the counts
    behind flow control and the introspection of a partition, ours or not."""

    def test_a_partition_not_ours_has_nothing_in_flight(self) -> None:
        eng = engine()
        other = ("orders", 9)
        eng.revoked(other)  # never assigned: harmless
        assert not eng.owns(other) and eng.owns(TP)
        assert eng.in_flight(other) == 0
        assert eng.suspended(other) == 0 and eng.suspended_keys(other) == 0
        assert eng.committable(other) is None
        assert eng.fetched(other, msgs(0, 1), end=1) is None
        eng.assigned(other)
        assert eng.fetched(other, msgs(0, 1), end=1) is not None

    def test_every_assignment_is_a_new_generation(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1)
        seen = []
        for _ in range(3):
            work = eng.fetched(TP, msgs(0, 1), end=1)
            assert work is not None and eng.is_current(work)
            seen.append(work.generation)
            [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
            assert copy.generation == work.generation and copy.work is work
            assert eng.holds(copy)
            eng.revoked(TP)
            assert not eng.is_current(work) and not eng.holds(copy)
            eng.assigned(TP)
        assert len(set(seen)) == 3

    def test_a_run_names_its_end_and_whether_it_is_one_fetch(self) -> None:
        eng = engine(suspend_ms=100)
        work = eng.fetched(TP, msgs(100, 3), end=104)
        assert work is not None and work.fresh and work.end == 104
        eng.fetched(TP, msgs(104, 2), end=106)
        eng.completed(work, 0, suspend(), 0.0)
        retry = run_of(eng.tick(0.1))
        assert isinstance(retry, OrderlyWork) and not retry.fresh and retry.end == 102
        nxt = run_of(eng.completed(retry, 1, None, 0.1))
        assert isinstance(nxt, OrderlyWork) and not nxt.fresh
        assert offsets(nxt) == [102, 104, 105] and nxt.end == 106

    def test_a_fetch_of_exactly_the_cap_runs_at_once(self) -> None:
        eng = OrderlyEngine(
            EngineOptions(batch_size=2, store_interval_s=0.0), OrderlyOptions(work_max=4)
        )
        eng.assigned(TP)
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None and work.fresh and offsets(work) == [0, 1, 2, 3]

    def test_a_cap_below_one_batch_is_one_batch(self) -> None:
        eng = OrderlyEngine(
            EngineOptions(batch_size=3, store_interval_s=0.0), OrderlyOptions(work_max=2)
        )
        eng.assigned(TP)
        first = eng.fetched(TP, msgs(0, 1), end=1)
        assert first is not None
        eng.fetched(TP, msgs(1, 7), end=8)
        assert offsets(run_of(eng.completed(first, 1, None, 0.0))) == [1, 2, 3]

    def test_messages_in_flight_through_suspend_dead_letter_and_retry(self) -> None:
        eng = engine(max_reconsume_times=3, batch_size=3, suspend_ms=100)
        batch = [Msg(0, reconsume_times=3), Msg(1), Msg(2)]
        work = eng.fetched(TP, batch, end=3)
        assert work is not None
        eng.fetched(TP, msgs(3, 2), end=5)
        assert eng.in_flight(TP) == 5
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        assert eng.in_flight(TP) == 5 and eng.suspended(TP) == 1
        assert eng.suspended_keys(TP) == 1 and eng.local_retries() == 1
        eng.published(copy)
        assert eng.in_flight(TP) == 4
        retry = run_of(eng.tick(0.1))
        assert offsets(retry) == [1, 2]
        eng.completed(retry, 0, suspend(), 0.1)  # fails again: the same two, still in flight
        assert eng.in_flight(TP) == 4 and eng.suspended(TP) == 1
        assert eng.suspended_keys(TP) == 1 and eng.local_retries() == 1
        retry = run_of(eng.tick(0.2))
        assert [m.reconsume_times for m in retry.msgs] == [2, 2]
        nxt = run_of(eng.completed(retry, 1, None, 0.2))
        assert eng.in_flight(TP) == 2 and eng.suspended(TP) == 0 and eng.local_retries() == 0
        assert eng.suspended_keys(TP) == 0
        eng.completed(nxt, 1, None, 0.2)
        assert eng.in_flight(TP) == 0

    def test_a_dropped_message_is_settled_and_named(self) -> None:
        options = EngineOptions(batch_size=3, max_reconsume_times=1, store_interval_s=0.0)
        eng = OrderlyEngine(options, OrderlyOptions(dead_letters=False))
        eng.assigned(TP)
        work = eng.fetched(TP, [Msg(0), Msg(1, reconsume_times=1), Msg(2)], end=3)
        assert work is not None
        acts = eng.completed(work, 0, suspend(rt=0.25), 0.0)
        [dropped] = of(Dropped, acts)
        assert dropped.tp == TP and dropped.msg.queue_offset == 1
        assert dropped.failure.type == "SUSPEND_CURRENT_QUEUE_A_MOMENT"
        assert dropped.info == (3, 1, None, 250.0)
        assert eng.in_flight(TP) == 2

    def test_a_dead_letter_carries_its_place_in_the_batch(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=2)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        copies = of(SendBack, eng.completed(work, 0, suspend(rt=0.5), 0.0))
        assert [c.info for c in copies] == [(2, 0, None, 500.0), (2, 1, None, 500.0)]

    @pytest.mark.parametrize(("own", "times", "dead"), [(-1, 10_000, False), (2, 2, True)])
    def test_a_message_header_of_minus_one_is_unlimited(
        self, own: int, times: int, dead: bool
    ) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1)
        m = Msg(0, reconsume_times=times, max_reconsume_times=own)
        work = eng.fetched(TP, [m], end=1)
        assert work is not None
        assert bool(of(SendBack, eng.completed(work, 0, suspend(), 0.0))) is dead

    def test_a_refused_copy_waiting_counts_as_a_local_retry(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1, suspend_ms=200)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        assert eng.local_retries() == 1
        eng.publish_failed(copy, Refusal.TRANSIENT, now=1.0)
        assert eng.local_retries() == 2
        assert eng.next_due() == pytest.approx(1.2)
        [again] = of(SendBack, eng.tick(1.2))
        eng.published(again)
        assert eng.in_flight(TP) == 0 and eng.local_retries() == 0

    def test_without_its_body_a_copy_is_no_longer_sent_alone(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        [alone] = eng.publish_failed(copy, Refusal.TOO_LARGE, 0.0)
        [bodiless] = eng.publish_failed(alone, Refusal.TOO_LARGE, 0.0)
        assert isinstance(bodiless, SendBack) and bodiless.omit_body and not bodiless.alone
        assert eng.holds(bodiless) and not eng.holds(alone)
        assert eng.publish_failed(bodiless, Refusal.TOO_LARGE, 0.0) != [bodiless]

    def test_bytes_waiting_and_suspended_decide_the_pause(self) -> None:
        flow = FlowLimits(max_count=10**6, max_bytes=25, max_span=10**6)
        eng = engine(batch_size=1, suspend_ms=100, flow=flow)
        work = eng.fetched(TP, msgs(0, 1), end=1)  # running: not counted
        assert work is not None and of(Pause, eng.tick(0.0)) == []
        eng.completed(work, 0, suspend(), 0.0)  # 10 bytes suspended
        eng.fetched(TP, msgs(1, 1), end=2)  # 20
        assert of(Pause, eng.tick(0.0)) == []
        eng.fetched(TP, msgs(2, 1), end=3)
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 25")]
        retry = run_of(eng.tick(0.1))
        assert of(Resume, eng.tick(0.1)) == []  # the retry's bytes count until it succeeds
        nxt = run_of(eng.completed(retry, 1, None, 0.1))  # the rest runs: nothing waits
        assert offsets(nxt) == [1, 2]
        assert of(Resume, eng.tick(0.1)) == [Resume(TP)]

    def test_the_offset_span_in_flight_decides_the_pause(self) -> None:
        flow = FlowLimits(max_count=10**6, max_bytes=10**9, max_span=5)
        eng = engine(batch_size=1, flow=flow)
        work = eng.fetched(TP, msgs(10, 1), end=11)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)
        eng.fetched(TP, msgs(11, 5), end=16)
        assert of(Pause, eng.tick(0.0)) == []  # 15 - 10 = 5: not above
        eng.fetched(TP, msgs(16, 1), end=17)
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "in-flight offset span 6 > 5")]

    def test_an_older_fetch_end_never_moves_the_position_back(self) -> None:
        eng = engine()
        assert eng.fetched(TP, [], end=50) is None
        assert eng.fetched(TP, [], end=40) is None
        assert stored(eng.tick(0.0)) == {TP: 50}

    def test_bytes_put_back_suspended_and_released(self) -> None:
        flow = FlowLimits(max_count=10**6, max_bytes=15, max_span=10**6)
        eng = engine(batch_size=2, suspend_ms=100, flow=flow)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        eng.fetched(TP, msgs(2, 1), end=3)  # 10 bytes wait
        eng.completed(work, 0, suspend(), 0.0)  # and 20 suspended
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 15")]
        retry = run_of(eng.tick(0.1))
        nxt = run_of(eng.completed(retry, 1, None, 0.1))  # released; the rest runs
        assert offsets(nxt) == [2]
        assert of(Resume, eng.tick(0.1)) == [Resume(TP)]

    def test_bytes_of_a_stopped_run_put_back_count(self) -> None:
        flow = FlowLimits(max_count=10**6, max_bytes=25, max_span=10**6)
        eng = engine(batch_size=1, flow=flow)
        work = eng.fetched(TP, msgs(0, 3), end=3)
        assert work is not None
        eng.fetched(TP, msgs(3, 1), end=4)  # 10 bytes wait
        eng.completed(work, 1, None, 0.0, chain=False)  # 20 more put back
        rest = run_of(eng.tick(0.0))  # and taken again, with the one that waited
        assert offsets(rest) == [1, 2, 3]
        eng.fetched(TP, msgs(4, 3), end=7)
        assert eng.tick(0.0)[0] == Drain((TP,))
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "30 bytes in flight > 25")]

    def test_bytes_of_a_retry_suspended_again_count_once(self) -> None:
        flow = FlowLimits(max_count=10**6, max_bytes=35, max_span=10**6)
        eng = engine(batch_size=2, suspend_ms=100, flow=flow)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        eng.fetched(TP, msgs(2, 1), end=3)
        eng.completed(work, 0, suspend(), 0.0)
        retry = run_of(eng.tick(0.1))
        eng.completed(retry, 0, suspend(), 0.1)  # still 30 bytes
        assert of(Pause, eng.tick(0.1)) == []

    def test_a_success_verdict_in_time_counts_as_exactly_one_batch(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 6), end=6)
        assert work is not None
        acts = eng.completed(work, 0, BatchVerdict(SUCCESS, -1, 0.1), now=0.0)
        assert offsets(run_of(acts)) == [2, 3, 4, 5]

    def test_a_stopped_retry_runs_again_whole(self) -> None:
        eng = engine(suspend_ms=100)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)
        retry = run_of(eng.tick(0.1))
        assert eng.completed(retry, 0, None, 0.1, chain=False) == []
        again = run_of(eng.tick(0.2))
        assert [(m.queue_offset, m.reconsume_times) for m in again.msgs] == [(0, 1), (1, 1)]

    def test_a_due_retry_comes_before_other_keys_when_a_run_ends(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1, suspend_ms=100)
        work = eng.fetched(TP, keyed((0, "a"), (1, "b")), end=2)
        assert work is not None
        nxt = run_of(eng.completed(work, 0, suspend(), 0.0))
        assert offsets(nxt) == [1]
        eng.fetched(TP, keyed((2, "b")), end=3)
        after = run_of(eng.completed(nxt, 1, None, 2.0))
        assert [(m.queue_offset, m.reconsume_times) for m in after.msgs] == [(0, 1)]

    @pytest.mark.parametrize("ordering", list(Ordering))
    def test_a_retry_dropped_at_its_maximum_frees_what_waits_behind_it(
        self, ordering: Ordering
    ) -> None:
        options = EngineOptions(batch_size=1, max_reconsume_times=1, store_interval_s=0.0)
        eng = OrderlyEngine(
            options, OrderlyOptions(dead_letters=False, ordering=ordering, suspend_ms=100)
        )
        eng.assigned(TP)
        work = eng.fetched(TP, keyed((0, "a")), end=1)
        assert work is not None
        eng.fetched(TP, keyed((1, "a")), end=2)
        eng.completed(work, 0, suspend(), 0.0)
        retry = run_of(eng.tick(0.1))
        acts = eng.completed(retry, 0, suspend(), 0.1)
        assert [d.msg.queue_offset for d in of(Dropped, acts)] == [0]
        assert offsets(run_of(acts)) == [1]
        assert eng.suspended(TP) == 0 and eng.suspended_keys(TP) == 0

    def test_suspended_batches_over_all_partitions_are_local_retries(self) -> None:
        eng = engine()
        other = ("orders", 1)
        eng.assigned(other)
        for tp in (TP, other):
            work = eng.fetched(tp, msgs(0, 1), end=1)
            assert work is not None
            eng.completed(work, 0, suspend(), 0.0)
        assert eng.local_retries() == 2

    def test_a_key_waiting_behind_its_suspended_batch_runs_after_the_retry(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1, suspend_ms=100)
        work = eng.fetched(TP, keyed((0, "a")), end=1)
        assert work is not None
        eng.fetched(TP, keyed((1, "a"), (2, "b")), end=3)
        nxt = run_of(eng.completed(work, 0, suspend(), 0.0))
        assert offsets(nxt) == [2]
        eng.completed(nxt, 1, None, 0.0)
        retry = run_of(eng.tick(0.1))
        assert offsets(run_of(eng.completed(retry, 1, None, 0.1))) == [1]

    def test_a_partition_suspended_holds_one_key_whatever_the_record_keys(self) -> None:
        eng = engine(batch_size=2)
        work = eng.fetched(TP, keyed((0, "a"), (1, "b")), end=2)
        assert work is not None
        eng.completed(work, 0, suspend(), 0.0)
        assert eng.suspended(TP) == 1 and eng.suspended_keys(TP) == 1

    @pytest.mark.parametrize("ordering", list(Ordering))
    def test_once_everything_waiting_ran_the_next_fetch_runs_as_it_is(
        self, ordering: Ordering
    ) -> None:
        eng = engine(ordering=ordering, batch_size=1)
        work = eng.fetched(TP, keyed((0, "a")), end=1)
        assert work is not None
        eng.fetched(TP, keyed((1, "a")), end=2)
        nxt = run_of(eng.completed(work, 1, None, 0.0))
        assert not nxt.fresh  # type: ignore[attr-defined]
        assert eng.completed(nxt, 1, None, 0.0) == []
        last = eng.fetched(TP, keyed((2, "a")), end=3)
        assert isinstance(last, OrderlyWork) and last.fresh

    def test_a_run_of_several_keys_is_in_offset_order_and_capped(self) -> None:
        eng = OrderlyEngine(
            EngineOptions(batch_size=1, store_interval_s=0.0),
            OrderlyOptions(ordering=Ordering.KEY, work_max=3),
        )
        eng.assigned(TP)
        first = eng.fetched(TP, keyed((0, "z")), end=1)
        assert first is not None
        eng.fetched(TP, keyed((1, "a"), (2, "b"), (3, "a"), (4, "a"), (5, "a")), end=6)
        nxt = run_of(eng.completed(first, 1, None, 0.0))
        assert offsets(nxt) == [1, 2, 3]  # across keys in offset order, at most 3
        assert offsets(run_of(eng.completed(nxt, 3, None, 0.0))) == [4, 5]

    def test_a_run_of_one_key_stops_at_the_cap_before_another_key(self) -> None:
        eng = OrderlyEngine(
            EngineOptions(batch_size=1, store_interval_s=0.0),
            OrderlyOptions(ordering=Ordering.KEY, work_max=2),
        )
        eng.assigned(TP)
        first = eng.fetched(TP, keyed((0, "z")), end=1)
        assert first is not None
        eng.fetched(TP, keyed((1, "a"), (2, "a"), (3, "a"), (4, "b")), end=5)
        nxt = run_of(eng.completed(first, 1, None, 0.0))
        assert offsets(nxt) == [1, 2]

    def test_of_two_suspended_batches_due_the_first_in_offset_order_runs(self) -> None:
        eng = engine(ordering=Ordering.KEY, batch_size=1, suspend_ms=100)
        work = eng.fetched(TP, keyed((0, "a"), (1, "b")), end=2)
        assert work is not None
        nxt = run_of(eng.completed(work, 0, suspend(), 0.0))
        eng.completed(nxt, 0, suspend(), 0.0)
        assert eng.suspended(TP) == 2
        retry = run_of(eng.tick(0.1))
        assert offsets(retry) == [0]
        assert offsets(run_of(eng.completed(retry, 1, None, 0.1))) == [1]

    def test_an_acknowledged_copy_below_the_retry_moves_the_offset(self) -> None:
        eng = engine(max_reconsume_times=1, batch_size=2)
        work = eng.fetched(TP, [Msg(0, reconsume_times=1), Msg(1)], end=2)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        assert stored(eng.tick(0.0)) == {TP: 0}
        eng.published(copy)
        assert stored(eng.tick(0.0)) == {TP: 1}

    def test_while_draining_the_offset_is_the_first_message_put_back(self) -> None:
        eng = engine()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        eng.completed(work, 1, None, 0.0, chain=False)
        assert eng.committable(TP) == 2

    def test_offsets_are_stored_once_per_store_interval(self) -> None:
        eng = engine(store_interval_s=1.0)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        assert stored(eng.tick(0.0)) == {TP: 0}
        eng.completed(work, 1, None, 0.0)
        assert stored(eng.tick(0.5)) == {}
        assert stored(eng.tick(1.0)) == {TP: 2}

    def test_a_copy_due_again_is_sent_by_the_first_tick_at_its_time(self) -> None:
        eng = engine(max_reconsume_times=1, batch_size=2, suspend_ms=10)
        work = eng.fetched(TP, [Msg(0, reconsume_times=1), Msg(1)], end=2)
        assert work is not None
        [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
        eng.publish_failed(copy, Refusal.TRANSIENT, now=0.0)
        acts = eng.tick(0.01)
        [again] = of(SendBack, acts)
        assert again.msg.queue_offset == 0
        assert of(RunWork, acts) == []  # the retry waits for the copy

    def test_copies_and_runs_of_many_partitions_come_out_of_one_tick(self) -> None:
        eng = engine(max_reconsume_times=0, batch_size=1, suspend_ms=100)
        tps = [("orders", p) for p in range(1, 11)]
        copies = []
        for tp in tps:
            eng.assigned(tp)
            work = eng.fetched(tp, msgs(0, 1), end=1)
            assert work is not None
            [copy] = of(SendBack, eng.completed(work, 0, suspend(), 0.0))
            copies.append(copy)
        held = eng.fetched(TP, msgs(0, 1, reconsume_times=-5), end=1)
        assert held is not None
        eng.completed(held, 0, BatchVerdict(SUSPEND, 100, 0.0), 0.0)  # TP due at 0.1
        eng.revoked(tps[0])
        for copy in copies:
            eng.publish_failed(copy, Refusal.TRANSIENT, now=0.0)  # sent again at 0.1
        acts = eng.tick(0.1)
        assert {a.tp for a in of(SendBack, acts)} == set(tps[1:])
        assert [a.work.tp for a in of(RunWork, acts)] == [TP]

    def test_every_partition_over_its_limit_pauses_in_the_same_tick(self) -> None:
        flow = FlowLimits(max_count=1, max_bytes=10**9, max_span=10**6)
        eng = engine(batch_size=1, flow=flow)
        eng.revoked(TP)
        full = [("orders", p) for p in range(10)]
        idle = [("idle", p) for p in range(10)]
        for tp in full + idle:
            eng.assigned(tp)
        for tp in full:
            work = eng.fetched(tp, msgs(0, 1), end=1)
            assert work is not None
            eng.completed(work, 0, suspend(), 0.0)
            eng.fetched(tp, msgs(1, 1), end=2)
        for tp in idle:
            assert eng.fetched(tp, [], end=5) is None
        acts = eng.tick(0.0)
        assert {a.tp for a in of(Pause, acts)} == set(full)
        assert stored(acts) == {**dict.fromkeys(full, 0), **dict.fromkeys(idle, 5)}
