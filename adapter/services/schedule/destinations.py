"""Where a forward goes: whether its ``REAL_TOPIC`` (and ``REAL_QID``) exists, from partition
counts the service caches and looks up again once they are old."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.schedule import Forward
from adapter.errors import TopicNameError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import admin_config
from adapter.io.errors import is_unknown_topic, make_client
from adapter.io.offsets import LOOKUP_TIMEOUT_S, retrying_lookup

__all__ = ["DESTINATION_TTL_S", "REFRESH_WAIT_S", "Destinations", "partition_count"]

log = logging.getLogger("adapter.schedule")

#: A destination's partition count is looked up again once it is this old: a destination
#: deleted meanwhile is dead-lettered before a forward to it waits out its timeout (and,
#: exactly-once, holds back the transaction of every other entry).
DESTINATION_TTL_S = 1.0
#: How long a forward to a destination whose description is stale waits for the new one.
REFRESH_WAIT_S = 2.0


class Destinations:
    """Partition counts of the topics entries are forwarded to.

    A count older than ``ttl_s`` is looked up again (an admin request).  The forward that
    found it stale waits for that answer up to ``REFRESH_WAIT_S``: a destination deleted
    since is then found gone before a record is produced to it (such a record would sit in
    the producer until ``message.timeout.ms`` and, exactly-once, hold back every other
    entry of its transaction that long).  When the broker does not answer in time (it is
    down or slow) the forward goes on with the count it had, and the loop never blocks
    longer than that.  Ages are measured on ``clock`` (the service's).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        ttl_s: float,
        refresh_wait_s: float = REFRESH_WAIT_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config
        self._clock = clock
        self._ttl_s = ttl_s
        self._refresh_wait_s = refresh_wait_s
        self._known: dict[str, tuple[int, float]] = {}
        self._refreshing: dict[str, Any] = {}  # Kafka topic -> future
        self._waited: set[Any] = set()  # refreshes a forward waited for (once each)
        self._admin: Any = None

    def check(self, fwd: Forward, consumer: Any) -> tuple[str | None, int]:
        """``(problem, partitions)`` of a forward's destination (cached; looked up through
        ``consumer`` when unknown, or found gone by a refresh)."""
        try:
            kafka_topic = naming.to_kafka(fwd.real_topic)
        except TopicNameError as exc:
            return str(exc), 0
        partitions = self.partitions(kafka_topic, self._clock.monotonic())
        if partitions is not None:
            # stale: a refresh is under way; its answer may be "gone"
            self.settle(kafka_topic, self._refresh_wait_s)
            partitions = self.partitions(kafka_topic, self._clock.monotonic())
        if partitions is None:
            partitions = partition_count(consumer, kafka_topic)
            if partitions is None:
                return f"REAL_TOPIC {fwd.real_topic!r} does not exist", 0
            self.known(kafka_topic, partitions, self._clock.monotonic())
        if fwd.real_queue_id is not None and fwd.real_queue_id >= partitions:
            problem = (
                f"REAL_QID={fwd.real_queue_id} but {fwd.real_topic!r} has {partitions} partitions"
            )
            return problem, partitions
        return None, partitions

    def partitions(self, kafka_topic: str, now: float) -> int | None:
        """The cached count (``None``: never seen, or found gone by a refresh)."""
        self._collect()
        known = self._known.get(kafka_topic)
        if known is None:
            return None
        if now - known[1] > self._ttl_s and kafka_topic not in self._refreshing:
            self._refresh(kafka_topic)
        return known[0]

    def settle(self, kafka_topic: str, timeout_s: float) -> None:
        """Wait (bounded) for a refresh of ``kafka_topic`` under way, and take its answer."""
        future = self._refreshing.get(kafka_topic)
        if future is None or future in self._waited:
            return  # none under way, or one forward already waited for it
        self._waited.add(future)
        concurrent.futures.wait([future], timeout=timeout_s)
        self._collect()

    def known(self, kafka_topic: str, partitions: int, now: float) -> None:
        self._known[kafka_topic] = (partitions, now)

    def forget(self) -> None:
        self._known.clear()

    def _refresh(self, kafka_topic: str) -> None:
        if self._admin is None:
            self._admin = make_client(
                AdminClient, admin_config(self._config), what="ScheduleService admin client"
            )
        futures = self._admin.describe_topics(
            TopicCollection([kafka_topic]), request_timeout=LOOKUP_TIMEOUT_S
        )
        self._refreshing[kafka_topic] = futures[kafka_topic]

    def _collect(self) -> None:
        if not self._refreshing:
            return
        for topic, future in list(self._refreshing.items()):
            if not future.done():
                continue
            del self._refreshing[topic]
            self._waited.discard(future)
            try:
                description = future.result()
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and is_unknown_topic(err):
                    self._known.pop(topic, None)  # gone: the next forward finds out
                continue  # any other failure: keep the count, try again later
            self._known[topic] = (len(description.partitions), self._clock.monotonic())

    def close(self) -> None:
        self._admin = None


def partition_count(consumer: Any, kafka_topic: str) -> int | None:
    """How many partitions ``kafka_topic`` has (``None``: it does not exist)."""
    # ask through the consumer: a producer's metadata request auto-creates the topic on
    # brokers with auto.create.topics.enable (the check itself would create it)
    md = retrying_lookup(
        lambda: consumer.list_topics(topic=kafka_topic, timeout=LOOKUP_TIMEOUT_S),
        what=f"looking up {kafka_topic}",
        logger=log,
    )
    tmd = md.topics.get(kafka_topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        return None
    return len(tmd.partitions)
