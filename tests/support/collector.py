"""A background reader of a whole topic, stamping when each record arrived.

Shared by the ScheduleService tests and the reliability suite: timing assertions need the
record's CreateTime (when the forwarding producer made it) and the time this test saw it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from adapter.constants import HEADER_DUE_MS, PROPERTY_UNIQ_KEY
from tests.support.consumer_helpers import wait_until


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Arrival:
    value: bytes | None
    headers: dict[str, bytes | None]  # last value per key
    header_keys: tuple[str, ...]  # every key, in order, duplicates kept
    created_ms: int  # record timestamp (CreateTime: when the forwarding producer made it)
    received_ms: int  # when this collector got it
    partition: int
    offset: int

    def text(self, key: str) -> str | None:
        raw = self.headers.get(key)
        return None if raw is None else raw.decode("utf-8", "replace")

    def required(self, key: str) -> str:
        value = self.text(key)
        assert value is not None, f"{self.value!r} has no {key} header: {self.headers}"
        return value

    @property
    def due_ms(self) -> int:
        return int(self.required(HEADER_DUE_MS))

    @property
    def uniq(self) -> str:
        return self.required(PROPERTY_UNIQ_KEY)


class Collector:
    """Reads every partition of ``topic`` from the beginning on a background thread."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, read_committed: bool = True
    ) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"collect-{uuid.uuid4().hex}",
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
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            first = self._consumer.poll(0.05)
            if first is None:
                continue
            got = now_ms()  # stamped as the first record arrives, the rest already there
            batch = [first, *self._consumer.consume(1000, 0)]
            out = []
            for msg in batch:
                if msg.error():
                    self.errors.append(msg.error().str())
                    continue
                raw = msg.headers() or []
                out.append(
                    Arrival(
                        msg.value(),
                        dict(raw),
                        tuple(k for k, _ in raw),
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

    def wait_for(self, predicate: Callable[[list[Arrival]], bool], timeout: float) -> None:
        try:
            wait_until(lambda: predicate(self.snapshot()), timeout, f"records on {self.topic}")
        except AssertionError:
            got = self.snapshot()
            raise AssertionError(
                f"{self.topic}: condition not met within {timeout}s; {len(got)} records: "
                f"{[r.value for r in got][:50]}"
            ) from None

    def wait_count(self, n: int, timeout: float) -> list[Arrival]:
        self.wait_for(lambda recs: len(recs) >= n, timeout)
        return self.snapshot()

    def wait_values(self, wanted: set[bytes], timeout: float) -> list[Arrival]:
        try:
            wait_until(lambda: wanted <= set(self.values()), timeout, "values", 0.1)
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
