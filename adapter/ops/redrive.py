"""One redrive for ``rmq-kafka dlq redrive`` and the console: choose the dead letters (ids, a
filter, or all), send them back through :func:`adapter.services.redrive.redrive` (idempotent,
dry run, rate, loop guard) and write what was asked and what came of it to the audit log.

The audit log is the Kafka topic ``rmq.audit`` (key: the group; value: one JSON object per
redrive: who, when, the selection, the options and the counts), so every console and every
CLI that redrives sees the same history, and nothing is kept anywhere else.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import Producer as _KafkaProducer

from adapter.core import naming
from adapter.core.timespec import format_time
from adapter.errors import InvalidInputError, KafkaClientError
from adapter.io.admin import AdminSession
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import producer_config
from adapter.io.errors import make_client, send_error
from adapter.services.dlq import DeadLetterEntry, Progress, read_dlq, read_dlq_at
from adapter.services.redrive import RedriveError, RedriveResult, check_redrive_options, redrive

log = logging.getLogger("adapter.ops.redrive")

#: Kafka name of the audit log (one partition: one history, in order).
AUDIT_TOPIC: Final = "rmq.audit"
AUDIT_TOPIC_CONFIG: Final = {"retention.ms": str(90 * 86_400_000)}
_SEND_TIMEOUT_S: Final = 15.0
#: At most this many ids in one redrive request.
MAX_IDS: Final = 1000


@dataclass(frozen=True, slots=True)
class DlqFilter:
    """Which dead letters a filter selects; a field left ``None`` selects every value."""

    origin_topic: str | None = None
    reason: str | None = None
    failure_type: str | None = None
    key: str | None = None
    msg_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def matches(self, e: DeadLetterEntry) -> bool:
        m = e.message
        born = m.store_timestamp
        return (
            (self.origin_topic is None or e.origin_topic == self.origin_topic)
            and (self.reason is None or e.reason == self.reason)
            and (self.failure_type is None or e.failure_type == self.failure_type)
            and (self.key is None or self.key in (m.keys or "").split(" "))
            and (self.msg_id is None or m.msg_id == self.msg_id)
            and (self.since_ms is None or (born is not None and born >= self.since_ms))
            and (self.until_ms is None or (born is not None and born < self.until_ms))
        )

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in {
                "origin_topic": self.origin_topic,
                "reason": self.reason,
                "failure_type": self.failure_type,
                "key": self.key,
                "msg_id": self.msg_id,
                "since": None if self.since_ms is None else format_time(self.since_ms),
                "until": None if self.until_ms is None else format_time(self.until_ms),
            }.items()
            if v is not None
        }


@dataclass(frozen=True, slots=True)
class Selection:
    """What a redrive takes from the DLQ: the listed ids, what a filter matches, or all (all
    entries, or the first ``limit``)."""

    ids: tuple[str, ...] | None = None
    filter: DlqFilter | None = None
    all: bool = False
    limit: int | None = None
    #: with ``ids``: where they are (``(partition, offset)``, as a DLQ page shows them), so
    #: only those records are read; a hint: an id not found there is looked for in the DLQ
    positions: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        given = sum((self.ids is not None, self.filter is not None, self.all))
        if given != 1:
            raise InvalidInputError(
                "selection", self.describe(), 'give exactly one of "ids", "filter" or "all"'
            )
        if self.positions is not None and self.ids is None:
            raise InvalidInputError("positions", len(self.positions), "only go with ids")
        if self.ids is not None:
            if not self.ids or len(self.ids) > MAX_IDS:
                raise InvalidInputError(
                    "ids", len(self.ids), f"give from 1 to {MAX_IDS} message ids"
                )
            for one in self.ids:
                if not isinstance(one, str) or not one or one != one.strip() or len(one) > 256:
                    raise InvalidInputError(
                        "ids", one, "a message id is a non-empty string without outer spaces"
                    )

    def chooses(self, e: DeadLetterEntry) -> bool:
        if self.ids is not None:
            return e.message.msg_id in self.ids
        if self.filter is not None:
            return self.filter.matches(e)
        return True

    def describe(self) -> dict[str, Any]:
        if self.ids is not None:
            return {"ids": list(self.ids)}
        if self.filter is not None:
            return {"filter": self.filter.to_json()}
        return {"all": True, **({"limit": self.limit} if self.limit is not None else {})}


@dataclass(frozen=True, slots=True)
class RedriveOptions:
    to_origin: bool = False
    skip_missing_bodies: bool = False
    again: bool = False
    dry_run: bool = False
    rate: float | None = None
    max_redrives: int | None = None
    force: bool = False

    def __post_init__(self) -> None:
        check_redrive_options(self.rate, self.max_redrives)

    def to_json(self) -> dict[str, Any]:
        return {
            "to_origin": self.to_origin,
            "again": self.again,
            "dry_run": self.dry_run,
            "rate": self.rate,
            "max_redrives": self.max_redrives,
            "force": self.force,
        }


@dataclass(frozen=True, slots=True)
class RedriveOutcome:
    """What one redrive did: the entries it chose, the result and the audit record."""

    group: str
    selected: int
    result: RedriveResult
    audit: dict[str, Any] = field(default_factory=dict)
    missing_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "group": self.group,
            "dry_run": r.dry_run,
            "selected": self.selected,
            "sent": r.sent,
            "would_send": len(r.planned) if r.dry_run else None,
            "already_redriven": r.already,
            "refused_by_loop_guard": len(r.guarded),
            "loop_guarded_ids": list(r.guarded),
            "skipped": [{"msg_id": m, "where": w, "why": y} for m, w, y in r.skipped],
            "failed": [{"msg_id": m, "where": w, "why": y} for m, w, y in r.failed],
            "plan": [{"msg_id": m, "to": t} for m, t in r.planned],
            "missing_ids": list(self.missing_ids),
        }


def run_redrive(
    config: Mapping[str, Any],
    group: str,
    selection: Selection,
    options: RedriveOptions,
    *,
    who: str,
    source: str,
    entries: Sequence[DeadLetterEntry] | None = None,
    reading: Progress | None = None,
    sending: Progress | None = None,
    timeout_s: float = 30.0,
) -> RedriveOutcome:
    """Read ``%DLQ%<group>`` (unless ``entries`` were read already), choose by ``selection``,
    redrive with ``options`` and append the audit record (a dry run too: what was looked at
    is part of the history).  A refused send raises :class:`RedriveError` after the audit
    record says so."""
    naming.check_group(group)
    if entries is None and selection.ids is not None and selection.positions:
        at = read_dlq_at(config, group, selection.positions)
        if at is not None and {i for i in selection.ids} <= {e.message.msg_id for e in at}:
            entries = at
    if entries is None:
        entries = read_dlq(config, group, limit=selection.limit, progress=reading)
    chosen = [e for e in entries if selection.chooses(e)]
    missing: tuple[str, ...] = ()
    if selection.ids is not None:
        found = {e.message.msg_id for e in chosen}
        missing = tuple(i for i in selection.ids if i not in found)
    error: RedriveError | None = None
    try:
        result = redrive(
            config,
            group,
            chosen,
            to_origin=options.to_origin,
            skip_missing_bodies=options.skip_missing_bodies,
            again=options.again,
            dry_run=options.dry_run,
            rate=options.rate,
            max_redrives=options.max_redrives,
            force=options.force,
            timeout_s=timeout_s,
            progress=sending,
        )
    except RedriveError as exc:
        error, result = exc, exc.result
    outcome = RedriveOutcome(group, len(chosen), result, missing_ids=missing)
    record = audit_record(outcome, selection, options, who=who, source=source)
    write_audit(config, record, timeout_s=timeout_s)
    if error is not None:
        raise error
    return RedriveOutcome(group, len(chosen), result, record, missing)


def audit_record(
    outcome: RedriveOutcome,
    selection: Selection,
    options: RedriveOptions,
    *,
    who: str,
    source: str,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The audit log's record of one redrive.  Pure (given ``now_ms``)."""
    at = SYSTEM_CLOCK.now_ms() if now_ms is None else now_ms
    r = outcome.result
    return {
        "at_ms": at,
        "at": format_time(at),
        "who": who,
        "source": source,
        "group": outcome.group,
        "action": "redrive",
        "selection": selection.describe(),
        "options": options.to_json(),
        "selected": outcome.selected,
        "sent": r.sent,
        "would_send": len(r.planned) if r.dry_run else None,
        "already_redriven": r.already,
        "refused_by_loop_guard": len(r.guarded),
        "skipped": len(r.skipped),
        "failed": len(r.failed),
    }


