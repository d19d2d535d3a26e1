"""Dead letters read back: a group's DLQ listed whole (:func:`read_dlq`), a page at a time
(:func:`read_dlq_page`, with cursors) or at given positions (:func:`read_dlq_at`).  Reads
only.

Each entry says whether a redrive already sent it back: the DLQ's *redrive group*
(``rmq-dlq-redrive.<group>``) commits a mark past what a redrive sent
(:mod:`adapter.services.redrive`), and :func:`read_marks` reads those marks.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import tenacity
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from adapter.constants import (
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_RETRY_TOPIC,
)
from adapter.core import naming
from adapter.core.codec import decode_record
from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.errors import AuthenticationError, InvalidInputError
from adapter.io.config import check_kafka_config
from adapter.io.errors import AUTH_CODES, FatalErrorWatch, make_client, wait_metadata
from adapter.io.polling import watermarks

log = logging.getLogger("adapter.dlq")

REDRIVE_GROUP_PREFIX = "rmq-dlq-redrive."
#: How many times a message was redriven from a DLQ (a user property: it stays on the
#: message's later hops, so a message that dies again still carries it).
HEADER_REDRIVE_COUNT = "RMQ_REDRIVE_COUNT"


def redrive_group(group: str) -> str:
    """The consumer group whose committed offsets on ``%DLQ%<group>`` mark what was redriven."""
    return f"{REDRIVE_GROUP_PREFIX}{group}"


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One DLQ record, decoded, with where it came from and why it failed.  ``redriven``:
    whether a redrive already sent it back (``None`` when the marks could not be read)."""

    message: MessageExt
    origin_topic: str | None
    reason: str | None
    failure_type: str | None
    failure_message: str | None
    redriven: bool | None = False

    @classmethod
    def of(cls, msg: MessageExt, redriven: bool | None = False) -> DeadLetterEntry:
        p = msg.properties
        return cls(
            msg,
            p.get(PROPERTY_DLQ_ORIGIN_TOPIC) or p.get(PROPERTY_RETRY_TOPIC),
            p.get(HEADER_DLQ_REASON),
            p.get(HEADER_FAILURE_TYPE),
            p.get(HEADER_FAILURE_MESSAGE),
            redriven,
        )

    @property
    def redrive_count(self) -> int:
        """How many times this message was redriven before (0: never, or unreadable)."""
        text = self.message.properties.get(HEADER_REDRIVE_COUNT)
        return int(text) if text is not None and text.isdigit() else 0

    def summary(self) -> dict[str, Any]:
        """The entry as ``rmq-kafka dlq list`` prints it (one JSON object; the console adds
        its time and redrive count)."""
        m = self.message
        return {
            "msg_id": m.msg_id,
            "origin_topic": self.origin_topic,
            "reason": self.reason,
            "reconsume_times": m.reconsume_times,
            "failure": self.failure_type,
            "failure_message": self.failure_message,
            "keys": m.keys,
            "tags": m.tags,
            "partition": m.queue_id,
            "offset": m.queue_offset,
            "body": m.body[:200].decode("utf-8", "replace"),
            "body_omitted": m.properties.get(HEADER_BODY_OMITTED),
            "redriven": self.redriven,
        }

    @property
    def omitted_body(self) -> OmittedBody | None:
        """Where the body is, when the broker refused even the dead-letter copy with it."""
        return OmittedBody.of(self.message.properties)


def dlq_reader(
    config: Mapping[str, Any], extra: Mapping[str, Any] | None = None, *, group: str | None = None
) -> Any:
    """A consumer that reads by assignment and never commits on its own (``group``: the group
    whose committed offsets it reads or writes, else a throwaway one)."""
    conf = dict(check_kafka_config(config, "dlq reader"))
    conf.update(
        {
            "group.id": group or f"rmq-dlq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **(extra or {}),
        }
    )
    return make_client(Consumer, conf, what="DLQ reader")


Progress = Callable[[int, int | None], None]
"""``progress(done, total)``, called as a long operation advances (``total`` may be ``None``)."""


