"""What an admin command read from the cluster: records, consumer groups and their members,
partitions' replication health, and the order the reports list topics in (users' topics,
then retry topics, then DLQs).  The reports over them are in :mod:`adapter.core.views`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from adapter.core.codec import logical_topic
from adapter.core.naming import is_dlq_topic, is_retry_topic
from adapter.core.types import TP

Logical = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Record:
    """One record an admin command read: where it is, its timestamp (``None`` when the
    record has none) and its headers (text, last value per key)."""

    kafka_topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    headers: dict[str, str]
    value_size: int = 0


@dataclass(frozen=True, slots=True)
class Member:
    """A live member of a consumer group, with the partitions it owns (Kafka names)."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[TP, ...]

    @property
    def label(self) -> str:
        """``client-id@host`` (the member id when there is no client id)."""
        name = self.client_id or self.member_id
        return f"{name}@{self.host}" if self.host else name

    def to_json(self, logical: Logical = logical_topic) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "client_id": self.client_id,
            "host": self.host,
            "group_instance_id": self.group_instance_id,
            "assignment": [{"topic": logical(t), "partition": p} for t, p in self.assignment],
        }


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group as Kafka describes it."""

    group: str
    state: str
    members: tuple[Member, ...]

    def owner(self, tp: TP) -> Member | None:
        for m in self.members:
            if tp in m.assignment:
                return m
        return None

    def owners(self, kafka_topic: str) -> dict[str, tuple[int, ...]]:
        """Member id → the partitions of ``kafka_topic`` it owns (members owning none left out)."""
        out: dict[str, tuple[int, ...]] = {}
        for m in self.members:
            mine = tuple(sorted(p for t, p in m.assignment if t == kafka_topic))
            if mine:
                out[m.member_id] = mine
        return out

    def member(self, member_id: str) -> Member | None:
        return next((m for m in self.members if m.member_id == member_id), None)


def assignment_text(assignment: Iterable[TP], logical: Logical = logical_topic) -> str:
    """``orders[0,1] %RETRY%g[0]``."""
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return (
        " ".join(
            f"{logical(t)}[{','.join(str(p) for p in sorted(ps))}]"
            for t, ps in sorted(by_topic.items(), key=lambda kv: topic_order(kv[0], logical))
        )
        or "-"
    )


def topic_order(kafka_topic: str, logical: Logical = logical_topic) -> tuple[int, str]:
    """The sort key of a topic in the reports: users' topics, then retry topics, then DLQs."""
    name = logical(kafka_topic)
    rank = 2 if is_dlq_topic(name) else 1 if is_retry_topic(name) else 0
    return rank, name


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
