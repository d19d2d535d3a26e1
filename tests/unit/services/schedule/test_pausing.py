"""PartitionPauser: the ScheduleService's pausing, with a fake consumer."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.core.engine.actions import Pause, Resume
from adapter.core.engine.schedule import Rewind
from adapter.services.schedule import ScheduleStats
from adapter.services.schedule.pausing import PartitionPauser

pytestmark = pytest.mark.unit

TP = ("rmq.schedule.L01-1s", 0)


class PausingConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def _log(self, what: str, tps: list[Any]) -> None:
        self.calls.append((what, [(t.topic, t.partition, t.offset) for t in tps]))

    def pause(self, tps: list[Any]) -> None:
        self._log("pause", tps)

    def resume(self, tps: list[Any]) -> None:
        self._log("resume", tps)

    def seek(self, tp: Any) -> None:
        self._log("seek", [tp])


# -- pausing ---------------------------------------------------------------------------------
def test_a_rewind_pauses_and_seeks_and_counts_a_pause() -> None:
    consumer, stats = PausingConsumer(), ScheduleStats()
    pauser = PartitionPauser(consumer, stats)
    pauser.apply(Rewind(TP, 42))
    assert consumer.calls == [("pause", [(*TP, 42)]), ("seek", [(*TP, 42)])]
    assert stats.pauses == 1
    assert pauser.paused() == {TP: "rewound to 42, held"}
    pauser.apply(Resume(TP))
    assert consumer.calls[-1][0] == "resume"
    assert pauser.paused() == {}


def test_flow_control_pauses_with_its_reason_until_resumed() -> None:
    consumer, stats = PausingConsumer(), ScheduleStats()
    pauser = PartitionPauser(consumer, stats)
    other = (TP[0], 1)
    pauser.apply(Pause(TP, "5000 entries buffered"))
    pauser.apply(Pause(other, "full"))
    assert stats.pauses == 2
    assert pauser.paused() == {TP: "5000 entries buffered", other: "full"}
    pauser.forget([other])  # revoked: a partition never inherits a pause
    assert pauser.paused() == {TP: "5000 entries buffered"}
    snapshot = pauser.paused()
    pauser.apply(Resume(TP))
    assert snapshot == {TP: "5000 entries buffered"}  # a copy, not a live view
    assert pauser.paused() == {}
