"""Per-partition in-flight tracking: the committable offset and flow-control figures.  Pure.

Like RocketMQ's ``ProcessQueue``: a message is in flight from fetch until it succeeded or
its send-back was acknowledged.  The committable offset is the smallest offset in flight,
or the next offset when none is, and never moves back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """When a partition stops fetching (RocketMQ ``pullThreshold*`` and max span)."""

    max_count: int = 1000
    max_bytes: int = 100 * 1024 * 1024
    max_span: int = 2000

    def exceeded(self, tracker: PartitionTracker) -> str | None:
        """The reason a partition must pause, or ``None`` when it may fetch."""
        if tracker.count > self.max_count:
            return f"{tracker.count} messages in flight > {self.max_count}"
        if tracker.bytes > self.max_bytes:
            return f"{tracker.bytes} bytes in flight > {self.max_bytes}"
        if tracker.span > self.max_span:
            return f"in-flight offset span {tracker.span} > {self.max_span}"
        return None


class PartitionTracker:
    """Offsets of one partition that are fetched but not settled.

    Offsets are added in increasing order (as a partition is read) and settled in any
    order.  All operations are O(1) amortised.
    """

    __slots__ = ("_bytes", "_committed", "_inflight", "_next")

    def __init__(self, start_offset: int | None = None) -> None:
        self._inflight: OrderedDict[int, int] = OrderedDict()
        self._bytes = 0
        self._next: int | None = start_offset
        self._committed: int | None = None

    def add(self, offset: int, size: int = 0) -> None:
        if self._next is not None and offset < self._next:
            # a re-fetch after a seek: the offset is already accounted for or settled
            return
        self._inflight[offset] = size
        self._bytes += size
        self._next = offset + 1

    def settle(self, offset: int) -> bool:
        """Mark ``offset`` done; ``False`` if it was not in flight (already settled)."""
        size = self._inflight.pop(offset, None)
        if size is None:
            return False
        self._bytes -= size
        return True

    def is_inflight(self, offset: int) -> bool:
        return offset in self._inflight

    @property
    def count(self) -> int:
        return len(self._inflight)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def span(self) -> int:
        if not self._inflight:
            return 0
        first = next(iter(self._inflight))
        last = next(reversed(self._inflight))
        return last - first

    def committable(self) -> int | None:
        """The offset to commit (Kafka's "next to read"), or ``None`` if nothing was seen."""
        if self._inflight:
            candidate: int | None = next(iter(self._inflight))
        else:
            candidate = self._next
        if candidate is None:
            return self._committed
        if self._committed is not None and candidate < self._committed:
            return self._committed
        return candidate

    def take_commit(self) -> int | None:
        """The committable offset if it moved since the last call (then remembered)."""
        candidate = self.committable()
        if candidate is None or candidate == self._committed:
            return None
        self._committed = candidate
        return candidate

    def mark_committed(self, offset: int) -> None:
        if self._committed is None or offset > self._committed:
            self._committed = offset
