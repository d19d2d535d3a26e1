"""The admin commands: a group's progress, offset resets, a message's journey and the
ScheduleService's status.  Logical names in, logical names out.

Thin I/O over :class:`adapter.io.admin.AdminSession` (an AdminClient and short-lived
readers derived from the user's config); the decisions and the rendering are the pure
functions of :mod:`adapter.core.views`, :mod:`adapter.ops.journey` and
:mod:`adapter.core.control`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

from adapter.constants import (
    DEFAULT_SCHEDULE_SERVICE_GROUP,
    HEADER_DUE_MS,
    KAFKA_DLQ_PREFIX,
    KAFKA_RETRY_PREFIX,
    KAFKA_SCHEDULE_PREFIX,
    NAMESPACE_SEPARATOR,
)
from adapter.core import naming
from adapter.core.circuit_status import LOOKBACK_S, MemberCircuit, latest_statuses
from adapter.core.clock import Clock
from adapter.core.codec import logical_topic
from adapter.core.control import ResetRequest, ResetTarget, settle
from adapter.core.delay import DelayLevels
from adapter.core.headers import parse_non_negative
from adapter.core.offsets import ConsumeFromWhere
from adapter.core.types import TP
from adapter.core.views import (
    DlqSize,
    GroupInfo,
    GroupProgress,
    LevelPartition,
    LevelStatus,
    Record,
    ResetResult,
    ResetRow,
    ScheduleStatus,
    reset_offsets,
)
from adapter.errors import AdapterError, InvalidInputError, KafkaClientError, TopicNameError
from adapter.io.admin import AdminSession
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.control import publish_reset, read_statuses
from adapter.io.group_lag import known_ends, read_group_lag
from adapter.io.head_records import head_records, record_of
from adapter.ops.errors import (
    GroupLiveError,
    GroupNotFoundError,
    ResetIncompleteError,
    TopicNotFoundError,
)
from adapter.ops.journey import Matcher, SearchResult, journeys
from adapter.ops.progress import ProgressCallback

log = logging.getLogger("adapter.ops")

DEFAULT_MAX_RECORDS: Final = 1_000_000
_SCAN_PREFIXES: Final = (KAFKA_SCHEDULE_PREFIX, KAFKA_RETRY_PREFIX, KAFKA_DLQ_PREFIX)


_ends = known_ends


def _group_state(session: AdminSession, group: str) -> tuple[GroupInfo, dict[TP, int]]:
    """The group's description and committed offsets; a group with neither is missing."""
    naming.check_group(group)
    info = session.describe_group(group)
    committed = session.committed(group)
    if not committed and not info.members:
        raise GroupNotFoundError(group)
    return info, committed


# --- group progress --------------------------------------------------------------------------
def group_progress(
    config: Mapping[str, Any],
    group: str,
    *,
    timeout_s: float = 30.0,
    consume_from_where: ConsumeFromWhere | None = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    clock: Clock = SYSTEM_CLOCK,
) -> GroupProgress:
    """Per partition of every topic ``group`` subscribes (from its committed offsets and its
    members' assignments) and of ``%RETRY%<group>``: committed offset, end offset, lag,
    owner and replication health (a leaderless partition's end offset and lag are unknown,
    not waited for); the group's members; the size of ``%DLQ%<group>``.  A partition
    without a committed offset counts from where the group starts there: the retry topic
    from its beginning, the others by ``consume_from_where`` (``None``: unknown)."""
    naming.check_group(group)
    dlq_kafka = naming.to_kafka(naming.dlq_topic(group))
    session = AdminSession(config, timeout_s=timeout_s, what="group progress", clock=clock)
    what = f"group progress of {group!r}"
    lag = read_group_lag(session, group, consume_from_where=consume_from_where, what=what)
    if not lag.committed and not lag.info.members:
        raise GroupNotFoundError(group)
    dlq_health = session.partition_health(dlq_kafka, what) or {}
    dlq_parts = sorted(dlq_health)
    dlq_tps = [(dlq_kafka, p) for p in dlq_parts]
    ends = _ends(
        session,
        dlq_tps,
        dlq_health_by_tp := {(dlq_kafka, p): h for p, h in dlq_health.items()},
        what,
    )
    dlq_ends = [ends[tp] for tp in dlq_tps if tp in ends]
    dlq = DlqSize(
        topic=naming.dlq_topic(group),
        kafka_topic=dlq_kafka,
        exists=bool(dlq_parts),
        size=sum(e.end - e.start for e in dlq_ends),
        partitions=len(dlq_parts),
        unhealthy=tuple(
            (p, dlq_health_by_tp[(dlq_kafka, p)])
            for p in dlq_parts
            if not dlq_health_by_tp[(dlq_kafka, p)].ok
        ),
    )
    return lag.progress(dlq, _circuits(session, lag.info, what, clock.now_ms()))


