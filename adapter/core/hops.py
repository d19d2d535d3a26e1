"""The records the adapter writes on a message's way: send-backs to a delay level, dead
letters, straight retries, forwards of due delay-topic entries, re-parked timer entries and
the ScheduleService's own dead letters.  Pure: which Kafka topic, which headers, which body.

Every hop replaces the per-hop headers (one value per key), so a message that retried 16
times is not 16 times bigger; user headers travel unchanged (byte-exact).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from adapter.constants import (
    FAILURE_MESSAGE_MAX_CHARS,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.core.codec import (
    Failure,
    RetryCopier,
    dlq_headers,
    forward_headers,
    replace_headers,
    retry_pairs,
    straight_retry_headers,
)
from adapter.core.delay import DelayLevels
from adapter.core.headers import RawHeader, header_text
from adapter.core.message import MessageExt
from adapter.core.omitted_body import OmittedBody
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryLater, RetryNow
from adapter.core.schedule import Placement

#: a named tuple made without its generated ``__new__`` (one Python frame fewer a copy)
_new_tuple = tuple.__new__


class OutRecord(NamedTuple):
    """One record to produce: Kafka topic, body, key, headers, partition (``None``: the
    partitioner's choice).  A named tuple: one is made per copy, on the hot path."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class GroupTopics:
    """Where a consumer group's copies go: its logical retry and DLQ topics (and their
    Kafka names), the delay table and namespace of its delay-level topics."""

    group: str
    levels: DelayLevels
    namespace: str | None = None
    #: the names, worked out once (a failing stream asks for them with every copy)
    retry_topic: str = field(init=False)
    dlq_topic: str = field(init=False)
    retry_kafka: str = field(init=False)
    dlq_kafka: str = field(init=False)
    _level_topics: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        retry, dlq = naming.retry_topic(self.group), naming.dlq_topic(self.group)
        object.__setattr__(self, "retry_topic", retry)
        object.__setattr__(self, "dlq_topic", dlq)
        object.__setattr__(self, "retry_kafka", naming.to_kafka(retry))
        object.__setattr__(self, "dlq_kafka", naming.to_kafka(dlq))
        levels = range(1, self.levels.max_level + 1)
        object.__setattr__(
            self,
            "_level_topics",
            tuple(
                naming.to_kafka(naming.schedule_topic(n, self.levels, self.namespace))
                for n in levels
            ),
        )

    def level_topic(self, level: int) -> str:
        """The Kafka topic of delay ``level``."""
        topics = self._level_topics
        if not 0 < level <= len(topics):
            self.levels.check(level)  # raises InvalidDelayLevelError naming the level
        return topics[level - 1]


def retry_copier(topics: GroupTopics) -> RetryCopier:
    """The fast builder of ``topics``' retry copies: what :func:`send_back` makes for a
    :class:`RetryLater`, in one call per copy (see :class:`RetryCopier`)."""
    return RetryCopier(topics.group, topics.retry_topic, topics._level_topics)


def send_back(
    msg: MessageExt,
    dest: RetryLater | DeadLetter | RetryNow,
    topics: GroupTopics,
    *,
    now_ms: int,
    failure: Failure | None,
    omit_body: bool = False,
) -> OutRecord:
    """The copy of a failed ``msg`` that goes to ``dest``.

    A retry copy is parked on its delay level, due ``dest.delay_ms`` from now; a straight
    retry goes to the group's retry topic; a dead letter says why and from where, and with
    ``omit_body`` leaves the body where it was read (``RMQ_BODY_OMITTED`` names it).
    """
    if isinstance(dest, RetryLater):  # the common case: the copy of every failed message
        fields = msg.hop_fields()  # the message read once, in one call
        level = dest.level
        headers = retry_pairs(
            fields, topics.group, topics.retry_topic, level, now_ms + dest.delay_ms, failure
        )
        # OutRecord(topic, body, key, headers, None), made without the named tuple's
        # generated ``__new__``
        topic = topics.level_topic(level)
        return _new_tuple(OutRecord, (topic, fields[6], fields[5], headers, None))
    key = msg.sharding_key
    if isinstance(dest, RetryNow):
        headers = straight_retry_headers(msg, group=topics.group, failure=failure)
        return OutRecord(topics.retry_kafka, msg.body, key, headers)
    headers = dlq_headers(
        msg,
        group=topics.group,
        reason=dest.reason.value,
        now_ms=now_ms,
        failure=failure,
        reconsume_times=dest.reconsume_times,
        last_hop=topics.dlq_topic if dest.orderly else None,
        max_reconsume_times=dest.max_reconsume_times,
    )
    if omit_body:
        omitted = OmittedBody(len(msg.body), msg.kafka_topic, msg.queue_id, msg.queue_offset)
        headers.append(omitted.header())
        return OutRecord(topics.dlq_kafka, None, key, headers)
    return OutRecord(topics.dlq_kafka, msg.body, key, headers)


def forward(
    raw: Sequence[RawHeader],
    value: bytes | None,
    key: bytes | None,
    *,
    real_topic: str,
    real_queue_id: int | None,
    partitions: int,
) -> OutRecord:
    """A due delay-topic entry, forwarded to its real topic.

    The partition is ``REAL_QID`` when set; otherwise it is chosen here the way librdkafka's
    default partitioner would (CRC-32 of the key, a fixed spread of keyless records), so
    the forwarded copy can record where it went in ``REAL_QID`` (RocketMQ keeps the queue).
    """
    if real_queue_id is not None:
        partition = real_queue_id
    else:
        # keyed: where librdkafka's partitioner puts the key; keyless: spread by message id
        # (stable, so an entry forwarded again after a crash lands beside its first copy)
        spread = key if key is not None else (header_text(raw, PROPERTY_UNIQ_KEY) or "").encode()
        partition = zlib.crc32(spread) % partitions
    headers = replace_headers(forward_headers(raw), {PROPERTY_REAL_QUEUE_ID: partition})
    return OutRecord(naming.to_kafka(real_topic), value, key, headers, partition)


def repark(
    raw: Sequence[RawHeader],
    value: bytes | None,
    key: bytes | None,
    *,
    placement: Placement,
    levels: DelayLevels,
    namespace: str | None,
) -> OutRecord:
    """A timer entry not yet at its delivery time, parked again on a (shorter) level."""
    headers = replace_headers(
        raw, {PROPERTY_DELAY_TIME_LEVEL: placement.level, HEADER_DUE_MS: placement.due_ms}
    )
    topic = naming.to_kafka(naming.schedule_topic(placement.level, levels, namespace))
    return OutRecord(topic, value, key, headers)


def invalid_entry(
    raw: Sequence[RawHeader],
    value: bytes | None,
    key: bytes | None,
    *,
    dlq_topic: str,
    origin_topic: str,
    reason: str,
    now_ms: int,
) -> OutRecord:
    """A delay-topic entry that cannot be scheduled, dead-lettered with the reason."""
    headers = replace_headers(
        raw,
        {
            HEADER_DLQ_REASON: DeadLetterReason.INVALID_SCHEDULE_ENTRY.value,
            HEADER_FAILURE_TYPE: DeadLetterReason.INVALID_SCHEDULE_ENTRY.value,
            HEADER_FAILURE_MESSAGE: reason[:FAILURE_MESSAGE_MAX_CHARS],
            PROPERTY_DLQ_ORIGIN_TOPIC: origin_topic,
            HEADER_DLQ_TIME_MS: now_ms,
        },
    )
    return OutRecord(naming.to_kafka(dlq_topic), value, key, headers)


def without_body(record: OutRecord, omitted: OmittedBody) -> OutRecord:
    """``record`` (a dead letter) without its body, which stays where ``omitted`` says."""
    headers = [h for h in record.headers if h[0] != omitted.header()[0]]
    headers.append(omitted.header())
    return OutRecord(record.topic, None, record.key, headers, record.partition)
