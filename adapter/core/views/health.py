"""A partition's replication health (ok, under-replicated, leaderless), as the reports show
it: a JSON block, a table marker and the footnote listing the unhealthy partitions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from adapter.core.views.text import text_table

HEALTH_OK: Final = "ok"
UNDER_REPLICATED: Final = "under-replicated"
LEADERLESS: Final = "leaderless"


def partition_status(leader: int, replicas: int, isr: int) -> str:
    """A partition's health from its metadata: ``leaderless`` (no leader, ``leader < 0``: it
    can be neither read nor written), ``under-replicated`` (fewer in-sync replicas than
    replicas) or ``ok``."""
    if leader < 0:
        return LEADERLESS
    if isr < replicas:
        return UNDER_REPLICATED
    return HEALTH_OK


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """A partition's replication as the cluster metadata reports it: its leader's node id
    (``None``: no leader), how many replicas it has and how many of them are in sync."""

    leader: int | None
    replicas: int
    isr: int

    @classmethod
    def of(cls, leader: int, replicas: Sequence[int], isrs: Sequence[int]) -> PartitionHealth:
        """From the metadata's fields (confluent-kafka's ``PartitionMetadata.leader``,
        ``.replicas``, ``.isrs``): node ids, leader ``-1`` when there is none."""
        return cls(None if leader < 0 else leader, len(replicas), len(isrs))

    @property
    def status(self) -> str:
        return partition_status(-1 if self.leader is None else self.leader, self.replicas, self.isr)

    @property
    def ok(self) -> bool:
        return self.status == HEALTH_OK

    @property
    def readable(self) -> bool:
        """Whether its offsets can be asked (it has a leader)."""
        return self.leader is not None

    def describe(self) -> str:
        """``under-replicated: 2 of 3 replicas in sync, leader 1``."""
        leader = "no leader" if self.leader is None else f"leader {self.leader}"
        return f"{self.status}: {self.isr} of {self.replicas} replicas in sync, {leader}"

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "replicas": self.replicas,
            "isr": self.isr,
            "status": self.status,
        }


#: The health fields of a partition that has no metadata (its topic does not exist).
_NO_HEALTH: Final[dict[str, Any]] = {"leader": None, "replicas": None, "isr": None, "status": None}


def health_json(health: PartitionHealth | None) -> dict[str, Any]:
    """A partition's health fields for its JSON row (all ``None`` without metadata)."""
    return dict(_NO_HEALTH) if health is None else health.to_json()


def health_marker(health: PartitionHealth | None) -> str:
    """The table's marker cell: empty for a healthy partition (or one without metadata)."""
    return "" if health is None or health.ok else health.status


def health_notes(unhealthy: Iterable[tuple[str, PartitionHealth]]) -> list[str]:
    """The footnote of a table: one line per unhealthy partition (``topic[partition]``,
    logical name), after a heading; nothing when every partition is healthy."""
    rows = [
        (
            name,
            health.describe() + ("" if health.readable else "; end offset unknown"),
        )
        for name, health in unhealthy
        if not health.ok
    ]
    if not rows:
        return []
    return [f"unhealthy partitions ({len(rows)}):"] + [
        "  " + line for line in text_table(None, rows, "ll")
    ]
