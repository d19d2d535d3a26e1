"""What the admin commands report: pure data, the arithmetic (lag, waiting entries, reset
targets) and the rendering (text lines and JSON).  No clients, no clock reads.

Every topic is shown by its logical name (``orders``, ``%RETRY%g``, ``%DLQ%g``,
``SCHEDULE_TOPIC_XXXX/L03-10s``); JSON adds the Kafka name as ``kafka_topic``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from adapter.core.codec import logical_topic
from adapter.core.control import ResetTarget
from adapter.core.naming import is_dlq_topic, is_retry_topic
from adapter.core.timespec import format_time
from adapter.core.types import TP

Logical = Callable[[str], str]


def format_span_ms(ms: int | None) -> str:
    """A duration for people: ``850ms``, ``12.3s``, ``5m02s``, ``2h03m``, ``3d04h``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600:02d}h"


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


# --- partition health ------------------------------------------------------------------------
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


def _health_json(health: PartitionHealth | None) -> dict[str, Any]:
    return dict(_NO_HEALTH) if health is None else health.to_json()


def _marker(health: PartitionHealth | None) -> str:
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
        "  " + line for line in _table(None, rows, "ll")
    ]


# --- groups ----------------------------------------------------------------------------------
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
            for t, ps in sorted(by_topic.items(), key=lambda kv: _topic_order(kv[0], logical))
        )
        or "-"
    )


def _topic_order(kafka_topic: str, logical: Logical = logical_topic) -> tuple[int, str]:
    name = logical(kafka_topic)
    rank = 2 if is_dlq_topic(name) else 1 if is_retry_topic(name) else 0
    return rank, name


def compute_lag(
    committed: int | None,
    start: int | None,
    end: int | None,
    *,
    head: int | None = None,
    drained: bool = False,
) -> int | None:
    """Records the group still has to read on a partition: ``end - committed``.

    ``None`` when there is no committed offset (where the group starts depends on its
    ``auto.offset.reset``).  A committed offset below the log start counts from the log
    start (the records before it are gone).  ``head`` (the first record actually readable
    at or after the committed offset) skips transaction markers in front of it;
    ``drained`` says nothing readable is left (only markers): lag 0.
    """
    if committed is None or end is None:
        return None
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

    @property
    def lag(self) -> int | None:
        return compute_lag(
            self.committed, self.start, self.end, head=self.head, drained=self.drained
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
            **_health_json(self.health),
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

    @property
    def lag(self) -> int:
        """The sum of the known lags (a leaderless partition's is unknown)."""
        return sum(p.lag or 0 for p in self.partitions)

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
            "members": [m.to_json() for m in self.info.members],
            "partitions": [p.to_json() for p in self.partitions],
            "lag": self.lag,
            "dlq": self.dlq.to_json(),
        }

    def render(self) -> list[str]:
        info = self.info
        lines = [f"group {info.group}  state {info.state}  members {len(info.members)}"]
        for m in info.members:
            lines.append(f"  member {m.label}  {assignment_text(m.assignment)}  ({m.member_id})")
        rows = [
            (
                f"{p.topic}[{p.partition}]",
                _num(p.committed),
                _num(p.end),
                _num(p.lag),
                p.owner.label if p.owner else "-",
                _marker(p.health),
            )
            for p in self.partitions
        ]
        # the marker column has no heading: a healthy table looks as it always did
        header = ("topic[partition]", "committed", "end", "lag", "owner", "")
        lines.extend(_table(header, rows, "lrrrll"))
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
    return sorted(topics, key=_topic_order)


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
) -> GroupProgress:
    """Assemble a group's progress.  ``partitions``: Kafka topic → its partitions (``None``:
    the topic does not exist, then only its committed partitions are shown); ``ends``:
    ``(log start, end)``, missing where unknown (a leaderless partition); ``heads``: for the
    partitions that were probed, the first readable offset at or after the committed one,
    ``None`` when there is none; ``health``: each partition's replication, from the
    metadata."""
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
                )
            )
    rows.sort(key=lambda r: (*_topic_order(r.kafka_topic, logical), r.partition))
    return GroupProgress(info, tuple(rows), dlq)


