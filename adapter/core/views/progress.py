"""``group progress``: a group's lag per partition (its arithmetic included), its DLQ's size,
and the report in text and JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.core.circuit_status import MemberCircuit
from adapter.core.cluster import (
    GroupInfo,
    Logical,
    Member,
    PartitionHealth,
    assignment_text,
    topic_order,
)
from adapter.core.codec import logical_topic
from adapter.core.offsets import ConsumeFromWhere, StartAt, first_start
from adapter.core.types import TP
from adapter.core.views.health import health_json, health_marker, health_notes
from adapter.core.views.text import num_text, text_table


def compute_lag(
    committed: int | None,
    start: int | None,
    end: int | None,
    *,
    head: int | None = None,
    drained: bool = False,
    first: StartAt | None = None,
) -> int | None:
    """Records the group still has to read on a partition: ``end - committed``.

    Without a committed offset the partition's start rule ``first`` says where the group
    starts (:func:`adapter.core.offsets.first_start`): at the log start
    (``BEGINNING``: the whole log is owed; a group's retry topic always), at the end
    (``END``: nothing); unknown (``None``, or ``TIMESTAMP``) leaves the lag unknown.  A
    committed offset below the log start counts from the log start (the records before it
    are gone).  ``head`` (the first record actually readable at or after the position)
    skips transaction markers in front of it; ``drained`` says nothing readable is left
    (only markers): lag 0.
    """
    if end is None:
        return None
    if committed is None:
        if first is StartAt.END:
            return 0
        if first is not StartAt.BEGINNING or start is None:
            return None
        committed = start
    if drained:
        return 0
    position = committed if start is None or committed >= start else start
    if head is not None and head > position:
        position = head
    return max(0, end - position)


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """One partition of a group's progress."""

    topic: str
    kafka_topic: str
    partition: int
    committed: int | None
    start: int | None
    end: int | None
    owner: Member | None = None
    head: int | None = None
    drained: bool = False
    #: ``None`` when the topic has no metadata (it does not exist)
    health: PartitionHealth | None = None
    #: where the group starts on it without a committed offset (``None``: unknown)
    first: StartAt | None = None

    @property
    def lag(self) -> int | None:
        return compute_lag(
            self.committed,
            self.start,
            self.end,
            head=self.head,
            drained=self.drained,
            first=self.first,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "partition": self.partition,
            "committed": self.committed,
            "start": self.start,
            "end": self.end,
            "lag": self.lag,
            "owner": None if self.owner is None else self.owner.member_id,
            "owner_client_id": None if self.owner is None else self.owner.client_id,
            **health_json(self.health),
        }


@dataclass(frozen=True, slots=True)
class DlqSize:
    """The size of a group's DLQ.  ``unhealthy``: its partitions that are under-replicated or
    leaderless (a leaderless one's records are not counted: its offsets cannot be asked)."""

    topic: str
    kafka_topic: str
    exists: bool
    size: int
    partitions: int
    unhealthy: tuple[tuple[int, PartitionHealth], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "exists": self.exists,
            "size": self.size,
            "partitions": self.partitions,
        }
        if self.unhealthy:  # only then: a healthy DLQ's JSON stays as it always was
            out["unhealthy"] = [{"partition": p, **h.to_json()} for p, h in self.unhealthy]
        return out


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """``group progress``: per partition of every subscribed topic and of the retry topic."""

    info: GroupInfo
    partitions: tuple[PartitionProgress, ...]
    dlq: DlqSize
    #: member id → its circuit breaker's latest published state (members with a breaker)
    circuits: Mapping[str, MemberCircuit] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        """The sum of the known lags (a leaderless partition's is unknown)."""
        return sum(p.lag or 0 for p in self.partitions)

    def lag_of(self, kafka_topics: Iterable[str]) -> int:
        """The sum of the known lags on ``kafka_topics``."""
        wanted = set(kafka_topics)
        return sum(p.lag or 0 for p in self.partitions if p.kafka_topic in wanted)

    def unhealthy(self) -> list[tuple[str, PartitionHealth]]:
        """``(topic[partition], health)`` of every listed or DLQ partition that is
        under-replicated or leaderless."""
        out = [
            (f"{p.topic}[{p.partition}]", p.health)
            for p in self.partitions
            if p.health is not None and not p.health.ok
        ]
        out.extend((f"{self.dlq.topic}[{p}]", h) for p, h in self.dlq.unhealthy if not h.ok)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.info.group,
            "state": self.info.state,
            "members": [
                {**m.to_json(), "circuit": _circuit_json(self.circuits.get(m.member_id))}
                for m in self.info.members
            ],
            "partitions": [p.to_json() for p in self.partitions],
            "lag": self.lag,
            "dlq": self.dlq.to_json(),
        }

    def render(self) -> list[str]:
        info = self.info
        lines = [f"group {info.group}  state {info.state}  members {len(info.members)}"]
        for m in info.members:
            lines.append(f"  member {m.label}  {assignment_text(m.assignment)}  ({m.member_id})")
            circuit = self.circuits.get(m.member_id)
            if circuit is not None:
                lines.append(f"    {circuit.text()}")
        rows = [
            (
                f"{p.topic}[{p.partition}]",
                num_text(p.committed),
                num_text(p.end),
                num_text(p.lag),
                p.owner.label if p.owner else "-",
                health_marker(p.health),
            )
            for p in self.partitions
        ]
        # the marker column has no heading: a healthy table looks as it always did
        header = ("topic[partition]", "committed", "end", "lag", "owner", "")
        lines.extend(text_table(header, rows, "lrrrll"))
        unknown = sum(1 for p in self.partitions if p.health is not None and not p.health.readable)
        more = f" (+ unknown on {unknown} leaderless partition(s))" if unknown else ""
        lines.append(f"total lag {self.lag}{more}")
        if self.dlq.exists:
            blind = sum(1 for _, h in self.dlq.unhealthy if not h.readable)
            lines.append(
                f"{self.dlq.topic}: {self.dlq.size}{'+?' if blind else ''} message(s) in "
                f"{self.dlq.partitions} partition(s)"
            )
        else:
            lines.append(f"{self.dlq.topic}: no such topic (nothing dead-lettered yet)")
        lines.extend(health_notes(self.unhealthy()))
        return lines


