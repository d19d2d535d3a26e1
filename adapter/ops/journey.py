"""``msg show``: which records belong to a message, what each hop means, and the journey in
time order.  Pure: the records are read elsewhere.

A message keeps its ``UNIQ_KEY`` on every hop (retry copies and dead letters also carry
``ORIGIN_MESSAGE_ID``), so one id finds the original record, every delay-topic entry of a
failed delivery, every retry copy and the dead letter.  A record from a plain Kafka producer
has no ``UNIQ_KEY``; its id is ``<topic>:<partition>:<offset>``, which its copies carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from adapter.constants import (
    HEADER_DLQ_REASON,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HEADER_GROUP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core.codec import derived_message_id, logical_topic
from adapter.core.headers import parse_non_negative
from adapter.core.naming import group_of, is_dlq_topic, is_retry_topic, schedule_level_of
from adapter.core.timespec import format_time
from adapter.errors import InvalidInputError
from adapter.ops.views import Record

_ID_HEADERS: Final = frozenset(
    {PROPERTY_UNIQ_KEY, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_DLQ_ORIGIN_MESSAGE_ID}
)
_FAILURE_TEXT_MAX: Final = 80

#: Hop kinds, in the order they are shown when two hops share a timestamp.
SENT: Final = "sent"
DELIVERED: Final = "delivered"  # a scheduled message forwarded to its topic
SCHEDULED: Final = "scheduled"  # a scheduled message parked on a delay level
FAILED: Final = "failed"  # a failed delivery parked on a delay level for a retry
RETRY: Final = "retry"  # forwarded to the group's retry topic
DEAD_LETTERED: Final = "dead-lettered"
REDRIVEN: Final = "redriven"
_RANK: Final = {
    SENT: 0,
    SCHEDULED: 1,
    DELIVERED: 2,
    FAILED: 3,
    RETRY: 4,
    DEAD_LETTERED: 5,
    REDRIVEN: 6,
}


@dataclass(frozen=True, slots=True)
class Matcher:
    """What ``msg show`` looks for: a message id (``UNIQ_KEY``, or ``ORIGIN_MESSAGE_ID`` /
    ``DLQ_ORIGIN_MESSAGE_ID`` on copies, or the ``<topic>:<partition>:<offset>`` id of a plain
    record) or one of its ``KEYS``."""

    msg_id: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if (self.msg_id is None) == (self.key is None):
            raise InvalidInputError("--id/--key", (self.msg_id, self.key), "give exactly one")
        for name, value in (("--id", self.msg_id), ("--key", self.key)):
            if value is not None and (not value or value != value.strip()):
                raise InvalidInputError(name, value, "must be non-empty, without outer spaces")
        if self.key is not None and " " in self.key:
            raise InvalidInputError("--key", self.key, "one key (KEYS are space-separated)")

    def describe(self) -> str:
        return f"message {self.msg_id!r}" if self.msg_id is not None else f"key {self.key!r}"

    def matches(
        self,
        kafka_topic: str,
        partition: int,
        offset: int,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> bool:
        """Whether a raw record belongs to what is looked for (no decoding unless needed)."""
        if self.key is not None:
            wanted = self.key.encode("utf-8")
            return any(
                k == PROPERTY_KEYS and v is not None and wanted in v.split()
                for k, v in headers or ()
            )
        assert self.msg_id is not None
        wanted = self.msg_id.encode("utf-8")
        has_uniq = False
        for k, v in headers or ():
            if k in _ID_HEADERS:
                if v == wanted:
                    return True
                has_uniq = has_uniq or k == PROPERTY_UNIQ_KEY
        return not has_uniq and derived_message_id(kafka_topic, partition, offset) == self.msg_id

    def to_json(self) -> dict[str, Any]:
        return {"id": self.msg_id, "key": self.key}


@dataclass(frozen=True, slots=True)
class Hop:
    """One record of a message's journey, read as what happened to it."""

    kind: str
    time_ms: int | None
    topic: str
    kafka_topic: str
    partition: int
    offset: int
    msg_id: str
    origin_id: str
    group: str | None = None
    reconsume_times: int | None = None
    level: int | None = None
    due_ms: int | None = None
    real_topic: str | None = None
    failure_type: str | None = None
    failure_message: str | None = None
    reason: str | None = None
    keys: str | None = None
    tags: str | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @property
    def failure(self) -> str | None:
        if self.failure_type is None:
            return None
        text = (self.failure_message or "").replace("\n", " ")
        if len(text) > _FAILURE_TEXT_MAX:
            text = text[: _FAILURE_TEXT_MAX - 1] + "…"
        return f"{self.failure_type}: {text}" if text else self.failure_type

    @property
    def text(self) -> str:
        times = f"{PROPERTY_RECONSUME_TIME}={_num(self.reconsume_times)}"
        if self.kind == SENT:
            return f"sent to {self.where}"
        if self.kind == DELIVERED:
            return f"delivered to {self.where} (scheduled, due at {format_time(self.due_ms)})"
        if self.kind == SCHEDULED:
            return (
                f"scheduled on level {_num(self.level)} ({self.where}) for {self.real_topic}, "
                f"due at {format_time(self.due_ms)}"
            )
        if self.kind == FAILED:
            why = ", ".join(x for x in (times, self.failure) if x)
            return (
                f"failed in group {self.group or '?'} ({why}) → parked on level "
                f"{_num(self.level)} ({self.where}) due at {format_time(self.due_ms)}"
            )
        if self.kind == RETRY:
            return f"forwarded to {self.where} ({times})"
        if self.kind == DEAD_LETTERED:
            why = ", ".join(x for x in (self.reason or "no reason given", times, self.failure) if x)
            return f"dead-lettered to {self.where} ({why})"
        return f"redriven to {self.where}" + (f" for group {self.group}" if self.group else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "time_ms": self.time_ms,
            "time": None if self.time_ms is None else format_time(self.time_ms),
            "topic": self.topic,
            "kafka_topic": self.kafka_topic,
            "partition": self.partition,
            "offset": self.offset,
            "msg_id": self.msg_id,
            "group": self.group,
            "reconsume_times": self.reconsume_times,
            "level": self.level,
            "due_ms": self.due_ms,
            "real_topic": self.real_topic,
            "failure_type": self.failure_type,
            "failure_message": self.failure_message,
            "reason": self.reason,
            "text": self.text,
        }