# --- offset resets ---------------------------------------------------------------------------
def reset_offsets(
    target: ResetTarget,
    ends: Mapping[int, tuple[int, int]],
    at_time: Mapping[int, int | None] | None = None,
) -> dict[int, int]:
    """The new offset of every partition (``ends``: partition → ``(log start, end)``):
    earliest → log start, latest → end, a time → the first record at or after it (Kafka's
    ``offsetsForTimes``), or the end when no record is that recent."""
    out: dict[int, int] = {}
    for p, (start, end) in sorted(ends.items()):
        if target.kind == "earliest":
            out[p] = start
        elif target.kind == "latest":
            out[p] = end
        else:
            found = (at_time or {}).get(p)
            out[p] = end if found is None else max(start, min(found, end))
    return out


@dataclass(frozen=True, slots=True)
class ResetRow:
    partition: int
    old: int | None
    new: int
    by: Member | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "old": self.old,
            "new": self.new,
            "by": None if self.by is None else self.by.member_id,
            "by_client_id": None if self.by is None else self.by.client_id,
        }


@dataclass(frozen=True, slots=True)
class ResetResult:
    """``group reset-offset``: per partition, the old and the new committed offset.

    ``mode`` is ``admin`` (the group was empty: offsets altered with the AdminClient) or
    ``members`` (``--force``: the live members reset their own partitions).
    """

    group: str
    topic: str
    kafka_topic: str
    target: ResetTarget
    mode: str
    rows: tuple[ResetRow, ...]
    request_id: str | None = None
    not_applied: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "target": self.target.to_json() | {"text": self.target.describe()},
            "mode": self.mode,
            "request_id": self.request_id,
            "partitions": [r.to_json() for r in self.rows],
            "not_applied": list(self.not_applied),
        }

    def render(self) -> list[str]:
        how = (
            "group empty: offsets altered"
            if self.mode == "admin"
            else f"applied by the live members, request {self.request_id}"
        )
        lines = [f"reset group {self.group} on {self.topic} to {self.target.describe()} ({how})"]
        rows = [
            (
                f"{self.topic}[{r.partition}]",
                _num(r.old),
                "→",
                str(r.new),
                f"by {r.by.label}" if r.by else "",
            )
            for r in self.rows
        ]
        lines.extend("  " + line for line in _table(None, rows, "lrcll"))
        for p in self.not_applied:
            lines.append(f"  {self.topic}[{p}]  NOT reset")
        return lines


# --- ScheduleService status ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LevelPartition:
    """One partition of a delay-level topic; ``start``/``end`` are ``None`` when unknown (a
    leaderless partition: its offsets cannot be asked)."""

    partition: int
    committed: int | None
    start: int | None
    end: int | None
    head: int | None = None
    head_due_ms: int | None = None
    drained: bool = False
    health: PartitionHealth | None = None

    @property
    def waiting(self) -> int | None:
        """Entries not yet forwarded: ``end - committed`` (from the log start when the service
        never committed here); ``None`` when the end offset is unknown."""
        if self.end is None:
            return None
        base = self.start if self.committed is None else self.committed
        lag = compute_lag(base, self.start, self.end, head=self.head, drained=self.drained)
        return lag or 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "committed": self.committed,
            "start": self.start,
            "end": self.end,
            "waiting": self.waiting,
            "head_offset": self.head,
            "head_due_ms": self.head_due_ms,
            **_health_json(self.health),
        }