def _circuit_json(circuit: MemberCircuit | None) -> dict[str, Any] | None:
    return None if circuit is None else circuit.to_json()


def subscribed_topics(
    info: GroupInfo, committed: Iterable[TP], retry_kafka: str, dlq_kafka: str
) -> list[str]:
    """The Kafka topics a group's progress shows: those it committed offsets on or its members
    own partitions of, and its retry topic; users' topics first, then retry topics.  The
    group's own DLQ is shown by its size only."""
    topics = {t for t, _ in committed}
    topics.update(t for m in info.members for t, _ in m.assignment)
    topics.add(retry_kafka)
    topics.discard(dlq_kafka)
    return sorted(topics, key=topic_order)


def start_rule(
    retry_kafka: str, consume_from_where: ConsumeFromWhere | None
) -> Callable[[str], StartAt | None]:
    """Where a group starts on a partition of a Kafka topic it has no committed offset on:
    its retry topic from the beginning, always; its other topics by ``consume_from_where``
    (``None``: not known, their lag unknown until the group commits)."""

    def first(kafka_topic: str) -> StartAt | None:
        if kafka_topic == retry_kafka:
            return StartAt.BEGINNING
        if consume_from_where is None:
            return None
        return first_start(consume_from_where, retry_topic=False)

    return first


def build_progress(  # noqa: PLR0917
    info: GroupInfo,
    committed: Mapping[TP, int],
    partitions: Mapping[str, list[int] | None],
    ends: Mapping[TP, tuple[int, int]],
    heads: Mapping[TP, int | None],
    dlq: DlqSize,
    logical: Logical = logical_topic,
    *,
    health: Mapping[TP, PartitionHealth] | None = None,
    circuits: Mapping[str, MemberCircuit] | None = None,
    first: Callable[[str], StartAt | None] | None = None,
) -> GroupProgress:
    """Assemble a group's progress.  ``partitions``: Kafka topic → its partitions (``None``:
    the topic does not exist, then only its committed partitions are shown); ``ends``:
    ``(log start, end)``, missing where unknown (a leaderless partition); ``heads``: for the
    partitions that were probed, the first readable offset at or after the committed one,
    ``None`` when there is none; ``health``: each partition's replication, from the
    metadata; ``circuits``: member id → its circuit breaker's state, for the live members
    that publish one; ``first``: a topic's start rule without a committed offset
    (:func:`start_rule`; unknown when not given)."""
    health = health or {}
    rows: list[PartitionProgress] = []
    for topic, parts in partitions.items():
        known = parts if parts is not None else sorted(p for t, p in committed if t == topic)
        for p in known:
            tp = (topic, p)
            start, end = ends.get(tp, (None, None))
            rows.append(
                PartitionProgress(
                    topic=logical(topic),
                    kafka_topic=topic,
                    partition=p,
                    committed=committed.get(tp),
                    start=start,
                    end=end,
                    owner=info.owner(tp),
                    head=heads.get(tp),
                    drained=tp in heads and heads[tp] is None,
                    health=health.get(tp),
                    first=None if first is None else first(topic),
                )
            )
    rows.sort(key=lambda r: (*topic_order(r.kafka_topic, logical), r.partition))
    return GroupProgress(info, tuple(rows), dlq, dict(circuits or {}))
