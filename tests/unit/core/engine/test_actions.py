"""What the engines share: a copy as its own delivery callback, and flow control with
the offsets to store over many partitions at once."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core.codec import Failure
from adapter.core.engine.actions import (
    Pause,
    Resume,
    SendBack,
    StoreOffsets,
    flow_and_offsets,
    pause_change,
)
from adapter.core.engine.tracking import PartitionState, Work
from adapter.core.offsets import FlowLimits
from adapter.core.routing import DeadLetter, DeadLetterReason

pytestmark = pytest.mark.unit


class Verdicts:
    def __init__(self) -> None:
        self.acked: list[SendBack] = []
        self.refusals: list[tuple[SendBack, Any, bool]] = []

    def refused(self, action: SendBack, err: Any, local: bool) -> None:
        self.refusals.append((action, err, local))


def test_a_copy_as_its_own_delivery_callback_reports_to_its_verdicts() -> None:
    verdicts = Verdicts()
    work = Work(("t", 0), 1, [], 1, 1)
    dest = DeadLetter(DeadLetterReason.MAX_RECONSUME_TIMES, 1)
    copy = SendBack(("t", 0), 1, work, object(), dest, Failure("E", "m"), verdicts=verdicts)
    copy(None)
    assert verdicts.acked == [copy] and verdicts.refusals == []
    err = RuntimeError("refused")
    copy(err)
    assert verdicts.refusals == [(copy, err, False)]


def parts(n: int) -> dict[tuple[str, int], PartitionState]:
    out = {}
    for i in range(n):
        part = PartitionState(("t", i), 1)
        part.advance(10)
        out[("t", i)] = part
    return out


def test_every_dirty_partition_is_seen_whatever_else_is_dirty() -> None:
    """Gone partitions and idle ones among the dirty set skip only themselves."""
    states = parts(10)
    for i in range(5):
        states["t", i].count = 5  # in flight: above the limit
    dirty = set(states) | {("gone", i) for i in range(10)}
    actions = flow_and_offsets(states, dirty, FlowLimits(max_count=1), store=True)
    pauses = {a.tp for a in actions if isinstance(a, Pause)}
    assert pauses == {("t", i) for i in range(5)}
    [store] = [a for a in actions if isinstance(a, StoreOffsets)]
    assert dict(store.offsets) == {tp: 10 for tp in states}
    assert dirty == set()


def test_a_partition_resumed_is_no_longer_paused() -> None:
    part = PartitionState(("t", 0), 1)
    assert pause_change(("t", 0), part, "full", below_half=False) == Pause(("t", 0), "full")
    assert part.paused is True
    assert pause_change(("t", 0), part, None, below_half=True) == Resume(("t", 0))
    assert part.paused is False