def _circuits(
    session: AdminSession, info: GroupInfo, what: str, now: int
) -> dict[str, MemberCircuit]:
    """The circuit-breaker state each live member published on the control topic (members
    without a breaker publish none).  The control topic unreadable (an ACL that leaves it
    out): none, said in the log; the rest of the progress stands."""
    if not info.members:
        return {}
    try:
        statuses = read_statuses(session, info.group, now - int(LOOKBACK_S * 1000), what)
    except AdapterError as exc:
        log.warning("%s: circuit states not read from the control topic: %s", what, exc)
        return {}
    return latest_statuses(statuses, [m.member_id for m in info.members], info.group, now)


# --- offset reset ----------------------------------------------------------------------------
def reset_group_offsets(
    config: Mapping[str, Any],
    group: str,
    topic: str,
    target: ResetTarget,
    *,
    force: bool = False,
    timeout_s: float = 30.0,
    clock: Clock = SYSTEM_CLOCK,
) -> ResetResult:
    """RocketMQ's ``resetOffsetByTime``: move ``group``'s committed offsets on ``topic``.

    An empty group's offsets are altered with the AdminClient.  A group with live members
    is refused (naming them) unless ``force``: then the reset is published on the control
    topic and every live member that owns partitions of ``topic`` seeks, commits and
    acknowledges; :class:`ResetIncompleteError` says which did not within ``timeout_s``.
    """
    naming.check_group(group)
    kafka_topic = naming.to_kafka(topic)
    session = AdminSession(config, timeout_s=timeout_s, what="group reset-offset", clock=clock)
    what = f"resetting group {group!r} on {topic}"
    parts = session.partitions(kafka_topic, what)
    if parts is None:
        raise TopicNotFoundError(topic, kafka_topic)
    info, committed = _group_state(session, group)
    tps = [(kafka_topic, p) for p in parts]
    ends = session.watermarks(tps, what)
    at_time = None
    if target.time_ms is not None:
        found = session.offsets_for_time(tps, target.time_ms, what)
        at_time = {p: found.get((kafka_topic, p)) for p in parts}
    span = {p: (ends[(kafka_topic, p)].start, ends[(kafka_topic, p)].end) for p in parts}
    new = reset_offsets(target, span, at_time)
    old = {p: committed.get((kafka_topic, p)) for p in parts}

    if not info.members:
        refused = session.alter_offsets(group, {(kafka_topic, p): o for p, o in new.items()})
        if refused:
            again = session.describe_group(group)
            if again.members:
                raise GroupLiveError(group, again.members, "they joined while resetting")
            why = "; ".join(f"{topic}[{p}]: {e}" for (_, p), e in sorted(refused.items()))
            raise KafkaClientError(f"{what}: Kafka refused {why}")
        rows = tuple(ResetRow(p, old[p], o) for p, o in sorted(new.items()))
        return ResetResult(group, topic, kafka_topic, target, "admin", rows)

    if not force:
        raise GroupLiveError(
            group,
            info.members,
            "stop them first, or pass --force to have them reset their own partitions",
        )
    owners = info.owners(kafka_topic)
    if not owners:
        raise GroupLiveError(
            group,
            info.members,
            f"and none of them owns a partition of {topic}, so none can reset it: stop them first",
        )
    now = clock.now_ms()
    request = ResetRequest(
        request_id=uuid.uuid4().hex,
        group=group,
        topic=topic,
        kafka_topic=kafka_topic,
        target=target,
        offsets=new,
        issued_ms=now,
        expires_ms=now + int(timeout_s * 1000),
    )
    acks = publish_reset(session.config, request, owners, timeout_s=timeout_s, clock=clock)
    outcome = settle(request, owners, acks)
    rows = tuple(
        ResetRow(p, old[p], offset, info.member(member))
        for p, (member, offset) in sorted(outcome.applied.items())
    )
    not_applied = tuple(sorted(set(new) - set(outcome.applied)))
    result = ResetResult(
        group, topic, kafka_topic, target, "members", rows, request.request_id, not_applied
    )
    if not outcome.complete:
        problems = []

        def who(member_id: str, partitions: tuple[int, ...]) -> str:
            m = info.member(member_id)
            label = m.label if m is not None else member_id
            return f"{label} ({topic}[{','.join(map(str, partitions))}])"

        if outcome.silent:
            problems.append(
                f"no acknowledgement within {timeout_s:g} s from "
                + ", ".join(who(m, ps) for m, ps in outcome.silent.items())
            )
        if outcome.left_out:
            problems.append(
                "acknowledged without applying "
                + ", ".join(who(m, ps) for m, ps in outcome.left_out.items())
            )
        if outcome.unowned:
            problems.append(f"no live member owns {topic}[{','.join(map(str, outcome.unowned))}]")
        done = ", ".join(f"{topic}[{r.partition}] → {r.new}" for r in rows) or "nothing"
        raise ResetIncompleteError(
            f"reset of group {group!r} on {topic} not confirmed: {'; '.join(problems)} "
            f"(applied: {done})",
            result,
        )
    return result


