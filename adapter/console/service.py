"""What the console's pages and API read and do, as plain functions over the ops layer (the
same code ``group progress``, ``schedule status``, ``dlq list``, ``msg show`` and ``dlq
redrive`` run), with the console's input checks: a bad value is an
:class:`~adapter.errors.InvalidInputError` naming the field."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from adapter.constants import TRACE_TOPIC
from adapter.core import naming
from adapter.core.timespec import format_time, parse_since
from adapter.errors import AdapterError, InvalidInputError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.ops.admin import find_message, group_progress, schedule_status
from adapter.ops.errors import GroupNotFoundError
from adapter.ops.journey import Matcher
from adapter.ops.ladder import adapter_groups, consume_outcomes, dlq_growth, group_ladder
from adapter.ops.redrive import (
    DlqFilter,
    RedriveOptions,
    RedriveOutcome,
    Selection,
    read_audit,
    run_redrive,
)
from adapter.services.dlq import (
    DeadLetterEntry,
    DlqPage,
    format_cursor,
    parse_cursor,
    read_dlq_page,
)

MAX_ID_LENGTH: Final = 256
_PRINTABLE: Final = frozenset(string.printable) - frozenset("\t\n\r\x0b\x0c")
_GROUP_CHARS: Final = re.compile(r"^[^\x00-\x1f\x7f]{1,249}$")
BODY_PREVIEW_BYTES: Final = 4096
#: Groups whose rows of the overview are read side by side.
OVERVIEW_THREADS: Final = 4


class UnknownGroupError(InvalidInputError):
    """A group the cluster has no adapter topics, offsets or members of (a 404)."""

    def __init__(self, group: str) -> None:
        super().__init__("group", group, "no such group here (no %RETRY%/%DLQ% topic, no offsets)")


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """How a console reads the cluster and whom it lets in."""

    config: Mapping[str, Any]
    token: str
    read_only: bool = False
    namespace: str | None = None
    schedule_group: str | None = None
    #: the loop guard's default: a dead letter redriven this often is skipped unless forced
    max_redrives: int = 3
    timeout_s: float = 30.0
    #: the trace topic the consumers write (successes per reconsume_times come from it)
    trace_topic: str = TRACE_TOPIC


def check_group_name(group: str) -> str:
    if not _GROUP_CHARS.match(group):
        raise InvalidInputError("group", group, "not a group name (1-249 printable characters)")
    naming.check_group(group)
    return group


def check_message_id(msg_id: str, field: str = "message_id") -> str:
    if (
        not msg_id
        or len(msg_id) > MAX_ID_LENGTH
        or msg_id != msg_id.strip()
        or not set(msg_id) <= _PRINTABLE
    ):
        raise InvalidInputError(
            field,
            msg_id[:80],
            f"a message id is 1-{MAX_ID_LENGTH} printable characters without outer spaces",
        )
    return msg_id


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidInputError(name, text, f"must be a whole number from {low} to {high}")
    return int(text)


def _since(params: Mapping[str, str], name: str) -> int | None:
    text = params.get(name)
    if not text:
        return None
    return parse_since(text, SYSTEM_CLOCK.now_ms(), name)


# --- groups ----------------------------------------------------------------------------------
def schedule_summary(settings: ConsoleSettings) -> dict[str, Any] | None:
    """``schedule status --json`` of the console's namespace; ``None`` without delay levels."""
    try:
        status = schedule_status(
            settings.config,
            namespace=settings.namespace,
            group=settings.schedule_group,
            timeout_s=settings.timeout_s,
        )
    except (InvalidInputError, GroupNotFoundError):
        return None
    out = status.to_json()
    lags = [lv["lag_ms"] for lv in out["levels"] if lv["lag_ms"] is not None]
    out["lateness_ms"] = max(lags) if lags else 0
    return out


