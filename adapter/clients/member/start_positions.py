"""Where a member starts reading a partition it was just given.

Its committed offset; without one, ``consume_from_where`` (the group's retry topic always
from its beginning), an offset the caller commits at once so that a restart resumes
there.  When the committed offsets cannot be read even after retries, nothing is guessed:
librdkafka reads them itself (a transient error must never rewind or skip anything).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from adapter.core.offsets import ConsumeFromWhere, StartAt, end_at_start, first_start
from adapter.core.types import TP
from adapter.io.errors import FatalErrorWatch, wait_metadata
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
        #: where each partition of the subscribed topics ended when the member started
        #: (``None``: not taken; an end start is then looked up on assignment)
        self.ends_at_start: dict[TP, int] | None = None
        #: topics whose ends could not be read at start (the old rule applies to them)
        self.unknown_at_start: set[str] = set()

    def take_ends(
        self, consumer: Any, kafka_topics: list[str], watch: FatalErrorWatch | None = None
    ) -> None:
        """Remember where each partition of ``kafka_topics`` ends now, before subscribing.

        A partition that starts "at its end" (``CONSUME_FROM_LAST_OFFSET``) then starts where
        it ended when the member started, and a partition that did not exist yet (a topic
        created after ``start()``) at its beginning: whatever was sent after ``start()`` is
        read, however late the assignment or the topic came.  A failed lookup leaves the old
        rule (the end at assignment) for the topic concerned.  With the consumer's ``watch``
        (its ``error_cb``) a failed TLS handshake raises its ``TlsError`` within a second."""
        if first_start(self.consume_from_where, retry_topic=False) is not StartAt.END:
            return
        ends: dict[TP, int] = {}
        for topic in kafka_topics:
            if topic == self.retry_kafka:
                continue
            try:
                # not subscribed yet: poll(0) only runs the callbacks
                md = wait_metadata(
                    consumer,
                    LOOKUP_TIMEOUT_S,
                    watch=watch,
                    serve=lambda: consumer.poll(0),
                    topic=topic,
                )
                tmd = md.topics.get(topic)
                if tmd is None or tmd.error is not None:
                    continue  # not there yet: every partition it gets starts at its beginning
                for partition in tmd.partitions:
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=LOOKUP_TIMEOUT_S
                    )
                    ends[(topic, partition)] = int(high)
            except KafkaException as exc:
                log.warning("%s: end offsets of %s at start: %s", self.name, topic, exc)
                self.unknown_at_start.add(topic)
        self.ends_at_start = ends

    def resolve(
        self, consumer: Any, partitions: list[Any], stopping: Callable[[], bool] = lambda: False
    ) -> list[Any]:
        """Set where each of ``partitions`` starts (their ``offset``); returns the start
        positions to commit (those the group had none for, fixed now so that a restart
        resumes there).

        A member that is ``stopping()`` reads nothing from these partitions any more: it
        looks nothing up (a lookup may wait 10 s a try on a busy coordinator, past the
        shutdown's grace) and leaves them at their committed offsets, which librdkafka
        reads itself; a lookup that fails once the member is stopping is not retried."""
        if stopping():
            return []
        committed = committed_offsets(consumer, partitions, logger=log, give_up=stopping)
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
        if start is StartAt.END and self.ends_at_start is not None:
            known = end_at_start(self.ends_at_start, self.unknown_at_start, (topic, partition))
            if known is not None:
                return known
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