# --- message journey -------------------------------------------------------------------------
def find_message(
    config: Mapping[str, Any],
    matcher: Matcher,
    *,
    since_ms: int,
    topic: str | None = None,
    max_records: int = DEFAULT_MAX_RECORDS,
    timeout_s: float = 30.0,
    progress: ProgressCallback | None = None,
) -> SearchResult:
    """Find a message (by id or key) in ``topic`` (if given), every delay-level topic, every
    retry topic and every DLQ, among the records written since ``since_ms``; at most
    ``max_records`` records are read."""
    if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
        raise InvalidInputError("--max-records", max_records, "must be a whole number >= 1")
    session = AdminSession(config, timeout_s=timeout_s, what="msg show")
    what = f"looking for {matcher.describe()}"
    all_topics = session.topics()
    scan = sorted(t for t in all_topics if t.startswith(_SCAN_PREFIXES))
    if topic is not None:
        kafka_topic = naming.to_kafka(topic)
        if kafka_topic not in all_topics:
            if session.partitions(kafka_topic, what) is None:
                raise TopicNotFoundError(topic, kafka_topic)
            all_topics[kafka_topic] = session.partitions(kafka_topic, what) or []
        scan = [kafka_topic, *(t for t in scan if t != kafka_topic)]
    tps = [(t, p) for t in scan for p in all_topics[t]]
    ends = session.watermarks(tps, what)
    starts = session.offsets_for_time(tps, since_ms, what)
    ranges = {
        tp: (max(start, ends[tp].start), ends[tp].end)
        for tp, start in starts.items()
        if start is not None
    }
    found: list[Record] = []

    def visit(kmsg: Any) -> bool:
        if matcher.matches(kmsg.topic(), kmsg.partition(), kmsg.offset(), kmsg.headers()):
            found.append(record_of(kmsg))
        return False

    read = session.read(ranges, visit, what=what, max_records=max_records, progress=progress)
    return SearchResult(
        matcher=matcher,
        since_ms=since_ms,
        topics=tuple(logical_topic(t) for t in scan),
        scanned=read.records,
        max_records=max_records,
        truncated=read.truncated,
        unfinished=tuple(f"{logical_topic(t)}[{p}]" for t, p in read.unfinished),
        journeys=tuple(journeys(found)),
    )