def write_audit(
    config: Mapping[str, Any], record: Mapping[str, Any], *, timeout_s: float = 30.0
) -> None:
    """Append ``record`` to the audit log (created on first use) and wait for the broker."""
    what = "writing the audit log"
    session = AdminSession(config, timeout_s=timeout_s, what=what)
    if not session.partitions(AUDIT_TOPIC, what):
        session.ensure_topic(AUDIT_TOPIC, 1, AUDIT_TOPIC_CONFIG, what)
    conf = producer_config(session.config)
    conf.update({"acks": "all", "enable.idempotence": True})
    producer = make_client(_KafkaProducer, conf, what="audit producer")
    failure: list[Any] = []

    def done(err: Any, kmsg: Any) -> None:
        if err is not None:
            failure.append(send_error(err, kmsg, topic=AUDIT_TOPIC))

    producer.produce(
        AUDIT_TOPIC,
        key=str(record.get("group", "")).encode(),
        value=json.dumps(record, ensure_ascii=False).encode(),
        on_delivery=done,
    )
    left = producer.flush(_SEND_TIMEOUT_S)
    if failure:
        raise KafkaClientError(f"{what}: {failure[0]}")
    if left:
        raise KafkaClientError(f"{what}: not acknowledged by the broker in {_SEND_TIMEOUT_S:g} s")


def read_audit(
    config: Mapping[str, Any],
    *,
    group: str | None = None,
    limit: int = 50,
    window: int = 5000,
    timeout_s: float = 15.0,
) -> list[dict[str, Any]]:
    """The latest ``limit`` audit records (of ``group``), newest first, from the last
    ``window`` records of the log (a page does not read the whole history)."""
    what = "reading the audit log"
    session = AdminSession(config, timeout_s=timeout_s, what=what)
    parts = session.partitions(AUDIT_TOPIC, what)
    if not parts:
        return []
    ends = session.watermarks([(AUDIT_TOPIC, p) for p in parts], what)
    ranges = {tp: (max(e.start, e.end - window), e.end) for tp, e in ends.items()}
    found: list[dict[str, Any]] = []

    def visit(kmsg: Any) -> bool:
        try:
            rec = json.loads(kmsg.value() or b"")
        except ValueError:
            log.warning("audit log: record at %d is not JSON", kmsg.offset())
            return False
        if isinstance(rec, dict) and (group is None or rec.get("group") == group):
            found.append(rec)
        return False

    session.read(ranges, visit, what=what)
    found.sort(key=lambda r: int(r.get("at_ms") or 0), reverse=True)
    return found[:limit]


__all__ = [
    "AUDIT_TOPIC",
    "DlqFilter",
    "RedriveOptions",
    "RedriveOutcome",
    "Selection",
    "audit_record",
    "read_audit",
    "run_redrive",
    "write_audit",
]
