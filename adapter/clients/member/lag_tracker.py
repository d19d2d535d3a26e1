"""A group member's lag per assigned partition: end offset minus committable offset.

The member refreshes it on its loop thread (at most every :data:`LAG_INTERVAL_S`) while
metrics are on; any thread reads the last snapshot.  End offsets come from asynchronous
admin requests (fetch responses leave idle partitions out, so a consumer does not know
their end): one round is asked for, and collected on a later refresh once it is answered,
so the loop never waits for the broker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from adapter.core.types import TP
from adapter.io.config import admin_config
from adapter.io.errors import make_client
from adapter.io.offsets import LOOKUP_TIMEOUT_S
from adapter.io.protocols import AdminFactory, AdminLike

__all__ = ["LAG_INTERVAL_S", "LagTracker", "Settled", "partition_lag"]

#: How often the loop refreshes the partitions' lag while metrics are on.
LAG_INTERVAL_S = 1.0

#: ``OffsetSpec``'s constructors are untyped in confluent-kafka.
_SPEC: Any = OffsetSpec


class Settled(Protocol):
    """What lag needs of an engine."""

    def committable(self, tp: TP) -> int | None: ...
    def in_flight(self, tp: TP) -> int: ...


def partition_lag(
    ends: tuple[int, int],
    committable: int | None,
    start: int | None,
    fetched: int | None,
) -> int:
    """One partition's lag from its ``(log start, end)``: the end minus the committable
    offset (``None``: nothing fetched yet, so where it ``start`` s, or the log start for a
    logical start); ``fetched``, given when nothing is in flight, is the fetch position,
    which is past transaction markers (the end offset of a transactionally written topic
    counts its last marker)."""
    low, high = ends
    position = committable
    if position is None:
        position = start if start is not None and start >= 0 else low
    if fetched is not None:
        position = max(position, fetched)
    return max(0, high - max(position, low))


class LagTracker:
    """Lag of one member's partitions; see the module docstring."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        what: str,
        admin_factory: AdminFactory = AdminClient,
        interval_s: float = LAG_INTERVAL_S,
    ) -> None:
        self._config = dict(config)
        self._what = what
        self._factory = admin_factory
        self._interval = interval_s
        self._admin: AdminLike | None = None
        self._lag: dict[TP, int] = {}
        self._next = 0.0
        self._ends: dict[TP, tuple[int, int]] = {}  # (log start, end) per partition
        self._starts: dict[TP, int] = {}  # where each assigned partition starts
        self._pending: dict[str, dict[Any, Any]] = {}

    def started(self, tp: TP, offset: int) -> None:
        """``tp`` (re)starts at ``offset`` (an offset, or a logical one)."""
        self._starts[tp] = offset

    def snapshot(self) -> dict[TP, int]:
        """The last refreshed lag per partition (any thread)."""
        return dict(self._lag)

    def refresh(
        self, now: float, consumer: Any, assignment: Collection[TP], engine: Settled
    ) -> None:
        """On the loop thread: recompute from the last answered end offsets (when the
        interval passed) and ask for the next round."""
        if now < self._next:
            return
        self._next = now + self._interval
        self._collect_ends()
        out: dict[TP, int] = {}
        tps = list(assignment)
        fetched = _fetch_positions(consumer, tps)
        for tp in tps:
            ends = self._ends.get(tp)
            if ends is None:
                continue
            settled = not engine.in_flight(tp)
            out[tp] = partition_lag(
                ends,
                engine.committable(tp),
                self._starts.get(tp),
                fetched.get(tp, -1) if settled else None,
            )
        self._lag = out
        self._ask_ends(assignment)

    def close(self) -> None:
        """Let the admin client go (a later refresh creates another)."""
        self._admin = None

    def _ask_ends(self, assignment: Collection[TP]) -> None:
        if self._pending or not assignment:
            return
        if self._admin is None:
            self._admin = make_client(
                self._factory, admin_config(self._config), what=f"{self._what} admin client"
            )
        tps = [TopicPartition(*tp) for tp in list(assignment)]
        admin = self._admin
        self._pending = {
            "low": admin.list_offsets(
                {tp: _SPEC.earliest() for tp in tps}, request_timeout=LOOKUP_TIMEOUT_S
            ),
            "high": admin.list_offsets(
                {tp: _SPEC.latest() for tp in tps}, request_timeout=LOOKUP_TIMEOUT_S
            ),
        }

    def _collect_ends(self) -> None:
        pending = self._pending
        if not pending or not all(f.done() for fs in pending.values() for f in fs.values()):
            return
        self._pending = {}
        for tp, future in pending["high"].items():
            try:
                high = int(future.result().offset)
                low = int(pending["low"][tp].result().offset)
            except (KafkaException, KeyError):
                continue
            self._ends[(tp.topic, tp.partition)] = (low, high)


def _fetch_positions(consumer: Any, tps: list[TP]) -> dict[TP, int]:
    try:
        positions = consumer.position([TopicPartition(*tp) for tp in tps])
    except KafkaException:
        return {}
    return {(p.topic, p.partition): p.offset for p in positions if p.offset >= 0}
