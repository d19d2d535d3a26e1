"""What a consumer group still has to read, from the cluster: its committed offsets, the
partitions of the topics it reads and of its retry topic, their offsets, and (for a short
remainder) whether anything but transaction markers is left.  ``rmq-kafka group progress``
and the ScheduleService's backlog gauge (:mod:`adapter.io.metrics`) read a group's lag
through this one function; the arithmetic is :func:`adapter.core.views.compute_lag`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from adapter.core import naming
from adapter.core.circuit_status import MemberCircuit
from adapter.core.offsets import ConsumeFromWhere, StartAt
from adapter.core.types import TP
from adapter.core.views import (
    DlqSize,
    GroupInfo,
    GroupProgress,
    PartitionHealth,
    build_progress,
    start_rule,
    subscribed_topics,
)
from adapter.io.admin import AdminSession, Ends
from adapter.io.head_records import head_records

__all__ = ["PROBE_LAG_MAX", "GroupLag", "known_ends", "read_group_lag", "readable"]

#: A partition whose lag is at most this is read once to see whether anything but
#: transaction markers is left (exactly-once forwarding leaves a marker after the last record).
PROBE_LAG_MAX: Final = 64


def readable(tps: list[TP], health: Mapping[TP, PartitionHealth]) -> list[TP]:
    """The partitions whose offsets can be asked: not a leaderless one (a request for its
    offsets would wait for a leader until it times out, or fail the whole request): its end
    offset is reported unknown instead."""
    return [tp for tp in tps if tp not in health or health[tp].readable]


def known_ends(
    session: AdminSession, tps: list[TP], health: dict[TP, PartitionHealth], what: str
) -> dict[TP, Ends]:
    """The offsets of ``tps`` but the leaderless ones (unknown).  A partition the metadata
    gave a leader that could not answer (down, not yet noticed by the cluster) is unknown
    too, and its health is read again: by then it is usually reported leaderless."""
    asked = readable(tps, health)
    ends = session.watermarks(asked, what, known_only=True)
    missing = {tp for tp in asked if tp not in ends}
    for topic in sorted({t for t, _ in missing}):
        fresh = session.partition_health(topic, what) or {}
        health.update(((t, p), fresh[p]) for t, p in missing if t == topic and p in fresh)
    return ends


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One reading of a group's position on every topic it reads and on its retry topic."""

    group: str
    info: GroupInfo
    committed: Mapping[TP, int]
    #: Kafka topic -> its partitions (``None``: the topic does not exist)
    partitions: Mapping[str, list[int] | None]
    ends: Mapping[TP, Ends]
    #: the first readable offset of the probed partitions (``None``: only markers left)
    heads: Mapping[TP, int | None]
    health: Mapping[TP, PartitionHealth]
    first: Callable[[str], StartAt | None]

    @property
    def retry_kafka(self) -> str:
        return naming.to_kafka(naming.retry_topic(self.group))

    def progress(
        self, dlq: DlqSize | None = None, circuits: Mapping[str, MemberCircuit] | None = None
    ) -> GroupProgress:
        """The group's progress (per partition, lag included); ``dlq`` its DLQ's size."""
        if dlq is None:
            dlq_kafka = naming.to_kafka(naming.dlq_topic(self.group))
            dlq = DlqSize(naming.dlq_topic(self.group), dlq_kafka, False, 0, 0)
        return build_progress(
            self.info,
            self.committed,
            self.partitions,
            {tp: (e.start, e.end) for tp, e in self.ends.items()},
            self.heads,
            dlq,
            health=self.health,
            circuits=circuits,
            first=self.first,
        )

    def lags(self) -> tuple[int, int]:
        """``(lag on the topics it subscribes, lag on its retry topic)``, known lags only."""
        progress = self.progress()
        retry = progress.lag_of([self.retry_kafka])
        return progress.lag - retry, retry


def read_group_lag(
    session: AdminSession,
    group: str,
    *,
    consume_from_where: ConsumeFromWhere | None = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    what: str,
) -> GroupLag:
    """Read ``group``'s position: the topics it committed offsets on or its members own
    partitions of, and its retry topic.  A partition without a committed offset counts from
    where the group starts there (:func:`adapter.core.views.start_rule`: the retry topic
    from its beginning; the others by ``consume_from_where``, ``None``: unknown)."""
    naming.check_group(group)
    retry_kafka = naming.to_kafka(naming.retry_topic(group))
    dlq_kafka = naming.to_kafka(naming.dlq_topic(group))
    first = start_rule(retry_kafka, consume_from_where)
    info = session.describe_group(group)
    committed = session.committed(group)
    partitions: dict[str, list[int] | None] = {}
    health: dict[TP, PartitionHealth] = {}
    for topic in subscribed_topics(info, committed, retry_kafka, dlq_kafka):
        parts = session.partition_health(topic, what)
        if parts is not None or topic != retry_kafka:
            partitions[topic] = None if parts is None else sorted(parts)
            health.update(((topic, p), h) for p, h in (parts or {}).items())
    tps = [(t, p) for t, ps in partitions.items() for p in ps or ()]
    ends = known_ends(session, tps, health, what)
    probe: dict[TP, tuple[int, int]] = {}
    for tp in tps:
        if tp not in ends:
            continue
        start, end = ends[tp].start, ends[tp].end
        if tp in committed:
            position = committed[tp]
        elif first(tp[0]) is StartAt.BEGINNING:
            position = start  # owed from the log start: what is there may be markers only
        else:
            continue
        if start <= position < end <= position + PROBE_LAG_MAX:
            probe[tp] = (position, end)
    heads = {
        tp: (None if rec is None else rec.offset)
        for tp, rec in head_records(session, probe, what).items()
    }
    return GroupLag(group, info, committed, partitions, ends, heads, health, first)
