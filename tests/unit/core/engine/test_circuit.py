"""What the concurrent and orderly engines do in each circuit state
(:mod:`adapter.core.engine.circuit`), on a fake clock, and the metrics that show it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from adapter.core.breaker import Breaker, CircuitBreaker, CircuitState, OpenCircuit
from adapter.core.delay import DelayLevels
from adapter.core.engine import EngineOptions, Pause, Resume, RunWork, SendBack, StoreOffsets
from adapter.core.engine.circuit import (
    CircuitConcurrentEngine,
    CircuitGate,
    CircuitOrderlyEngine,
    CircuitSnapshot,
)
from adapter.core.engine.orderly import BatchVerdict, OrderlyOptions
from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyStatus,
    MessageQueue,
    Outcome,
    judge,
)
from adapter.core.offsets import FlowLimits
from adapter.core.publishing import Refusal
from adapter.core.routing import ConsumeConcurrentlyStatus, DeadLetter

pytestmark = pytest.mark.unit

LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
SUCCESS = ConsumeOrderlyStatus.SUCCESS
TP = ("orders", 0)
TP2 = ("orders", 1)
LEVELS = DelayLevels.parse("1s 5s 10s 30s 1m")
OPEN, CLOSED, HALF = CircuitState.OPEN, CircuitState.CLOSED, CircuitState.HALF_OPEN


@dataclass(frozen=True)
class Msg:
    """What the engines need of a message."""

    queue_offset: int
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    sharding_key: bytes | None = None
    body: bytes = b"x" * 10

    def redelivered(self) -> Msg:
        return replace(self, reconsume_times=self.reconsume_times + 1)

    def retry_fields(self) -> tuple[int, int | None, int, int]:
        return self.reconsume_times, self.max_reconsume_times, self.queue_offset, len(self.body)


def msgs(first: int, n: int, **kw: Any) -> list[Msg]:
    return [Msg(o, **kw) for o in range(first, first + n)]


def later(size: int) -> Outcome:
    out = judge(LATER, ConsumeConcurrentlyContext(MessageQueue("orders", 0)), size)
    assert out is not None
    return out


def raised(exc: BaseException, size: int) -> Outcome:
    out = judge(exc, ConsumeConcurrentlyContext(MessageQueue("orders", 0)), size)
    assert out is not None
    return out


def of(kind: type, actions: list[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def stored(actions: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for a in of(StoreOffsets, actions):
        out.update(dict(a.offsets))
    return out


# -- the concurrent engine -----------------------------------------------------------------
def concurrent(
    changes: list[tuple[Any, ...]] | None = None,
    *,
    max_reconsume_times: int = 16,
    batch_size: int = 1,
    consume_timeout_s: float = 60.0,
    **kw: Any,
) -> CircuitConcurrentEngine:
    settings = CircuitBreaker(**{"minimum_batches": 4, "open_s": 5.0, **kw})

    def changed(*change: Any) -> None:
        if changes is not None:
            changes.append(change)

    eng = CircuitConcurrentEngine(
        EngineOptions(
            batch_size=batch_size,
            levels=LEVELS,
            consume_timeout_s=consume_timeout_s,
            store_interval_s=0.0,
            max_reconsume_times=max_reconsume_times,
        ),
        Breaker(settings),
        changed,
    )
    eng.assigned(TP)
    eng.assigned(TP2)
    return eng


def fail_all(eng: CircuitConcurrentEngine, first: int, n: int, now: float) -> list[Any]:
    """A fetched run of ``n`` batches of one, every one failing."""
    work = eng.fetched(TP, msgs(first, n), end=first + n)
    assert work is not None
    return eng.settle_run(work, [(i, later(1), 0.001) for i in range(n)], now)


class TestConcurrent:
    def test_failures_while_closed_take_the_ladder_as_usual(self) -> None:
        eng = concurrent()
        work = eng.fetched(TP, msgs(0, 10, reconsume_times=2), end=10)
        assert work is not None
        actions = eng.settle_run(work, [(3, later(1), 0.001)], 0.0)  # 1 in 10
        [copy] = of(SendBack, actions)
        assert copy.msg.queue_offset == 3 and copy.dest.level == 5  # 3 + reconsume_times
        assert eng.circuit(0.0).state is CLOSED
        assert of(Pause, actions) == []

    def test_the_batch_that_opens_it_and_all_after_are_held_and_fetching_stops(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = concurrent(changes)
        actions = fail_all(eng, 0, 10, now=0.0)
        # batches 0-2 failed while closed (3 < minimum_batches): sent back as usual
        assert [a.msg.queue_offset for a in of(SendBack, actions)] == [0, 1, 2]
        assert sorted(a.tp for a in of(Pause, actions)) == [TP, TP2]
        assert [c[:2] for c in changes] == [(CLOSED, OPEN)]
        snap = eng.circuit(1.0)
        assert (snap.state, snap.held_messages, snap.held_batches) == (OPEN, 7, 7)
        assert eng.committable(TP) == 0  # the copies 0-2 are not acknowledged yet
        for a in of(SendBack, actions):
            eng.published(a)
        assert eng.committable(TP) == 3  # the first held message
        assert eng.next_due() == 5.0

    def test_while_open_more_failures_are_held_and_flow_control_does_not_resume(
        self,
    ) -> None:
        eng = concurrent()
        fail_all(eng, 0, 4, now=0.0)
        assert eng.circuit(0.0).state is OPEN
        assert of(SendBack, fail_all(eng, 4, 6, now=1.0)) == []
        assert eng.circuit(1.0).held_messages == 7  # 1 from the first run (3 went back) + 6
        assert of(Resume, eng.tick(2.0)) == []

    def test_flow_controls_resume_waits_for_the_breaker(self) -> None:
        eng = concurrent()
        flow = FlowLimits(max_count=2, max_bytes=10**9, max_span=10**9)
        eng.options = replace(eng.options, flow=flow)
        work = eng.fetched(TP, msgs(0, 4), end=4, pooled=True)
        assert work is not None
        assert [a.tp for a in of(Pause, eng.tick(0.0))] == [TP]  # flow control
        for i in range(4):  # everything fails: the breaker opens, all four are held
            eng.completed(work, i, later(1), 0.1)
        assert eng.circuit(0.1).state is OPEN
        assert of(Resume, eng.tick(0.2)) == []

    def test_half_open_probes_one_held_batch_with_its_reconsume_times_unchanged(
        self,
    ) -> None:
        eng = concurrent()
        fail_all(eng, 0, 6, now=0.0)  # 3 sent back, 3 held (offsets 3, 4, 5)
        assert of(RunWork, eng.tick(4.9)) == []
        actions = eng.tick(5.0)
        [probe] = of(RunWork, actions)
        assert [(m.queue_offset, m.reconsume_times) for m in probe.work.msgs] == [(3, 0)]
        assert eng.circuit(5.0).state is HALF
        assert of(Resume, actions) == []  # still not fetching

    def test_a_good_probe_closes_it_and_everything_held_runs_and_fetching_resumes(
        self,
    ) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = concurrent(changes)
        for a in of(SendBack, fail_all(eng, 0, 6, now=0.0)):
            eng.published(a)
        [probe] = of(RunWork, eng.tick(5.0))
        actions = eng.settle_run(probe.work, [], 5.1)
        assert [c[1] for c in changes] == [OPEN, HALF, CLOSED]
        rest = of(RunWork, actions)
        assert [m.queue_offset for r in rest for m in r.work.msgs] == [4, 5]
        assert sorted(a.tp for a in of(Resume, actions)) == [TP, TP2]
        assert eng.committable(TP) == 4
        for r in rest:
            eng.settle_run(r.work, [], 5.2)
        assert stored(eng.tick(5.3)) == {TP: 6}
        assert eng.circuit(5.3).held_messages == 0

    def test_a_failed_probe_is_held_again_not_sent_back(self) -> None:
        eng = concurrent()
        fail_all(eng, 0, 6, now=0.0)
        [probe] = of(RunWork, eng.tick(5.0))
        actions = eng.settle_run(probe.work, [(0, later(1), 0.001)], 5.1)
        assert of(SendBack, actions) == []
        snap = eng.circuit(5.1)
        assert (snap.state, snap.held_messages) == (OPEN, 3)
        assert eng.next_due() == pytest.approx(10.1)
        [again] = of(RunWork, eng.tick(10.1))
        assert again.work.msgs[0].reconsume_times == 0

    def test_held_dead_letters_wait_too(self) -> None:
        eng = concurrent(max_reconsume_times=0)
        work = eng.fetched(TP, msgs(0, 6, reconsume_times=16), end=6)
        assert work is not None
        actions = eng.settle_run(work, [(i, later(1), 0.0) for i in range(6)], 0.0)
        copies = of(SendBack, actions)
        assert len(copies) == 3 and all(isinstance(a.dest, DeadLetter) for a in copies)
        assert eng.circuit(0.0).held_messages == 3

    def test_open_circuit_and_trip_on_types_open_it_at_the_first_failure(self) -> None:
        eng = concurrent(trip_on=(ConnectionError,))
        work = eng.fetched(TP, msgs(0, 3), end=3)
        assert work is not None
        actions = eng.settle_run(work, [(1, raised(ConnectionResetError("down"), 1), 0.0)], 0.0)
        assert of(SendBack, actions) == []
        assert eng.circuit(0.0).state is OPEN
        eng2 = concurrent()
        work2 = eng2.fetched(TP, msgs(0, 1), end=1)
        assert work2 is not None
        eng2.settle_run(work2, [(0, raised(OpenCircuit("db down"), 1), 0.0)], 0.0)
        assert eng2.circuit(0.0).state is OPEN

    def test_a_batch_past_consume_timeout_counts_as_a_failure(self) -> None:
        eng = concurrent(minimum_batches=1)
        work = eng.fetched(TP, msgs(0, 1), end=1, pooled=True)
        assert work is not None
        assert work.started is not None
        work.started[0] = 0.0
        eng.tick(61.0)  # past consume_timeout: RECONSUME_LATER, and the breaker opens
        assert eng.circuit(61.0).state is OPEN

    def test_a_revoked_partition_forgets_what_was_held_for_it(self) -> None:
        eng = concurrent()
        fail_all(eng, 0, 6, now=0.0)
        eng.revoked(TP)
        assert eng.circuit(1.0).held_messages == 0
        actions = eng.tick(5.0)  # nothing held: the next fetch is the probe
        assert [a.tp for a in of(Resume, actions)] == [TP2]

    def test_a_partition_assigned_while_open_is_paused_too(self) -> None:
        eng = concurrent()
        fail_all(eng, 0, 6, now=0.0)
        eng.assigned(("orders", 2))
        assert [a.tp for a in of(Pause, eng.tick(1.0))] == [("orders", 2)]


# -- the orderly engine --------------------------------------------------------------------
def orderly(
    changes: list[tuple[Any, ...]] | None = None, *, suspend_ms: int = 1000, **kw: Any
) -> CircuitOrderlyEngine:
    def changed(*change: Any) -> None:
        if changes is not None:
            changes.append(change)

    eng = CircuitOrderlyEngine(
        EngineOptions(batch_size=2, consume_timeout_s=60.0, store_interval_s=0.0),
        OrderlyOptions(suspend_ms=suspend_ms),
        Breaker(CircuitBreaker(**{"minimum_batches": 1, "open_s": 5.0, **kw})),
        changed,
    )
    eng.assigned(TP)
    eng.assigned(TP2)
    return eng


class TestOrderly:
    def test_a_suspended_batch_is_held_while_open_and_the_partition_does_not_wait(
        self,
    ) -> None:
        eng = orderly()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        actions = eng.completed(work, 0, BatchVerdict(SUSPEND), 0.0)
        assert eng.circuit(0.0).state is OPEN
        assert sorted(a.tp for a in of(Pause, actions)) == [TP, TP2]
        assert of(RunWork, eng.tick(1.5)) == []  # the suspend time passed: held instead
        snap = eng.circuit(1.5)
        assert (snap.held_batches, snap.held_messages) == (1, 2)  # 2 and 3 wait behind it
        assert not eng.running([TP])  # a rebalance does not wait for a held run
        assert eng.committable(TP) == 0

    def test_the_probe_is_the_held_run_and_its_success_resumes(self) -> None:
        eng = orderly()
        work = eng.fetched(TP, msgs(0, 4), end=4)
        assert work is not None
        eng.completed(work, 0, BatchVerdict(SUSPEND), 0.0)
        eng.tick(1.5)
        [probe] = of(RunWork, eng.tick(5.0))
        assert [m.queue_offset for m in probe.work.msgs] == [0, 1]
        assert [m.reconsume_times for m in probe.work.msgs] == [1, 1]  # suspended once
        actions = eng.completed(probe.work, 1, None, 5.1)
        assert eng.circuit(5.1).state is CLOSED
        assert sorted(a.tp for a in of(Resume, actions)) == [TP, TP2]
        [nxt] = of(RunWork, actions)  # the rest of the partition goes on
        assert [m.queue_offset for m in nxt.work.msgs] == [2, 3]

    def test_a_failed_probe_holds_again(self) -> None:
        eng = orderly()
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        eng.completed(work, 0, BatchVerdict(ValueError("down")), 0.0)
        eng.tick(1.5)
        [probe] = of(RunWork, eng.tick(5.0))
        eng.completed(probe.work, 0, BatchVerdict(SUSPEND), 5.1)
        assert eng.circuit(5.1).state is OPEN
        assert of(RunWork, eng.tick(7.0)) == []
        assert eng.circuit(7.0).held_batches == 1


# -- metrics -------------------------------------------------------------------------------
class _Clock:
    def monotonic(self) -> float:
        return 3.0


class _Member:
    """What the consumer collector reads of a group member (no Kafka)."""

    def __init__(self, engine: Any) -> None:
        from adapter.clients.member.outcomes import ConsumerStats
        from adapter.io.records import TopicNames

        self.engine = engine
        self.stats = ConsumerStats()
        self.names = TopicNames("g")
        self.assignment: set[tuple[str, int]] = set()
        self.runner = None
        self.clock = _Clock()

    def lag(self) -> dict[tuple[str, int], int]:
        return {}


def test_the_metrics_show_the_state_the_time_open_and_what_is_held() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from adapter.io.metrics import ConsumerCollector

    eng = concurrent()
    fail_all(eng, 0, 6, now=1.0)  # opens at 1.0, holds 3
    registry = CollectorRegistry()
    registry.register(ConsumerCollector("g", lambda: _Member(eng)))
    text = generate_latest(registry).decode()
    assert 'rmq_consumer_circuit_state{group="g",state="open"} 1.0' in text
    assert 'rmq_consumer_circuit_state{group="g",state="closed"} 0.0' in text
    assert 'rmq_consumer_circuit_open_seconds_total{group="g"} 2.0' in text
    assert 'rmq_consumer_circuit_opened_total{group="g"} 1.0' in text
    assert 'rmq_consumer_circuit_held_messages{group="g"} 3.0' in text


# -- a rebalance while open ----------------------------------------------------------------
TP3 = ("orders", 2)


def open_concurrent() -> CircuitConcurrentEngine:
    eng = concurrent()
    fail_all(eng, 0, 6, now=0.0)
    assert eng.circuit(0.0).state is OPEN
    return eng


def open_orderly() -> CircuitOrderlyEngine:
    eng = orderly()
    work = eng.fetched(TP, msgs(0, 2), end=2)
    assert work is not None
    eng.completed(work, 0, BatchVerdict(SUSPEND), 0.0)
    assert eng.circuit(0.0).state is OPEN
    return eng


@pytest.mark.parametrize("make", [open_concurrent, open_orderly], ids=["concurrent", "orderly"])
def test_partitions_assigned_after_all_were_revoked_are_paused_while_open(make: Any) -> None:
    """An eager rebalance revokes every partition, then assigns the new ones: the breaker
    is still open, so they do not fetch either (and they resume when it closes)."""
    eng = make()
    eng.revoked(TP)
    eng.revoked(TP2)
    eng.assigned(TP3)
    assert of(Pause, eng.tick(1.0)) == [Pause(TP3, "circuit open")]
    actions = eng.tick(5.0)  # nothing held any more: half-open, the next fetch is the probe
    assert eng.circuit(5.0).state is HALF
    assert of(Resume, actions) == [Resume(TP3)]
    eng.assigned(TP)  # fetching goes on: a partition assigned now is not paused
    assert of(Pause, eng.tick(5.1)) == []


def test_a_partition_assigned_after_it_closed_is_not_paused() -> None:
    eng = concurrent()
    fail_all(eng, 0, 6, now=0.0)
    eng.assigned(TP3)
    eng.tick(1.0)
    [probe] = of(RunWork, eng.tick(5.0))
    actions = eng.settle_run(probe.work, [], 5.1)
    assert eng.circuit(5.1).state is CLOSED
    assert of(Resume, actions) == [Resume(TP), Resume(TP2), Resume(TP3)]
    eng.assigned(("orders", 3))
    assert of(Pause, eng.tick(5.2)) == []


@pytest.mark.parametrize("make", [open_concurrent, open_orderly], ids=["concurrent", "orderly"])
def test_a_partition_reset_while_open_stays_paused(make: Any) -> None:
    """Resetting a partition's offset revokes and assigns it again: still paused."""
    eng = make()
    eng.revoked(TP2)  # the consumer owns TP alone
    eng.revoked(TP)
    eng.assigned(TP)
    assert of(Pause, eng.tick(1.0)) == [Pause(TP, "circuit open")]


