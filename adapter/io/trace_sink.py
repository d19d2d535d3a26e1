"""The trace sink: consume-trace events, Avro-encoded and packed, to a Kafka trace topic.

:class:`KafkaTraceSink` is what ``PushConsumer(..., trace_topic=...)`` and
``ScheduleService(..., trace_topic=...)`` create.  It is a thin idempotent confluent-kafka
producer derived from the client's own config (so ``security.*``/``sasl.*``/``ssl.*`` pass
through), lingering to batch.  Like RocketMQ's trace dispatcher it packs many events into
one record (``packed=True``, the default):

* topic: the Kafka name of the logical trace topic (created if missing);
* value: plain Avro binary of ``consume_trace_batch.avsc`` -- up to ``max_events``
  events, at most ``max_bytes`` of them: ``ConsumeTrace`` events, or runs of them written
  as columns (``ConsumeTraceRun``) (no prefix: Spark's ``from_avro`` reads it as is, and
  ``decode_traces`` expands the runs and explodes the array);
* key: none (packs spread over the partitions; one pack's events keep their order);
* header ``RMQ_TRACE_SCHEMA``: the writer schema (``<full name>/<fingerprint>``), which is
  how a reader tells a packed record from a single one.

With ``packed=False`` it writes the older layout, one ``consume_trace.avsc`` record per
event keyed by the message id (for readers older than the packed format).

The consume path does as little as it can. Calling the sink appends to an in-memory
queue (no lock). The successes of listener batches whose records carry no headers, or
only ``UNIQ_KEY``, ``TAGS``, ``KEYS`` and headers no event field depends on (what our
producer writes: :func:`~adapter.io.trace_columns.text_columns`) -- one hand-over per
fetched run the consumer ran inline, whatever the batch size
(:data:`~adapter.core.trace.PendingBatches`), or per batch -- are read off their records
at once with C-level operations on the whole batch
(:func:`~adapter.io.trace_columns.batch_columns`: offsets, Kafka timestamps, those three
headers; no Python code per message) and queued as columns that hold no message; the
sink's thread joins consecutive ones into runs (:class:`~adapter.core.trace.RunBuilder`),
one ``ConsumeTraceRun`` record each, which readers expand into the events they stand for.
Everything else (failures, messages with other headers -- an origin id, a reconsume
count, an origin born time, a retry record's topic --, local redeliveries, the
ScheduleService's forwards) is queued as a :data:`~adapter.core.trace.Pending` tuple (or
the event) and derived and encoded event by event on the sink's thread
(:func:`~adapter.core.trace.consumer_fields`, the writer compiled from the schema,
:func:`~adapter.io.avro.trace_encoder`). The thread takes what is queued when a pack's
worth waits (or 256 events in items that still hold messages, so they are released
young), and produces every ``interval_s`` (or as soon as a pack is full) one record per
pack (:func:`~adapter.core.trace.plan_packs`); librdkafka batches (``linger.ms``) and
compresses on its own threads, and delivery reports (one per pack) are served on the
sink's thread too.

It never raises into the consumer and never blocks it: an event that cannot be derived,
encoded or produced, that finds the queue full (``max_queued``, the trace topic being slow),
or whose record is not delivered is counted in :attr:`KafkaTraceSink.dropped` and logged
(rate-limited).  Tracing is best effort by design; it must not slow down or break
consumption.  :meth:`KafkaTraceSink.flush` waits for the queue and the producer.  Every
counter counts events, not records.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final

from confluent_kafka import Producer

from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.trace import (
    BATCHES,
    RUN,
    RUN_FIELDS,
    Pending,
    PendingBatches,
    PendingRun,
    RunBuilder,
    TraceEvent,
    batches_fields,
    consumer_fields,
    plan_packs,
    run_fields,
)
from adapter.io.avro import (
    TRACE_SCHEMA_HEADER,
    pack_traces,
    run_encoder,
    trace_batch_schema,
    trace_encoder,
    trace_schema,
)
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import check_kafka_config, producer_config
from adapter.io.errors import make_client
from adapter.io.topics import TopicPlan, ensure_topics
from adapter.io.trace_columns import COLUMNS, Columns, add_batch_run, batch_columns

__all__ = [
    "DEFAULT_MAX_PACK_BYTES",
    "DEFAULT_MAX_PACK_EVENTS",
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_TRACE_PARTITIONS",
    "KafkaTraceSink",
]

log = logging.getLogger("adapter.trace")

#: Partitions of a trace topic this sink creates (an existing topic is used as it is).
DEFAULT_TRACE_PARTITIONS: Final = 3
_LOG_EVERY_S: Final = 10.0
#: Events the queue holds at most; beyond that new events are dropped (and counted).
DEFAULT_MAX_QUEUED: Final = 100_000
#: Events in one packed record at most ...
DEFAULT_MAX_PACK_EVENTS: Final = 1_000
#: ... and bytes of them (well under the broker's default ``message.max.bytes``, 1 MiB,
#: before compression).
DEFAULT_MAX_PACK_BYTES: Final = 256 * 1024
#: The sink's thread drains the queue at least this often (the longest an event waits
#: before its pack is produced, plus ``linger.ms``); at once when a pack's worth waits.
DEFAULT_INTERVAL_S: Final = 0.05
#: The consumer wakes the sink's thread once this many events wait (about) in items that
#: hold messages: it takes them from the queue soon, so the listener batches they hold
#: are released young (kept longer, they would outlive the garbage collector's young
#: generations, and every collection would walk them).
_WAKE_EVENTS: Final = 256
#: Packs' worth of events queued as columns that wake the sink's thread before its
#: interval.
_COLUMN_PACKS: Final = 8
#: Items one take handles at most (then the thread looks again).
_DRAIN_MAX: Final = 10_000
#: Where the message id sits in an event's fields (the key of an unpacked record).
_MSG_ID: Final = TraceEvent._fields.index("msg_id")
#: Where a run's event count sits in its fields.
_RUN_COUNT: Final = RUN_FIELDS.index("count")
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


def _events_in(item: Any) -> int:
    """How many events a queued item stands for."""
    kind = item[0]
    if kind is COLUMNS:
        return int(item[3])
    return len(item[4]) if kind is RUN else len(item[3]) if kind is BATCHES else 1


#: What the queue holds.
_Item = TraceEvent | Pending | PendingRun | PendingBatches | Columns


class KafkaTraceSink:
    """``sink(event)`` / ``sink.defer(pending)`` -> packed Avro records on the trace topic.
    Thread-safe."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        *,
        partitions: int = DEFAULT_TRACE_PARTITIONS,
        create_topic: bool = True,
        max_queued: int = DEFAULT_MAX_QUEUED,
        packed: bool = True,
        max_events: int = DEFAULT_MAX_PACK_EVENTS,
        max_bytes: int = DEFAULT_MAX_PACK_BYTES,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        checked = check_kafka_config(config, "trace")
        plan_packs((), max_events, max_bytes)  # validates both (raises ConfigError)
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
        # single records: a delivery report per record would cost a Python callback per
        # event, so only failures are reported; packs: one report per pack (cheap), which
        # keeps ``delivered`` exact while records are in flight
        conf["delivery.report.only.error"] = not packed
        conf["on_delivery"] = self._on_delivery
        conf["client.id"] = f"{conf['client.id']}-trace" if conf.get("client.id") else "rmq-trace"
        self._producer: Any = make_client(Producer, conf, what="trace producer")
        schema = trace_batch_schema() if packed else trace_schema()
        self._headers = [(TRACE_SCHEMA_HEADER, schema.tag.encode())]
        self.packed = packed
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._interval_s = interval_s
        #: the interval, the producer's room and the flush/close deadlines are measured on it
        self._now = clock.monotonic
        self._max_queued = max_queued
        #: joins listener batches into runs (packed only: the single layout has no runs)
        self._runs = RunBuilder(max_events) if packed else None
        self._run_encode = run_encoder()
        # what the sink's thread took from the queue and has not produced yet: encoded
        # events (and their message ids), encoded runs (and their event counts), the open
        # run in ``_runs``; ``_held`` counts all their events
        self._values: list[bytes] = []
        self._ids: list[str] = []
        self._run_values: list[bytes] = []
        self._run_counts: list[int] = []
        self._held = 0
        self._waiting = 0  # events queued since the sink's thread last looked (about)
        self._queue: deque[_Item] = deque()
        self._wake = threading.Event()
        self._drained = threading.Condition()
        self._busy = False  # the sink's thread is between taking events and producing them
        self._flushing = 0  # flush()/close() calls waiting: the thread produces every event
        self._lock = threading.Lock()
        self._closed = False  # no more events accepted
        self._stopping = False  # the sink's thread ends once the queue is empty
        self.sent = 0  # events handed to the producer
        self.records = 0  # records handed to the producer (packs, or events when unpacked)
        self.dropped = 0  # events not queued, not encoded, not produced, or not delivered
        self._acked = 0  # events in packs the broker acknowledged
        self._undelivered = 0
        self._last_log = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"rmq-trace-{self.kafka_topic}", daemon=True
        )
        self._thread.start()

    @property
    def delivered(self) -> int:
        """Events the broker acknowledged (exact once flushed or closed)."""
        if self.packed:
            return self._acked
        producer = self._producer
        in_flight = len(producer) if producer is not None else 0
        return self.sent - self._undelivered - in_flight

    @property
    def queued(self) -> int:
        """Items (events, or listener batches of them) queued for the sink's thread, plus
        the events it took and has not produced yet."""
        return len(self._queue) + self._held

    # -- the sink (called on the consumer's threads) ---------------------------------------
    def __call__(self, event: TraceEvent) -> None:
        """Queue one event (built by the caller: the ScheduleService, tools, tests)."""
        self._put(event)

    def defer(self, pending: Pending | PendingRun | PendingBatches) -> None:
        """Queue one consumer outcome, or the successes of one listener batch or of
        consecutive ones; the sink's thread derives their events (:func:`add_batch_run`,
        :func:`~adapter.core.trace.consumer_fields`, :func:`~adapter.core.trace.run_fields`).
        The consumer's hot path.  (A batch counts as one item against ``max_queued``.)"""
        kind = pending[0]
        if self._runs is None or not (kind is BATCHES or kind is RUN):
            self._put(pending, _events_in(pending))
            return
        if self._put_columns(pending):  # type: ignore[arg-type]
            return
        if kind is RUN:
            self._put(pending, _events_in(pending))
            return
        # one of the batches cannot be a run (a message with headers): the others still can,
        # unless the first cannot either (then the traffic has headers: all are derived)
        _, group, now_ms, msgs, size, rt_ms, started = pending  # type: ignore[misc]
        for k in range(0, len(msgs), size):
            batch = (RUN, group, now_ms, msgs[k : k + size], range(size), None, rt_ms, started)
            if not self._put_columns(batch):
                if not k:
                    self._put(pending, len(msgs))
                    return
                self._put(batch, size)

    def _put_columns(self, pending: PendingRun | PendingBatches) -> bool:
        """Queue the columns of ``pending`` (read off the records while they are at hand:
        nothing of them is kept); ``False`` when they cannot be a run."""
        try:
            columns = batch_columns(pending)
        except Exception:  # derived one by one on the sink's thread, which reports it
            return False
        if columns is None:
            return False
        # holds no message: the sink's thread takes columns on its interval, or when
        # several packs' worth wait (each wake-up takes the GIL from the consumer's loop)
        self._put(columns, columns[3], self._max_events * _COLUMN_PACKS)
        return True

    def _put(self, item: _Item | Columns, events: int = 1, wake: int = _WAKE_EVENTS) -> None:
        if self._closed:
            return
        queue = self._queue
        n = len(queue)
        if n >= self._max_queued:
            self._drop(f"trace queue full ({n} items): {events} event(s) dropped", events)
            return
        queue.append(item)  # deque.append is atomic: no lock on the hot path
        # not exact when consumer threads race here: it only decides when to wake the sink
        waiting = self._waiting = self._waiting + events
        if waiting >= wake and not self._wake.is_set():
            self._wake.set()

    # -- the sink's thread -----------------------------------------------------------------
    def _run(self) -> None:
        producer = self._producer
        queue = self._queue
        sent_at = self._now()
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self._busy = True
            try:
                # take what is queued at once (the batches it holds are released: kept
                # queued, they would outlive the garbage collector's young generations),
                # and produce when a pack's worth is held (full packs only), on the
                # interval, flush() or close() (everything)
                while queue:
                    self._waiting = 0
                    self._take(queue, len(queue))
                now = self._now()
                everything = (
                    now - sent_at >= self._interval_s or self._flushing > 0 or self._stopping
                )
                if everything or self._held >= self._max_events:
                    self._send(producer, everything=everything)
                    if everything:
                        sent_at = now
                producer.poll(0)  # delivery reports, error and statistics callbacks
            except Exception:  # never let the thread die
                log.exception("trace sink thread")
            finally:
                self._busy = False
            with self._drained:
                self._drained.notify_all()
            if self._stopping and not queue:
                return

    def _take(self, queue: deque[_Item], take: int) -> None:
        """Take up to ``take`` (at most :data:`_DRAIN_MAX`) queued items: their events
        encoded, or added to the open run (held until :meth:`_send`)."""
        popleft, encode, event_type = queue.popleft, trace_encoder(), TraceEvent
        values, ids = self._values, self._ids
        builder = self._runs
        for _ in range(min(take, _DRAIN_MAX)):
            item = popleft()
            try:
                if isinstance(item, event_type):
                    rows: Any = (item,)
                elif item[0] is COLUMNS or item[0] is RUN or item[0] is BATCHES:
                    if builder is not None:
                        done: Any = add_batch_run(builder, item)  # type: ignore[arg-type]
                        if done is not False:
                            self._held += _events_in(item)
                            if done is not None:
                                self._encode_run(done)
                            continue
                    rows = (
                        run_fields(item)  # type: ignore[arg-type]
                        if item[0] is RUN
                        else batches_fields(item)  # type: ignore[arg-type]
                    )
                else:  # one deferred consumer outcome
                    rows = (consumer_fields(item),)  # type: ignore[arg-type]
            except Exception as exc:
                lost = _events_in(item)
                self._drop(f"trace event(s) not derived: {exc!r}", lost)
                continue
            for fields in rows:  # an event's fields, in its order
                try:
                    values.append(encode(fields))
                    ids.append(fields[_MSG_ID])
                    self._held += 1
                except Exception as exc:
                    self._drop(f"trace event not encoded: {exc!r}")

    def _send(self, producer: Any, *, everything: bool) -> None:
        """Produce the held events: all of them (closing the open run), or only full packs
        (the rest stays held).  This thread only."""
        topic = self.kafka_topic
        values, ids = self._values, self._ids
        if not self.packed:
            for value, msg_id in zip(values, ids, strict=True):
                self._produce(producer, topic, value, msg_id.encode("utf-8", "surrogatepass"), 1)
            values.clear()
            ids.clear()
            self._held = 0
            return
        if everything and self._runs is not None:
            closed = self._runs.close()
            if closed is not None:
                self._encode_run(closed)
        del ids[: self._send_packs(producer, values, None, everything)]
        self._send_packs(producer, self._run_values, self._run_counts, everything)
        self._held = len(values) + sum(self._run_counts)  # + the open run's, when kept
        if not everything and self._runs is not None:
            self._held += self._runs.count

    def _send_packs(
        self, producer: Any, items: list[bytes], counts: list[int] | None, everything: bool
    ) -> int:
        """Produce ``items`` (events, or runs of ``counts`` events) as packs and remove
        them: all of them, or all but the last pack (which may grow).  How many went."""
        if not items:
            return 0
        ends = plan_packs([len(v) for v in items], self._max_events, self._max_bytes, counts)
        if not everything:
            ends.pop()
        start = 0
        for end in ends:
            if counts is None:
                n, value = end - start, pack_traces(items[start:end])
            else:
                n, value = sum(counts[start:end]), pack_traces([], items[start:end])
            self._produce(
                producer, self.kafka_topic, value, None, n, on_delivery=partial(self._on_pack, n)
            )
            start = end
        del items[:start]
        if counts is not None:
            del counts[:start]
        return start

    def _encode_run(self, fields: tuple[Any, ...]) -> None:
        n: int = fields[_RUN_COUNT]
        try:
            self._run_values.append(self._run_encode(fields))
        except Exception as exc:
            self._held -= n
            self._drop(f"trace run of {n} event(s) not encoded: {exc!r}", n)
            return
        self._run_counts.append(n)

    def _produce(
        self,
        producer: Any,
        topic: str,
        value: bytes,
        key: bytes | None,
        n: int,
        *,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> None:
        """One record of ``n`` events; librdkafka's queue full: wait a little for room."""
        kwargs: dict[str, Any] = {"headers": self._headers}
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        deadline = self._now() + 10 * _ROOM_WAIT_S
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
            except BufferError:
                if self._now() >= deadline:
                    self._drop(f"trace producer queue full: {n} event(s) dropped", n)
                    return
                producer.poll(_ROOM_WAIT_S)
                continue
            except Exception as exc:
                self._drop(f"trace record of {n} event(s) not sent: {exc!r}", n)
                return
            self.sent += n  # only this thread writes it
            self.records += 1
            return

    def _on_pack(self, n: int, err: Any, _msg: Any) -> None:
        # served by the sink's thread, or by the thread in flush()/close()
        if err is None:
            with self._lock:
                self._acked += n
        else:
            with self._lock:
                self._undelivered += n
            self._drop(f"trace record of {n} event(s) not delivered to {self.topic}: {err}", n)

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._undelivered += 1
            self._drop(f"trace record not delivered to {self.topic}: {err}")

    def _drop(self, why: str, count: int = 1) -> None:
        with self._lock:
            self.dropped += count
            now = self._now()
            if now - self._last_log < _LOG_EVERY_S:
                return
            self._last_log = now
            dropped = self.dropped
        log.warning("%s (%d trace event(s) dropped so far)", why, dropped)

    # -- lifecycle -------------------------------------------------------------------------
    def _wait_drained(self, deadline: float) -> bool:
        """Wait until the sink's thread has produced every queued event (or ``deadline``)."""
        with self._lock:
            self._flushing += 1
        try:
            return self._wait_until_drained(deadline)
        finally:
            with self._lock:
                self._flushing -= 1

    def _wait_until_drained(self, deadline: float) -> bool:
        with self._drained:
            while self._queue or self._busy or self._held:
                left = deadline - self._now()
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
        deadline = self._now() + timeout_s
        self._wait_drained(deadline)
        remaining: int = producer.flush(max(0.0, deadline - self._now()))
        return self._in_flight(remaining) + len(self._queue) + self._held

    def _in_flight(self, records: int) -> int:
        """Events in the producer's ``records`` (packs: counted by their delivery reports)."""
        if not self.packed or not records:
            return records
        with self._lock:
            return max(0, self.sent - self._acked - self._undelivered)

    def close(self, timeout_s: float = 10.0) -> None:
        """Produce what is queued, flush, stop the sink's thread and release the producer
        (idempotent).  What is not delivered within ``timeout_s`` is counted as dropped."""
        if self._closed:
            return
        self._closed = True  # no more events accepted
        producer = self._producer
        deadline = self._now() + timeout_s
        self._wait_drained(deadline)
        self._stopping = True
        self._wake.set()
        self._thread.join(max(0.0, deadline - self._now()))
        try:
            in_producer = self._in_flight(int(producer.flush(max(0.0, deadline - self._now()))))
        except Exception:
            log.exception("trace producer flush failed")
            in_producer = 0
        never_produced = len(self._queue) + self._held
        self._queue.clear()
        self._held = 0
        with self._lock:
            self.dropped += never_produced + in_producer
            self._undelivered += in_producer
        if never_produced or in_producer:
            log.warning(
                "%d trace event(s) for %s not delivered within %.0fs",
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
