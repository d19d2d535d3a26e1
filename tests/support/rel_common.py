"""Shared helpers of the reliability tests in this folder (schedule faults, timing, slow
listeners, bad input): time, bounded waits, a stamping collector and raw producing.

"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer as RawProducer

# re-exported for the suites in this folder
from tests.support.collector import Arrival, Collector, now_ms
from tests.support.consumer_helpers import wait_until

__all__ = [
    "FULL",
    "Arrival",
    "Collector",
    "delete_topics",
    "now_ms",
    "planned_kafka_topics",
    "produce_raw",
    "unique",
    "wait_until",
]

#: ``RMQ_RELIABILITY_FULL=1`` runs the heavier variants (more kills, bigger backlogs).
FULL = os.environ.get("RMQ_RELIABILITY_FULL", "").strip() not in ("", "0", "false", "no")


def unique(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------------------------
# producing raw records
# --------------------------------------------------------------------------------------------


def produce_raw(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes | None, list[tuple[str, bytes | None]] | None]],
    *,
    partition: int | None = None,
    key: bytes | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Plain confluent-kafka records (value, headers or ``None``); all must be acknowledged."""
    producer = RawProducer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "enable.idempotence": True,
            **(extra or {}),
        }
    )
    errors: list[Any] = []
    for value, headers in records:
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key=key,
                    on_delivery=lambda err, _m: errors.append(err) if err else None,
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "records left unacknowledged"
    assert not errors, errors[:5]


# --------------------------------------------------------------------------------------------
# topics of one test
# --------------------------------------------------------------------------------------------


def delete_topics(bootstrap: str, topics: set[str] | list[str]) -> None:
    """Best-effort deletion at teardown (a long session must not pile up topics)."""
    if not topics:
        return
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        futures = admin.delete_topics(sorted(topics), operation_timeout=10, request_timeout=10)
    except Exception:
        return
    for fut in futures.values():
        try:
            fut.result(timeout=15)
        except Exception:
            continue


def planned_kafka_topics(
    *, groups: Sequence[str], levels: str, namespace: str, partitions: int = 1
) -> list[str]:
    from adapter.core.delay import DelayLevels
    from adapter.io.topics import plan_topics

    return [
        p.kafka_topic
        for p in plan_topics(
            groups=groups,
            delay_levels=DelayLevels.parse(levels),
            namespace=namespace,
            partitions=partitions,
        )
    ]
