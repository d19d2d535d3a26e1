"""The ScheduleService's rules for delay-level partitions, as a state machine.  Pure.

Entries of a level partition become due in offset order (each is its sender's time plus
the level's fixed delay), so a partition is a FIFO: fetched entries wait in a buffer and
leave from its head when due; the partition keeps being fetched (no pause, no re-fetch,
nothing late for it) until the buffer holds ``buffer_max`` entries, and is fetched again
once it is below half of that.

An entry is *in flight* from the moment it is handed out for forwarding until the forward
is settled (acknowledged; exactly-once: committed with its transaction).  The committable
offset is the smallest offset in flight, else the first buffered, else the next to fetch.
Exactly-once, a transaction commits the offset after the last entry *sent in it*
(:meth:`ScheduleEngine.in_transaction`), never past an entry handed out but not yet sent:
an entry sent alone commits its neighbours' transaction first, and the entries behind it
are not in that transaction.
A forward that fails for a transient reason rewinds the partition to its smallest
unsettled offset -- never past an entry still awaiting its acknowledgement, which a rewind
to the failed entry would have skipped -- and holds it for ``retry_after_ms``.

Events: ``assigned``/``revoked``, ``fetched``, ``due``, ``settled``, ``failed``,
``rewind``, ``tick``.  Actions: :class:`Pause`, :class:`Resume`, :class:`Rewind`,
:class:`StoreOffsets`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import NamedTuple

from adapter.core.engine.actions import Pause, Resume, StoreOffsets
from adapter.core.schedule import EntryInfo, read_entry
from adapter.core.types import TP


@dataclass(frozen=True, slots=True)
class Rewind:
    """Fetch ``tp`` again from ``offset`` (pause it: a :class:`Resume` follows when the
    hold is over)."""

    tp: TP
    offset: int


ScheduleAction = Pause | Resume | Rewind | StoreOffsets


class Entry(NamedTuple):
    """One fetched delay-topic entry: the record's parts (bytes, text, ints) and what its
    headers say.  A named tuple of such values is untracked by the garbage collector, so
    thousands of entries waiting for their due time cost a collection nothing."""

    tp: TP
    offset: int
    value: bytes | None
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    info: EntryInfo
    generation: int
    seen_ms: int
    mark: Mark | None = None  # what an earlier refusal of this entry taught


@dataclass(frozen=True, slots=True)
class Mark:
    """What the broker's refusal of an entry's copy means for the next attempt (kept per
    offset across a rewind: an exactly-once transaction is retried without the refusal's
    cause, so the entry itself must be sent differently)."""

    alone: bool = False  # in a record batch (and transaction) of its own
    refused: str | None = None  # refused for good: to the DLQ, with this reason
    omit_body: bool = False  # its dead letter too was too large: without the body


class LevelPartition:
    """One assigned delay-level partition."""

    __slots__ = (
        "buffer",
        "delay_ms",
        "flow_paused",
        "generation",
        "held_until",
        "inflight",
        "marks",
        "position",
        "stored",
        "tp",
        "txn_end",
    )

    def __init__(self, tp: TP, delay_ms: int, generation: int) -> None:
        self.tp = tp
        self.delay_ms = delay_ms
        self.generation = generation
        self.buffer: deque[Entry] = deque()
        self.inflight: dict[int, Entry] = {}  # insertion order is offset order
        self.position: int | None = None  # the offset after the last one accepted
        self.stored: int | None = None
        self.held_until: int | None = None  # after a failure: nothing goes before then
        self.flow_paused = False
        self.marks: dict[int, Mark] = {}  # by offset: how to send an entry next time
        self.txn_end: int | None = None  # the offset after the last one sent in the open txn

    def committable(self) -> int | None:
        for offset in self.inflight:
            return offset
        if self.buffer:
            return self.buffer[0].offset
        return self.position


class ScheduleEngine:
    """Delay-level partitions of one ScheduleService (see the module docstring)."""

    def __init__(
        self, *, buffer_max: int = 5000, retry_after_ms: int = 1000, store_interval_ms: int = 20
    ) -> None:
        self.buffer_max = buffer_max
        self.retry_after_ms = retry_after_ms
        self.store_interval_ms = store_interval_ms
        self._parts: dict[TP, LevelPartition] = {}
        self._generations: dict[TP, int] = {}
        self._dirty: set[TP] = set()
        self._next_store = 0

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP, delay_ms: int) -> None:
        generation = self._generations.get(tp, 0) + 1
        self._generations[tp] = generation
        self._parts[tp] = LevelPartition(tp, delay_ms, generation)

    def revoked(self, tp: TP) -> None:
        self._parts.pop(tp, None)
        self._generations[tp] = self._generations.get(tp, 0) + 1
        self._dirty.discard(tp)

    def owns(self, tp: TP) -> bool:
        return tp in self._parts

    def current(self, entry: Entry) -> bool:
        part = self._parts.get(entry.tp)
        return part is not None and part.generation == entry.generation

    @property
    def partitions(self) -> list[TP]:
        return list(self._parts)

    # -- fetching --------------------------------------------------------------------------
    def fetched(  # noqa: PLR0917 - one call per fetched record
        self,
        tp: TP,
        offset: int,
        value: bytes | None,
        key: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
        now_ms: int,
    ) -> Entry | None:
        """A record fetched from ``tp``; ``None`` when it is not taken (not ours, held
        after a failure and about to be fetched again, or already accepted)."""
        part = self._parts.get(tp)
        if part is None or part.held_until is not None:
            return None
        if part.position is not None and offset < part.position:
            return None
        raw = tuple(headers) if headers else ()
        info = read_entry(raw, level_delay_ms=part.delay_ms, seen_ms=now_ms)
        entry = Entry(
            tp, offset, value, key, raw, info, part.generation, now_ms, part.marks.get(offset)
        )
        part.buffer.append(entry)
        part.position = offset + 1
        self._dirty.add(tp)
        return entry

    # -- time ------------------------------------------------------------------------------
    def due(self, now_ms: int) -> list[Entry]:
        """The entries whose time has come, each partition's in offset order; they are in
        flight from now on."""
        out: list[Entry] = []
        for part in self._parts.values():
            buffer = part.buffer
            if not buffer or part.held_until is not None:
                continue
            inflight = part.inflight
            while buffer and buffer[0].info.due_ms <= now_ms:
                entry = buffer.popleft()
                inflight[entry.offset] = entry
                out.append(entry)
        return out

    def next_wake_ms(self) -> int | None:
        """The earliest time something is due or a hold ends (``None``: nothing waits)."""
        wake: int | None = None
        for part in self._parts.values():
            if part.held_until is not None:
                at = part.held_until
            elif part.buffer:
                at = part.buffer[0].info.due_ms
            else:
                continue
            if wake is None or at < wake:
                wake = at
        return wake

    def tick(self, now_ms: int) -> list[ScheduleAction]:
        """Holds that are over, flow control, and (every ``store_interval_ms``) the offsets
        that moved."""
        actions: list[ScheduleAction] = []
        for part in self._parts.values():
            if part.held_until is not None and now_ms >= part.held_until:
                part.held_until = None
                if not part.flow_paused:
                    actions.append(Resume(part.tp))
            full = len(part.buffer) >= self.buffer_max
            if full and not part.flow_paused:
                part.flow_paused = True
                if part.held_until is None:
                    actions.append(Pause(part.tp, f"{len(part.buffer)} entries buffered"))
            elif part.flow_paused and len(part.buffer) < self.buffer_max // 2:
                part.flow_paused = False
                if part.held_until is None:
                    actions.append(Resume(part.tp))
        if self._dirty and now_ms >= self._next_store:
            self._next_store = now_ms + self.store_interval_ms
            offsets = []
            for tp in self._dirty:
                moved = self._parts.get(tp)
                if moved is None:
                    continue
                offset = moved.committable()
                if offset is not None and (moved.stored is None or offset > moved.stored):
                    moved.stored = offset
                    offsets.append((tp, offset))
            self._dirty.clear()
            if offsets:
                actions.append(StoreOffsets(tuple(offsets)))
        return actions

    # -- results ---------------------------------------------------------------------------
    def settled(self, entry: Entry) -> None:
        """``entry``'s forward (or dead letter, or re-park) is settled."""
        part = self._parts.get(entry.tp)
        if part is None or part.generation != entry.generation:
            return
        if part.inflight.pop(entry.offset, None) is not None:
            part.marks.pop(entry.offset, None)
            self._dirty.add(entry.tp)

    def in_transaction(self, entry: Entry) -> None:
        """Exactly-once: ``entry``'s copy was sent in the open transaction (entries of a
        partition are sent in offset order, so the transaction holds every entry from where
        it began on that partition up to this one)."""
        part = self._parts.get(entry.tp)
        if part is not None and part.generation == entry.generation:
            end = entry.offset + 1
            if part.txn_end is None or end > part.txn_end:
                part.txn_end = end

    def txn_offset(self, tp: TP) -> int | None:
        """The offset the open transaction commits for ``tp``: the one after the last entry
        sent in it (``None``: nothing of ``tp`` was sent in it)."""
        part = self._parts.get(tp)
        return None if part is None else part.txn_end

    def txn_committed(self, tp: TP) -> None:
        """The open transaction committed: the entries of ``tp`` sent in it are settled;
        those handed out after them stay in flight."""
        part = self._parts.get(tp)
        if part is None or part.txn_end is None:
            return
        end, part.txn_end = part.txn_end, None
        inflight = part.inflight
        for offset in [o for o in inflight if o < end]:
            del inflight[offset]
            part.marks.pop(offset, None)
        self._dirty.add(tp)

    def mark(self, entry: Entry, mark: Mark) -> None:
        """Remember how ``entry`` must be sent the next time (after a rewind)."""
        part = self._parts.get(entry.tp)
        if part is not None and part.generation == entry.generation:
            part.marks[entry.offset] = mark

    def failed(self, entry: Entry, now_ms: int) -> Rewind | None:
        """``entry``'s forward failed transiently: rewind its partition to the smallest
        unsettled offset and hold it (``None`` when the partition is no longer ours)."""
        part = self._parts.get(entry.tp)
        if part is None or part.generation != entry.generation:
            return None
        offset = part.committable()
        return self.rewind(entry.tp, entry.offset if offset is None else offset, now_ms)

    def rewind(
        self, tp: TP, offset: int, now_ms: int, *, hold_ms: int | None = None
    ) -> Rewind | None:
        """Forget what was fetched of ``tp`` from ``offset`` on (results of it are ignored
        from now on), fetch it again from there after ``hold_ms`` (default
        ``retry_after_ms``)."""
        part = self._parts.get(tp)
        if part is None:
            return None
        generation = self._generations[tp] = part.generation + 1
        fresh = LevelPartition(tp, part.delay_ms, generation)
        fresh.position = offset
        fresh.stored = part.stored
        fresh.marks = part.marks
        fresh.held_until = now_ms + (self.retry_after_ms if hold_ms is None else hold_ms)
        fresh.flow_paused = False
        self._parts[tp] = fresh
        return Rewind(tp, offset)

    # -- introspection ---------------------------------------------------------------------
    def committable(self, tp: TP) -> int | None:
        part = self._parts.get(tp)
        return None if part is None else part.committable()

    # (read from other threads for diagnostics: snapshots that tolerate concurrent changes)
    def inflight(self, tp: TP | None = None) -> int:
        if tp is not None:
            part = self._parts.get(tp)
            return 0 if part is None else len(part.inflight)
        return sum(len(p.inflight) for p in list(self._parts.values()))

    def waiting(self) -> dict[TP, tuple[int, int | None]]:
        """Per partition: entries buffered and the due time of the oldest."""
        out: dict[TP, tuple[int, int | None]] = {}
        for tp, part in list(self._parts.items()):
            buffer = part.buffer
            try:
                head: int | None = buffer[0].info.due_ms
            except IndexError:
                head = None
            out[tp] = (len(buffer), head)
        return out

    def due_within(self, real_topics: Set[str], before_ms: int) -> dict[str, int]:
        """Per real (logical) topic of ``real_topics``: the entries held for it (buffered or
        in flight) due at or before ``before_ms`` (any thread may ask: a snapshot)."""
        out = dict.fromkeys(real_topics, 0)
        for part in list(self._parts.values()):
            for entry in [*list(part.buffer), *list(part.inflight.values())]:
                info = entry.info
                topic = info.real_topic
                if topic in out and info.due_ms <= before_ms:
                    out[topic] += 1
        return out

    def held(self) -> list[TP]:
        return [tp for tp, p in list(self._parts.items()) if p.held_until is not None]