def classify(record: Record) -> Hop:
    """What a record of a message says happened, by the topic it is on and its headers."""
    h = record.headers
    topic = logical_topic(record.kafka_topic, h.get(HEADER_GROUP))
    msg_id = h.get(PROPERTY_UNIQ_KEY) or derived_message_id(
        record.kafka_topic, record.partition, record.offset
    )
    origin = h.get(PROPERTY_ORIGIN_MESSAGE_ID) or h.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID) or msg_id
    reconsume = parse_non_negative(h.get(PROPERTY_RECONSUME_TIME))
    real_topic = h.get(PROPERTY_REAL_TOPIC)
    level_of = schedule_level_of(record.kafka_topic)
    group = h.get(HEADER_GROUP)
    kind: str
    level: int | None = None
    if level_of is not None:
        level = level_of[0]
        if real_topic and is_retry_topic(real_topic):
            kind = FAILED
            group = group or group_of(real_topic)
        else:
            kind = SCHEDULED
        level = parse_non_negative(h.get(PROPERTY_DELAY_TIME_LEVEL)) or level
    elif is_dlq_topic(topic):
        kind = DEAD_LETTERED
        group = group or group_of(topic)
    elif is_retry_topic(topic):
        kind = REDRIVEN if reconsume == 0 else RETRY
        group = group or group_of(topic)
    elif group:
        kind = REDRIVEN  # dlq redrive --to-origin: a copy on the original topic
    elif HEADER_DUE_MS in h:
        kind = DELIVERED
    else:
        kind = SENT
    return Hop(
        kind=kind,
        time_ms=record.timestamp_ms,
        topic=topic,
        kafka_topic=record.kafka_topic,
        partition=record.partition,
        offset=record.offset,
        msg_id=msg_id,
        origin_id=origin,
        group=group,
        reconsume_times=reconsume,
        level=level,
        due_ms=parse_non_negative(h.get(HEADER_DUE_MS)),
        real_topic=real_topic,
        failure_type=h.get(HEADER_FAILURE_TYPE),
        failure_message=h.get(HEADER_FAILURE_MESSAGE),
        reason=h.get(HEADER_DLQ_REASON),
        keys=h.get(PROPERTY_KEYS),
        tags=h.get(PROPERTY_TAGS),
    )


