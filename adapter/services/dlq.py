"""Dead-letter operations: list a group's DLQ and send entries back for consumption."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _KafkaProducer

from adapter.clients.config import check_kafka_config, producer_config
from adapter.clients.kafka_errors import AUTH_CODES, make_client, send_error
from adapter.constants import (
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.core.codec import OmittedBody, decode_record, replace_headers
from adapter.core.message import MessageExt
from adapter.errors import AuthenticationError, DeadLetterBodyError


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One DLQ record, decoded, with where it came from and why it failed."""

    message: MessageExt
    origin_topic: str | None
    reason: str | None
    failure_type: str | None
    failure_message: str | None

    @classmethod
    def of(cls, msg: MessageExt) -> DeadLetterEntry:
        p = msg.properties
        return cls(
            msg,
            p.get(PROPERTY_DLQ_ORIGIN_TOPIC) or p.get(PROPERTY_RETRY_TOPIC),
            p.get(HEADER_DLQ_REASON),
            p.get(HEADER_FAILURE_TYPE),
            p.get(HEADER_FAILURE_MESSAGE),
        )

    @property
    def omitted_body(self) -> OmittedBody | None:
        """Where the body is, when the broker refused even the dead-letter copy with it."""
        return OmittedBody.of(self.message.properties)


def _reader(config: Mapping[str, Any]) -> Any:
    conf = dict(check_kafka_config(config, "dlq reader"))
    conf.update(
        {
            "group.id": f"rmq-dlq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    return make_client(Consumer, conf, what="DLQ reader")


def read_dlq(
    config: Mapping[str, Any], group: str, *, limit: int | None = None, timeout_s: float = 10.0
) -> list[DeadLetterEntry]:
    """Every entry of ``%DLQ%<group>`` from the beginning (bounded by ``limit``); reads only."""
    kafka_topic = naming.to_kafka(naming.dlq_topic(group))
    consumer = _reader(config)
    try:
        md = consumer.list_topics(topic=kafka_topic, timeout=timeout_s)
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
        for tp in parts:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if high > low:
                ends[tp.partition] = high
        if not ends:
            return []
        consumer.assign([tp for tp in parts if tp.partition in ends])
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
            out.append(DeadLetterEntry.of(msg))
            if kmsg.offset() + 1 >= ends[kmsg.partition()]:
                done.add(kmsg.partition())
        return out
    finally:
        consumer.close()


def redrive(
    config: Mapping[str, Any],
    group: str,
    entries: list[DeadLetterEntry],
    *,
    to_origin: bool = False,
    skip_missing_bodies: bool = False,
    timeout_s: float = 30.0,
) -> int:
    """Send DLQ entries back for consumption; returns how many were acknowledged.

    By default an entry goes to ``%RETRY%<group>`` with ``RECONSUME_TIME`` reset to 0, so
    only the failing group consumes it again (and sees its original topic); with
    ``to_origin`` it goes back to the original topic, for every group.

    An entry sent to the DLQ without its body (``RMQ_BODY_OMITTED``: too large even alone)
    is redriven with the body read back from the record it names.  When that record is gone
    (retention) or is not the same message, :class:`DeadLetterBodyError` lists those entries
    and nothing is sent; ``skip_missing_bodies`` sends the others instead.  An empty body is
    never sent in place of an omitted one.
    """
    bodies: dict[int, bytes] = {}
    omitted = {i: e.omitted_body for i, e in enumerate(entries)}
    wanted = {i: o for i, o in omitted.items() if o is not None}
    if wanted:
        bodies, missing = _fetch_bodies(config, entries, wanted, timeout_s)
        if missing and not skip_missing_bodies:
            raise DeadLetterBodyError(missing)
    conf = producer_config(check_kafka_config(config, "dlq redrive"))
    conf["enable.idempotence"] = True
    producer = make_client(_KafkaProducer, conf, what="DLQ redrive producer")
    errors: list[Exception] = []
    acked = 0

    def on_delivery(err: Any, kmsg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(send_error(err, kmsg))

    for i, entry in enumerate(entries):
        msg = entry.message
        body = msg.body
        if i in wanted:
            if i not in bodies:
                continue  # skipped: its body is gone
            body = bodies[i]
        origin = entry.origin_topic or msg.topic
        target = origin if to_origin else naming.retry_topic(group)
        headers = replace_headers(
            msg.raw_headers,
            {PROPERTY_RECONSUME_TIME: 0, PROPERTY_RETRY_TOPIC: origin, HEADER_BODY_OMITTED: None},
        )
        producer.produce(
            naming.to_kafka(target),
            value=body,
            key=msg.sharding_key,
            headers=headers,
            on_delivery=on_delivery,
        )
    producer.flush(timeout_s)
    if errors:
        raise errors[0]
    return acked


def _fetch_bodies(
    config: Mapping[str, Any],
    entries: list[DeadLetterEntry],
    wanted: Mapping[int, OmittedBody],
    timeout_s: float,
) -> tuple[dict[int, bytes], list[tuple[str, str, str]]]:
    """Read the omitted bodies back from the records they were read from."""
    bodies: dict[int, bytes] = {}
    missing: list[tuple[str, str, str]] = []
    consumer = _reader(config)
    try:
        for i, where in wanted.items():
            entry = entries[i].message
            found = _read_one(consumer, where, timeout_s)
            if isinstance(found, str):
                missing.append((entry.msg_id, where.where, found))
                continue
            body = found.value() or b""
            if len(body) != where.size:
                why = f"the record there has {len(body)} bytes, not {where.size}"
                missing.append((entry.msg_id, where.where, why))
                continue
            theirs = dict(found.headers() or []).get(PROPERTY_UNIQ_KEY)
            ours = entry.properties.get(PROPERTY_UNIQ_KEY)
            if theirs is not None and ours is not None and theirs.decode(errors="replace") != ours:
                why = f"the record there is message {theirs.decode(errors='replace')}"
                missing.append((entry.msg_id, where.where, why))
                continue
            bodies[i] = body
    finally:
        consumer.close()
    return bodies, missing


def _read_one(consumer: Any, where: OmittedBody, timeout_s: float) -> Any:
    """The record at ``where``, or a string saying why it cannot be read."""
    tp = TopicPartition(where.kafka_topic, where.partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    except KafkaException as exc:
        return f"cannot read {where.kafka_topic}: {exc.args[0].str() if exc.args else exc}"
    if not low <= where.offset < high:
        return f"no longer there (the partition holds offsets {low} to {high - 1})"
    consumer.assign([TopicPartition(where.kafka_topic, where.partition, where.offset)])
    try:
        kmsg = consumer.poll(timeout_s)
        while kmsg is not None and kmsg.error() is not None:
            if kmsg.error().code() in AUTH_CODES:
                return f"not allowed to read it: {kmsg.error().str()}"
            kmsg = consumer.poll(timeout_s)
    finally:
        consumer.unassign()
    if kmsg is None:
        return f"not read within {timeout_s:g} s"
    if kmsg.offset() != where.offset:
        return f"no longer there (compacted: the next record is at offset {kmsg.offset()})"
    return kmsg