def groups_overview(settings: ConsoleSettings) -> dict[str, Any]:
    groups = adapter_groups(settings.config, timeout_s=settings.timeout_s)
    # each group's reads wait on the broker, not on this process: a few side by side
    with ThreadPoolExecutor(max_workers=OVERVIEW_THREADS, thread_name_prefix="rmq-console") as pool:
        rows = list(pool.map(lambda g: group_row(settings, g), groups))
    return {"groups": rows, "schedule": schedule_summary(settings)}


def group_row(settings: ConsoleSettings, group: str) -> dict[str, Any]:
    try:
        progress = group_progress(settings.config, group, timeout_s=settings.timeout_s).to_json()
    except GroupNotFoundError:
        progress = None
    retry = naming.to_kafka(naming.retry_topic(group))
    growth = dlq_growth(settings.config, group, timeout_s=settings.timeout_s)
    if progress is None:
        return {
            "group": group,
            "state": "UNKNOWN",
            "members": [],
            "lag": None,
            "retry_lag": None,
            "topics": {},
            "dlq": None,
            "dlq_growth_1h": growth,
            "circuits": [],
        }
    topics: dict[str, int] = {}
    for p in progress["partitions"]:
        topics[p["topic"]] = topics.get(p["topic"], 0) + (p["lag"] or 0)
    return {
        "group": group,
        "state": progress["state"],
        "members": progress["members"],
        "lag": progress["lag"],
        "retry_lag": sum(
            p["lag"] or 0 for p in progress["partitions"] if p["kafka_topic"] == retry
        ),
        "topics": topics,
        "dlq": progress["dlq"],
        "dlq_growth_1h": growth,
        "circuits": [m["circuit"] for m in progress["members"] if m.get("circuit")],
    }


def group_detail(settings: ConsoleSettings, group: str) -> dict[str, Any]:
    """``group progress --json`` plus the ladder, the DLQ's growth and the schedule."""
    check_group_name(group)
    known = group in adapter_groups(settings.config, timeout_s=settings.timeout_s)
    try:
        progress: dict[str, Any] | None = group_progress(
            settings.config, group, timeout_s=settings.timeout_s
        ).to_json()
    except GroupNotFoundError:
        if not known:
            raise UnknownGroupError(group) from None
        progress = None
    ladder = None
    try:
        status = schedule_status(
            settings.config,
            namespace=settings.namespace,
            group=settings.schedule_group,
            timeout_s=settings.timeout_s,
        )
        ladder = group_ladder(settings.config, group, status, timeout_s=settings.timeout_s)
    except (InvalidInputError, GroupNotFoundError):
        status = None
    return {
        "group": group,
        "progress": progress,
        "ladder": None if ladder is None else ladder.to_json(),
        "schedule_waiting": None if status is None else status.waiting,
        "dlq_growth_1h": dlq_growth(settings.config, group, timeout_s=settings.timeout_s),
        "outcomes": consume_outcomes(
            settings.config, group, trace_topic=settings.trace_topic, timeout_s=settings.timeout_s
        ).to_json(),
    }


# --- dead letters ----------------------------------------------------------------------------
def entry_json(e: DeadLetterEntry) -> dict[str, Any]:
    """A dead letter as ``dlq list`` prints it, plus its time and redrive count."""
    store_ms = e.message.store_timestamp
    return {
        **e.summary(),
        "redrive_count": e.redrive_count,
        "time_ms": store_ms,
        "time": format_time(store_ms),
    }


def dlq_filter(params: Mapping[str, str]) -> DlqFilter | None:
    values = {
        "origin_topic": params.get("origin_topic") or None,
        "reason": params.get("reason") or None,
        "failure_type": params.get("failure_type") or None,
        "key": params.get("key") or None,
        "msg_id": params.get("msg_id") or None,
    }
    if values["msg_id"] is not None:
        check_message_id(values["msg_id"], "msg_id")
    since = _since(params, "since")
    until = _since(params, "until")
    if all(v is None for v in values.values()) and since is None and until is None:
        return None
    return DlqFilter(**values, since_ms=since, until_ms=until)


