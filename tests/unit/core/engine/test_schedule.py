"""The ScheduleService's engine, driven event by event without a broker or a clock."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.constants import HEADER_DUE_MS, PROPERTY_REAL_TOPIC
from adapter.core.engine.actions import Pause, Resume, StoreOffsets
from adapter.core.engine.schedule import Entry, Mark, Rewind, ScheduleEngine

pytestmark = pytest.mark.unit

TP = ("rmq.schedule.L01-1s", 0)
DELAY = 1_000
NOW = 1_700_000_000_000


def headers(due_ms: int, real: str = "orders") -> list[tuple[str, bytes]]:
    return [(PROPERTY_REAL_TOPIC, real.encode()), (HEADER_DUE_MS, str(due_ms).encode())]


def engine(**kw: Any) -> ScheduleEngine:
    kw.setdefault("store_interval_ms", 0)
    eng = ScheduleEngine(**kw)
    eng.assigned(TP, DELAY)
    return eng


def fetch(eng: ScheduleEngine, offset: int, due_ms: int, seen_ms: int = NOW) -> Entry | None:
    return eng.fetched(TP, offset, b"v", None, headers(due_ms), seen_ms)


def stored(actions: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for a in actions:
        if isinstance(a, StoreOffsets):
            out.update(dict(a.offsets))
    return out


def not_stores(actions: list[Any]) -> list[Any]:
    return [a for a in actions if not isinstance(a, StoreOffsets)]


class TestDue:
    def test_entries_leave_in_order_when_due_and_never_early(self) -> None:
        eng = engine()
        for i in range(3):
            fetch(eng, i, NOW + 100 * (i + 1))
        assert eng.due(NOW + 99) == []
        assert eng.next_wake_ms() == NOW + 100
        assert [e.offset for e in eng.due(NOW + 200)] == [0, 1]
        assert eng.next_wake_ms() == NOW + 300
        assert [e.offset for e in eng.due(NOW + 10_000)] == [2]

    def test_a_sender_clock_ahead_waits_one_level_delay_not_for_ever_nor_not_at_all(
        self,
    ) -> None:
        eng = engine()
        entry = fetch(eng, 0, NOW + 600_000, seen_ms=NOW)  # sender 10 minutes ahead
        assert entry is not None and entry.info.due_ms == NOW + DELAY
        assert eng.due(NOW + DELAY - 1) == []
        assert [e.offset for e in eng.due(NOW + DELAY)] == [0]

    def test_offsets_commit_up_to_the_first_entry_not_settled(self) -> None:
        eng = engine()
        for i in range(3):
            fetch(eng, 10 + i, NOW)
        assert stored(eng.tick(NOW)) == {TP: 10}
        first, second, third = eng.due(NOW)
        eng.settled(second)
        assert stored(eng.tick(NOW)) == {}
        eng.settled(first)
        assert stored(eng.tick(NOW)) == {TP: 12}
        eng.settled(third)
        assert stored(eng.tick(NOW)) == {TP: 13}

    def test_buffered_entries_not_due_hold_the_offset(self) -> None:
        eng = engine()
        fetch(eng, 5, NOW + 500)
        assert stored(eng.tick(NOW)) == {TP: 5}
        assert eng.committable(TP) == 5


class TestRewind:
    def test_a_failure_rewinds_to_the_smallest_unsettled_offset_not_to_the_failed_one(
        self,
    ) -> None:
        """Entry A (offset 0) is still awaiting its acknowledgement when B (offset 1) fails:
        the partition is read again from A, so A is forwarded again even if its late answer
        is a failure.  (The rewind used to start at B: A's failure was then discarded as
        stale and the committed offset moved past it.)"""
        eng = engine(retry_after_ms=1000)
        a, b = fetch(eng, 0, NOW), fetch(eng, 1, NOW)
        assert a is not None and b is not None
        eng.due(NOW)
        rewind = eng.failed(b, NOW)
        assert rewind == Rewind(TP, 0)
        eng.settled(a)  # a late answer of the old generation changes nothing
        assert eng.committable(TP) == 0
        assert fetch(eng, 0, NOW) is None  # held: fetched again only after the hold
        assert Resume(TP) in eng.tick(NOW + 1000)
        again = fetch(eng, 0, NOW)
        assert again is not None and again.generation != a.generation
        assert not eng.current(a) and eng.current(again)

    def test_records_before_the_rewind_position_are_not_taken_twice(self) -> None:
        eng = engine(retry_after_ms=0)
        fetch(eng, 0, NOW)
        fetch(eng, 1, NOW)
        [e0, e1] = eng.due(NOW)
        eng.settled(e0)
        assert eng.failed(e1, NOW) == Rewind(TP, 1)
        eng.tick(NOW)
        assert fetch(eng, 0, NOW) is None
        assert fetch(eng, 1, NOW) is not None

    def test_marks_survive_a_rewind(self) -> None:
        eng = engine(retry_after_ms=0)
        entry = fetch(eng, 3, NOW)
        assert entry is not None
        eng.due(NOW)
        eng.mark(entry, Mark(alone=True))
        eng.rewind(TP, 3, NOW, hold_ms=0)
        eng.tick(NOW)
        again = fetch(eng, 3, NOW)
        assert again is not None and again.mark == Mark(alone=True)
        [due] = eng.due(NOW)
        eng.settled(due)
        eng.rewind(TP, 3, NOW, hold_ms=0)
        eng.tick(NOW)
        assert fetch(eng, 3, NOW).mark is None  # type: ignore[union-attr]

    def test_an_exactly_once_commit_settles_what_its_transaction_sent(self) -> None:
        eng = engine()
        for i in range(4):
            fetch(eng, i, NOW if i < 3 else NOW + 10)
        for entry in eng.due(NOW):
            eng.in_transaction(entry)
        assert eng.txn_offset(TP) == 3
        eng.txn_committed(TP)
        assert eng.committable(TP) == 3
        assert eng.txn_offset(TP) is None

    def test_an_exactly_once_commit_never_covers_entries_handed_out_but_not_sent(self) -> None:
        """An entry sent alone commits its neighbours' transaction first: the entries due
        in the same pass behind it were handed out but are not in that transaction, so its
        commit must not carry their offsets (a crash, or an abort that reads the partition
        again from its committed position, would lose them)."""
        eng = engine()
        for i in range(5):
            fetch(eng, i, NOW)
        first, alone, *behind = eng.due(NOW)
        eng.in_transaction(first)
        assert eng.txn_offset(TP) == 1  # not 5: offsets 1..4 are not in this transaction
        eng.txn_committed(TP)
        assert eng.committable(TP) == 1
        assert eng.inflight(TP) == 4
        eng.in_transaction(alone)  # its own transaction
        assert eng.txn_offset(TP) == 2
        eng.txn_committed(TP)
        for entry in behind:
            eng.in_transaction(entry)
        assert eng.committable(TP) == 2
        eng.txn_committed(TP)
        assert eng.committable(TP) == 5 and eng.inflight(TP) == 0

    def test_a_rewind_forgets_the_open_transaction(self) -> None:
        eng = engine()
        for i in range(2):
            fetch(eng, i, NOW)
        for entry in eng.due(NOW):
            eng.in_transaction(entry)
        eng.rewind(TP, 0, NOW, hold_ms=0)
        assert eng.txn_offset(TP) is None
        eng.txn_committed(TP)  # a late commit report changes nothing
        assert eng.committable(TP) == 0


class TestFlow:
    def test_fetching_stops_when_the_buffer_is_full_and_resumes_below_half(self) -> None:
        eng = engine(buffer_max=4)
        for i in range(4):
            fetch(eng, i, NOW + 100 + i)
        actions = eng.tick(NOW)
        assert next(a for a in actions if isinstance(a, Pause)).tp == TP
        eng.due(NOW + 101)  # two leave: still at half
        assert not [a for a in eng.tick(NOW) if isinstance(a, Resume)]
        eng.due(NOW + 102)
        assert Resume(TP) in eng.tick(NOW)

    def test_revoked_partitions_ignore_late_results(self) -> None:
        eng = engine()
        entry = fetch(eng, 0, NOW)
        assert entry is not None
        eng.due(NOW)
        eng.revoked(TP)
        eng.settled(entry)
        assert eng.failed(entry, NOW) is None
        eng.assigned(TP, DELAY)
        assert eng.committable(TP) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["fetch", "due", "ack", "fail", "tick"]),
                          st.integers(0, 100)), max_size=80))  # fmt: skip
def test_the_stored_offset_never_passes_an_entry_not_forwarded(
    events: list[tuple[str, int]],
) -> None:
    """Whatever the order of fetches, acknowledgements and failures, a stored offset is
    never past an entry whose forward is not settled."""
    eng = engine(retry_after_ms=50)
    now = NOW
    next_offset = 0
    settled: set[int] = set()
    inflight: list[Entry] = []

    for kind, n in events:
        now += 7
        if kind == "fetch":
            entry = fetch(eng, next_offset, now + n, seen_ms=now)
            if entry is not None:
                next_offset += 1
        elif kind == "due":
            inflight.extend(eng.due(now))
        elif kind == "ack" and inflight:
            entry = inflight.pop(n % len(inflight))
            if eng.current(entry):
                settled.add(entry.offset)
            eng.settled(entry)
        elif kind == "fail" and inflight:
            entry = inflight.pop(n % len(inflight))
            rewind = eng.failed(entry, now)
            if rewind is not None:
                next_offset = rewind.offset  # the consumer is seeked back there
                inflight = [e for e in inflight if eng.current(e)]
        for offset in stored(eng.tick(now)).values():
            assert all(o in settled for o in range(offset)), (offset, sorted(settled))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["fetch", "due", "send", "commit", "abort"]),
                          st.integers(0, 100)), max_size=80))  # fmt: skip
def test_an_exactly_once_commit_never_passes_an_entry_not_sent_in_a_committed_transaction(
    events: list[tuple[str, int]],
) -> None:
    """Exactly-once: entries are sent in offset order, some in transactions of their own
    (a commit in the middle of a pass); whatever the interleaving, the offset a transaction
    commits is never past an entry whose copy is not in a committed transaction."""
    eng = engine()
    now = NOW
    next_offset = 0
    committed: set[int] = set()
    open_txn: list[int] = []
    handed: list[Entry] = []  # due, not sent yet (in offset order)
    for kind, n in events:
        now += 7
        if kind == "fetch":
            if fetch(eng, next_offset, now + n % 20, seen_ms=now) is not None:
                next_offset += 1
        elif kind == "due":
            handed.extend(eng.due(now))
        elif kind == "send" and handed:
            for entry in handed[: 1 + n % 3]:
                if eng.current(entry):
                    eng.in_transaction(entry)
                    open_txn.append(entry.offset)
            del handed[: 1 + n % 3]
        elif kind == "commit":
            offset = eng.txn_offset(TP)
            committed.update(open_txn)
            open_txn.clear()
            if offset is not None:
                assert all(o in committed for o in range(offset)), (offset, sorted(committed))
            eng.txn_committed(TP)
            if (c := eng.committable(TP)) is not None:
                assert all(o in committed for o in range(c))
        elif kind == "abort" and open_txn:
            start = open_txn[0]
            open_txn.clear()
            handed.clear()
            eng.rewind(TP, start, now, hold_ms=0)
            eng.tick(now)
            next_offset = start


def test_due_within_counts_held_entries_per_real_topic_up_to_a_time() -> None:
    """The backlog gauge's delayed part: entries held (waiting or in flight) for a real
    topic, due by a time; other topics and later entries are left out."""
    eng = ScheduleEngine(store_interval_ms=0)
    eng.assigned(TP, 10_000)  # a 10 s level: an entry is due at most 10 s after it is seen
    for offset, (due, real) in enumerate(
        [(NOW + 1000, "%RETRY%g"), (NOW + 5000, "%RETRY%g"), (NOW + 1000, "orders")]
    ):
        eng.fetched(TP, offset, b"v", None, headers(due, real), NOW)
    assert eng.due_within({"%RETRY%g", "%RETRY%h"}, NOW + 2000) == {"%RETRY%g": 1, "%RETRY%h": 0}
    assert eng.due_within({"%RETRY%g"}, NOW + 5000) == {"%RETRY%g": 2}
    assert len(eng.due(NOW + 1000)) == 1  # in flight now (offset order): still counted
    assert eng.due_within({"%RETRY%g"}, NOW + 5000) == {"%RETRY%g": 2}


class TestWhatTheServiceReads:
    """What the ScheduleService reads of the engine: an entry's parts, holds, flow control,
    the offsets to store and the introspection of partitions, ours or not."""

    def test_the_defaults(self) -> None:
        eng = ScheduleEngine()
        assert (eng.buffer_max, eng.retry_after_ms, eng.store_interval_ms) == (5000, 1000, 20)

    def test_an_entry_keeps_the_records_parts(self) -> None:
        eng = engine()
        raw = headers(NOW + 5)
        entry = eng.fetched(TP, 3, b"v", b"k", raw, NOW)
        assert entry is not None
        assert (entry.key, entry.headers, entry.seen_ms) == (b"k", tuple(raw), NOW)
        bare = eng.fetched(TP, 4, b"v", None, None, NOW)
        assert bare is not None and bare.headers == () and bare.info.real_topic is None

    def test_offsets_are_stored_at_most_every_interval_from_time_zero(self) -> None:
        eng = engine(store_interval_ms=20)
        entry = fetch(eng, 0, 0, seen_ms=0)
        assert entry is not None
        assert stored(eng.tick(0)) == {TP: 0}
        eng.due(0)
        eng.settled(entry)
        assert eng.tick(10) == []  # moved, but too soon
        assert stored(eng.tick(20)) == {TP: 1}

    def test_a_partition_with_nothing_due_does_not_hide_the_others(self) -> None:
        eng = engine()
        other = (TP[0], 1)
        eng.assigned(other, DELAY)
        entry = eng.fetched(other, 0, b"v", None, headers(NOW + 50), NOW)
        assert entry is not None
        assert eng.next_wake_ms() == NOW + 50
        assert eng.due(NOW + 50) == [entry]
        assert eng.inflight(other) == 1 and eng.inflight(TP) == 0 and eng.inflight() == 1
        fetch(eng, 0, NOW + 70)
        assert eng.waiting() == {TP: (1, NOW + 70), other: (0, None)}
        eng.failed(entry, NOW)  # held until NOW + 1000
        assert eng.next_wake_ms() == NOW + 70
        eng.due(NOW + 70)
        assert eng.next_wake_ms() == NOW + 1000

    def test_a_held_partition_resumes_when_its_hold_ends_and_only_once(self) -> None:
        eng = engine(retry_after_ms=1000)
        entry = fetch(eng, 0, NOW)
        assert entry is not None
        eng.due(NOW)
        assert eng.failed(entry, NOW) == Rewind(TP, 0)
        assert eng.held() == [TP] and fetch(eng, 0, NOW) is None
        assert not_stores(eng.tick(NOW + 999)) == []
        assert not_stores(eng.tick(NOW + 1000)) == [Resume(TP)]
        assert eng.held() == [] and not_stores(eng.tick(NOW + 1001)) == []

    def test_a_full_buffer_pauses_with_its_count_and_resumes_below_half(self) -> None:
        eng = engine(buffer_max=5)
        for i in range(5):
            fetch(eng, i, NOW + i)
        assert [a for a in eng.tick(NOW) if isinstance(a, Pause)] == [
            Pause(TP, "5 entries buffered")
        ]
        assert [a for a in eng.tick(NOW) if isinstance(a, Pause)] == []
        eng.due(NOW + 2)  # 2 left: not below half of 5 (2)
        assert [a for a in eng.tick(NOW) if isinstance(a, Resume)] == []
        eng.due(NOW + 3)
        assert [a for a in eng.tick(NOW) if isinstance(a, Resume)] == [Resume(TP)]
        assert [a for a in eng.tick(NOW) if isinstance(a, Resume)] == []

    def test_late_results_for_a_partition_not_ours_change_nothing(self) -> None:
        eng = engine()
        entry = fetch(eng, 0, NOW)
        assert entry is not None
        eng.due(NOW)
        eng.settled(entry)
        eng.settled(entry)  # twice: harmless
        eng.revoked(TP)
        eng.in_transaction(entry)
        eng.mark(entry, Mark(alone=True))
        assert eng.txn_offset(TP) is None and eng.committable(TP) is None
        assert eng.inflight(TP) == 0 and eng.rewind(TP, 0, NOW) is None

    def test_a_committed_transaction_stores_its_offset_and_forgets_its_marks(self) -> None:
        eng = engine()
        entry = fetch(eng, 0, NOW)
        assert entry is not None
        eng.due(NOW)
        assert stored(eng.tick(NOW)) == {TP: 0}
        eng.mark(entry, Mark(alone=True))
        eng.in_transaction(entry)
        assert eng.txn_offset(TP) == 1
        eng.txn_committed(TP)
        assert stored(eng.tick(NOW)) == {TP: 1}
        eng.rewind(TP, 0, NOW, hold_ms=0)
        eng.tick(NOW)
        again = fetch(eng, 0, NOW)
        assert again is not None and again.mark is None

    def test_a_rewind_keeps_the_stored_offset(self) -> None:
        eng = engine()
        for i in range(3):
            fetch(eng, i, NOW)
        eng.due(NOW)
        assert stored(eng.tick(NOW)) == {TP: 0}
        eng.rewind(TP, 0, NOW, hold_ms=0)
        eng.tick(NOW)
        fetch(eng, 0, NOW + 10)
        assert stored(eng.tick(NOW)) == {}  # still 0: nothing to store again

    def test_every_rewind_and_assignment_is_a_new_generation(self) -> None:
        eng = engine()
        first = fetch(eng, 0, NOW)
        assert first is not None and eng.current(first)
        eng.rewind(TP, 0, NOW, hold_ms=0)
        eng.rewind(TP, 0, NOW, hold_ms=0)
        eng.revoked(TP)
        eng.assigned(TP, DELAY)
        assert not eng.current(first)
        second = fetch(eng, 0, NOW)
        assert second is not None and eng.current(second)
        eng.revoked(TP)
        eng.assigned(TP, DELAY)
        assert not eng.current(second)
        eng.revoked(("other", 0))  # never assigned: harmless
