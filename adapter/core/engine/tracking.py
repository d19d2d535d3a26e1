"""Offsets of one partition: which fetched messages are settled, and how far it is safe to
commit.  Pure.

A message is *in flight* from fetch until it is *settled*: its listener batch succeeded,
or its copy (retry or dead letter) was acknowledged by the broker, or (broadcasting) it
was dropped.  The committable offset of a partition is its smallest offset in flight, or
the next offset to fetch when none is; it never moves back (RocketMQ's ``ProcessQueue``).

Messages are tracked per fetched run (a :class:`Work`), not one by one: a run whose
batches all succeed never holds anything, so the hot path costs one object per partition
per fetch.  Only failed messages are tracked individually, until their copy is settled.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from adapter.core.types import TP

"""A partition: (Kafka topic, partition)."""


class Work:
    """A run of fetched messages of one partition, handed to the listener in batches.

    ``msgs`` are the run's messages in offset order; batch ``i`` is ``batch(i)``, the
    ``size`` messages from ``i * size``.  ``started[i]`` is when a worker
    began it (set by the worker; ``None`` until then), for consume timeouts.  ``pending``
    maps the offset of each failed message whose copy is not settled yet to the action
    that owns it.  A *local retry* is a Work of one batch whose message is tracked in its
    ``origin`` (the run it was fetched in).  Once every batch of a run is done the engine
    lets its messages go (:meth:`let_go`): ``msgs`` is then empty.
    """

    __slots__ = (
        "done",
        "done_upto",
        "end",
        "generation",
        "left",
        "msgs",
        "nbatches",
        "nbytes",
        "origin",
        "pending",
        "size",
        "started",
        "total",
        "tp",
    )

    def __init__(  # noqa: PLR0917 - one of these per fetched run: positional is cheapest
        self,
        tp: TP,
        generation: int,
        msgs: list[Any],
        size: int,
        end: int,
        nbytes: int = 0,
        *,
        origin: Work | None = None,
    ) -> None:
        self.tp = tp
        self.generation = generation
        self.msgs = msgs
        self.size = size
        self.total = len(msgs)  # kept after the messages are let go (a late result's size)
        self.nbatches = (self.total + size - 1) // size
        self.end = end  # the offset after the last one fetched in this run
        self.nbytes = nbytes
        self.origin = origin
        self.left = self.nbatches  # batches whose result has not been applied
        self.done: bytearray | None = None  # per batch, once they complete out of order
        self.done_upto = 0  # every batch before this index is done
        self.started: list[float | None] | None = None
        self.pending: dict[int, Any] | None = None

    def batch(self, index: int) -> list[Any]:
        """The messages of batch ``index`` (a new list: the listener may keep or change it)."""
        size = self.size
        return list(self.msgs[index * size : (index + 1) * size])

    @property
    def batches(self) -> list[list[Any]]:
        """Every batch (for inspection; the hot path uses :meth:`batch`)."""
        return [self.batch(i) for i in range(self.nbatches)]

    def batch_len(self, index: int) -> int:
        return min(self.size, self.total - index * self.size)

    @property
    def home(self) -> Work:
        """The run that tracks this work's offsets (itself, or the run a retry came from)."""
        return self.origin or self

    def mark_done(self, index: int) -> bool:
        """Record that batch ``index`` completed; ``False`` if it already had."""
        done = self.done
        if done is None:
            done = self.done = bytearray(self.nbatches)
        if done[index]:
            return False
        done[index] = 1
        self.left -= 1
        upto = self.done_upto
        while upto < len(done) and done[upto]:
            upto += 1
        self.done_upto = upto
        return True

    def let_go(self) -> None:
        """Every batch is done: drop the run's messages (what is still held stays with its
        owner in :attr:`pending`; :meth:`first_unsettled` no longer needs them)."""
        self.msgs = []

    def mark_all_done(self) -> None:
        self.left = 0
        self.done_upto = self.nbatches
        if self.done is not None:
            self.done = bytearray(b"\x01" * self.nbatches)

    def hold(self, offset: int, owner: Any) -> None:
        """Keep ``offset`` in flight until :meth:`release`; ``owner`` is what holds it."""
        if self.pending is None:
            self.pending = {}
        self.pending[offset] = owner

    def release(self, offset: int, owner: Any = None) -> bool:
        """Settle a held ``offset`` (only if ``owner`` still holds it, when given)."""
        pending = self.pending
        if pending is None or offset not in pending:
            return False
        if owner is not None and pending[offset] is not owner:
            return False
        del pending[offset]
        return True

    def holder(self, offset: int) -> Any:
        return None if self.pending is None else self.pending.get(offset)

    @property
    def settled(self) -> bool:
        return self.left == 0 and not self.pending

    def first_unsettled(self) -> int | None:
        """The smallest offset of this run still in flight (``None``: all settled)."""
        first: int | None = None
        if self.left:
            first = self.msgs[self.done_upto * self.size].queue_offset
        if self.pending:
            held = min(self.pending)
            first = held if first is None else min(first, held)
        return first


class PartitionState:
    """What one consumer knows about one assigned partition."""

    __slots__ = ("count", "generation", "nbytes", "paused", "position", "stored", "tp", "works")

    def __init__(self, tp: TP, generation: int) -> None:
        self.tp = tp
        self.generation = generation
        self.works: deque[Work] = deque()  # runs not settled yet, in offset order
        self.position: int | None = None  # the offset after the last one fetched
        self.stored: int | None = None  # the last committable offset handed out
        self.count = 0  # messages in flight
        self.nbytes = 0  # bytes in flight (runs still running, and held messages)
        self.paused = False  # paused by flow control

    def add(self, work: Work) -> None:
        self.works.append(work)

    def advance(self, end: int) -> None:
        if self.position is None or end > self.position:
            self.position = end

    def release_settled(self) -> None:
        """Drop the settled runs at the front (nothing in them is in flight)."""
        works = self.works
        while works and works[0].settled:
            works.popleft()

    def committable(self) -> int | None:
        """The offset to commit ("next to read"): the smallest in flight, else the position."""
        self.release_settled()
        works = self.works
        for work in works:  # the first run with something in flight decides
            first = work.first_unsettled()
            if first is not None:
                return first
        return self.position

    def take_commit(self) -> int | None:
        """The committable offset if it moved forward since the last call (then remembered)."""
        offset = self.committable()
        if offset is None or (self.stored is not None and offset <= self.stored):
            return None
        self.stored = offset
        return offset

    @property
    def span(self) -> int:
        """From the smallest offset in flight to the last fetched one."""
        if self.position is None or not self.count:
            return 0
        first = self.committable()
        return 0 if first is None else self.position - 1 - first

    def running(self) -> bool:
        """Whether a listener batch of this partition has not completed yet."""
        return any(work.left for work in self.works)
