"""``PushConsumer``: RocketMQ's concurrent push consumer on a Kafka consumer group.

The poll thread owns all state: it fetches, hands batches to a worker pool, applies the
listener's results (``ack_index``), sends failed messages back (delay topic or DLQ), and
stores offsets that are settled; librdkafka commits stored offsets in the background.
Workers only run the listener and report back through a queue.  Nothing here sleeps.
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import logging
import queue
import socket
import threading
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Producer as _KafkaProducer

from adapter.clients.workers import WorkerPool
from adapter.constants import (
    DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN,
    DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE,
    DEFAULT_CONSUME_THREAD_MAX,
    DEFAULT_CONSUME_TIMEOUT_S,
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
    DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
    DEFAULT_SEND_BACK_RETRY_INTERVAL_S,
    HOP_MESSAGE_MAX_BYTES,
    PROPERTY_CONSUME_START_TIMESTAMP,
)
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.codec import (
    Failure,
    OmittedBody,
    decode_record,
    dlq_headers,
    logical_topic,
    retry_headers,
)
from adapter.core.delay import DelayLevels, resolve_max_reconsume_times
from adapter.core.filter import TagFilter
from adapter.core.message import MessageExt
from adapter.core.offsets import FlowLimits, PartitionTracker
from adapter.core.routing import (
    ConsumeConcurrentlyStatus,
    DeadLetter,
    DeadLetterReason,
    MessageModel,
    RetryLater,
    route_failed,
    split_batch,
)
from adapter.core.trace import TraceEvent, TraceSink, TraceStatus
from adapter.errors import ClientClosedError, ConfigError, InvalidInputError, ListenerResultError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import (
    build_options,
    check_int,
    check_kafka_config,
    check_seconds,
    producer_config,
    require_setting,
)
from adapter.io.errors import (
    FatalErrorWatch,
    client_error,
    is_permanent,
    is_too_large,
    make_client,
)
from adapter.io.offset_store import LocalFileOffsetStore
from adapter.io.polling import (
    apply_assignment,
    commit_positions,
    consume_available,
    is_cooperative,
    release_assignment,
)
from adapter.io.topics import ensure_topics, plan_topics

log = logging.getLogger("adapter.consumer")

TP = tuple[str, int]
#: Longest the poll loop goes without calling ``consume()`` while it serves completions.
_MAX_FETCH_GAP_S = 1.0
#: How long sending one record alone may wait for the records queued before it and for itself.
_ALONE_FLUSH_S = 30.0


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """A partition, RocketMQ style: ``topic`` is logical, ``queue_id`` the partition."""

    topic: str
    queue_id: int


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """What the listener may set: ``ack_index`` (last message done; ``None`` = all, ``-1`` =
    none) and ``delay_level_when_next_consume`` (0 = system, > 0 = level, < 0 = DLQ)."""

    message_queue: MessageQueue
    ack_index: int | None = None
    delay_level_when_next_consume: int = 0


class MessageListenerConcurrently(Protocol):
    def consume_message(
        self, msgs: list[MessageExt], context: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus: ...


Listener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """DefaultMQPushConsumer settings, snake_case.  Times are in seconds."""

    message_model: MessageModel = MessageModel.CLUSTERING
    consume_message_batch_max_size: int = DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    max_reconsume_times: int = -1
    consume_thread_max: int = DEFAULT_CONSUME_THREAD_MAX
    consume_timeout: float = DEFAULT_CONSUME_TIMEOUT_S
    pull_threshold_for_queue: int = DEFAULT_PULL_THRESHOLD_FOR_QUEUE
    pull_threshold_size_for_queue: int = DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB
    consume_concurrently_max_span: int = DEFAULT_CONSUME_CONCURRENTLY_MAX_SPAN
    delay_levels: DelayLevels | str | None = None
    send_back_retry_interval: float = DEFAULT_SEND_BACK_RETRY_INTERVAL_S
    namespace: str | None = None
    auto_create_topics: bool = True
    partitions: int = 3
    offset_store_dir: str | None = None
    instance_name: str | None = None
    shutdown_await: float = 30.0
    trace_topic: str | None = None
    trace_sink: TraceSink | None = None
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "message_model", _enum(MessageModel, "message_model", self.message_model)
        )
        check_int("consume_message_batch_max_size", self.consume_message_batch_max_size, minimum=1)
        if self.consume_message_batch_max_size > 1024:
            raise ConfigError(
                "consume_message_batch_max_size",
                self.consume_message_batch_max_size,
                "must be <= 1024",
            )
        check_int("pull_batch_size", self.pull_batch_size, minimum=1)
        resolve_max_reconsume_times(self.max_reconsume_times)
        check_int("consume_thread_max", self.consume_thread_max, minimum=1)
        check_seconds("consume_timeout", self.consume_timeout)
        check_int("pull_threshold_for_queue", self.pull_threshold_for_queue, minimum=1)
        check_int("pull_threshold_size_for_queue", self.pull_threshold_size_for_queue, minimum=1)
        check_int("consume_concurrently_max_span", self.consume_concurrently_max_span, minimum=1)
        check_seconds("send_back_retry_interval", self.send_back_retry_interval)
        check_int("partitions", self.partitions, minimum=1)
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels

    @property
    def flow_limits(self) -> FlowLimits:
        return FlowLimits(
            max_count=self.pull_threshold_for_queue,
            max_bytes=self.pull_threshold_size_for_queue * 1024 * 1024,
            max_span=self.consume_concurrently_max_span,
        )


def _bad_context(ctx: ConsumeConcurrentlyContext) -> ListenerResultError | None:
    """What the listener set on ``ctx`` that is not an int (``ack_index`` may be None)."""
    for name, value in (
        ("ack_index", ctx.ack_index),
        ("delay_level_when_next_consume", ctx.delay_level_when_next_consume),
    ):
        if value is None and name == "ack_index":
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return ListenerResultError(
                f"context.{name}", value, "must be an int; the batch counts as RECONSUME_LATER"
            )
    return None


def _enum(cls: type[Enum], name: str, value: Any) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise ConfigError(name, value, f"expected one of {[m.value for m in cls]}") from None


@dataclass
class TopicStats:
    """ConsumerStatsManager-like figures for one topic."""

    consume_ok: int = 0
    consume_failed: int = 0
    sent_back: int = 0
    dead_lettered: int = 0
    send_back_failed: int = 0
    timeouts: int = 0
    rt_total_ms: float = 0.0
    rt_max_ms: float = 0.0
    rt_count: int = 0

    @property
    def consume_rt_avg_ms(self) -> float:
        return self.rt_total_ms / self.rt_count if self.rt_count else 0.0


class _State(Enum):
    RUNNING = 1
    DONE = 2
    TIMED_OUT = 3


@dataclass(eq=False)
class _Batch:
    id: int
    tp: TP
    generation: int
    msgs: list[MessageExt]
    started: float | None = None  # when a worker called the listener (consume_timeout)
    state: _State = _State.RUNNING


@dataclass(frozen=True, slots=True)
class _TraceInfo:
    batch_size: int
    index: int
    ack_index: int | None
    rt_ms: float | None


@dataclass(frozen=True, slots=True)
class _SendBack:
    tp: TP
    generation: int
    msg: MessageExt
    dest: RetryLater | DeadLetter
    failure: Failure | None
    trace: _TraceInfo | None = None
    body_omitted: bool = False
    alone: bool = False  # sent in a record batch of its own


@dataclass(order=True)
class _LocalRetry:
    due: float
    seq: int
    tp: TP = field(compare=False)
    generation: int = field(compare=False)
    msg: MessageExt = field(compare=False)


class PushConsumer:
    """RocketMQ ``DefaultMQPushConsumer`` semantics over a confluent-kafka config dict.

    The group is ``config["group.id"]``.
    """

    def __init__(self, config: Mapping[str, Any], **options: Any) -> None:
        self.options = build_options(ConsumerOptions, options, "PushConsumer")
        self._config = check_kafka_config(config, "consumer")
        group = self._config.get("group.id")
        if not isinstance(group, str) or not group:
            raise ConfigError("group.id", group, "a consumer group is required")
        self.group = group
        self.max_reconsume_times = resolve_max_reconsume_times(self.options.max_reconsume_times)
        self._subscriptions: dict[str, TagFilter] = {}
        self._listener: Listener | None = None
        self.retry_topic = naming.retry_topic(group)
        self.dlq_topic = naming.dlq_topic(group)
        self._retry_kafka = naming.to_kafka(self.retry_topic)
        self._dlq_kafka = naming.to_kafka(self.dlq_topic)
        self._filters: dict[str, TagFilter] = {}  # by Kafka topic
        self._consumer: Any = None
        self._producer: Any = None
        self._executor: WorkerPool | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._errors = FatalErrorWatch(self._config.get("error_cb"))
        self._completions: queue.SimpleQueue[
            tuple[_Batch, Any, ConsumeConcurrentlyContext, float]
        ] = queue.SimpleQueue()
        self._trackers: dict[TP, PartitionTracker] = {}
        self._generation: dict[TP, int] = defaultdict(int)
        self._running_batches: dict[int, _Batch] = {}
        self._queued_msgs = 0  # messages in batches handed to workers and not yet back
        self._local_retries: list[_LocalRetry] = []
        self._flow_paused: set[TP] = set()
        #: send-backs refused within a record batch the broker found too large; the limit is
        #: per batch, so the refusal may be a neighbour's fault: each is sent again alone
        self._send_alone: deque[_SendBack] = deque()
        self._batch_ids = itertools.count()
        self._seq = itertools.count()
        self._stats: dict[str, TopicStats] = defaultdict(TopicStats)
        self._stats_lock = threading.Lock()
        self._offset_store: LocalFileOffsetStore | None = None
        self._dirty_local_offsets = False
        self.assignment: set[TP] = set()
        self._trace: TraceSink | None = self.options.trace_sink
        self._owned_trace: Any = None

    # -- configuration ---------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        """Subscribe to a (logical) topic with a tag expression (``*``, ``TagA || TagB``)."""
        if self._consumer is not None:
            raise InvalidInputError("subscribe", topic, "subscribe before start()")
        naming.check_user_topic(topic)
        self._subscriptions[topic] = TagFilter.parse(expression)

    def register_message_listener(self, listener: Listener | MessageListenerConcurrently) -> None:
        if hasattr(listener, "consume_message"):
            self._listener = listener.consume_message
        elif callable(listener):
            self._listener = listener
        else:
            raise InvalidInputError(
                "listener", listener, "must be callable or have consume_message()"
            )

    @property
    def clustering(self) -> bool:
        return self.options.message_model is MessageModel.CLUSTERING

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> PushConsumer:
        if self._thread is not None:
            return self
        if self._listener is None:
            raise InvalidInputError("listener", None, "register_message_listener() before start()")
        if not self._subscriptions:
            raise InvalidInputError(
                "subscription", None, "subscribe() to at least one topic before start()"
            )
        self._filters = {naming.to_kafka(t): f for t, f in self._subscriptions.items()}
        if self.clustering:
            self._filters[self._retry_kafka] = TagFilter.parse("*")
            if self.options.auto_create_topics:
                ensure_topics(
                    self._config,
                    plan_topics(
                        groups=[self.group],
                        delay_levels=self.options.levels,
                        namespace=self.options.namespace,
                        partitions=self.options.partitions,
                    ),
                )
        if self.options.trace_topic and self._trace is None:
            # imported on use: tracing is opt-in and lives with the analytics extra
            trace_module = importlib.import_module("adapter.analytics.trace")
            self._owned_trace = trace_module.KafkaTraceSink(self._config, self.options.trace_topic)
            self._trace = self._owned_trace
        self._make_clients()
        self._executor = WorkerPool(self.options.consume_thread_max, "rmq-consume")
        self._running.set()
        self._thread = threading.Thread(
            target=self._loop, name=f"rmq-poll-{self.group}", daemon=True
        )
        self._thread.start()
        return self

    def _make_clients(self) -> None:
        cconf = dict(self._config)
        cconf["error_cb"] = self._errors
        # a partition resumed after a flow-control pause is fetched with the next request;
        # librdkafka sends one fetch per broker at a time, so a long-polling fetch of idle
        # partitions (the retry topic) would hold it back for up to this long
        cconf.setdefault("fetch.wait.max.ms", 100)
        require_setting(cconf, "enable.auto.offset.store", False, "only settled offsets are stored")
        if self.clustering:
            require_setting(
                cconf, "enable.auto.commit", True, "stored offsets commit in the background"
            )
            cconf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        else:
            cconf["enable.auto.commit"] = False
        self._cooperative = is_cooperative(cconf)
        self._consumer = make_client(Consumer, cconf, what="consumer")
        pconf = producer_config(self._config)
        pconf["error_cb"] = self._errors
        require_setting(pconf, "enable.idempotence", True, "send-backs must not duplicate")
        pconf.setdefault("message.timeout.ms", 30_000)
        # send-backs batch for up to 5 ms: their offsets wait that much longer for the ack,
        # and a failing stream costs half the CPU per message of linger.ms=0 (benchmarks)
        pconf.setdefault("linger.ms", 5)
        # a copy carries more headers than the record it copies: do not refuse it client-side
        pconf.setdefault("message.max.bytes", HOP_MESSAGE_MAX_BYTES)
        self._producer = make_client(_KafkaProducer, pconf, what="send-back producer")
        topics = list(self._filters)
        if self.clustering:
            self._consumer.subscribe(
                topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        else:
            self._assign_broadcast(topics)

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop fetching, let running batches finish (up to ``shutdown_await``), send back
        what failed, commit what is settled and close."""
        self._running.clear()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout if timeout is not None else self.options.shutdown_await + 60)
        self._thread = None

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- stats -----------------------------------------------------------------------------
    def stats(self) -> dict[str, TopicStats]:
        """Per logical topic: OK / failed counts, send-backs, consume RT."""
        with self._stats_lock:
            return {t: replace(s) for t, s in self._stats.items()}

    def _stat(self, topic: str) -> TopicStats:
        return self._stats[topic]

    # -- rebalance -------------------------------------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        retry_parts = [p for p in partitions if p.topic == self._retry_kafka]
        if retry_parts:
            # the retry topic is read from the beginning when the group has no offset there
            try:
                committed = consumer.committed(retry_parts, timeout=10)
                for p, c in zip(retry_parts, committed, strict=True):
                    if c.offset < 0:
                        p.offset = OFFSET_BEGINNING
            except KafkaException as exc:
                log.warning("could not read committed offsets of %s: %s", self.retry_topic, exc)
                for p in retry_parts:
                    p.offset = OFFSET_BEGINNING
        for p in partitions:
            tp = (p.topic, p.partition)
            self._drop(tp)
            self._trackers[tp] = PartitionTracker()
            self.assignment.add(tp)
        apply_assignment(consumer, partitions, self._cooperative)
        log.info("%s assigned %s", self.group, sorted((p.topic, p.partition) for p in partitions))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        self._drain(set(tps), self.options.shutdown_await if not self._running.is_set() else 2.0)
        offsets = self._take_commits(tps)
        if offsets:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                log.warning("commit on revoke failed: %s", exc)
        for tp in tps:
            self._drop(tp)
        release_assignment(consumer, partitions, self._cooperative)
        log.info("%s revoked %s", self.group, sorted(tps))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # the session expired: another member may own these now, so nothing is committed
        # for them; their unsettled messages are read again by whoever gets them
        for p in partitions:
            self._drop((p.topic, p.partition))
        release_assignment(consumer, partitions, self._cooperative)
        log.warning(
            "%s lost %s (session expired)",
            self.group,
            sorted((p.topic, p.partition) for p in partitions),
        )

    def _drop(self, tp: TP) -> None:
        self._trackers.pop(tp, None)
        self._flow_paused.discard(tp)
        self.assignment.discard(tp)
        self._generation[tp] += 1

    def _assign_broadcast(self, topics: list[str]) -> None:
        instance = self.options.instance_name or f"{socket.gethostname()}@{uuid.uuid4().hex[:8]}"
        directory = self.options.offset_store_dir or ".rmq-offsets"
        self._offset_store = LocalFileOffsetStore(directory, self.group, instance)
        stored = self._offset_store.load()
        md = self._consumer.list_topics(timeout=10)
        parts = []
        for t in topics:
            tmd = md.topics.get(t)
            if tmd is None or tmd.error is not None:
                raise client_error(
                    KafkaException(tmd.error if tmd else KafkaError(KafkaError._UNKNOWN_TOPIC)),
                    what=f"topic {t}",
                )
            for p in tmd.partitions:
                tp = (t, p)
                start = stored.get(tp)
                if start is None:
                    # consume from the last offset, fixed now and stored (RocketMQ's
                    # correctTagsOffset): a restart resumes here even if nothing arrived
                    try:
                        start = self._consumer.get_watermark_offsets(
                            TopicPartition(t, p), timeout=10
                        )[1]
                    except KafkaException as exc:
                        raise client_error(exc, what=f"end offset of {t}[{p}]") from exc
                parts.append(TopicPartition(t, p, start))
                self._trackers[tp] = PartitionTracker(start)
                self.assignment.add(tp)
        self._consumer.assign(parts)

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        consumer = self._consumer
        # Soft back-pressure: while this many batches wait for a worker, serve completions
        # instead of fetching more (a hard pause purges librdkafka's prefetched data).  The
        # loop still fetches at least every ``_MAX_FETCH_GAP_S`` so the group stays alive.
        opts = self.options
        soft_limit = min(
            2 * opts.consume_thread_max * opts.consume_message_batch_max_size,
            max(opts.pull_batch_size, opts.pull_threshold_for_queue // 2),
        )
        last_fetch = self.options.clock.monotonic()
        try:
            while self._running.is_set():
                self._process_completions()
                self._check_timeouts()
                self._submit_local_retries()
                self._relieve_flow_control()
                now = self.options.clock.monotonic()
                if self._queued_msgs >= soft_limit and now - last_fetch < _MAX_FETCH_GAP_S:
                    self._wait_for_completion(0.05)
                else:
                    # short while listeners run or send-backs await their acks: both
                    # settle offsets (and may lift a flow-control pause)
                    busy = self._running_batches or len(self._producer)
                    timeout = 0.005 if busy else 0.1
                    msgs = consume_available(consumer, self.options.pull_batch_size, timeout)
                    last_fetch = now
                    if msgs:
                        self._dispatch(msgs)
                self._producer.poll(0)
                self._send_back_alone()
                self._store_offsets()
        except Exception:
            log.exception("consumer %s poll loop failed", self.group)
            raise
        finally:
            self._close()

    def _wait_for_completion(self, timeout: float) -> None:
        try:
            item = self._completions.get(timeout=timeout)
        except queue.Empty:
            return
        self._complete(*item)

    def _close(self) -> None:
        try:
            self._drain(set(self._trackers), self.options.shutdown_await)
            self._producer.flush(30)
            self._store_offsets()
            offsets = self._take_commits(list(self._trackers), force=True)
            if self.clustering and offsets:
                try:
                    self._consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    log.warning("final commit failed: %s", exc)
            self._save_local_offsets()
            if self._owned_trace is not None:
                self._owned_trace.close()
        finally:
            self._consumer.close()
            if self._executor is not None:
                self._executor.shutdown()
            # flushed above: let librdkafka's producer (and its broker connections) go now,
            # not whenever this object is collected
            self._producer = None

    def _drain(self, tps: set[TP], timeout: float) -> None:
        """Wait (bounded) for running batches and send-backs of ``tps`` to settle."""
        deadline = self.options.clock.monotonic() + timeout
        while self.options.clock.monotonic() < deadline:
            pending = [b for b in self._running_batches.values() if b.tp in tps]
            self._producer.poll(0)
            self._send_back_alone()
            if not pending and len(self._producer) == 0:
                return
            try:
                item = self._completions.get(timeout=0.05)
            except queue.Empty:
                self._check_timeouts()
                continue
            self._complete(*item)
        if any(b.tp in tps for b in self._running_batches.values()):
            log.warning(
                "%s: batches still running after %.1fs; their offsets stay uncommitted",
                self.group,
                timeout,
            )

    def _dispatch(self, kmsgs: list[Any]) -> None:
        by_tp: dict[TP, list[MessageExt]] = {}
        for kmsg in kmsgs:
            err = kmsg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s consume error: %s", self.group, err.str())
                continue
            tp = (kmsg.topic(), kmsg.partition())
            tracker = self._trackers.get(tp)
            if tracker is None:
                continue
            value = kmsg.value()
            offset = kmsg.offset()
            ts_type, ts = kmsg.timestamp()
            msg = decode_record(
                kafka_topic=tp[0],
                partition=tp[1],
                offset=offset,
                value=value,
                key=kmsg.key(),
                headers=kmsg.headers(),
                timestamp_ms=ts if ts_type else None,
                log_append_time=ts_type == 2,
            )
            tracker.add(offset, len(value) if value else 0)
            if msg.header_errors:
                log.warning(
                    "%s: message %s (%s) has malformed headers: %s",
                    self.group,
                    msg.msg_id,
                    tp,
                    "; ".join(msg.header_errors),
                )
            tag_filter = self._filters[tp[0]]
            if tag_filter.tags is not None and not tag_filter.matches(msg.tags):
                tracker.settle(offset)  # filtered out by tag, like a broker-side filter
                continue
            by_tp.setdefault(tp, []).append(msg)
        size = self.options.consume_message_batch_max_size
        for tp, msgs in by_tp.items():
            for i in range(0, len(msgs), size):
                self._submit(tp, msgs[i : i + size])
            limits = self.options.flow_limits.exceeded(self._trackers[tp])
            if limits is not None and tp not in self._flow_paused:
                self._consumer.pause([TopicPartition(tp[0], tp[1])])
                self._flow_paused.add(tp)
                log.debug("%s: pause %s: %s", self.group, tp, limits)

    def _relieve_flow_control(self) -> None:
        if not self._flow_paused:
            return
        for tp in list(self._flow_paused):
            tracker = self._trackers.get(tp)
            if tracker is None or self.options.flow_limits.exceeded(tracker) is None:
                self._flow_paused.discard(tp)
                if tracker is not None:
                    self._consumer.resume([TopicPartition(tp[0], tp[1])])

    def _submit(self, tp: TP, msgs: list[MessageExt]) -> None:
        assert self._executor is not None
        batch = _Batch(next(self._batch_ids), tp, self._generation[tp], msgs)
        self._running_batches[batch.id] = batch
        self._queued_msgs += len(msgs)
        self._executor.submit(self._run_listener, batch)

    def _run_listener(self, batch: _Batch) -> None:
        """On a worker: call the listener; everything it returns or raises goes back."""
        msgs = batch.msgs
        now_ms = str(self.options.clock.now_ms())
        for m in msgs:
            m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = now_ms
        ctx = ConsumeConcurrentlyContext(MessageQueue(logical_topic(batch.tp[0]), batch.tp[1]))
        begin = self.options.clock.monotonic()
        batch.started = begin  # a batch waiting for a free worker is not timed out
        try:
            assert self._listener is not None
            # a copy: a listener that pops or clears its list must not change the batch
            result: Any = self._listener(list(msgs), ctx)
        except BaseException as exc:
            result = exc
        self._completions.put((batch, result, ctx, (self.options.clock.monotonic() - begin) * 1000))

    def _process_completions(self) -> None:
        while True:
            try:
                item = self._completions.get_nowait()
            except queue.Empty:
                return
            self._complete(*item)

    def _check_timeouts(self) -> None:
        if not self._running_batches:
            return
        now = self.options.clock.monotonic()
        limit = self.options.consume_timeout
        for batch in list(self._running_batches.values()):
            started = batch.started
            if batch.state is _State.RUNNING and started is not None and now - started > limit:
                log.warning(
                    "%s: listener ran past consume_timeout=%ss on %s; counted as RECONSUME_LATER",
                    self.group,
                    limit,
                    batch.tp,
                )
                with self._stats_lock:
                    self._stat(batch.msgs[0].topic).timeouts += 1
                self._apply(
                    batch,
                    ConsumeConcurrentlyStatus.RECONSUME_LATER,
                    None,
                    Failure("ConsumeTimeout", f"listener ran longer than {limit}s"),
                    limit * 1000,
                )
                batch.state = _State.TIMED_OUT

    def _finish_batch(self, batch: _Batch) -> None:
        if self._running_batches.pop(batch.id, None) is not None:
            self._queued_msgs -= len(batch.msgs)

    def _complete(
        self, batch: _Batch, result: Any, ctx: ConsumeConcurrentlyContext, rt_ms: float
    ) -> None:
        if batch.state is _State.TIMED_OUT:
            self._finish_batch(batch)
            log.info("%s: late result for a timed-out batch on %s ignored", self.group, batch.tp)
            return
        failure: Failure | None = None
        status: ConsumeConcurrentlyStatus
        if isinstance(result, BaseException):
            failure = Failure.of(result)
            log.warning("%s: listener raised %s: %s", self.group, failure.type, result)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        elif isinstance(result, ConsumeConcurrentlyStatus):
            status = result
        else:
            err = ListenerResultError(
                "listener result",
                result,
                "not a ConsumeConcurrentlyStatus; counted as RECONSUME_LATER",
            )
            log.warning("%s: %s", self.group, err)
            failure = Failure(
                "ListenerResultError" if result is not None else "NoneReturned", str(err)
            )
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        bad = _bad_context(ctx)
        if bad is not None:  # never let a bad ack_index / level kill the poll loop
            log.warning("%s: %s", self.group, bad)
            failure = failure or Failure("ListenerResultError", str(bad))
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
            ctx = ConsumeConcurrentlyContext(ctx.message_queue)
        if status is ConsumeConcurrentlyStatus.RECONSUME_LATER and failure is None:
            failure = Failure("RECONSUME_LATER", "listener returned RECONSUME_LATER")
        self._apply(batch, status, ctx, failure, rt_ms)

    def _apply(
        self,
        batch: _Batch,
        status: ConsumeConcurrentlyStatus,
        ctx: ConsumeConcurrentlyContext | None,
        failure: Failure | None,
        rt_ms: float,
    ) -> None:
        self._finish_batch(batch)
        batch.state = _State.DONE
        tp = batch.tp
        if self._generation[tp] != batch.generation or tp not in self._trackers:
            return  # revoked meanwhile: the new owner re-reads from the committed offset
        tracker = self._trackers[tp]
        ack_index = ctx.ack_index if ctx is not None else None
        outcome = split_batch(status, ack_index, len(batch.msgs))
        topic = batch.msgs[0].topic
        with self._stats_lock:
            st = self._stat(topic)
            st.consume_ok += len(outcome.succeeded)
            st.consume_failed += len(outcome.failed)
            st.rt_total_ms += rt_ms
            st.rt_count += 1
            st.rt_max_ms = max(st.rt_max_ms, rt_ms)
        for i in outcome.succeeded:
            tracker.settle(batch.msgs[i].queue_offset)
        if self._trace is not None:
            for i in outcome.succeeded:
                info = _TraceInfo(len(batch.msgs), i, ack_index, rt_ms)
                self._emit(batch.msgs[i], TraceStatus.SUCCESS, info)
        delay_level = ctx.delay_level_when_next_consume if ctx is not None else 0
        if failure is None and outcome.failed:
            failure = Failure("NotAcknowledged", f"CONSUME_SUCCESS with ack_index={ack_index}")
        for i in outcome.failed:
            msg = batch.msgs[i]
            if not self.clustering:
                log.warning(
                    "%s (broadcasting): message %s failed and is dropped", self.group, msg.msg_id
                )
                tracker.settle(msg.queue_offset)
                if self._trace is not None:
                    info = _TraceInfo(len(batch.msgs), i, ack_index, rt_ms)
                    self._emit(msg, TraceStatus.DROPPED, info, failure)
                continue
            trace = _TraceInfo(len(batch.msgs), i, ack_index, rt_ms) if self._trace else None
            self._send_back(tp, batch.generation, msg, delay_level, failure, trace=trace)

    def _emit(
        self,
        msg: MessageExt,
        status: TraceStatus,
        info: _TraceInfo,
        failure: Failure | None = None,
        dest: RetryLater | DeadLetter | None = None,
    ) -> None:
        """Hand one trace event to the sink (tracing is opt-in)."""
        assert self._trace is not None
        consumed = msg.properties.get(PROPERTY_CONSUME_START_TIMESTAMP)
        event = TraceEvent(
            event_time_ms=self.options.clock.now_ms(),
            source="consumer",
            group=self.group,
            topic=msg.topic,
            partition=msg.queue_id,
            offset=msg.queue_offset,
            msg_id=msg.msg_id,
            origin_msg_id=msg.origin_message_id,
            status=status,
            reconsume_times=msg.reconsume_times,
            tags=msg.tags,
            keys=msg.keys,
            batch_size=info.batch_size,
            batch_index=info.index,
            ack_index=info.ack_index,
            delay_level=dest.level if isinstance(dest, RetryLater) else None,
            consume_rt_ms=info.rt_ms,
            born_timestamp_ms=msg.born_timestamp,
            origin_born_timestamp_ms=msg.origin_born_timestamp,
            store_timestamp_ms=msg.store_timestamp,
            consume_timestamp_ms=int(consumed) if consumed and consumed.isdigit() else None,
            failure_type=failure.type if failure else None,
            failure_message=failure.truncated() if failure else None,
            dlq_reason=dest.reason.value if isinstance(dest, DeadLetter) else None,
        )
        try:
            self._trace(event)
        except Exception:  # tracing must never break consumption
            log.exception("%s: trace sink failed", self.group)

    # -- send-back -------------------------------------------------------------------------
    def _send_back(
        self,
        tp: TP,
        generation: int,
        msg: MessageExt,
        delay_level: int,
        failure: Failure | None,
        *,
        dest: RetryLater | DeadLetter | None = None,
        trace: _TraceInfo | None = None,
        omit_body: bool = False,
        alone: bool = False,
    ) -> None:
        now = self.options.clock.now_ms()
        if dest is None:
            dest = route_failed(
                reconsume_times=msg.reconsume_times,
                max_reconsume_times=self.max_reconsume_times,
                delay_level_when_next_consume=delay_level,
                levels=self.options.levels,
                message_max_reconsume_times=msg.max_reconsume_times,
            )
        if isinstance(dest, RetryLater):
            topic = naming.to_kafka(
                naming.schedule_topic(dest.level, self.options.levels, self.options.namespace)
            )
            headers = retry_headers(
                msg,
                group=self.group,
                retry_topic=self.retry_topic,
                level=dest.level,
                due_ms=now + dest.delay_ms,
                failure=failure,
            )
        else:
            assert isinstance(dest, DeadLetter)
            topic = self._dlq_kafka
            headers = dlq_headers(
                msg, group=self.group, reason=dest.reason.value, now_ms=now, failure=failure
            )
            if omit_body:
                headers.append(
                    OmittedBody(
                        len(msg.body), msg.kafka_topic, msg.queue_id, msg.queue_offset
                    ).header()
                )

        pending = _SendBack(tp, generation, msg, dest, failure, trace, omit_body, alone)
        if alone:
            self._producer.flush(_ALONE_FLUSH_S)  # nothing queued joins its batch

        def on_delivery(err: Any, _: Any) -> None:
            self._send_back_done(pending, err)

        try:
            self._producer.produce(
                topic,
                value=None if omit_body else msg.body,
                key=msg.sharding_key,
                headers=headers,
                on_delivery=on_delivery,
            )
        except BufferError as exc:
            self._send_back_done(pending, exc)
        except KafkaException as exc:  # refused before sending (e.g. too large)
            self._send_back_done(pending, exc.args[0] if exc.args else exc)
        if alone:
            self._producer.flush(_ALONE_FLUSH_S)  # its verdict is about this record only

    def _send_back_alone(self) -> None:
        """Send again, each in a batch of its own, the send-backs refused as too large."""
        while self._send_alone:
            p = self._send_alone.popleft()
            if self._generation.get(p.tp) != p.generation or p.tp not in self._trackers:
                continue
            self._send_back(
                p.tp,
                p.generation,
                p.msg,
                0,
                p.failure,
                dest=p.dest,
                trace=p.trace,
                omit_body=p.body_omitted,
                alone=True,
            )

    def _send_back_done(self, pending: _SendBack, err: Any) -> None:
        tp, generation, msg, dest = pending.tp, pending.generation, pending.msg, pending.dest
        if err is not None and not pending.alone and is_too_large(err):
            self._send_alone.append(pending)  # its batch was refused: judged again alone
            return
        with self._stats_lock:
            st = self._stat(msg.topic)
            if err is None:
                if isinstance(dest, DeadLetter):
                    st.dead_lettered += 1
                else:
                    st.sent_back += 1
            else:
                st.send_back_failed += 1
        if self._generation[tp] != generation or tp not in self._trackers:
            return
        if err is None:
            self._trackers[tp].settle(msg.queue_offset)
            if self._trace is not None:
                info = pending.trace or _TraceInfo(1, 0, None, None)
                status = TraceStatus.DLQ if isinstance(dest, DeadLetter) else TraceStatus.RETRY
                self._emit(msg, status, info, pending.failure, dest)
            if isinstance(dest, DeadLetter):
                log.warning(
                    "%s: message %s moved to %s (%s)",
                    self.group,
                    msg.msg_id,
                    self.dlq_topic,
                    dest.reason.value,
                )
            return
        if isinstance(dest, RetryLater) and is_permanent(err):
            log.error(
                "%s: the broker refuses the retry copy of %s (%s); sending it to %s",
                self.group,
                msg.msg_id,
                err.str(),
                self.dlq_topic,
            )
            self._send_back(
                tp,
                generation,
                msg,
                0,
                pending.failure,
                dest=DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, msg.reconsume_times + 1),
            )
            return
        if isinstance(dest, DeadLetter) and is_too_large(err) and not pending.body_omitted:
            # even the dead-letter copy is refused for good (too large with its headers):
            # dead-letter it without the body, which stays where it was read; re-consuming
            # it locally would hold this partition's offset for ever
            log.error(
                "%s: the broker refuses the dead-letter copy of %s too (%s); sending it to %s "
                "without its %d-byte body (left at %s[%d]@%d)",
                self.group,
                msg.msg_id,
                err.str(),
                self.dlq_topic,
                len(msg.body),
                msg.kafka_topic,
                msg.queue_id,
                msg.queue_offset,
            )
            self._send_back(
                tp,
                generation,
                msg,
                0,
                pending.failure,
                dest=dest,
                trace=pending.trace,
                omit_body=True,
            )
            return
        text = err.str() if hasattr(err, "str") else str(err)
        log.warning(
            "%s: send-back of %s failed (%s); re-consumed locally in %.1fs, offset held",
            self.group,
            msg.msg_id,
            text,
            self.options.send_back_retry_interval,
        )
        again = replace(
            msg, reconsume_times=msg.reconsume_times + 1, properties=dict(msg.properties)
        )
        heapq.heappush(
            self._local_retries,
            _LocalRetry(
                self.options.clock.monotonic() + self.options.send_back_retry_interval,
                next(self._seq),
                tp,
                generation,
                again,
            ),
        )

    def _submit_local_retries(self) -> None:
        now = self.options.clock.monotonic()
        while self._local_retries and self._local_retries[0].due <= now:
            item = heapq.heappop(self._local_retries)
            if self._generation[item.tp] == item.generation and item.tp in self._trackers:
                self._submit(item.tp, [item.msg])

    # -- offsets ---------------------------------------------------------------------------
    def _take_commits(self, tps: list[TP], force: bool = False) -> list[Any]:
        return commit_positions(self._trackers, tps, force=force)

    def _store_offsets(self) -> None:
        offsets = self._take_commits(list(self._trackers))
        if not offsets:
            return
        if not self.clustering:
            self._dirty_local_offsets = True
            self._save_local_offsets()
            return
        try:
            self._consumer.store_offsets(offsets=offsets)
        except KafkaException as exc:
            log.debug("store_offsets failed (revoked?): %s", exc)

    def _save_local_offsets(self) -> None:
        if self._offset_store is None or not self._dirty_local_offsets:
            return
        current = {tp: t.committable() for tp, t in self._trackers.items()}
        self._offset_store.save({tp: o for tp, o in current.items() if o is not None})
        self._dirty_local_offsets = False

    def check_alive(self) -> None:
        """Raise the last fatal client error (bad credentials, no broker), if any."""
        current = self._errors.current()
        if current is not None:
            raise current
        if self._thread is None or not self._thread.is_alive():
            raise ClientClosedError("consumer is not running (a dead poll loop logs why)")
