"""The redrive: send dead letters back for consumption (:func:`redrive`).

A redrive is resumable and idempotent: once the broker acknowledged an entry's copy, the
entry's offset is committed for the DLQ's *redrive group* (``rmq-dlq-redrive.<group>``), and
later redrives skip what lies below that mark (``again=True`` sends such entries anyway, on
purpose).  Every copy carries ``RMQ_REDRIVE_COUNT`` (how many times the message was redriven,
kept on its later hops): the *loop guard* (``max_redrives``) refuses a dead letter that was
redriven that often already unless ``force``.  ``dry_run`` says what would be sent where and
sends nothing; ``rate`` paces the sends (messages a second).  An entry that was not sent
(refused, or its omitted body gone) holds the mark of its partition where it is, so a later
run tries it again.  Two redrives of one DLQ at the same moment are not coordinated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _KafkaProducer

from adapter.constants import HOP_MESSAGE_MAX_BYTES, PROPERTY_UNIQ_KEY
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.codec import redrive_headers, replace_headers
from adapter.core.headers import HeaderView
from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.errors import (
    AdapterError,
    AuthenticationError,
    DeadLetterBodyError,
    InvalidInputError,
    MalformedHeaderError,
)
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_kafka_config, producer_config
from adapter.io.errors import AUTH_CODES, client_error, is_too_large, make_client, send_error
from adapter.services.dlq import (
    HEADER_REDRIVE_COUNT,
    DeadLetterEntry,
    Progress,
    dlq_reader,
    read_marks,
    redrive_group,
)
from adapter.telemetry import state as telemetry

Problem = tuple[str, str, str]
"""``(msg_id, where, why)``: an entry that was not redriven."""


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What :func:`redrive` did: how many entries the broker acknowledged, which were skipped
    (body gone, with ``skip_missing_bodies``), which the broker refused and how many an
    earlier redrive had sent already."""

    sent: int
    skipped: tuple[Problem, ...] = ()
    failed: tuple[Problem, ...] = ()
    #: entries not sent because an earlier redrive had (``again=True`` sends them)
    already: int = 0
    #: entries the loop guard refused: redriven ``max_redrives`` times already (``force``)
    guarded: tuple[str, ...] = ()
    #: ``(msg_id, logical target topic)`` of what was (or, on a dry run, would be) sent
    planned: tuple[tuple[str, str], ...] = ()
    dry_run: bool = False


class RedriveError(AdapterError):
    """Some dead letters could not be sent back; ``result`` says which, and what was sent."""

    def __init__(self, result: RedriveResult) -> None:
        shown = "; ".join(f"{m}: {why}" for m, _, why in result.failed[:5])
        super().__init__(
            f"{len(result.failed)} dead letter(s) could not be redriven ({result.sent} were): "
            f"{shown}"
        )
        self.result = result


