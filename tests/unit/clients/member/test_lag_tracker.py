"""LagTracker and partition_lag: a member's lag per partition."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.clients.member.lag_tracker import LagTracker, partition_lag
from tests.unit.kafka_fakes import Factory, FakeAdmin, FakeConsumer

pytestmark = pytest.mark.unit

TP0 = ("t", 0)
TP1 = ("t", 1)


# -- lag ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ends", "committable", "start", "fetched", "lag"),
    [
        ((0, 10), 4, None, None, 6),  # end minus the committable offset
        ((0, 10), None, 7, None, 3),  # nothing fetched yet: from where it starts
        ((5, 10), None, -2, None, 5),  # a logical start: from the log start
        ((5, 10), 2, None, None, 5),  # below the log start (retention): from the log start
        ((0, 10), 9, None, 10, 0),  # settled: the fetch position is past a txn marker
        ((0, 10), 12, None, None, 0),  # never negative
    ],
)
def test_partition_lag(
    ends: tuple[int, int], committable: int | None, start: int | None, fetched: int | None, lag: int
) -> None:
    assert partition_lag(ends, committable, start, fetched) == lag


class _Engine:
    def __init__(self, committable: dict[tuple[str, int], int], in_flight: int = 0) -> None:
        self._committable = committable
        self._in_flight = in_flight

    def committable(self, tp: tuple[str, int]) -> int | None:
        return self._committable.get(tp)

    def in_flight(self, tp: tuple[str, int]) -> int:
        return self._in_flight


def _admin(config: dict[str, Any]) -> FakeAdmin:
    admin = FakeAdmin(config)
    admin.ends = {TP0: (0, 100), TP1: (50, 60)}
    return admin


def test_lag_tracker_asks_asynchronously_and_refreshes_at_its_interval() -> None:
    admins = Factory(_admin)
    tracker = LagTracker({"bootstrap.servers": "x"}, what="m", admin_factory=admins)
    consumer = FakeConsumer({})
    tracker.started(TP1, -1)  # a logical start
    engine = _Engine({TP0: 30}, in_flight=1)
    tracker.refresh(10.0, consumer, {TP0, TP1}, engine)
    assert tracker.snapshot() == {}  # asked only now
    [admin] = admins.made
    assert admin.requests == 2  # log starts and ends, both in flight at once
    tracker.refresh(10.5, consumer, {TP0, TP1}, engine)  # before the interval: nothing
    assert tracker.snapshot() == {}
    tracker.refresh(11.0, consumer, {TP0, TP1}, engine)
    assert tracker.snapshot() == {TP0: 70, TP1: 10}
    assert admin.config["bootstrap.servers"] == "x"


def test_lag_tracker_waits_for_an_unanswered_round() -> None:
    admins = Factory(FakeAdmin)
    tracker = LagTracker({}, what="m", admin_factory=admins, interval_s=0.0)
    consumer = FakeConsumer({})
    tracker.refresh(1.0, consumer, {TP0}, _Engine({}))
    [admin] = admins.made
    admin.hold = True
    tracker.refresh(2.0, consumer, {TP0}, _Engine({}))  # the next round stays pending
    tracker.refresh(3.0, consumer, {TP0}, _Engine({}))
    assert admin.requests == 4  # no third round while the second is unanswered
