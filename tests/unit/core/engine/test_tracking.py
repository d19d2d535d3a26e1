"""A fetched run (:class:`Work`) and a partition's offsets (:class:`PartitionState`):
what is settled, what is in flight and the offset to commit."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from adapter.core.engine.tracking import PartitionState, Work

pytestmark = pytest.mark.unit

TP = ("orders", 0)


@dataclass(frozen=True)
class Msg:
    queue_offset: int


def run(first: int, n: int, size: int, **kw: int) -> Work:
    return Work(TP, 1, [Msg(o) for o in range(first, first + n)], size, first + n, **kw)


def test_a_run_keeps_its_end_and_its_bytes() -> None:
    work = run(10, 3, 2)
    assert (work.end, work.nbytes, work.nbatches, work.started) == (13, 0, 2, None)
    assert run(10, 3, 2, nbytes=30).nbytes == 30


def test_batches_completed_out_of_order_settle_from_the_front() -> None:
    work = run(0, 6, 2)  # batches [0, 1] [2, 3] [4, 5]
    assert work.mark_done(1) and not work.mark_done(1)
    assert work.first_unsettled() == 0 and work.done_upto == 0
    assert work.mark_done(0)
    assert work.done_upto == 2 and work.first_unsettled() == 4
    assert work.mark_done(2) and work.settled and work.first_unsettled() is None
    work.let_go()
    assert work.msgs == [] and work.first_unsettled() is None


def test_all_done_at_once() -> None:
    work = run(0, 6, 2)
    work.mark_done(1)
    work.mark_all_done()
    assert work.settled and work.done_upto == 3 and work.first_unsettled() is None
    assert not work.mark_done(0) and not work.mark_done(2)
    fresh = run(0, 4, 2)
    fresh.mark_all_done()
    assert fresh.settled and fresh.done_upto == 2


def test_a_partition_starts_empty_and_its_position_never_moves_back() -> None:
    part = PartitionState(TP, 1)
    assert (part.count, part.nbytes, part.paused, part.span) == (0, 0, False, 0)
    assert part.committable() is None and part.take_commit() is None
    part.advance(50)
    part.advance(40)
    part.advance(50)
    assert part.committable() == 50 and part.take_commit() == 50
    assert part.take_commit() is None


def test_settled_runs_at_the_front_no_longer_hold_the_offset() -> None:
    part = PartitionState(TP, 1)
    first, second = run(0, 2, 2), run(2, 2, 2)
    part.add(first)
    part.add(second)
    part.advance(4)
    part.count = 4
    assert part.committable() == 0 and part.span == 3 and part.running()
    first.mark_done(0)
    assert part.committable() == 2 and part.span == 1
    second.hold(3, "copy")
    second.mark_done(0)
    assert part.committable() == 3 and not part.running()
    assert second.release(3, "copy")
    assert part.committable() == 4