def redrive(
    config: Mapping[str, Any],
    group: str,
    entries: list[DeadLetterEntry],
    *,
    to_origin: bool = False,
    skip_missing_bodies: bool = False,
    again: bool = False,
    dry_run: bool = False,
    rate: float | None = None,
    max_redrives: int | None = None,
    force: bool = False,
    timeout_s: float = 30.0,
    progress: Progress | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RedriveResult:
    """Send DLQ entries back for consumption.

    By default an entry goes to ``%RETRY%<group>`` with ``RECONSUME_TIME`` reset to 0, so
    only the failing group consumes it again (and sees its original topic); with
    ``to_origin`` it goes back to the original topic, for every group.  The dead-letter
    headers (reason, time, last failure) are left behind.

    An entry sent to the DLQ without its body (``RMQ_BODY_OMITTED``: too large even alone)
    is redriven with the body read back from the record it names.  When that record is gone
    (retention) or is not the same message, :class:`DeadLetterBodyError` lists those entries
    and nothing is sent; ``skip_missing_bodies`` sends the others and reports the rest in
    ``RedriveResult.skipped``.  An empty body is never sent in place of an omitted one.
    Entries the broker refuses raise :class:`RedriveError` once every other entry is sent.
    ``progress(entries acknowledged, entries to send)`` is called as the broker acknowledges.

    Entries below the redrive group's mark were redriven before and are skipped (counted in
    ``RedriveResult.already``) unless ``again``; once sent, the marks move past what the broker
    acknowledged (never backwards).

    ``max_redrives``: an entry redriven that many times already (``RMQ_REDRIVE_COUNT``) is
    not sent (listed in ``RedriveResult.guarded``) unless ``force``; the marks move past it
    as past a sent one (forcing it on a later run needs ``again`` too).
    ``dry_run``: nothing is sent and no mark moves; ``RedriveResult.planned`` says what would
    go where.  ``rate``: at most that many messages a second.  ``clock``: what the pacing
    and the wait for an omitted body's record are measured on.
    """
    check_redrive_options(rate, max_redrives)
    kafka_dlq = naming.to_kafka(naming.dlq_topic(group))
    marker = dlq_reader(config, group=redrive_group(group))
    try:
        partitions = sorted({e.message.queue_id for e in entries})
        marks = read_marks(marker, kafka_dlq, partitions, timeout_s)
        if marks is None:
            raise AuthenticationError(
                f"cannot read the redrive marks of %DLQ%{group} (consumer group "
                f"{redrive_group(group)!r}): grant it READ, or redrive with again=True / --all"
            )
        plan = plan_redrive(entries, marks, again=again, max_redrives=max_redrives, force=force)
        planned = tuple(
            (e.message.msg_id, redrive_target(e, group, to_origin=to_origin)) for e in plan.send
        )
        guarded = tuple(e.message.msg_id for e in plan.guarded)
        if dry_run:
            return RedriveResult(
                0, already=len(plan.already), guarded=guarded, planned=planned, dry_run=True
            )
        result = _redrive(
            config,
            group,
            list(plan.send),
            to_origin=to_origin,
            skip_missing_bodies=skip_missing_bodies,
            timeout_s=timeout_s,
            progress=progress,
            rate=rate,
            clock=clock,
        )
        result = RedriveResult(
            result.sent,
            result.skipped,
            result.failed,
            already=len(plan.already),
            guarded=guarded,
            planned=planned,
        )
        # the loop guard's refusal is a decision, as a send is: the marks move past it (a
        # later forced redrive of it needs again=True too, as any second redrive does)
        moved = redrive_marks([*plan.send, *plan.guarded], result, marks)
        if moved:
            _commit_marks(marker, kafka_dlq, moved)
    finally:
        marker.close()
    if result.failed:
        raise RedriveError(result)
    return result


@dataclass(frozen=True, slots=True)
class RedrivePlan:
    """Which entries a redrive sends, which an earlier redrive sent already (below the
    marks) and which the loop guard refuses."""

    send: tuple[DeadLetterEntry, ...]
    already: tuple[DeadLetterEntry, ...]
    guarded: tuple[DeadLetterEntry, ...]


def check_redrive_options(rate: float | None, max_redrives: int | None) -> None:
    """Refuse a rate that is not a positive number and a loop guard below 1."""
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0
    ):
        raise InvalidInputError("rate", rate, "must be a number of messages a second > 0")
    if max_redrives is not None and (
        isinstance(max_redrives, bool) or not isinstance(max_redrives, int) or max_redrives < 1
    ):
        raise InvalidInputError("max_redrives", max_redrives, "must be a whole number >= 1")


def plan_redrive(
    entries: list[DeadLetterEntry],
    marks: Mapping[int, int],
    *,
    again: bool = False,
    max_redrives: int | None = None,
    force: bool = False,
) -> RedrivePlan:
    """Split ``entries`` into what to send, what was redriven before (below its partition's
    mark; sent anyway with ``again``) and what the loop guard refuses (redriven
    ``max_redrives`` times already; sent anyway with ``force``).  Pure."""
    send: list[DeadLetterEntry] = []
    already: list[DeadLetterEntry] = []
    guarded: list[DeadLetterEntry] = []
    for e in entries:
        if not again and e.message.queue_offset < marks.get(e.message.queue_id, 0):
            already.append(e)
        elif not force and max_redrives is not None and e.redrive_count >= max_redrives:
            guarded.append(e)
        else:
            send.append(e)
    return RedrivePlan(tuple(send), tuple(already), tuple(guarded))


def redrive_target(entry: DeadLetterEntry, group: str, *, to_origin: bool) -> str:
    """The logical topic a redrive sends ``entry`` to."""
    origin = entry.origin_topic or entry.message.topic
    return origin if to_origin else naming.retry_topic(group)


def redrive_marks(
    entries: list[DeadLetterEntry], result: RedriveResult, marks: Mapping[int, int]
) -> dict[int, int]:
    """Where each partition's redrive mark moves after ``entries`` were sent: past every entry
    in offset order up to the first one not sent (refused or skipped), and never backwards;
    nothing moves when the broker left some sends unanswered.  Pure."""
    if any(msg_id == "?" for msg_id, _, _ in result.failed):
        return {}
    not_sent = {msg_id for msg_id, _, _ in (*result.failed, *result.skipped)}
    by_partition: dict[int, list[DeadLetterEntry]] = {}
    for e in entries:
        by_partition.setdefault(e.message.queue_id, []).append(e)
    moved: dict[int, int] = {}
    for partition, group_entries in by_partition.items():
        mark = None
        for e in sorted(group_entries, key=lambda e: e.message.queue_offset):
            if e.message.msg_id in not_sent:
                break
            mark = e.message.queue_offset + 1
        if mark is not None and mark > marks.get(partition, 0):
            moved[partition] = mark
    return moved


