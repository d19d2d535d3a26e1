"""What the console shows beyond ``group progress`` and ``schedule status``: the groups that
use the adapter, a DLQ's growth, and a group's retry ladder (how many of its messages wait at
each delay level, and when the next is due).  All read from Kafka, nothing kept.

The ladder reads the delay-level records the ScheduleService has not forwarded yet (from its
committed position to the end) and counts those whose ``RMQ_GROUP`` is the group; at most
``max_records`` records a call, so a long backlog is reported as a lower bound
(``complete`` is ``False``), never waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from adapter.constants import (
    HEADER_DUE_MS,
    HEADER_GROUP,
    KAFKA_DLQ_PREFIX,
    KAFKA_RETRY_PREFIX,
    TRACE_TOPIC,
)
from adapter.core import naming
from adapter.core.headers import HeaderView, parse_non_negative
from adapter.core.timespec import format_time
from adapter.core.types import TP
from adapter.core.views import ScheduleStatus
from adapter.errors import TopicNameError
from adapter.io.admin import AdminSession
from adapter.io.avro import TRACE_SCHEMA_HEADER, decode_trace_records
from adapter.io.clock import SYSTEM_CLOCK

log = logging.getLogger("adapter.ops.ladder")

DEFAULT_LADDER_MAX_RECORDS: Final = 200_000
HOUR_MS: Final = 3_600_000


def adapter_groups(config: Mapping[str, Any], *, timeout_s: float = 30.0) -> list[str]:
    """Every group that has a ``%RETRY%`` or ``%DLQ%`` topic here, sorted."""
    session = AdminSession(config, timeout_s=timeout_s, what="listing groups")
    groups: set[str] = set()
    for kafka_topic in session.topics():
        if not kafka_topic.startswith((KAFKA_RETRY_PREFIX, KAFKA_DLQ_PREFIX)):
            continue
        try:
            group = naming.group_of(naming.from_kafka(kafka_topic))
        except TopicNameError:
            continue
        if group:
            groups.add(group)
    return sorted(groups)


def dlq_growth(
    config: Mapping[str, Any], group: str, *, window_ms: int = HOUR_MS, timeout_s: float = 30.0
) -> int | None:
    """How many dead letters arrived in the last ``window_ms`` (``None``: no DLQ)."""
    what = f"DLQ growth of {group!r}"
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    session = AdminSession(config, timeout_s=timeout_s, what=what)
    parts = session.partitions(kafka_topic, what)
    if parts is None:
        return None
    tps = [(kafka_topic, p) for p in parts]
    ends = session.watermarks(tps, what)
    since = session.offsets_for_time(tps, SYSTEM_CLOCK.now_ms() - window_ms, what)
    return sum(
        ends[tp].end - (ends[tp].end if at is None else at)
        for tp, at in since.items()
        if tp in ends
    )


@dataclass(frozen=True, slots=True)
class LadderRung:
    """One delay level of a group's ladder."""

    level: int
    delay: str
    topic: str
    waiting: int
    next_due_ms: int | None
    #: all the level's waiting records were read (else ``waiting`` is a lower bound)
    complete: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "delay": self.delay,
            "topic": self.topic,
            "waiting": self.waiting,
            "next_due_ms": self.next_due_ms,
            "next_due": None if self.next_due_ms is None else format_time(self.next_due_ms),
            "complete": self.complete,
        }


@dataclass(frozen=True, slots=True)
class Ladder:
    group: str
    rungs: tuple[LadderRung, ...]
    scanned: int

    @property
    def waiting(self) -> int:
        return sum(r.waiting for r in self.rungs)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "waiting": self.waiting,
            "scanned": self.scanned,
            "levels": [r.to_json() for r in self.rungs],
        }