def _hop_order(hop: Hop) -> tuple[int, int, int, str, int, int]:
    return (
        hop.time_ms if hop.time_ms is not None else -1,
        _RANK.get(hop.kind, len(_RANK)),
        hop.reconsume_times or 0,
        hop.kafka_topic,
        hop.partition,
        hop.offset,
    )


@dataclass(frozen=True, slots=True)
class Journey:
    """Every hop found of one message, in time order (record timestamps; hops with the
    same timestamp in the order a message moves: sent, parked, forwarded, dead-lettered)."""

    msg_id: str
    hops: tuple[Hop, ...]

    @property
    def keys(self) -> str | None:
        return next((h.keys for h in self.hops if h.keys), None)

    @property
    def tags(self) -> str | None:
        return next((h.tags for h in self.hops if h.tags), None)

    @property
    def outcome(self) -> str:
        """``dead-lettered`` when the last hop is a dead letter, else ``in flight or
        consumed`` (consumption leaves no record)."""
        if self.hops and self.hops[-1].kind == DEAD_LETTERED:
            return "dead-lettered"
        return "in flight or consumed"

    def render(self) -> list[str]:
        about = ", ".join(
            f"{k} {v}" for k, v in (("keys", self.keys), ("tags", self.tags)) if v is not None
        )
        lines = [
            f"message {self.msg_id}" + (f" ({about})" if about else "") + f": {len(self.hops)} "
            f"hop(s), {self.outcome}"
        ]
        lines.extend(f"  {format_time(h.time_ms):24}  {h.text}" for h in self.hops)
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "msg_id": self.msg_id,
            "keys": self.keys,
            "tags": self.tags,
            "outcome": self.outcome,
            "hops": [h.to_json() for h in self.hops],
        }


def journeys(records: Iterable[Record]) -> list[Journey]:
    """Group the records found by message (origin id) and order each journey's hops."""
    by_message: dict[str, list[Hop]] = {}
    for record in records:
        hop = classify(record)
        by_message.setdefault(hop.origin_id, []).append(hop)
    out = [Journey(mid, tuple(sorted(hops, key=_hop_order))) for mid, hops in by_message.items()]
    out.sort(key=lambda j: (_hop_order(j.hops[0]), j.msg_id))
    return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """``msg show``: the journeys found and what was scanned to find them."""

    matcher: Matcher
    since_ms: int
    topics: tuple[str, ...]
    scanned: int
    max_records: int
    truncated: bool
    unfinished: tuple[str, ...]
    journeys: tuple[Journey, ...]

    def summary(self) -> str:
        text = (
            f"scanned {self.scanned} record(s) in {len(self.topics)} topic(s) since "
            f"{format_time(self.since_ms)}"
        )
        if self.truncated:
            text += f"; stopped at --max-records {self.max_records}: the journey may be incomplete"
        if self.unfinished:
            text += f"; not read to the end: {', '.join(self.unfinished)}"
        return text

    def render(self) -> list[str]:
        lines: list[str] = []
        for journey in self.journeys:
            lines.extend(journey.render())
        lines.append(self.summary())
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.matcher.to_json(),
            "since_ms": self.since_ms,
            "since": format_time(self.since_ms),
            "topics": list(self.topics),
            "scanned": self.scanned,
            "max_records": self.max_records,
            "truncated": self.truncated,
            "unfinished": list(self.unfinished),
            "journeys": [j.to_json() for j in self.journeys],
        }


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)