def _commit_marks(consumer: Any, kafka_topic: str, moved: Mapping[int, int]) -> None:
    offsets = [TopicPartition(kafka_topic, p, o) for p, o in sorted(moved.items())]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:  # sent but not marked: a later redrive sends them again
        raise client_error(
            exc, what=f"marking {sum(1 for _ in offsets)} partition(s) of {kafka_topic} redriven"
        ) from exc


def _redrive(
    config: Mapping[str, Any],
    group: str,
    entries: list[DeadLetterEntry],
    *,
    to_origin: bool,
    skip_missing_bodies: bool,
    timeout_s: float,
    progress: Progress | None,
    rate: float | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RedriveResult:
    bodies, missing = _bodies(
        config, entries, strict=not skip_missing_bodies, timeout_s=timeout_s, clock=clock
    )
    if missing and not skip_missing_bodies:
        raise DeadLetterBodyError(missing)
    conf = producer_config(check_kafka_config(config, "dlq redrive"))
    conf["enable.idempotence"] = True
    conf.setdefault("message.max.bytes", HOP_MESSAGE_MAX_BYTES)
    records: list[tuple[str, str, dict[str, Any]]] = []
    for i, entry in enumerate(entries):
        msg = entry.message
        body = bodies.get(i, msg.body)
        if body is None:
            continue  # skipped: its omitted body cannot be read back
        origin = entry.origin_topic or msg.topic
        target = naming.to_kafka(redrive_target(entry, group, to_origin=to_origin))
        headers = redrive_headers(msg.raw_headers, origin)
        record = {
            "value": body,
            "key": msg.sharding_key,
            "headers": replace_headers(headers, {HEADER_REDRIVE_COUNT: entry.redrive_count + 1}),
        }
        records.append((msg.msg_id, target, record))
        hooks = telemetry.active
        if hooks is not None:  # the redrive's ``send`` span, in the message's trace
            hooks.copy("redrive", msg.properties, target, msg.msg_id)
    producer = make_client(_KafkaProducer, conf, what="DLQ redrive producer")
    report = None if progress is None else _Counter(progress, len(records))
    pacer = None if rate is None else Pacer(rate, clock)
    sent, failed, too_large = _send(
        producer, records, timeout_s, alone=False, progress=report, pacer=pacer
    )
    for one in too_large:  # refused with its batch: judged again in a batch of its own
        n, why, _ = _send(producer, [one], timeout_s, alone=True, progress=report)
        sent += n
        failed.extend(why)
    return RedriveResult(sent, tuple(missing), tuple(failed))


Record = tuple[str, str, dict[str, Any]]
"""``(msg_id, kafka topic, produce() keyword arguments)``."""


class Pacer:
    """At most ``rate`` sends a second: the n-th send waits until n / rate seconds after the
    first (the wait serves the producer's deliveries meanwhile)."""

    def __init__(self, rate: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.rate, self.clock, self.count = rate, clock, 0
        self.start: float | None = None

    def wait(self, serve: Callable[[float], Any]) -> None:
        now = self.clock.monotonic()
        if self.start is None:
            self.start = now
        due = self.start + self.count / self.rate
        while (left := due - self.clock.monotonic()) > 0:
            serve(min(left, 0.1))
        self.count += 1


class _Counter:
    """Counts acknowledged records across sends and reports them to a :data:`Progress`."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def add(self) -> None:
        self.done += 1
        self.progress(self.done, self.total)


def _send(
    producer: Any,
    records: list[Record],
    timeout_s: float,
    *,
    alone: bool,
    progress: _Counter | None = None,
    pacer: Pacer | None = None,
) -> tuple[int, list[Problem], list[Record]]:
    """Produce and flush: how many were acknowledged, which failed, and (unless ``alone``)
    which were refused as too large, maybe only for the batch they were in."""
    failed: list[Problem] = []
    too_large: list[Record] = []
    acked = 0

    def on_delivery(one: Record) -> Any:
        def done(err: Any, kmsg: Any) -> None:
            nonlocal acked
            if err is None:
                acked += 1
                if progress is not None:
                    progress.add()
            elif is_too_large(err) and not alone:
                too_large.append(one)
            else:
                failed.append((one[0], one[1], str(send_error(err, kmsg))))

        return done

    try:
        for one in records:
            msg_id, topic, record = one
            if pacer is not None:
                pacer.wait(producer.poll)
            why = _produce(producer, topic, {**record, "on_delivery": on_delivery(one)})
            if why is not None:
                failed.append((msg_id, topic, why))
    finally:
        left = producer.flush(timeout_s)
    if left:
        failed.append(("?", "", f"{left} record(s) not acknowledged in {timeout_s:g} s: unknown"))
    return acked, failed, too_large


def _produce(producer: Any, topic: str, record: dict[str, Any]) -> str | None:
    """Queue one record; why the client refused it before sending (e.g. too large), if so."""
    while True:
        try:
            producer.produce(topic, **record)
            return None
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            why = str(send_error(err)) if isinstance(err, KafkaError) else str(err)
            return f"{why} ({len(record['value'])}-byte body)"


def _bodies(
    config: Mapping[str, Any],
    entries: list[DeadLetterEntry],
    *,
    strict: bool,
    timeout_s: float,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[dict[int, bytes | None], list[Problem]]:
    """The bodies of the entries sent to the DLQ without one, read back from the records they
    name; ``None`` (and a problem) where that cannot be done.

    A malformed ``RMQ_BODY_OMITTED`` raises :class:`MalformedHeaderError` when ``strict``,
    else it is one more problem.
    """
    wanted: dict[int, OmittedBody] = {}
    bodies: dict[int, bytes | None] = {}
    missing: list[Problem] = []
    for i, entry in enumerate(entries):
        try:
            where = entry.omitted_body
        except MalformedHeaderError as exc:
            if strict:
                raise
            bodies[i] = None
            missing.append((entry.message.msg_id, "?", str(exc)))
            continue
        if where is None:
            continue
        if where.size and len(entry.message.body) == where.size:
            continue  # the body is there after all
        wanted[i] = where
    if not wanted:
        return bodies, missing
    consumer = dlq_reader(config, {"auto.offset.reset": "error"})
    read: dict[OmittedBody, Any] = {}
    try:
        for i, where in wanted.items():
            msg = entries[i].message
            if where not in read:
                read[where] = read_record_at(consumer, where, timeout_s, clock=clock)
            found = read[where]
            why = found if isinstance(found, str) else _mismatch(found, where, msg)
            if why is not None:
                bodies[i] = None
                missing.append((msg.msg_id, where.where, why))
            else:
                bodies[i] = found.value() or b""
    finally:
        consumer.close()
    return bodies, missing


def _mismatch(found: Any, where: OmittedBody, msg: MessageExt) -> str | None:
    """Why the record read back is not the dead letter's body (``None`` when it is)."""
    size = len(found.value() or b"")
    if size != where.size:
        return f"the record there has {size} bytes, not {where.size}"
    theirs = HeaderView.read(found.headers()).text.get(PROPERTY_UNIQ_KEY)
    ours = msg.properties.get(PROPERTY_UNIQ_KEY)
    if theirs is not None and ours is not None and theirs != ours:
        return f"the record there is message {theirs}"
    return None


_GONE = (
    KafkaError._PARTITION_EOF,
    KafkaError.OFFSET_OUT_OF_RANGE,
    KafkaError._AUTO_OFFSET_RESET,
)


def read_record_at(
    consumer: Any, where: OmittedBody, timeout_s: float, *, clock: Clock = SYSTEM_CLOCK
) -> Any:
    """The record at ``where``, or a string saying why it cannot be read (within
    ``timeout_s`` on ``clock``)."""
    tp = TopicPartition(where.kafka_topic, where.partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    except KafkaException as exc:
        return f"cannot read {where.kafka_topic}: {exc.args[0].str() if exc.args else exc}"
    if not low <= where.offset < high:
        return f"no longer there (the partition holds offsets {low} to {high - 1})"
    consumer.assign([TopicPartition(where.kafka_topic, where.partition, where.offset)])
    deadline = clock.monotonic() + timeout_s
    try:
        while (left := deadline - clock.monotonic()) > 0:
            kmsg = consumer.poll(left)
            if kmsg is None:
                break
            if kmsg.topic() != where.kafka_topic or kmsg.partition() != where.partition:
                continue
            err = kmsg.error()
            if err is None:
                if kmsg.offset() != where.offset:
                    return f"no longer there (compacted: the next record is at {kmsg.offset()})"
                return kmsg
            if err.code() in AUTH_CODES:
                return f"not allowed to read it: {err.str()}"
            if err.code() in _GONE:
                return f"no longer there ({err.str()})"
    finally:
        consumer.unassign()
    return f"not read within {timeout_s:g} s"