# -- the concurrent engine: what counts, and what is held -----------------------------------
def pooled(eng: CircuitConcurrentEngine, first: int, n: int, tp: Any = TP) -> Any:
    work = eng.fetched(tp, msgs(first, n), end=first + n, pooled=True)
    assert work is not None
    return work


class TestConcurrentResults:
    def test_each_state_change_is_told_with_its_reason_and_time(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = concurrent(changes)
        actions = fail_all(eng, 0, 4, now=0.5)
        assert of(Pause, actions) == [Pause(TP, "circuit open"), Pause(TP2, "circuit open")]
        [probe] = of(RunWork, eng.tick(5.5))
        eng.settle_run(probe.work, [(0, later(1), 0.0)], 5.6)  # a failed probe
        [probe] = of(RunWork, eng.tick(10.6))
        eng.settle_run(probe.work, [], 10.7)
        assert changes == [
            (CLOSED, OPEN, "100% of 4 batches failed", 0.5),
            (OPEN, HALF, "open for 5s", 5.5),
            (HALF, OPEN, "a probe failed", 5.6),
            (OPEN, HALF, "open for 5s", 10.6),
            (HALF, CLOSED, "1 probe(s) succeeded", 10.7),
        ]
        snap = eng.circuit(11.0)
        assert (snap.opened, snap.open_seconds) == (1, pytest.approx(10.2))

    def test_a_trip_on_exception_opens_it_at_once_and_it_probes_after_open_s(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = concurrent(changes, trip_on=(ConnectionError,))
        work = pooled(eng, 0, 2)
        eng.completed(work, 0, None, 0.4)
        actions = eng.completed(work, 1, raised(ConnectionResetError("down"), 1), 0.5)
        assert of(SendBack, actions) == []  # held
        assert changes == [(CLOSED, OPEN, "listener raised ConnectionResetError", 0.5)]
        assert eng.next_due() == 5.5
        [probe] = of(RunWork, eng.tick(5.5))
        eng.settle_run(probe.work, [(0, raised(ConnectionRefusedError("down"), 1), 0.0)], 5.6)
        assert changes[-1] == (HALF, OPEN, "listener raised ConnectionRefusedError", 5.6)
        assert eng.next_due() == pytest.approx(10.6)

    def test_a_trip_on_exception_of_an_inline_run_names_its_type(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = concurrent(changes)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        eng.settle_run(work, [(0, raised(OpenCircuit("db down"), 1), 0.0)], 0.5)
        assert changes == [(CLOSED, OPEN, "listener raised OpenCircuit", 0.5)]
        assert eng.next_due() == 5.5

    def test_it_opens_again_after_closing_and_counts_each_opening(self) -> None:
        eng = concurrent()
        fail_all(eng, 0, 4, now=0.0)
        [probe] = of(RunWork, eng.tick(5.0))
        eng.settle_run(probe.work, [(0, later(1), 0.0)], 5.1)  # reopened: not a new opening
        assert eng.circuit(5.1).opened == 1
        [probe] = of(RunWork, eng.tick(10.1))
        eng.settle_run(probe.work, [], 10.2)
        assert eng.circuit(10.2).state is CLOSED
        fail_all(eng, 10, 4, now=11.0)
        snap = eng.circuit(11.0)
        assert (snap.state, snap.opened) == (OPEN, 2)

    @pytest.mark.parametrize(
        ("results", "state"),
        [
            ("SF", OPEN),  # one of two failed: 50 %
            ("F", CLOSED),  # fewer than minimum_batches
            ("SSF", CLOSED),  # one of three
            ("FS", CLOSED),  # the share is taken when a batch fails
            ("SFF", OPEN),
        ],
    )
    def test_every_batch_result_counts_once(self, results: str, state: CircuitState) -> None:
        eng = concurrent(minimum_batches=2, failure_rate_threshold=0.5)
        work = pooled(eng, 0, len(results))
        for i, r in enumerate(results):
            eng.completed(work, i, None if r == "S" else later(1), float(i))
        assert eng.circuit(9.0).state is state

    def test_one_failed_batch_of_two_in_a_run_is_under_a_higher_threshold(self) -> None:
        eng = concurrent(minimum_batches=2, failure_rate_threshold=0.6)
        work = eng.fetched(TP, msgs(0, 2), end=2)
        assert work is not None
        actions = eng.settle_run(work, [(1, later(1), 0.0)], 0.0)
        assert eng.circuit(0.0).state is CLOSED
        assert [a.msg.queue_offset for a in of(SendBack, actions)] == [1]

    def test_a_failure_while_closed_is_sent_back_and_one_while_open_is_held(self) -> None:
        eng = concurrent()
        work = pooled(eng, 0, 6)
        actions = eng.completed(work, 0, later(1), 0.0)
        assert [a.msg.queue_offset for a in of(SendBack, actions)] == [0]
        for i in (1, 2, 3):
            eng.completed(work, i, later(1), 0.1)
        assert eng.circuit(0.1).state is OPEN
        assert eng.completed(work, 4, later(1), 0.2) == []
        assert eng.completed(work, 5, None, 0.3) == []
        snap = eng.circuit(0.3)
        assert (snap.held_batches, snap.held_messages) == (2, 2)

    def test_a_batch_reported_past_consume_timeout_is_a_failure_and_at_it_is_not(
        self,
    ) -> None:
        eng = concurrent(minimum_batches=1)
        work = pooled(eng, 0, 2)
        assert eng.completed(work, 0, None, 60.0, rt_s=60.0) == []  # just in time
        assert eng.circuit(60.0).state is CLOSED
        actions = eng.completed(work, 1, None, 61.0, rt_s=61.0)
        assert eng.circuit(61.0).state is OPEN
        assert of(SendBack, actions) == []  # it opened the breaker: held
        assert eng.circuit(61.0).held_messages == 1

    def test_a_batch_past_consume_timeout_while_closed_is_sent_back(self) -> None:
        eng = concurrent()
        work = pooled(eng, 0, 1)
        [copy] = of(SendBack, eng.completed(work, 0, None, 61.0, rt_s=61.0))
        assert copy.msg.queue_offset == 0
        assert eng.circuit(61.0).state is CLOSED

    def test_a_batch_reported_without_its_run_time_ran_in_time(self) -> None:
        eng = concurrent(minimum_batches=1, consume_timeout_s=0.5)
        work = pooled(eng, 0, 1)
        assert eng.completed(work, 0, None, 0.1) == []
        assert eng.circuit(0.1).state is CLOSED
        assert eng.committable(TP) == 1

    def test_an_inline_run_past_consume_timeout_is_a_failure_and_at_it_is_not(
        self,
    ) -> None:
        eng = concurrent(minimum_batches=1)
        work = eng.fetched(TP, msgs(0, 1), end=1)
        assert work is not None
        assert eng.settle_run(work, [(0, None, 60.0)], 60.0) == []
        assert eng.circuit(60.0).state is CLOSED
        assert eng.committable(TP) == 1
        work = eng.fetched(TP, msgs(1, 1), end=2)
        assert work is not None
        eng.settle_run(work, [(0, None, 61.0)], 61.0)
        snap = eng.circuit(61.0)
        assert (snap.state, snap.held_messages) == (OPEN, 1)

    def test_results_of_a_revoked_generation_do_not_count(self) -> None:
        eng = concurrent(minimum_batches=1)
        work = pooled(eng, 0, 2)
        inline = eng.fetched(TP, msgs(2, 1), end=3)
        assert inline is not None
        eng.revoked(TP)
        eng.assigned(TP)
        assert eng.completed(work, 0, later(1), 0.0) == []
        assert eng.settle_run(inline, [(0, later(1), 0.0)], 0.0) == []
        assert eng.circuit(0.0).state is CLOSED

    def test_a_late_result_of_a_timed_out_batch_is_not_counted_again(self) -> None:
        eng = concurrent(minimum_batches=2, failure_rate_threshold=1.0)
        work = pooled(eng, 0, 2)
        assert work.started is not None
        work.started[0] = 0.0
        eng.tick(61.0)  # batch 0 timed out: one failure
        assert eng.completed(work, 0, None, 62.0, rt_s=62.0) == []  # its late result
        eng.completed(work, 1, later(1), 62.0)
        assert eng.circuit(62.0).state is OPEN  # two failures of two

    def test_a_revoked_partition_is_forgotten(self) -> None:
        eng = concurrent()
        fail_all(eng, 0, 6, now=0.0)
        eng.revoked(TP)
        assert not eng.owns(TP)
        assert eng.committable(TP) is None
        assert eng.partitions == [TP2]

    @pytest.mark.parametrize(
        ("n", "runs"),
        [(5, [[0, 1], [2, 3], [4]]), (4, [[0, 1], [2, 3]]), (3, [[0, 1], [2]])],
    )
    def test_held_copies_run_again_in_batches_of_batch_size(
        self, n: int, runs: list[list[int]]
    ) -> None:
        eng = concurrent(batch_size=2, minimum_batches=1)
        work = eng.fetched(TP, msgs(0, n), end=n)
        assert work is not None
        failures = [(i, later(len(work.batch(i))), 0.0) for i in range(work.nbatches)]
        assert of(SendBack, eng.settle_run(work, failures, 0.0)) == []
        snap = eng.circuit(0.0)
        assert (snap.held_batches, snap.held_messages) == (len(runs), n)
        probes = of(RunWork, eng.tick(5.0))
        held = [*probes]
        for probe in probes:
            held += of(RunWork, eng.settle_run(probe.work, [], 5.1))
        assert [[m.queue_offset for m in r.work.msgs] for r in held] == runs
        assert all(r.work.tp == TP for r in held)

    def test_a_revoked_partition_forgets_a_held_batch_shorter_than_batch_size(self) -> None:
        eng = concurrent(batch_size=2, minimum_batches=1)
        work = eng.fetched(TP, msgs(0, 3), end=3)
        assert work is not None
        eng.settle_run(work, [(0, later(2), 0.0), (1, later(1), 0.0)], 0.0)
        assert eng.circuit(0.0).held_batches == 2
        eng.revoked(TP)
        snap = eng.circuit(0.0)
        assert (snap.held_batches, snap.held_messages) == (0, 0)

    def test_only_the_failures_from_the_one_that_opened_it_on_are_held(self) -> None:
        eng = concurrent(batch_size=2, minimum_batches=2)
        work = eng.fetched(TP, msgs(0, 6), end=6)
        assert work is not None
        failures = [(i, later(2), 0.0) for i in range(3)]
        actions = eng.settle_run(work, failures, 0.0)
        assert [a.msg.queue_offset for a in of(SendBack, actions)] == [0, 1]
        snap = eng.circuit(0.0)
        assert (snap.state, snap.held_batches, snap.held_messages) == (OPEN, 2, 4)

    def test_its_next_timer_is_the_earlier_of_a_local_retry_and_the_probe(self) -> None:
        eng = concurrent()
        eng.options = replace(eng.options, send_back_retry_interval_s=2.0)
        copies = of(SendBack, fail_all(eng, 0, 6, now=0.0))
        assert eng.next_due() == 5.0  # the breaker's
        eng.publish_failed(copies[0], Refusal.TRANSIENT, 0.0)
        assert eng.next_due() == 2.0  # the local retry's
        eng.options = replace(eng.options, send_back_retry_interval_s=9.0)
        eng.publish_failed(copies[1], Refusal.TRANSIENT, 0.0)
        [retry] = of(RunWork, eng.tick(2.0))
        assert retry.work.msgs[0].queue_offset == 0
        assert eng.next_due() == 5.0  # the breaker's comes before the retry at 9.0


class TestFlowControlWhileOpen:
    @pytest.mark.parametrize(("failing", "offsets"), [(0, {}), (1, {TP: 1})])
    def test_its_resume_waits_and_the_breaker_resumes_on_close(
        self, failing: int, offsets: dict[Any, int]
    ) -> None:
        eng = concurrent()
        eng.options = replace(eng.options, flow=FlowLimits(2, 10**9, 10**9))
        work = pooled(eng, 0, 4)
        assert of(Pause, eng.tick(0.0)) == [Pause(TP, "4 messages in flight > 2")]
        for i in range(4):
            outcome = raised(OpenCircuit("down"), 1) if i == failing else None
            eng.completed(work, i, outcome, 0.1)
        assert eng.circuit(0.1).state is OPEN
        actions = eng.tick(0.2)  # one in flight: flow control would resume TP
        assert of(Resume, actions) == []
        assert stored(actions) == offsets
        [probe] = of(RunWork, eng.tick(5.1))
        actions = eng.settle_run(probe.work, [], 5.2)
        assert of(Resume, actions) == [Resume(TP), Resume(TP2)]


# -- the orderly engine: what counts, and what is held --------------------------------------
def run_of(eng: CircuitOrderlyEngine, tp: Any, first: int, n: int) -> Any:
    work = eng.fetched(tp, msgs(first, n), end=first + n)
    assert work is not None
    return work


class TestOrderlyResults:
    def test_the_consumers_suspend_time_and_callback_are_used(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = orderly(changes, suspend_ms=2000, minimum_batches=2)
        eng.completed(run_of(eng, TP, 0, 2), 0, BatchVerdict(SUSPEND), 0.0)
        assert eng.next_due() == 2.0
        assert of(RunWork, eng.tick(1.9)) == []
        [again] = of(RunWork, eng.tick(2.0))
        eng.completed(again.work, 0, BatchVerdict(SUSPEND), 2.1)
        assert changes == [(CLOSED, OPEN, "100% of 2 batches failed", 2.1)]

    def test_its_next_timer_is_the_earlier_of_a_suspend_time_and_the_probe(self) -> None:
        eng = open_orderly()  # suspended at 0 for 1 s; the breaker probes at 5
        assert eng.next_due() == 1.0
        assert of(RunWork, eng.tick(1.0)) == []  # held
        assert eng.next_due() == 5.0

    @pytest.mark.parametrize(("threshold", "state"), [(0.25, OPEN), (0.3, CLOSED)])
    def test_a_run_counts_each_batch_that_succeeded(
        self, threshold: float, state: CircuitState
    ) -> None:
        eng = orderly(minimum_batches=2, failure_rate_threshold=threshold)
        work = run_of(eng, TP, 0, 6)  # three batches of two
        eng.completed(work, 2, BatchVerdict(SUCCESS), 0.0)  # the third succeeded too
        eng.completed(run_of(eng, TP2, 0, 2), 0, BatchVerdict(SUSPEND), 0.1)
        assert eng.circuit(0.1).state is state  # one of four failed: 25 %

    def test_a_trip_on_exception_opens_it_at_once(self) -> None:
        changes: list[tuple[Any, ...]] = []
        eng = orderly(changes, minimum_batches=10, trip_on=(ConnectionError,))
        work = run_of(eng, TP, 0, 2)
        eng.completed(work, 0, BatchVerdict(ConnectionResetError("down")), 0.5)
        assert changes == [(CLOSED, OPEN, "listener raised ConnectionResetError", 0.5)]

    def test_a_run_of_a_revoked_generation_does_not_count(self) -> None:
        eng = orderly()
        work = run_of(eng, TP, 0, 2)
        eng.revoked(TP)
        eng.assigned(TP)
        assert eng.completed(work, 0, BatchVerdict(SUSPEND), 0.0) == []
        assert eng.circuit(0.0).state is CLOSED

    def test_while_closed_the_next_run_follows_at_once_or_at_the_next_tick(self) -> None:
        eng = orderly()
        work = run_of(eng, TP, 0, 2)
        assert eng.fetched(TP, msgs(2, 2), end=4) is None  # waits behind the run
        assert of(RunWork, eng.completed(work, 1, None, 0.1, chain=False)) == []
        [nxt] = of(RunWork, eng.tick(0.2))
        assert [m.queue_offset for m in nxt.work.msgs] == [2, 3]
        assert eng.fetched(TP, msgs(4, 2), end=6) is None
        [after] = of(RunWork, eng.completed(nxt.work, 1, None, 0.3))
        assert [m.queue_offset for m in after.work.msgs] == [4, 5]
        assert eng.circuit(0.3).held_batches == 0

    def test_while_open_a_partitions_next_run_is_held_and_its_offsets_still_move(
        self,
    ) -> None:
        eng = orderly()
        work = run_of(eng, TP, 0, 2)
        assert eng.fetched(TP, msgs(2, 2), end=4) is None
        eng.completed(run_of(eng, TP2, 0, 2), 0, BatchVerdict(SUSPEND), 0.1)  # opens
        assert eng.completed(work, 1, None, 0.2) == []  # TP's next run is held
        snap = eng.circuit(0.2)
        assert (snap.held_batches, snap.held_messages) == (1, 2)
        assert stored(eng.tick(0.3)) == {TP: 2, TP2: 0}
        [probe] = of(RunWork, eng.tick(5.1))
        assert (probe.work.tp, [m.queue_offset for m in probe.work.msgs]) == (TP, [2, 3])

    def test_a_run_due_while_a_probe_runs_is_held_until_it_succeeds(self) -> None:
        eng = orderly()
        tp_run, tp2_run = run_of(eng, TP, 0, 2), run_of(eng, TP2, 0, 2)
        eng.completed(tp_run, 0, BatchVerdict(SUSPEND), 0.0)  # opens; TP again at 1.0
        eng.completed(tp2_run, 0, BatchVerdict(SUSPEND), 4.5)  # TP2 again at 5.5
        assert of(RunWork, eng.tick(1.5)) == []  # TP's run is held
        [probe] = of(RunWork, eng.tick(5.0))
        assert probe.work.tp == TP
        assert eng.circuit(5.0).state is HALF
        assert of(RunWork, eng.tick(5.5)) == []  # TP2's run is held behind the probe
        assert eng.circuit(5.5).held_batches == 1
        actions = eng.completed(probe.work, 1, None, 5.6)
        assert eng.circuit(5.6).state is CLOSED
        assert [a.work.tp for a in of(RunWork, actions)] == [TP2]
        assert of(Resume, actions) == [Resume(TP), Resume(TP2)]

    def test_a_revoked_partition_forgets_its_held_run(self) -> None:
        eng = open_orderly()
        eng.tick(1.5)
        assert eng.circuit(1.5).held_batches == 1
        eng.revoked(TP)
        assert not eng.owns(TP)
        snap = eng.circuit(1.5)
        assert (snap.held_batches, snap.held_messages) == (0, 0)

    def test_only_a_run_with_the_listener_counts_as_running(self) -> None:
        eng = orderly(minimum_batches=2)
        run_of(eng, TP, 0, 2)
        assert eng.running() and eng.running([TP])
        assert not eng.running([TP2])  # nothing held: as the plain engine
        eng = open_orderly()
        eng.tick(1.5)  # TP's run is held
        assert not eng.running() and not eng.running([TP])
        run_of(eng, TP2, 0, 2)
        assert eng.running() and eng.running([TP2])
        assert not eng.running([TP])


# -- the gate and the snapshot --------------------------------------------------------------
def test_a_snapshot_as_the_consumers_circuit_returns_it() -> None:
    eng = concurrent()
    fail_all(eng, 0, 6, now=0.5)
    assert eng.circuit(2.0).as_dict() == {
        "state": "open",
        "open_seconds": 1.5,
        "held_messages": 3,
        "held_batches": 3,
        "opened": 1,
    }
    assert CircuitSnapshot(CLOSED, 0.0, 0, 0, 0).as_dict()["state"] == "closed"


def test_the_gate_tells_how_many_failed_batches_to_hold_counted_from_the_end() -> None:
    gate = CircuitGate(Breaker(CircuitBreaker(minimum_batches=4, open_s=5.0)))
    assert gate.record(0.0, 1, [None]) == 0  # closed: none
    assert gate.record(0.1, 0, [None, None, None]) == 2  # the second of three opened it
    assert gate.record(0.2, 2, [None]) == 1  # open: every failure
    gate.breaker.advance(5.1)
    assert gate.record(5.2, 1, [None, None]) == 2  # half-open: every failure
    assert gate.breaker.state is OPEN
