"""Where a broadcasting member reads from: its own offsets, kept in a local file.

In broadcasting mode (RocketMQ ``MessageModel.BROADCASTING``) every instance reads every
partition, so offsets belong to the instance, not the group: they are kept in memory,
written to a :class:`~adapter.io.offset_store.LocalFileOffsetStore` every
:data:`PERSIST_INTERVAL_S` (and on shutdown), and the member looks for partitions added to
its topics every :data:`REDISCOVER_INTERVAL_S` (RocketMQ's rebalance interval).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from adapter.core.types import TP
from adapter.io.errors import client_error

__all__ = ["PERSIST_INTERVAL_S", "REDISCOVER_INTERVAL_S", "BroadcastOffsets", "OffsetFile"]

#: Local offsets are written this often (RocketMQ persists every 5 s) ...
PERSIST_INTERVAL_S = 5.0
#: ... and the topics' partitions are looked up again this often (RocketMQ rebalances
#: every 20 s), so partitions added later are read too.
REDISCOVER_INTERVAL_S = 20.0


class OffsetFile(Protocol):
    """Where the offsets live between runs (a
    :class:`~adapter.io.offset_store.LocalFileOffsetStore`)."""

    def load(self) -> dict[TP, int]: ...
    def save(self, offsets: dict[TP, int]) -> None: ...


class BroadcastOffsets:
    """One broadcasting instance's offsets (on the loop thread); see the module docstring."""

    def __init__(
        self,
        store: OffsetFile,
        *,
        persist_s: float = PERSIST_INTERVAL_S,
        rediscover_s: float = REDISCOVER_INTERVAL_S,
    ) -> None:
        self._store = store
        self._persist_s = persist_s
        self._rediscover_s = rediscover_s
        self._offsets: dict[TP, int] = store.load()
        self._dirty = False
        self._next_persist = 0.0
        self._next_discover = 0.0

    def offsets(self) -> dict[TP, int]:
        """A copy of the offsets held now (next offset to read, per partition)."""
        return dict(self._offsets)

    def store(self, offsets: Iterable[tuple[TP, int]]) -> None:
        """These partitions' offsets moved (written to the file at the next persist)."""
        self._offsets.update(offsets)
        self._dirty = True

    def persist(self) -> None:
        """Write the offsets if any moved since the last write."""
        if self._dirty:
            self._store.save(dict(self._offsets))
            self._dirty = False

    def new_partitions(
        self,
        metadata: Any,
        topics: Iterable[str],
        assigned: Collection[TP],
        first_offset: Callable[[str, int], int],
        *,
        first: bool = False,
    ) -> list[TopicPartition]:
        """The partitions of ``topics`` in ``metadata`` (``list_topics``' answer) that are not
        ``assigned`` yet, each at its stored offset, else at ``first_offset(topic,
        partition)`` (an offset is remembered at once, so a restart starts there too).  On the
        ``first`` look a missing topic raises; later it is passed over."""
        new = []
        for topic in topics:
            tmd = metadata.topics.get(topic)
            if tmd is None or tmd.error is not None:
                if first:
                    raise client_error(
                        KafkaException(tmd.error if tmd else KafkaError(KafkaError._UNKNOWN_TOPIC)),
                        what=f"topic {topic}",
                    )
                continue
            for partition in sorted(tmd.partitions):
                tp = (topic, partition)
                if tp in assigned:
                    continue
                offset = self._offsets.get(tp)
                if offset is None:
                    offset = first_offset(topic, partition)
                    if offset >= 0:
                        self._offsets[tp] = offset
                        self._dirty = True
                new.append(TopicPartition(topic, partition, offset))
        return new

    def upkeep(self, now: float, rediscover: Callable[[], None]) -> None:
        """Persist when due; call ``rediscover()`` when due (not at the first call: the
        member looked when it opened)."""
        if now >= self._next_persist:
            self._next_persist = now + self._persist_s
            self.persist()
        if now >= self._next_discover:
            if self._next_discover:
                rediscover()
            self._next_discover = now + self._rediscover_s