@dataclass(frozen=True, slots=True)
class LevelStatus:
    level: int
    delay: str
    topic: str
    kafka_topic: str
    partitions: tuple[LevelPartition, ...]

    @property
    def waiting(self) -> int:
        """The entries waiting in the partitions whose end offset is known."""
        return sum(p.waiting or 0 for p in self.partitions)

    @property
    def waiting_known(self) -> bool:
        return all(p.waiting is not None for p in self.partitions)

    @property
    def marker(self) -> str:
        """The worst health of its partitions, for the table (empty when all are ok)."""
        statuses = {_marker(p.health) for p in self.partitions}
        return next((s for s in (LEADERLESS, UNDER_REPLICATED) if s in statuses), "")

    @property
    def oldest_due_ms(self) -> int | None:
        dues = [p.head_due_ms for p in self.partitions if p.waiting and p.head_due_ms is not None]
        return min(dues) if dues else None

    def lag_ms(self, now_ms: int) -> int | None:
        """How late the oldest waiting entry is (0 when it is not due yet)."""
        due = self.oldest_due_ms
        return None if due is None else max(0, now_ms - due)

    def to_json(self, now_ms: int) -> dict[str, Any]:
        due = self.oldest_due_ms
        return {
            "level": self.level,
            "delay": self.delay,
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "waiting": self.waiting,
            "oldest_due_ms": due,
            "oldest_due": None if due is None else format_time(due),
            "lag_ms": self.lag_ms(now_ms),
            "partitions": [p.to_json() for p in self.partitions],
        }


@dataclass(frozen=True, slots=True)
class ScheduleStatus:
    """``schedule status``: the ScheduleService group and every delay-level topic."""

    namespace: str | None
    info: GroupInfo
    levels: tuple[LevelStatus, ...]
    now_ms: int

    @property
    def waiting(self) -> int:
        return sum(level.waiting for level in self.levels)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "group": self.info.group,
            "state": self.info.state,
            "members": [m.to_json() for m in self.info.members],
            "now_ms": self.now_ms,
            "levels": [level.to_json(self.now_ms) for level in self.levels],
            "waiting": self.waiting,
        }

    def render(self) -> list[str]:
        info = self.info
        who = ", ".join(m.label for m in info.members) or "none"
        ns = f"  namespace {self.namespace}" if self.namespace else ""
        lines = [f"ScheduleService group {info.group}{ns}  state {info.state}  members: {who}"]
        rows = [
            (
                str(level.level),
                level.topic,
                f"{level.waiting}{'' if level.waiting_known else '+?'}",
                format_time(level.oldest_due_ms),
                format_span_ms(level.lag_ms(self.now_ms)),
                level.marker,
            )
            for level in self.levels
        ]
        # the marker column has no heading: a healthy table looks as it always did
        header = ("level", "topic", "waiting", "oldest due", "lag", "")
        lines.extend(_table(header, rows, "rlrlll"))
        known = all(level.waiting_known for level in self.levels)
        lines.append(f"total waiting {self.waiting}{'' if known else ' (+ unknown: leaderless)'}")
        lines.extend(health_notes(self.unhealthy()))
        return lines

    def unhealthy(self) -> list[tuple[str, PartitionHealth]]:
        """``(topic[partition], health)`` of every delay-level partition that is
        under-replicated or leaderless."""
        return [
            (f"{level.topic}[{p.partition}]", p.health)
            for level in self.levels
            for p in level.partitions
            if p.health is not None and not p.health.ok
        ]


# --- text tables -----------------------------------------------------------------------------
def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(
    header: tuple[str, ...] | None, rows: Sequence[tuple[str, ...]], align: str
) -> list[str]:
    """Columns padded to their widest cell; ``align`` per column: ``l``, ``r`` or ``c``."""
    everything = ([header] if header else []) + list(rows)
    if not everything:
        return []
    widths = [max(len(row[i]) for row in everything) for i in range(len(everything[0]))]
    out = []
    for row in everything:
        cells = []
        for cell, width, how in zip(row, widths, align, strict=True):
            if how == "r":
                cells.append(cell.rjust(width))
            elif how == "c":
                cells.append(cell.center(width))
            else:
                cells.append(cell.ljust(width))
        out.append("  ".join(cells).rstrip())
    return out
