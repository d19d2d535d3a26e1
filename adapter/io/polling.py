"""Fetching batches without waiting for them to fill."""

from __future__ import annotations

import logging
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from adapter.io.errors import client_error

log = logging.getLogger("adapter.consumer")


def consume_available(consumer: Any, max_messages: int, timeout: float) -> list[Any]:
    """Up to ``max_messages`` records: whatever is ready now, else wait (≤ ``timeout``) for
    the first and take what is ready with it.

    ``Consumer.consume(n, timeout)`` alone waits the whole timeout for ``n`` records,
    which adds up to ``timeout`` of latency whenever traffic is light.
    """
    msgs: list[Any] = consumer.consume(max_messages, 0)
    if msgs:
        return msgs
    msgs = consumer.consume(1, timeout)
    if msgs and max_messages > 1:
        msgs.extend(consumer.consume(max_messages - 1, 0))
    return msgs


def refresh_if_any_exists(consumer: Any, topics: list[str], timeout: float, name: str) -> list[str]:
    """Subscribed ``topics`` the member holds no partition of: when one of them exists,
    refresh the consumer's whole metadata, which makes librdkafka compare the subscription
    with the cluster again (a rejoin only when the group's view was out of date; see
    :mod:`adapter.core.subscription`).  Returns the ones that exist.  A failed lookup is
    logged and left for the next check."""
    existing: list[str] = []
    try:
        for topic in topics:
            tmd = consumer.list_topics(topic=topic, timeout=timeout).topics.get(topic)
            if tmd is not None and tmd.error is None and tmd.partitions:
                existing.append(topic)
        if existing:
            log.debug(
                "%s: subscribed topic(s) %s exist and this member holds none of them: "
                "refreshing the group's metadata",
                name,
                existing,
            )
            consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        log.debug("%s: looking up subscribed topics failed: %s", name, exc)
    return existing


def held_by_no_other_member(
    admin: Any, group: str, member_id: str, topics: list[str], timeout: float
) -> list[str]:
    """The ``topics`` of which no member of ``group`` but ``member_id`` holds a partition,
    by the group's own description (empty when the group cannot be described now).  Asked
    for topics this member holds nothing of: held by nobody, or by this member in the
    group's view only, the assignment went wrong."""
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(
            timeout=timeout + 5
        )
    except KafkaException as exc:
        log.debug("describing group %s failed: %s", group, exc)
        return []
    held = {
        tp.topic
        for m in desc.members or ()
        if m.member_id != member_id and m.assignment is not None
        for tp in m.assignment.topic_partitions or ()
    }
    return [t for t in topics if t not in held]


def is_cooperative(config: dict[str, Any]) -> bool:
    """Whether a consumer config rebalances incrementally: the cooperative assignor of the
    classic protocol, or the consumer protocol (KIP-848), which is always incremental."""
    if str(config.get("group.protocol", "classic")).lower() == "consumer":
        return True
    return "cooperative" in str(config.get("partition.assignment.strategy", ""))


def apply_assignment(consumer: Any, partitions: list[Any], cooperative: bool) -> None:
    """Take ``partitions`` inside an ``on_assign`` callback, for either rebalance protocol."""
    if cooperative:
        consumer.incremental_assign(partitions)
    else:
        consumer.assign(partitions)
    if partitions:
        consumer.resume(partitions)  # a partition never inherits a pause


def release_assignment(consumer: Any, partitions: list[Any], cooperative: bool) -> None:
    """Give ``partitions`` up inside an ``on_revoke``/``on_lost`` callback."""
    if cooperative:
        consumer.incremental_unassign(partitions)
    else:
        consumer.unassign()


_LEADERLESS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._TRANSPORT,
    }
)


def _leaderless(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _LEADERLESS)


def watermarks(consumer: Any, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """A partition's (low, high) watermarks.  A DLQ created a moment ago may not have a
    leader yet (``NOT_LEADER_FOR_PARTITION``, ``LEADER_NOT_AVAILABLE``): such retriable
    errors are retried with back-off (≤ ``timeout_s``); what remains is an adapter error."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        retry=tenacity.retry_if_exception(_leaderless),
        reraise=True,
    )
    try:
        low, high = retrying(consumer.get_watermark_offsets, tp, timeout=timeout_s)
    except KafkaException as exc:
        raise client_error(exc, what=f"reading the offsets of {tp.topic}[{tp.partition}]") from exc
    return int(low), int(high)