def dlq_page(settings: ConsoleSettings, group: str, params: Mapping[str, str]) -> dict[str, Any]:
    """One page of the group's DLQ (``limit``, ``cursor``, the filters): at most
    ``scan`` records read for it, whatever the DLQ's size."""
    check_group_name(group)
    limit = _int(params, "limit", 50, 1, 1000)
    scan = _int(params, "scan", 20_000, 1, 1_000_000)
    cursor = parse_cursor(params["cursor"]) if params.get("cursor") else None
    flt = dlq_filter(params)
    if group not in adapter_groups(settings.config, timeout_s=settings.timeout_s):
        raise UnknownGroupError(group)
    page: DlqPage = read_dlq_page(
        settings.config,
        group,
        limit=limit,
        cursor=cursor,
        since_ms=None if flt is None else flt.since_ms,
        match=None if flt is None else flt.matches,
        scan_max=scan,
        timeout_s=min(settings.timeout_s, 10.0),
    )
    return {
        "group": group,
        "total": page.total,
        "scanned": page.scanned,
        "entries": [entry_json(e) for e in page.entries],
        "next_cursor": None if page.next_cursor is None else format_cursor(page.next_cursor),
        "filter": None if flt is None else flt.to_json(),
    }


# --- messages --------------------------------------------------------------------------------
def body_preview(body: bytes) -> dict[str, Any]:
    """A body as text, hex and (when it is JSON) pretty JSON; the first 4 KiB."""
    head = body[:BODY_PREVIEW_BYTES]
    text = head.decode("utf-8", "replace")
    pretty = None
    try:
        pretty = json.dumps(json.loads(body.decode("utf-8")), indent=2, ensure_ascii=False)
    except (ValueError, UnicodeDecodeError):
        pretty = None
    return {
        "size": len(body),
        "truncated": len(body) > BODY_PREVIEW_BYTES,
        "text": text,
        "hex": head.hex(" "),
        "json": pretty,
    }


