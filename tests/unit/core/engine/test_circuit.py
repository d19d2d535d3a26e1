"""What the concurrent and orderly engines do in each circuit state
(:mod:`adapter.core.engine.circuit`), on a fake clock, and the metrics that show it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from adapter.core.breaker import Breaker, CircuitBreaker, CircuitState, OpenCircuit
from adapter.core.delay import DelayLevels
from adapter.core.engine import EngineOptions, Pause, Resume, RunWork, SendBack, StoreOffsets
from adapter.core.engine.circuit import CircuitConcurrentEngine, CircuitOrderlyEngine
from adapter.core.engine.orderly import BatchVerdict, OrderlyOptions
from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyStatus,
    MessageQueue,
    Outcome,
    judge,
)
from adapter.core.offsets import FlowLimits
from adapter.core.routing import ConsumeConcurrentlyStatus, DeadLetter

pytestmark = pytest.mark.unit

LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
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
    changes: list[tuple[Any, ...]] | None = None, *, max_reconsume_times: int = 16, **kw: Any
) -> CircuitConcurrentEngine:
    settings = CircuitBreaker(**{"minimum_batches": 4, "open_s": 5.0, **kw})

    def changed(*change: Any) -> None:
        if changes is not None:
            changes.append(change)

    eng = CircuitConcurrentEngine(
        EngineOptions(
            batch_size=1,
            levels=LEVELS,
            consume_timeout_s=60.0,
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
def orderly(**kw: Any) -> CircuitOrderlyEngine:
    eng = CircuitOrderlyEngine(
        EngineOptions(batch_size=2, consume_timeout_s=60.0, store_interval_s=0.0),
        OrderlyOptions(suspend_ms=1000),
        Breaker(CircuitBreaker(**{"minimum_batches": 1, "open_s": 5.0, **kw})),
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


@pytest.mark.parametrize("make", [open_concurrent, open_orderly], ids=["concurrent", "orderly"])
def test_a_partition_reset_while_open_stays_paused(make: Any) -> None:
    """Resetting a partition's offset revokes and assigns it again: still paused."""
    eng = make()
    eng.revoked(TP2)  # the consumer owns TP alone
    eng.revoked(TP)
    eng.assigned(TP)
    assert of(Pause, eng.tick(1.0)) == [Pause(TP, "circuit open")]
