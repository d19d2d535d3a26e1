"""The offset rule of the confluent-kafka drop-in (:mod:`adapter.kafka`).  Pure.

A poll loop settles a message by moving past it (committing or storing a later offset) or
by handing it to the retry path (``reconsume_later``).  A message handed to the retry path
is settled only once the broker has acknowledged its copy, so until then no offset of its
partition may be committed or stored past it: :class:`CopyHolds` clamps what the
application (or the emulated ``enable.auto.offset.store``) asks to store or commit, and
remembers what was asked so it can be applied once the copy is acknowledged.

:class:`RetryTimer` keeps the copies to send again after a transient refusal (the shared
rule, :func:`~adapter.core.publishing.escalate`), ``now`` passed in.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from adapter.core.types import TP


class CopyHolds:
    """Per partition, the offsets whose retry copy is not acknowledged yet (usually none)."""

    __slots__ = ("_deferred", "_held")

    def __init__(self) -> None:
        self._held: dict[TP, dict[int, int]] = {}  # tp -> {offset: copies pending}
        self._deferred: dict[TP, tuple[int, bool]] = {}  # tp -> (offset asked for, commit?)

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, tp: TP, offset: int) -> None:
        """A copy of the message at ``offset`` is on its way."""
        held = self._held.setdefault(tp, {})
        held[offset] = held.get(offset, 0) + 1

    def holds(self, tp: TP, offset: int | None = None) -> bool:
        """Whether ``tp`` has a held message (``offset``: that one)."""
        held = self._held.get(tp)
        return held is not None and (offset is None or offset in held)

    def release(self, tp: TP, offset: int) -> tuple[int, bool] | None:
        """The copy of ``offset`` was acknowledged.  Returns what was asked for ``tp`` and
        held back, clamped again, as ``(offset, commit?)`` to apply now (``None``: nothing)."""
        held = self._held.get(tp)
        if held is None or offset not in held:
            return None
        left = held[offset] - 1
        if left:
            held[offset] = left
        else:
            del held[offset]
            if not held:
                del self._held[tp]
        deferred = self._deferred.pop(tp, None)
        if deferred is None:
            return None
        wanted, commit = deferred
        return self.clamp(tp, wanted, commit=commit), commit

    def clamp(self, tp: TP, offset: int, *, commit: bool = False) -> int:
        """``offset`` (next to read) for ``tp``, lowered to the first held message; what was
        asked is remembered and handed back by :meth:`release`."""
        held = self._held.get(tp)
        if not held:
            return offset
        low = min(held)
        if offset <= low:
            return offset
        before = self._deferred.get(tp)
        if before is not None:
            offset = max(offset, before[0])
            commit = commit or before[1]
        self._deferred[tp] = (offset, commit)
        return low

    def forget(self, tp: TP) -> None:
        """``tp`` was revoked or lost: its next owner reads the held messages again."""
        self._held.pop(tp, None)
        self._deferred.pop(tp, None)


class RetryTimer:
    """Copies to send again later (a transient refusal), in due order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def later(self, due: float, item: Any) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), item))

    def due(self, now: float) -> list[Any]:
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            out.append(heapq.heappop(heap)[2])
        return out