# --- ScheduleService status ------------------------------------------------------------------
def _schedule_namespace(kafka_topic: str) -> tuple[str | None, int, str] | None:
    """``(namespace, level, delay)`` of a delay-level topic; ``None`` for any other topic."""
    level = naming.schedule_level_of(kafka_topic)
    if level is None:
        return None
    try:
        logical = naming.from_kafka(kafka_topic)
    except TopicNameError:
        return None
    namespace, sep, _ = logical.rpartition(NAMESPACE_SEPARATOR)
    return (namespace if sep else None), level[0], level[1]


def schedule_status(
    config: Mapping[str, Any],
    *,
    namespace: str | None = None,
    group: str | None = None,
    timeout_s: float = 30.0,
    clock: Clock = SYSTEM_CLOCK,
) -> ScheduleStatus:
    """Per delay-level topic (of ``namespace``): entries waiting (end - the ScheduleService
    group's committed offset; every entry when no service has run yet), the oldest due time
    (``RMQ_DUE_MS`` of the next entry) and how late it is; per partition its replication
    health (a leaderless partition's entries are unknown, not waited for)."""
    if namespace is not None:
        naming.schedule_topic(1, DelayLevels.DEFAULT, namespace)  # refuses a bad namespace
    if group is None:
        group = (
            f"{DEFAULT_SCHEDULE_SERVICE_GROUP}.{namespace}"
            if namespace
            else DEFAULT_SCHEDULE_SERVICE_GROUP
        )
    naming.check_group(group)
    session = AdminSession(config, timeout_s=timeout_s, what="schedule status", clock=clock)
    what = f"schedule status of group {group!r}"
    levels: dict[str, tuple[int, str]] = {}
    topics_health = session.topics_health()
    all_topics = {t: sorted(parts) for t, parts in topics_health.items()}
    for t in all_topics:
        parsed = _schedule_namespace(t)
        if parsed is not None and parsed[0] == (namespace or None):
            levels[t] = (parsed[1], parsed[2])
    if not levels:
        where = f"namespace {namespace!r}" if namespace else "no namespace"
        raise InvalidInputError(
            "--namespace",
            namespace,
            f"no delay-level topics ({KAFKA_SCHEDULE_PREFIX}*) for {where}: run "
            "'rmq-kafka topics ensure' or start a ScheduleService",
        )
    # a group no service has run in is not an error here: its entries are what waits for one
    info = session.describe_group(group)
    committed = session.committed(group)
    health = {(t, p): h for t in levels for p, h in topics_health[t].items()}
    tps = [(t, p) for t in levels for p in all_topics[t]]
    ends = _ends(session, tps, health, what)

    def position(tp: TP) -> int:
        c = committed.get(tp)
        return ends[tp].start if c is None or c < ends[tp].start else c

    heads = head_records(session, {tp: (position(tp), ends[tp].end) for tp in ends}, what)
    out = []
    for t, (level, delay) in sorted(levels.items(), key=lambda kv: (kv[1][0], kv[0])):
        rows = []
        for p in all_topics[t]:
            tp = (t, p)
            rec = heads.get(tp)
            known = ends.get(tp)
            rows.append(
                LevelPartition(
                    partition=p,
                    committed=committed.get(tp),
                    start=None if known is None else known.start,
                    end=None if known is None else known.end,
                    head=None if rec is None else rec.offset,
                    head_due_ms=None
                    if rec is None
                    else parse_non_negative(rec.headers.get(HEADER_DUE_MS)),
                    drained=tp in heads and rec is None,
                    health=health.get(tp),
                )
            )
        out.append(LevelStatus(level, delay, logical_topic(t), t, tuple(rows)))
    return ScheduleStatus(namespace, info, tuple(out), clock.now_ms())
