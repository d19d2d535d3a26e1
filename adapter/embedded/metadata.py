"""Where things are in a running embedded cluster, asked over the Kafka protocol: a topic's
partitions and leaders, the coordinators of a group and of a transactional id, what is
under-replicated.  The bounce tests use it to pick the node to stop.

:class:`ClusterMetadata` is a base of :class:`~adapter.embedded.broker.EmbeddedKafka`: the
instance's lifecycle (nodes, ports, state files) stays in :mod:`adapter.embedded.broker`,
these read-only questions live here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from adapter.embedded.config import OFFSETS_PARTITIONS, TRANSACTION_PARTITIONS
from adapter.embedded.jars import EmbeddedKafkaError
from adapter.embedded.node import coordinator_partition, probe_admin

__all__ = ["ClusterMetadata"]

_T = TypeVar("_T")


class ClusterMetadata:
    """The metadata questions of an embedded instance (a base of ``EmbeddedKafka``)."""

    name: str

    def _reach(self) -> tuple[str, dict[str, str]]:
        """The bootstrap address and the client security settings to ask with."""
        raise NotImplementedError

    def _metadata(self, timeout: float = 10.0) -> Any:
        bootstrap, security = self._reach()
        return probe_admin(bootstrap, timeout, security).list_topics(timeout=timeout)

    def partitions(self, topic: str, timeout: float = 10.0) -> dict[int, Any]:
        """``topic``'s partition metadata by partition id (leader, replicas, in-sync
        replicas). A topic created a moment ago may not have reached the node that answers
        yet: it is asked again until ``timeout``."""

        def known() -> dict[int, Any] | None:
            t = self._metadata(timeout).topics.get(topic)
            return None if t is None or t.error is not None else dict(t.partitions) or None

        return self._until(known, timeout, f"no topic {topic!r}")

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The node id that leads ``topic``'s ``partition`` now (-1: none); waits for the
        topic as :meth:`partitions` does."""

        def leader() -> int | None:
            t = self._metadata(timeout).topics.get(topic)
            p = None if t is None or t.error is not None else t.partitions.get(partition)
            return None if p is None else int(p.leader)

        return self._until(leader, timeout, f"no partition {topic}[{partition}]")

    def transaction_coordinator(self, transactional_id: str, timeout: float = 10.0) -> int:
        """The node id that coordinates ``transactional_id``'s transactions now."""
        return self.leader_of(
            "__transaction_state",
            coordinator_partition(transactional_id, TRANSACTION_PARTITIONS),
            timeout,
        )

    def group_coordinator(self, group_id: str, timeout: float = 10.0) -> int:
        """The node id that coordinates the consumer group ``group_id`` now."""
        return self.leader_of(
            "__consumer_offsets", coordinator_partition(group_id, OFFSETS_PARTITIONS), timeout
        )

    def under_replicated(self, topics: Iterable[str] | None = None) -> list[tuple[str, int]]:
        """Partitions whose in-sync replicas are fewer than their replicas, or leaderless."""
        md = self._metadata()
        wanted = set(topics) if topics is not None else None
        return sorted(
            (name, pid)
            for name, t in md.topics.items()
            if wanted is None or name in wanted
            for pid, p in t.partitions.items()
            if p.leader < 0 or len(p.isrs) < len(p.replicas)
        )

    def wait_in_sync(self, timeout: float = 120.0, topics: Iterable[str] | None = None) -> None:
        """Wait until every partition (of ``topics``, or all) has its full ISR again: what an
        operator waits for between the brokers of a rolling restart."""
        wanted = list(topics) if topics is not None else None
        lagging: list[tuple[str, int]] = []

        def in_sync() -> bool | None:
            nonlocal lagging
            lagging = self.under_replicated(wanted)
            return True if not lagging else None

        self._until(in_sync, timeout, "still under-replicated", lambda: f": {lagging[:10]}")

    def _until(
        self,
        probe: Callable[[], _T | None],
        timeout: float,
        what: str,
        detail: Callable[[], str] = lambda: "",
    ) -> _T:
        """``probe()``'s first answer that is not None, asked every 0.2 s (metadata that is
        not answered yet counts as no answer) until ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                answer = probe()
            except Exception as exc:  # metadata not answered yet: try again
                answer, last = None, exc
            if answer is not None:
                return answer
            if time.monotonic() >= deadline:
                why = f" (last error: {last})" if last is not None else ""
                raise EmbeddedKafkaError(
                    f"{self.name!r}: {what} after {timeout:.0f}s{detail()}{why}"
                )
            time.sleep(0.2)