def group_ladder(
    config: Mapping[str, Any],
    group: str,
    schedule: ScheduleStatus,
    *,
    max_records: int = DEFAULT_LADDER_MAX_RECORDS,
    timeout_s: float = 30.0,
) -> Ladder:
    """``group``'s messages waiting on each delay level of ``schedule`` (a
    :func:`adapter.ops.admin.schedule_status` read just before): the records between the
    ScheduleService's position and the end whose ``RMQ_GROUP`` is ``group``."""
    naming.check_group(group)
    what = f"retry ladder of {group!r}"
    session = AdminSession(config, timeout_s=timeout_s, what=what)
    ranges: dict[TP, tuple[int, int]] = {}
    level_of: dict[str, int] = {}
    for level in schedule.levels:
        level_of[level.kafka_topic] = level.level
        for p in level.partitions:
            if p.start is None or p.end is None:
                continue
            position = p.start if p.committed is None or p.committed < p.start else p.committed
            if position < p.end:
                ranges[(level.kafka_topic, p.partition)] = (position, p.end)
    counts: dict[int, int] = {}
    due: dict[int, int] = {}
    text = group.encode()

    def visit(kmsg: Any) -> bool:
        headers = kmsg.headers() or ()
        if not any(k == HEADER_GROUP and v == text for k, v in headers):
            return False
        lvl = level_of[kmsg.topic()]
        counts[lvl] = counts.get(lvl, 0) + 1
        at = parse_non_negative(HeaderView.read(headers).text.get(HEADER_DUE_MS))
        if at is not None and (lvl not in due or at < due[lvl]):
            due[lvl] = at
        return False

    result = session.read(ranges, visit, what=what, max_records=max_records)
    complete = not result.truncated and not result.unfinished
    rungs = tuple(
        LadderRung(
            level.level,
            level.delay,
            level.topic,
            counts.get(level.level, 0),
            due.get(level.level),
            complete,
        )
        for level in schedule.levels
    )
    return Ladder(group, rungs, result.records)


@dataclass(frozen=True, slots=True)
class Outcomes:
    """How the group's consumptions ended, per ``reconsume_times``, among the last ``window``
    records of the trace topic (consumers with tracing on write them)."""

    group: str
    trace_topic: str
    #: reconsume_times -> successes
    successes: Mapping[int, int]
    #: reconsume_times -> failures sent to a retry level / to the DLQ
    retries: Mapping[int, int]
    dead: Mapping[int, int]
    events: int
    exists: bool

    def to_json(self) -> dict[str, Any]:
        times = sorted({*self.successes, *self.retries, *self.dead})
        return {
            "trace_topic": self.trace_topic,
            "exists": self.exists,
            "events": self.events,
            "by_reconsume_times": [
                {
                    "reconsume_times": t,
                    "succeeded": self.successes.get(t, 0),
                    "retried": self.retries.get(t, 0),
                    "dead_lettered": self.dead.get(t, 0),
                }
                for t in times
            ],
        }


def consume_outcomes(
    config: Mapping[str, Any],
    group: str,
    *,
    trace_topic: str = TRACE_TOPIC,
    window: int = 20_000,
    timeout_s: float = 30.0,
) -> Outcomes:
    """Per ``reconsume_times``: how many of ``group``'s consumptions succeeded, were retried
    or dead-lettered, from the last ``window`` records of each partition of the trace topic."""
    naming.check_group(group)
    what = f"consume outcomes of {group!r}"
    kafka_topic = naming.to_kafka(trace_topic)
    session = AdminSession(config, timeout_s=timeout_s, what=what)
    parts = session.partitions(kafka_topic, what)
    counts: dict[str, dict[int, int]] = {"SUCCESS": {}, "RETRY": {}, "DLQ": {}}
    if not parts:
        return Outcomes(group, trace_topic, {}, {}, {}, 0, False)
    ends = session.watermarks([(kafka_topic, p) for p in parts], what)
    ranges = {tp: (max(e.start, e.end - window), e.end) for tp, e in ends.items()}
    seen = [0]

    def visit(kmsg: Any) -> bool:
        tag = HeaderView.read(kmsg.headers()).text.get(TRACE_SCHEMA_HEADER)
        try:
            events = decode_trace_records(kmsg.value() or b"", tag)
        except (ValueError, KeyError, EOFError, TypeError) as exc:
            log.debug("%s: trace record at %d not read: %s", what, kmsg.offset(), exc)
            return False
        for e in events:
            if e.get("group") != group or e.get("source") != "consumer":
                continue
            seen[0] += 1
            by = counts.get(str(e.get("status")))
            if by is not None:
                t = int(e.get("reconsume_times") or 0)
                by[t] = by.get(t, 0) + 1
        return False

    session.read(ranges, visit, what=what)
    return Outcomes(
        group, trace_topic, counts["SUCCESS"], counts["RETRY"], counts["DLQ"], seen[0], True
    )
