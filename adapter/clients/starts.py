"""Where a member starts reading a partition it was just given.

Its committed offset; without one, ``consume_from_where`` (the group's retry topic always
from its beginning), an offset the caller commits at once so that a restart resumes
there.  When the committed offsets cannot be read even after retries, nothing is guessed:
librdkafka reads them itself (a transient error must never rewind or skip anything).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from adapter.core.offsets import ConsumeFromWhere, StartAt, first_start
from adapter.io.offsets import LOOKUP_TIMEOUT_S, committed_offsets

__all__ = ["StartPositions"]

log = logging.getLogger("adapter.consumer")


class StartPositions:
    """Start positions for one member (``retry_kafka``: its group's retry topic, read from
    its beginning; ``None`` when broadcasting)."""

    def __init__(
        self,
        *,
        name: str,
        consume_from_where: ConsumeFromWhere,
        consume_timestamp_ms: int | None,
        retry_kafka: str | None,
    ) -> None:
        self.name = name
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.retry_kafka = retry_kafka

    def resolve(self, consumer: Any, partitions: list[Any]) -> list[Any]:
        """Set where each of ``partitions`` starts (their ``offset``); returns the start
        positions to commit (those the group had none for, fixed now so that a restart
        resumes there)."""
        committed = committed_offsets(consumer, partitions, logger=log)
        if committed is None:
            log.warning(
                "%s: committed offsets unknown after retries; librdkafka reads them itself",
                self.name,
            )
            return []  # OFFSET_STORED: the committed offset, else the earliest
        initial = []
        for p, c in zip(partitions, committed, strict=True):
            if c.offset >= 0:
                p.offset = c.offset
                continue
            offset = self.first_offset(consumer, p.topic, p.partition)
            p.offset = offset
            if offset >= 0:
                initial.append(TopicPartition(p.topic, p.partition, offset))
        return initial

    def first_offset(self, consumer: Any, topic: str, partition: int) -> int:
        """Where a partition without a committed offset starts (an offset, or a logical one)."""
        start = first_start(self.consume_from_where, retry_topic=topic == self.retry_kafka)
        if start is StartAt.BEGINNING:
            return OFFSET_BEGINNING
        try:
            if start is StartAt.TIMESTAMP:
                ts = self.consume_timestamp_ms or 0
                [found] = consumer.offsets_for_times(
                    [TopicPartition(topic, partition, ts)], timeout=LOOKUP_TIMEOUT_S
                )
                if found.offset >= 0:
                    return int(found.offset)
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=LOOKUP_TIMEOUT_S
            )
            return int(high)
        except KafkaException as exc:
            log.warning("%s: start position of %s[%d]: %s", self.name, topic, partition, exc)
            return OFFSET_END
