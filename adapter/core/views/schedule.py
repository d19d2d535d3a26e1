"""``schedule status``: the ScheduleService group and the entries waiting in every
delay-level topic (how many, the oldest one due, how late it is)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapter.core.cluster import LEADERLESS, UNDER_REPLICATED, GroupInfo, PartitionHealth
from adapter.core.timespec import format_time
from adapter.core.views.health import health_json, health_marker, health_notes
from adapter.core.views.progress import compute_lag
from adapter.core.views.text import format_span_ms, text_table


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
            **health_json(self.health),
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
        statuses = {health_marker(p.health) for p in self.partitions}
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

    @property
    def service_seen(self) -> bool:
        """Whether a ScheduleService has run in the group: a member now, or an offset it
        committed on a delay-level topic.  Before that every entry waits for one to start."""
        return bool(self.info.members) or any(
            p.committed is not None for level in self.levels for p in level.partitions
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "group": self.info.group,
            "state": self.info.state,
            "members": [m.to_json() for m in self.info.members],
            "service_seen": self.service_seen,
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
        lines.extend(text_table(header, rows, "rlrlll"))
        known = all(level.waiting_known for level in self.levels)
        lines.append(f"total waiting {self.waiting}{'' if known else ' (+ unknown: leaderless)'}")
        lines.extend(health_notes(self.unhealthy()))
        if not self.service_seen:
            lines.append(
                f"no ScheduleService has run in group {info.group}: what waits here is "
                "forwarded once one starts (rmq-kafka schedule-service run)"
            )
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
