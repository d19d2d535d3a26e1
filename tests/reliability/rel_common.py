"""Shared helpers of the reliability tests in this folder (schedule faults, timing, slow
listeners, bad input): time, bounded waits, a stamping collector and raw producing.

``tests/integration`` is put on ``sys.path`` so its helpers (``_procs``,
``consumer_helpers``) can be reused by import, the way pytest's default import mode makes
them importable for the tests beside them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka import Producer as RawProducer

_INTEGRATION = str(Path(__file__).resolve().parent.parent / "integration")
if _INTEGRATION not in sys.path:
    sys.path.append(_INTEGRATION)

from consumer_helpers import wait_until  # noqa: E402  (re-exported for the suites)

#: ``RMQ_RELIABILITY_FULL=1`` runs the heavier variants (more kills, bigger backlogs).
FULL = os.environ.get("RMQ_RELIABILITY_FULL", "").strip() not in ("", "0", "false", "no")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def unique(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------------------------
# reading a topic, stamping arrivals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    value: bytes | None
    headers: dict[str, bytes | None]  # last value per key
    created_ms: int  # record timestamp (CreateTime: when the forwarding producer made it)
    received_ms: int  # when this collector got it
    partition: int
    offset: int

    def text(self, key: str) -> str | None:
        raw = self.headers.get(key)
        return None if raw is None else raw.decode("utf-8", "replace")


class Collector:
    """Reads every partition of ``topic`` from the beginning on a background thread."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, read_committed: bool = True
    ) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"rel-collect-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                "fetch.wait.max.ms": 50,
            }
        )
        self._consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self._records: list[Arrival] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="rel-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            batch = self._consumer.consume(1000, 0.05)
            if not batch:
                continue
            got = now_ms()
            out = []
            for msg in batch:
                if msg.error():
                    self.errors.append(msg.error().str())
                    continue
                headers: dict[str, bytes | None] = {}
                for k, v in msg.headers() or []:
                    headers[k] = v
                out.append(
                    Arrival(
                        msg.value(),
                        headers,
                        msg.timestamp()[1],
                        got,
                        msg.partition(),
                        msg.offset(),
                    )
                )
            with self._lock:
                self._records.extend(out)

    def snapshot(self) -> list[Arrival]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def values(self) -> Counter[bytes | None]:
        with self._lock:
            return Counter(r.value for r in self._records)

    def wait_values(self, wanted: set[bytes], timeout: float) -> list[Arrival]:
        def have_all() -> bool:
            with self._lock:
                return wanted <= {r.value for r in self._records}

        try:
            wait_until(have_all, timeout, f"{len(wanted)} values on {self.topic}", 0.1)
        except AssertionError:
            missing = wanted - set(self.values())
            raise AssertionError(
                f"{self.topic}: {len(missing)} of {len(wanted)} never arrived, e.g. "
                f"{sorted(missing)[:10]}"
            ) from None
        return self.snapshot()

    def drain(self, quiet_s: float = 1.0, timeout: float = 15.0) -> list[Arrival]:
        """Wait until nothing new arrived for ``quiet_s`` (bounded): catches late repeats."""
        deadline = time.monotonic() + timeout
        count, since = len(self), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            n = len(self)
            if n != count:
                count, since = n, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return self.snapshot()

    def close(self) -> None:
        self._running = False
        self._thread.join(5)
        self._consumer.close()


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
    from adapter.clients.topics import plan_topics
    from adapter.core.delay import DelayLevels

    return [
        p.kafka_topic
        for p in plan_topics(
            groups=groups,
            delay_levels=DelayLevels.parse(levels),
            namespace=namespace,
            partitions=partitions,
        )
    ]