def read_dlq(
    config: Mapping[str, Any],
    group: str,
    *,
    limit: int | None = None,
    timeout_s: float = 10.0,
    progress: Progress | None = None,
) -> list[DeadLetterEntry]:
    """Every entry of ``%DLQ%<group>`` from the beginning (bounded by ``limit``); reads only.
    ``progress(entries read, entries in the DLQ)`` is called as it goes."""
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    watch = FatalErrorWatch(config.get("error_cb"), config=config)
    consumer = dlq_reader(config, {"error_cb": watch}, group=redrive_group(group))
    try:
        # not yet assigned: poll(0) only runs the callbacks (a TLS failure fails fast)
        md = wait_metadata(
            consumer,
            timeout_s,
            watch=watch,
            serve=lambda: consumer.poll(0),
            topic=kafka_topic,
            where=config.get("bootstrap.servers"),
            what=f"reading {naming.dlq_topic(group)}",
        )
        tmd = md.topics.get(kafka_topic)
        if tmd is not None and tmd.error is not None and tmd.error.code() in AUTH_CODES:
            raise AuthenticationError(
                f"not allowed to read {naming.dlq_topic(group)}: {tmd.error.str()}",
                kafka_error=tmd.error,
            )
        if tmd is None or tmd.error is not None:
            return []
        parts = [TopicPartition(kafka_topic, p, OFFSET_BEGINNING) for p in tmd.partitions]
        ends = {}
        total = 0
        for tp in parts:
            low, high = watermarks(consumer, tp, timeout_s)
            if high > low:
                ends[tp.partition] = high
                total += high - low
        if limit is not None:
            total = min(total, limit)
        if not ends:
            return []
        consumer.assign([tp for tp in parts if tp.partition in ends])
        marks = read_marks(consumer, kafka_topic, sorted(ends), timeout_s)
        out: list[DeadLetterEntry] = []
        done: set[int] = set()
        while len(done) < len(ends) and (limit is None or len(out) < limit):
            kmsg = consumer.poll(timeout_s)
            if kmsg is None:
                break
            err = kmsg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(kmsg.partition())
                elif err.code() in AUTH_CODES:
                    raise AuthenticationError(
                        f"not allowed to read {naming.dlq_topic(group)}: {err.str()}",
                        kafka_error=err,
                    )
                continue
            out.append(_entry(kafka_topic, kmsg, marks))
            if progress is not None:
                progress(min(len(out), total), total)
            if kmsg.offset() + 1 >= ends[kmsg.partition()]:
                done.add(kmsg.partition())
        return out
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class DlqPage:
    """One page of a DLQ, oldest first: the entries that matched, where the next page starts
    (``None``: the end was reached), how many records were read for it and how many the DLQ
    holds."""

    entries: tuple[DeadLetterEntry, ...]
    next_cursor: dict[int, int] | None
    scanned: int
    total: int


def parse_cursor(text: str) -> dict[int, int]:
    """``"0-15.1-20"`` (partition-offset pairs) as ``{0: 15, 1: 20}``."""
    out: dict[int, int] = {}
    for part in text.split("."):
        p, sep, o = part.partition("-")
        if not sep or not p.isdigit() or not o.isdigit():
            raise InvalidInputError(
                "cursor", text, "expected partition-offset pairs like 0-15.1-20"
            )
        out[int(p)] = int(o)
    return out


def format_cursor(cursor: Mapping[int, int]) -> str:
    return ".".join(f"{p}-{o}" for p, o in sorted(cursor.items()))