def message_journey(
    settings: ConsoleSettings, msg_id: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """``msg show --id <msg_id> --json`` (looking back ``since``, default 7d)."""
    check_message_id(msg_id)
    since = _since(params, "since") or parse_since("7d", SYSTEM_CLOCK.now_ms())
    max_records = _int(params, "max_records", 1_000_000, 1, 10_000_000)
    result = find_message(
        settings.config,
        Matcher(msg_id=msg_id),
        since_ms=since,
        max_records=max_records,
        timeout_s=settings.timeout_s,
    )
    return {**result.to_json(), "text": result.render()}


# --- redrive ---------------------------------------------------------------------------------
def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInputError(name, value, "must be true or false")
    return value


def redrive_request(settings: ConsoleSettings, body: Any) -> tuple[Selection, RedriveOptions]:
    """The selection and options of a ``POST .../dlq/redrive`` body."""
    if not isinstance(body, dict):
        raise InvalidInputError("body", type(body).__name__, "must be a JSON object")
    known = {
        "ids",
        "all",
        "filter",
        "dry_run",
        "rate",
        "max_redrives",
        "force",
        "again",
        "to_origin",
        "positions",
    }
    extra = sorted(set(body) - known)
    if extra:
        raise InvalidInputError("body", extra, f"unknown field(s); known: {sorted(known)}")
    ids = body.get("ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidInputError("ids", ids, "must be a list of message id strings")
        for one in ids:
            check_message_id(one, "ids")
    flt = body.get("filter")
    if flt is not None:
        if not isinstance(flt, dict) or not all(isinstance(v, str) for v in flt.values()):
            raise InvalidInputError("filter", flt, "must be an object of strings")
        allowed = {"origin_topic", "reason", "failure_type", "key", "msg_id", "since", "until"}
        if set(flt) - allowed:
            raise InvalidInputError("filter", sorted(set(flt) - allowed), "unknown filter field")
        parsed = dlq_filter(flt)
        if parsed is None:
            raise InvalidInputError("filter", flt, 'is empty: use {"all": true} for all')
    else:
        parsed = None
    positions = body.get("positions")
    where: tuple[tuple[int, int], ...] | None = None
    if positions is not None:
        if not isinstance(positions, list) or not all(isinstance(p, str) for p in positions):
            raise InvalidInputError(
                "positions", positions, 'must be a list of "partition-offset" strings'
            )
        where = tuple(_position(p) for p in positions)
    selection = Selection(
        ids=None if ids is None else tuple(ids),
        filter=parsed,
        all=_flag(body, "all"),
        positions=where,
    )
    rate = body.get("rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        raise InvalidInputError("rate", rate, "must be a number of messages a second > 0")
    max_redrives = body.get("max_redrives", settings.max_redrives)
    options = RedriveOptions(
        to_origin=_flag(body, "to_origin"),
        again=_flag(body, "again"),
        dry_run=_flag(body, "dry_run"),
        rate=rate,
        max_redrives=max_redrives,
        force=_flag(body, "force"),
    )
    return selection, options


def _position(text: str) -> tuple[int, int]:
    p, sep, o = text.partition("-")
    if not sep or not p.isdigit() or not o.isdigit():
        raise InvalidInputError("positions", text, 'a position is "partition-offset", e.g. "0-15"')
    return int(p), int(o)


def redrive_group_dlq(settings: ConsoleSettings, group: str, body: Any, who: str) -> RedriveOutcome:
    check_group_name(group)
    selection, options = redrive_request(settings, body)
    if group not in adapter_groups(settings.config, timeout_s=settings.timeout_s):
        raise UnknownGroupError(group)
    return run_redrive(
        settings.config,
        group,
        selection,
        options,
        who=who,
        source="console",
        timeout_s=settings.timeout_s,
    )


def audit(settings: ConsoleSettings, group: str | None, limit: int = 20) -> list[dict[str, Any]]:
    if group is not None:
        check_group_name(group)
    return read_audit(settings.config, group=group, limit=limit, timeout_s=settings.timeout_s)


__all__ = [
    "AdapterError",
    "ConsoleSettings",
    "UnknownGroupError",
    "audit",
    "body_preview",
    "dlq_page",
    "group_detail",
    "groups_overview",
    "message_journey",
    "redrive_group_dlq",
]


def dlq_entry(
    settings: ConsoleSettings, group: str, partition: int, offset: int
) -> dict[str, Any] | None:
    """One dead letter (headers and a body preview), read at its partition and offset."""
    from adapter.core.codec import decode_record
    from adapter.io.admin import AdminSession

    check_group_name(group)
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    what = f"reading {naming.dlq_topic(group)}[{partition}]@{offset}"
    session = AdminSession(settings.config, timeout_s=settings.timeout_s, what=what)
    found: list[DeadLetterEntry] = []

    def visit(kmsg: Any) -> bool:
        ts_type, ts = kmsg.timestamp()
        msg = decode_record(
            kafka_topic=kafka_topic,
            partition=kmsg.partition(),
            offset=kmsg.offset(),
            value=kmsg.value(),
            key=kmsg.key(),
            headers=kmsg.headers(),
            timestamp_ms=ts if ts_type else None,
        )
        found.append(DeadLetterEntry.of(msg, None))
        return True

    session.read({(kafka_topic, partition): (offset, offset + 1)}, visit, what=what)
    if not found:
        return None
    e = found[0]
    return {
        **entry_json(e),
        "headers": [
            (k, None if v is None else v.decode("utf-8", "replace"))
            for k, v in e.message.raw_headers
        ],
        "preview": body_preview(e.message.body),
    }
