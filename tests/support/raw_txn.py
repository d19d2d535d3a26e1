"""A raw confluent-kafka transactional loop: the baseline the exactly-once forwarding's
failover is measured against in the same run (same cluster, same kill, same load).

It commits a small transaction every ``pause_s`` the way the ScheduleService's does (a
record to each partition of ``topic`` and a consumer group's offsets), handling errors as
librdkafka documents (retriable: call again; abortable: abort; fatal: a new producer), and
records when each commit completed. Its ``transactional.id`` is chosen so that its
coordinator is the same ``__transaction_state`` partition as ``twin_of``'s: killing one's
coordinator kills the other's.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from adapter.embedded.config import TRANSACTION_PARTITIONS
from adapter.embedded.node import coordinator_partition

#: a call's timeout, as the ScheduleService uses in its slices
CALL_TIMEOUT_S = 2.0


def twin_transactional_id(twin_of: str) -> str:
    """A new ``transactional.id`` whose coordinator partition is ``twin_of``'s."""
    want = coordinator_partition(twin_of, TRANSACTION_PARTITIONS)
    while True:
        tid = f"raw-twin-{uuid.uuid4().hex[:8]}"
        if coordinator_partition(tid, TRANSACTION_PARTITIONS) == want:
            return tid


class RawTransactionLoop:
    """The raw loop on a thread of its own; :meth:`resumed_after` is the baseline."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, twin_of: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.transactional_id = twin_transactional_id(twin_of)
        self.commits: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raw-txn", daemon=True)
        self._group = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"raw-twin-{uuid.uuid4().hex[:8]}"}
        ).consumer_group_metadata()

    def start(self) -> RawTransactionLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the raw transactional loop did not stop"

    def resumed_after(self, t: float) -> float | None:
        """Seconds from ``t`` (monotonic) to the first commit completed after it."""
        return next((c - t for c in self.commits if c > t), None)

    def _producer(self) -> Any:
        """A new producer with its transactions initialised (a fatal error: another one)."""
        config = {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 10_000,  # the ScheduleService's
            "linger.ms": 5,
        }
        p = Producer(config)
        while not self._stop.is_set():
            try:
                p.init_transactions(CALL_TIMEOUT_S)
                return p
            except KafkaException as exc:
                self.errors.append(f"init: {exc.args[0].name()}")
                if exc.args[0].fatal():
                    p = Producer(config)
                time.sleep(0.25)
        return p

    def _run(self) -> None:
        p = self._producer()
        n = 0
        while not self._stop.wait(0.2):
            try:
                p.begin_transaction()
                for k in range(self.partitions):
                    p.produce(self.topic, b"raw-twin", partition=k)
                offsets = [TopicPartition(self.topic, k, n) for k in range(self.partitions)]
                self._call(p.send_offsets_to_transaction, offsets, self._group, CALL_TIMEOUT_S)
                self._call(p.commit_transaction, CALL_TIMEOUT_S)
                self.commits.append(time.monotonic())
                n += 1
            except KafkaException as exc:
                err = exc.args[0]
                self.errors.append(err.name())
                if not err.fatal():
                    try:
                        self._call(p.abort_transaction, CALL_TIMEOUT_S)
                        continue
                    except KafkaException as again:
                        self.errors.append(f"abort: {again.args[0].name()}")
                p = self._producer()

    def _call(self, call: Any, *args: Any) -> None:
        """A transactional call repeated while librdkafka says it may be (retriable)."""
        while True:
            try:
                call(*args)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or self._stop.is_set():
                    raise
                time.sleep(0.25)