def read_dlq_page(
    config: Mapping[str, Any],
    group: str,
    *,
    limit: int = 50,
    cursor: Mapping[int, int] | None = None,
    since_ms: int | None = None,
    match: Callable[[DeadLetterEntry], bool] | None = None,
    scan_max: int = 20_000,
    timeout_s: float = 10.0,
) -> DlqPage:
    """At most ``limit`` entries of ``%DLQ%<group>`` that ``match``, from ``cursor`` (else from
    ``since_ms``, else from the start), reading at most ``scan_max`` records: the cost of a
    page does not grow with the DLQ.  Reads only."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInputError("limit", limit, "must be a whole number from 1 to 1000")
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    consumer = dlq_reader(config, group=redrive_group(group))
    try:
        md = consumer.list_topics(topic=kafka_topic, timeout=timeout_s)
        tmd = md.topics.get(kafka_topic)
        if tmd is not None and tmd.error is not None and tmd.error.code() in AUTH_CODES:
            raise AuthenticationError(
                f"not allowed to read {naming.dlq_topic(group)}: {tmd.error.str()}",
                kafka_error=tmd.error,
            )
        if tmd is None or tmd.error is not None:
            return DlqPage((), None, 0, 0)
        spans: dict[int, tuple[int, int]] = {}
        for p in sorted(tmd.partitions):
            spans[p] = watermarks(consumer, TopicPartition(kafka_topic, p), timeout_s)
        total = sum(high - low for low, high in spans.values())
        starts = {p: low for p, (low, _) in spans.items()}
        if cursor is not None:
            starts = {p: max(starts[p], cursor.get(p, starts[p])) for p in starts}
        elif since_ms is not None:
            asked = [TopicPartition(kafka_topic, p, since_ms) for p in spans]
            for tp in consumer.offsets_for_times(asked, timeout=timeout_s):
                starts[tp.partition] = spans[tp.partition][1] if tp.offset < 0 else tp.offset
        todo = {p: (starts[p], spans[p][1]) for p in spans if starts[p] < spans[p][1]}
        position = dict(starts)
        out: list[DeadLetterEntry] = []
        scanned = 0
        if todo:
            consumer.assign([TopicPartition(kafka_topic, p, s) for p, (s, _) in todo.items()])
            marks = read_marks(consumer, kafka_topic, sorted(todo), timeout_s)
            while todo and len(out) < limit and scanned < scan_max:
                kmsg = consumer.poll(timeout_s)
                if kmsg is None:
                    break
                err = kmsg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if todo.pop(kmsg.partition(), None) is not None:  # markers only left
                            position[kmsg.partition()] = spans[kmsg.partition()][1]
                    elif err.code() in AUTH_CODES:
                        raise AuthenticationError(
                            f"not allowed to read {naming.dlq_topic(group)}: {err.str()}",
                            kafka_error=err,
                        )
                    continue
                p = kmsg.partition()
                if p not in todo:
                    continue
                scanned += 1
                position[p] = kmsg.offset() + 1
                if position[p] >= todo[p][1]:
                    todo.pop(p)
                entry = _entry(kafka_topic, kmsg, marks)
                if match is None or match(entry):
                    out.append(entry)
        more = any(position[p] < spans[p][1] for p in spans)
        return DlqPage(tuple(out), dict(position) if more else None, scanned, total)
    finally:
        consumer.close()


#: A partition's positions further apart than this are not read as one span.
MAX_SPAN: Final = 10_000


def read_dlq_at(
    config: Mapping[str, Any],
    group: str,
    positions: Iterable[tuple[int, int]],
    *,
    timeout_s: float = 10.0,
) -> list[DeadLetterEntry] | None:
    """The entries of ``%DLQ%<group>`` at ``(partition, offset)`` positions (those still
    there), reading per partition only the span between its first and last position;
    ``None`` when a partition's span is above :data:`MAX_SPAN` (read the DLQ instead)."""
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    wanted: dict[int, set[int]] = {}
    for p, o in positions:
        wanted.setdefault(p, set()).add(o)
    if any(max(offs) - min(offs) >= MAX_SPAN for offs in wanted.values()):
        return None
    if not wanted:
        return []
    consumer = dlq_reader(config, group=redrive_group(group))
    try:
        spans: dict[int, tuple[int, int]] = {}
        for p, offs in wanted.items():
            low, high = watermarks(consumer, TopicPartition(kafka_topic, p), timeout_s)
            first, last = max(min(offs), low), min(max(offs) + 1, high)
            if first < last:
                spans[p] = (first, last)
        if not spans:
            return []
        consumer.assign([TopicPartition(kafka_topic, p, s) for p, (s, _) in spans.items()])
        out: list[DeadLetterEntry] = []
        while spans:
            kmsg = consumer.poll(timeout_s)
            if kmsg is None:
                break
            err = kmsg.error()
            p = kmsg.partition()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    spans.pop(p, None)
                elif err.code() in AUTH_CODES:
                    raise AuthenticationError(
                        f"not allowed to read {naming.dlq_topic(group)}: {err.str()}",
                        kafka_error=err,
                    )
                continue
            if p not in spans:
                continue
            if kmsg.offset() in wanted[p]:
                out.append(_entry(kafka_topic, kmsg, None))
            if kmsg.offset() + 1 >= spans[p][1]:
                spans.pop(p)
        return out
    finally:
        consumer.close()


def _entry(kafka_topic: str, kmsg: Any, marks: Mapping[int, int] | None) -> DeadLetterEntry:
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
    mark = None if marks is None else marks.get(kmsg.partition(), 0)
    return DeadLetterEntry.of(msg, None if mark is None else kmsg.offset() < mark)


def read_marks(
    consumer: Any, kafka_topic: str, partitions: list[int], timeout_s: float
) -> dict[int, int] | None:
    """The redrive group's committed offsets (0 where none); ``None`` when not readable."""
    if not partitions:
        return {}
    retrying = tenacity.Retrying(  # a new group's coordinator may still be loading
        stop=tenacity.stop_after_attempt(5),
        wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
        retry=tenacity.retry_if_exception_type(KafkaException),
        reraise=True,
    )
    try:
        committed = retrying(
            consumer.committed,
            [TopicPartition(kafka_topic, p) for p in partitions],
            timeout=timeout_s,
        )
    except KafkaException as exc:
        log.warning("redrive marks of %s not readable: %s", kafka_topic, exc)
        return None
    return {tp.partition: max(tp.offset, 0) for tp in committed}
