"""A raw confluent-kafka transactional loop: the baseline the exactly-once forwarding's
failover is measured against in the same run (same cluster, same kill, same load).

It commits a small transaction every ``pause_s`` the way the ScheduleService's does (a
record to each partition of ``topic`` and a consumer group's offsets), handling errors as
librdkafka documents (retriable: call again; abortable: abort; fatal: a new producer), and
records when each commit completed. Its ``transactional.id`` is chosen so that its
coordinator is the same ``__transaction_state`` partition as ``twin_of``'s: killing one's
coordinator kills the other's.

The loop runs in a process of its own (``python -m tests.support.raw_txn``), as a raw
application would: it does not share the test's GIL, and a librdkafka call that hangs past
its timeout (a transactional call waits for a coordinator request already in flight) cannot
hang the test. The child prints one line per commit (``commit <monotonic seconds>``, the
system-wide clock the parent reads too) and per error; it stops when its stdin closes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
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
    """The raw loop in a child process; :meth:`resumed_after` is the baseline."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, twin_of: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.transactional_id = twin_transactional_id(twin_of)
        self.commits: list[float] = []
        self.errors: list[str] = []
        #: the child had to be killed: it did not stop within the grace period
        self.hung = False
        self._child: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> RawTransactionLoop:
        root = Path(__file__).resolve().parents[2]
        self._child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.raw_txn",
                self.bootstrap,
                self.topic,
                str(self.partitions),
                self.transactional_id,
            ],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        self._reader = threading.Thread(target=self._read, name="raw-txn-reader", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._child is not None and self._child.stdout is not None
        for line in self._child.stdout:
            kind, _, value = line.strip().partition(" ")
            if kind == "commit":
                self.commits.append(float(value))
            elif kind == "error":
                self.errors.append(value)

    def stop(self, grace_s: float = 30.0) -> None:
        """Closes the child's stdin (its signal to stop); kills it after ``grace_s``."""
        child = self._child
        if child is None:
            return
        assert child.stdin is not None
        child.stdin.close()
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.hung = True
            child.kill()
            child.wait(10)
        if self._reader is not None:
            self._reader.join(10)

    def resumed_after(self, t: float) -> float | None:
        """Seconds from ``t`` (monotonic) to the first commit completed after it."""
        return next((c - t for c in self.commits if c > t), None)


class _Loop:
    """The loop itself, in the child process."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.transactional_id = transactional_id
        self.stop = threading.Event()
        self._group = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"raw-twin-{uuid.uuid4().hex[:8]}"}
        ).consumer_group_metadata()

    @staticmethod
    def _say(kind: str, value: object) -> None:
        print(kind, value, flush=True)

    def _producer(self) -> Any:
        """A new producer with its transactions initialised (a fatal error: another one)."""
        config = {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 10_000,  # the ScheduleService's
            "linger.ms": 5,
        }
        p = Producer(config)
        while not self.stop.is_set():
            try:
                p.init_transactions(CALL_TIMEOUT_S)
                return p
            except KafkaException as exc:
                self._say("error", f"init:{exc.args[0].name()}")
                if exc.args[0].fatal():
                    p = Producer(config)
                time.sleep(0.25)
        return p

    def run(self) -> None:
        p = self._producer()
        n = 0
        while not self.stop.wait(0.2):
            try:
                p.begin_transaction()
                for k in range(self.partitions):
                    p.produce(self.topic, b"raw-twin", partition=k)
                offsets = [TopicPartition(self.topic, k, n) for k in range(self.partitions)]
                self._call(p.send_offsets_to_transaction, offsets, self._group, CALL_TIMEOUT_S)
                self._call(p.commit_transaction, CALL_TIMEOUT_S)
                self._say("commit", time.monotonic())
                n += 1
            except KafkaException as exc:
                err = exc.args[0]
                self._say("error", err.name())
                if not err.fatal():
                    try:
                        self._call(p.abort_transaction, CALL_TIMEOUT_S)
                        continue
                    except KafkaException as again:
                        self._say("error", f"abort:{again.args[0].name()}")
                p = self._producer()

    def _call(self, call: Any, *args: Any) -> None:
        """A transactional call repeated while librdkafka says it may be (retriable)."""
        while True:
            try:
                call(*args)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or self.stop.is_set():
                    raise
                time.sleep(0.25)


def main(argv: list[str]) -> None:
    bootstrap, topic, partitions, transactional_id = argv
    loop = _Loop(bootstrap, topic, int(partitions), transactional_id)

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed it
        loop.stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    loop.run()
    os._exit(0)  # no producer teardown to wait for: the parent measured what it needed


if __name__ == "__main__":
    main(sys.argv[1:])
