"""Per-partition in-flight tracking: the committable offset and flow-control figures.  Pure.

Like RocketMQ's ``ProcessQueue``: a message is in flight from fetch until it succeeded or
its send-back was acknowledged.  The committable offset is the smallest offset in flight,
or the next offset when none is, and never moves back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

from adapter.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """When a partition stops fetching (RocketMQ ``pullThreshold*`` and max span)."""

    max_count: int = 1000
    max_bytes: int = 100 * 1024 * 1024
    max_span: int = 2000

    def exceeded(self, tracker: PartitionTracker) -> str | None:
        """The reason a partition must pause, or ``None`` when it may fetch."""
        return self.reason(tracker.count, tracker.bytes, tracker.span)

    def reason(self, count: int, nbytes: int, span: int) -> str | None:
        """Why a partition with ``count`` messages / ``nbytes`` bytes in flight over an
        offset span of ``span`` must pause, or ``None`` when it may fetch."""
        if count > self.max_count:
            return f"{count} messages in flight > {self.max_count}"
        if nbytes > self.max_bytes:
            return f"{nbytes} bytes in flight > {self.max_bytes}"
        if span > self.max_span:
            return f"in-flight offset span {span} > {self.max_span}"
        return None

    def below_half(self, count: int, nbytes: int, span: int) -> bool:
        """Whether a paused partition is down to half of every limit (where it resumes)."""
        return self.reason(2 * count, 2 * nbytes, 2 * span) is None


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


class ConsumeFromWhere(str, Enum):
    """Where a consumer group starts on a partition it has no committed offset for."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    """At the end: only messages sent from now on (RocketMQ's default).  The position is
    committed at once, so a restart resumes there instead of skipping what came meanwhile."""

    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    """At the first offset still retained."""

    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    """At the first message stored at or after ``consume_timestamp`` (default: 30 minutes
    before the consumer started), or at the end when there is none."""


class StartAt(str, Enum):
    BEGINNING = "BEGINNING"
    END = "END"
    TIMESTAMP = "TIMESTAMP"


def first_start(where: ConsumeFromWhere, *, retry_topic: bool) -> StartAt:
    """Where to start on a partition without a committed offset.  A group's retry topic is
    always read from its beginning: every record there is a retry owed to this group."""
    if retry_topic or where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return StartAt.BEGINNING
    if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return StartAt.TIMESTAMP
    return StartAt.END


def consume_from_where_of(
    value: ConsumeFromWhere | str | None, auto_offset_reset: object
) -> ConsumeFromWhere:
    """The start rule: ``value`` when given, else what a Kafka ``auto.offset.reset`` in the
    config asks for (``earliest``/``smallest``/``beginning`` → first offset), else the last
    offset.  Out-of-range offsets are a different matter: they always restart at the
    earliest retained offset (RocketMQ corrects an illegal offset to the minimum)."""
    if value is not None:
        try:
            return ConsumeFromWhere(value)
        except ValueError:
            raise ConfigError(
                "consume_from_where",
                value,
                f"expected one of {[w.value for w in ConsumeFromWhere]}",
            ) from None
    if str(auto_offset_reset).lower() in ("earliest", "smallest", "beginning"):
        return ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
