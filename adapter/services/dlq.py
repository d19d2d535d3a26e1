"""Dead-letter operations: list a group's DLQ and send entries back for consumption."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka import Producer as _KafkaProducer

from adapter.clients.config import check_kafka_config, producer_config
from adapter.clients.kafka_errors import AUTH_CODES, make_client, send_error
from adapter.constants import (
    HEADER_DLQ_REASON,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
)
from adapter.core import naming
from adapter.core.codec import decode_record, replace_headers
from adapter.core.message import MessageExt
from adapter.errors import AuthenticationError


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
    timeout_s: float = 30.0,
) -> int:
    """Send DLQ entries back for consumption; returns how many were acknowledged.

    By default an entry goes to ``%RETRY%<group>`` with ``RECONSUME_TIME`` reset to 0, so
    only the failing group consumes it again (and sees its original topic); with
    ``to_origin`` it goes back to the original topic, for every group.
    """
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

    for entry in entries:
        msg = entry.message
        origin = entry.origin_topic or msg.topic
        target = origin if to_origin else naming.retry_topic(group)
        headers = replace_headers(
            msg.raw_headers, {PROPERTY_RECONSUME_TIME: 0, PROPERTY_RETRY_TOPIC: origin}
        )
        producer.produce(
            naming.to_kafka(target),
            value=msg.body,
            key=msg.sharding_key,
            headers=headers,
            on_delivery=on_delivery,
        )
    producer.flush(timeout_s)
    if errors:
        raise errors[0]
    return acked
