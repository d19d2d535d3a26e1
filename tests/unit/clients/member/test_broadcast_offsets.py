"""BroadcastOffsets: a broadcasting member's local offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapter.clients.member.broadcast_offsets import BroadcastOffsets
from adapter.io.offset_store import LocalFileOffsetStore
from tests.unit.kafka_fakes import FakeConsumer

pytestmark = pytest.mark.unit

TP0 = ("t", 0)
TP1 = ("t", 1)


# -- broadcasting -----------------------------------------------------------------------------
class _Store:
    def __init__(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self.saved: list[dict[tuple[str, int], int]] = []
        self._offsets = dict(offsets or {})

    def load(self) -> dict[tuple[str, int], int]:
        return dict(self._offsets)

    def save(self, offsets: dict[tuple[str, int], int]) -> None:
        self.saved.append(dict(offsets))


def test_broadcast_offsets_persist_only_what_moved_at_the_interval() -> None:
    store = _Store({TP0: 3})
    offsets = BroadcastOffsets(store, persist_s=5.0, rediscover_s=20.0)
    looked: list[float] = []
    offsets.upkeep(100.0, lambda: looked.append(100.0))
    assert store.saved == []  # nothing moved
    offsets.store([(TP0, 5), (TP1, 1)])
    offsets.upkeep(101.0, lambda: looked.append(101.0))
    assert store.saved == []  # not due yet
    offsets.upkeep(105.0, lambda: looked.append(105.0))
    assert store.saved == [{TP0: 5, TP1: 1}]
    offsets.upkeep(120.0, lambda: looked.append(120.0))
    assert looked == [120.0]  # not at the first call: the member looked when it opened
    assert offsets.offsets() == {TP0: 5, TP1: 1}


def test_broadcast_offsets_round_trip_through_the_local_file(tmp_path: Path) -> None:
    first = BroadcastOffsets(LocalFileOffsetStore(tmp_path, "g", "i"))
    first.store([(("a:b", 0), 12), (TP1, 4)])
    first.persist()
    again = BroadcastOffsets(LocalFileOffsetStore(tmp_path, "g", "i"))
    assert again.offsets() == {("a:b", 0): 12, TP1: 4}


def test_new_partitions_start_at_their_stored_offset_else_the_first_one() -> None:
    consumer = FakeConsumer({})
    consumer.topics = {"t": 3}
    offsets = BroadcastOffsets(_Store({TP1: 8}))
    new = offsets.new_partitions(
        consumer.list_topics(), ["t"], {TP0}, lambda topic, partition: 40 + partition
    )
    assert [(p.topic, p.partition, p.offset) for p in new] == [("t", 1, 8), ("t", 2, 42)]
    assert offsets.offsets() == {TP1: 8, ("t", 2): 42}  # the first offset is kept at once
