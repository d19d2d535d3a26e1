"""The trace sink: consume-trace events, Avro-encoded, to a Kafka trace topic.

:class:`KafkaTraceSink` is what ``PushConsumer(..., trace_topic=...)`` and
``ScheduleService(..., trace_topic=...)`` create.  It is a thin idempotent confluent-kafka
producer derived from the client's own config (so ``security.*``/``sasl.*``/``ssl.*`` pass
through), lingering to batch.  Each event becomes one record:

* topic: the Kafka name of the logical trace topic (created if missing);
* key: the message id (so a message's events stay in one partition, in order);
* value: plain Avro binary of ``consume_trace.avsc`` (no prefix: Spark's ``from_avro``
  reads it as is);
* header ``RMQ_TRACE_SCHEMA``: the writer schema (``<full name>/<fingerprint>``).

Calling the sink only appends the event to an in-memory queue (well under a microsecond, no
lock): the consumer's poll loop, which emits most events, does no encoding and no
``produce()``.  The sink's own thread drains the queue every few milliseconds (or as soon as
:data:`_WAKE_AT` events wait), encodes each event with the writer compiled from the schema
(:func:`~adapter.io.avro.trace_encoder`) and hands it to librdkafka, which batches
(``linger.ms``) and compresses on its own threads; delivery reports (failures only) are
served on the sink's thread too.

It never raises into the consumer: an event that cannot be encoded or produced, or that
finds the queue full (:data:`DEFAULT_MAX_QUEUED`), is counted in
:attr:`KafkaTraceSink.dropped` and logged (rate-limited).  Tracing is best effort by design;
it must not slow down or break consumption.  :meth:`KafkaTraceSink.flush` waits for the
queue and the producer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import Producer

from adapter.core import naming
from adapter.core.trace import TraceEvent
from adapter.io.avro import TRACE_SCHEMA_HEADER, trace_encoder, trace_schema
from adapter.io.config import check_kafka_config, producer_config
from adapter.io.errors import make_client
from adapter.io.topics import TopicPlan, ensure_topics

__all__ = ["DEFAULT_MAX_QUEUED", "DEFAULT_TRACE_PARTITIONS", "KafkaTraceSink"]

log = logging.getLogger("adapter.trace")

#: Partitions of a trace topic this sink creates (an existing topic is used as it is).
DEFAULT_TRACE_PARTITIONS: Final = 3
_LOG_EVERY_S: Final = 10.0
#: Events the queue holds at most; beyond that new events are dropped (and counted).
DEFAULT_MAX_QUEUED: Final = 100_000
#: The sink's thread drains the queue at least this often ...
_DRAIN_EVERY_S: Final = 0.01
#: ... and at once when this many events wait.
_WAKE_AT: Final = 1_000
#: How long the sink's thread waits for librdkafka to make room in a full local queue.
_ROOM_WAIT_S: Final = 0.05
_TRACE_RETENTION_MS: Final = str(7 * 86_400_000)
_PRODUCER_DEFAULTS: Final[dict[str, Any]] = {
    "linger.ms": 50,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 200_000,
    # a trace that cannot be delivered within a minute is not worth holding memory for
    "message.timeout.ms": 60_000,
}


class KafkaTraceSink:
    """``sink(event)`` -> one Avro record on the trace topic.  Thread-safe."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        *,
        partitions: int = DEFAULT_TRACE_PARTITIONS,
        create_topic: bool = True,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        checked = check_kafka_config(config, "trace")
        self.topic = topic
        self.kafka_topic = naming.to_kafka(topic)
        if create_topic:
            ensure_topics(
                checked,
                [
                    TopicPlan(
                        topic, self.kafka_topic, partitions, {"retention.ms": _TRACE_RETENTION_MS}
                    )
                ],
            )
        conf = producer_config(checked)
        for key, value in _PRODUCER_DEFAULTS.items():
            conf.setdefault(key, value)
        conf["enable.idempotence"] = True
        # a delivery report per record would cost a Python callback per event: only failures
        # are reported (and counted)
        conf["delivery.report.only.error"] = True
        conf["on_delivery"] = self._on_delivery
        conf["client.id"] = f"{conf['client.id']}-trace" if conf.get("client.id") else "rmq-trace"
        self._producer: Any = make_client(Producer, conf, what="trace producer")
        self._headers = [(TRACE_SCHEMA_HEADER, trace_schema().tag.encode())]
        self._max_queued = max_queued
        self._queue: deque[TraceEvent] = deque()
        self._wake = threading.Event()
        self._drained = threading.Condition()
        self._busy = False  # the sink's thread is between taking events and producing them
        self._lock = threading.Lock()
        self._closed = False  # no more events accepted
        self._stopping = False  # the sink's thread ends once the queue is empty
        self.sent = 0  # handed to the producer
        self.dropped = 0  # not queued, not encoded, not produced, or not delivered
        self._undelivered = 0
        self._last_log = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"rmq-trace-{self.kafka_topic}", daemon=True
        )
        self._thread.start()

    @property
    def delivered(self) -> int:
        """Records the broker acknowledged (exact once flushed or closed)."""
        producer = self._producer
        in_flight = len(producer) if producer is not None else 0
        return self.sent - self._undelivered - in_flight

    @property
    def queued(self) -> int:
        """Events waiting for the sink's thread."""
        return len(self._queue)

    # -- the sink (called on the consumer's threads) ---------------------------------------
    def __call__(self, event: TraceEvent) -> None:
        if self._closed:
            return
        queue = self._queue
        n = len(queue)
        if n >= self._max_queued:
            self._drop(f"trace queue full ({n} events): event for {event.msg_id} dropped")
            return
        queue.append(event)  # deque.append is atomic: no lock on the hot path
        if n >= _WAKE_AT and not self._wake.is_set():
            self._wake.set()

    # -- the sink's thread -----------------------------------------------------------------
    def _run(self) -> None:
        producer = self._producer
        queue = self._queue
        while True:
            self._wake.wait(_DRAIN_EVERY_S)
            self._wake.clear()
            self._busy = True
            try:
                self._drain(producer, queue)
                producer.poll(0)  # failure reports, error and statistics callbacks
            except Exception:  # never let the thread die
                log.exception("trace sink thread")
            finally:
                self._busy = False
            with self._drained:
                self._drained.notify_all()
            if self._stopping and not queue:
                return

    def _drain(self, producer: Any, queue: deque[TraceEvent]) -> None:
        """Encode and produce every queued event (the hot loop: locals only)."""
        produce, popleft, encode = producer.produce, queue.popleft, trace_encoder()
        topic, headers = self.kafka_topic, self._headers
        sent = 0
        try:
            while queue:
                event = popleft()
                try:
                    value = encode(event)
                    key = event.msg_id.encode("utf-8", "surrogatepass")
                except Exception as exc:
                    self._drop(f"trace event for {event.msg_id!r} not encoded: {exc!r}")
                    continue
                try:
                    produce(topic, value, key, headers=headers)
                    sent += 1
                except BufferError:
                    sent += self._produce_when_room(producer, event, value, key)
                except Exception as exc:
                    self._drop(f"trace event for {event.msg_id} not sent: {exc!r}")
        finally:
            self.sent += sent  # only this thread writes it

    def _produce_when_room(self, producer: Any, event: TraceEvent, value: bytes, key: bytes) -> int:
        """librdkafka's local queue is full: wait a little for room (this thread only)."""
        deadline = time.monotonic() + 10 * _ROOM_WAIT_S
        while time.monotonic() < deadline:
            producer.poll(_ROOM_WAIT_S)
            try:
                producer.produce(self.kafka_topic, value, key, headers=self._headers)
                return 1
            except BufferError:
                continue
            except Exception as exc:
                self._drop(f"trace event for {event.msg_id} not sent: {exc!r}")
                return 0
        self._drop(f"trace producer queue full: event for {event.msg_id} dropped")
        return 0

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._undelivered += 1
            self._drop(f"trace record not delivered to {self.topic}: {err}")

    def _drop(self, why: str, count: int = 1) -> None:
        with self._lock:
            self.dropped += count
            now = time.monotonic()
            if now - self._last_log < _LOG_EVERY_S:
                return
            self._last_log = now
            dropped = self.dropped
        log.warning("%s (%d trace record(s) dropped so far)", why, dropped)

    # -- lifecycle -------------------------------------------------------------------------
    def _wait_drained(self, deadline: float) -> bool:
        """Wait until the sink's thread has produced every queued event (or ``deadline``)."""
        with self._drained:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._wake.set()
                self._drained.wait(min(left, 0.1))
        return True

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for every event given so far to be produced and delivered; returns how many
        are still queued here or in the producer."""
        producer = self._producer
        if producer is None:
            return 0
        deadline = time.monotonic() + timeout_s
        self._wait_drained(deadline)
        remaining: int = producer.flush(max(0.0, deadline - time.monotonic()))
        return remaining + len(self._queue)

    def close(self, timeout_s: float = 10.0) -> None:
        """Produce what is queued, flush, stop the sink's thread and release the producer
        (idempotent).  What is not delivered within ``timeout_s`` is counted as dropped."""
        if self._closed:
            return
        self._closed = True  # no more events accepted
        producer = self._producer
        deadline = time.monotonic() + timeout_s
        self._wait_drained(deadline)
        self._stopping = True
        self._wake.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        try:
            in_producer = int(producer.flush(max(0.0, deadline - time.monotonic())))
        except Exception:
            log.exception("trace producer flush failed")
            in_producer = 0
        never_produced = len(self._queue)
        self._queue.clear()
        with self._lock:
            self.dropped += never_produced + in_producer
            self._undelivered += in_producer
        if never_produced or in_producer:
            log.warning(
                "%d trace record(s) for %s not delivered within %.0fs",
                never_produced + in_producer,
                self.topic,
                timeout_s,
            )
        self._producer = None  # the librdkafka client goes away with its last reference

    def __enter__(self) -> KafkaTraceSink:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaTraceSink(topic={self.topic!r}, kafka_topic={self.kafka_topic!r})"
