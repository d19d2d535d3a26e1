"""``ScheduleService``: serves the delay-level topics (RocketMQ's ScheduleMessageService).

One Kafka consumer group reads every level topic.  Per partition, in order: the head entry
is forwarded to ``REAL_TOPIC`` when due; when it is not due, the partition is paused (and
the consumer seeks back to the head) until it is, while the loop keeps polling so the group
membership stays alive.  The poll loop never sleeps.

Delivery guarantees (:class:`DeliveryGuarantee`): at-least-once commits a delay-topic
offset only after the forward is acknowledged; exactly-once wraps each polled batch's
forwards and offsets in one Kafka transaction (``send_offsets_to_transaction``).

Entries that cannot be scheduled (no ``REAL_TOPIC``, bad due time, a real topic that does
not exist) go to the service's own dead-letter topic ``%DLQ%<service group>`` with
``RMQ_DLQ_REASON=INVALID_SCHEDULE_ENTRY`` and the reason in ``RMQ_FAILURE_MESSAGE``; an
operator can read and redrive them like any DLQ.
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as _KafkaProducer

from adapter.constants import (
    DEFAULT_SCHEDULE_SERVICE_GROUP,
    FAILURE_MESSAGE_MAX_CHARS,
    HEADER_BODY_OMITTED,
    HEADER_DLQ_REASON,
    HEADER_DLQ_TIME_MS,
    HEADER_DUE_MS,
    HEADER_FAILURE_MESSAGE,
    HEADER_FAILURE_TYPE,
    HOP_MESSAGE_MAX_BYTES,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.codec import (
    OmittedBody,
    forward_headers,
    replace_headers,
)
from adapter.core.delay import UNIT_MS, DelayLevels
from adapter.core.headers import HeaderView, parse_non_negative
from adapter.core.offsets import PartitionTracker
from adapter.core.schedule import Forward, Invalid, Repark, Wait, decide
from adapter.core.stats import LatencySummary, Reservoir
from adapter.core.trace import TraceEvent, TraceSink, TraceStatus
from adapter.errors import ConfigError, TopicNameError
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
from adapter.io.polling import (
    apply_assignment,
    commit_positions,
    consume_available,
    is_cooperative,
    release_assignment,
)
from adapter.io.topics import ensure_topics, plan_topics

log = logging.getLogger("adapter.schedule")

INVALID_SCHEDULE_ENTRY = "INVALID_SCHEDULE_ENTRY"
#: Bound on one transactional call: after a broker outage the loop aborts and re-reads
#: instead of blocking for a minute (transactions time out after 10 s anyway).
_TXN_CALL_TIMEOUT_S = 10
_TXN_CALL_GRACE_S = 5  # librdkafka may overrun its own timeout (librdkafka#5456)
_TXN_CALL_ATTEMPTS = 6  # a call pending for a minute: fence the producer instead
TP = tuple[str, int]


class DeliveryGuarantee(str, Enum):
    """How the ScheduleService forwards due messages."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    """Commit a delay-topic offset after the forward is acknowledged; a crash between the
    two forwards the message again (consumers de-duplicate on ``UNIQ_KEY``)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    """Forwards and delay-topic offsets commit in one Kafka transaction per batch; readers
    with ``isolation.level=read_committed`` (the default) never see a duplicate."""


@dataclass(frozen=True, slots=True)
class ScheduleServiceOptions:
    delay_levels: DelayLevels | str | None = None
    namespace: str | None = None
    group: str | None = None
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    batch_size: int = 500
    poll_timeout_s: float = 0.1
    retry_after_failure_s: float = 1.0
    partitions: int = 3
    auto_create_topics: bool = True
    transactional_id: str | None = None
    trace_topic: str | None = None
    trace_sink: TraceSink | None = None
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))
        try:
            delivery = DeliveryGuarantee(self.delivery)
        except ValueError:
            raise ConfigError(
                "delivery", self.delivery, f"expected one of {[d.value for d in DeliveryGuarantee]}"
            ) from None
        object.__setattr__(self, "delivery", delivery)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("partitions", self.partitions, minimum=1)
        check_seconds("poll_timeout_s", self.poll_timeout_s)
        check_seconds("retry_after_failure_s", self.retry_after_failure_s)

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels

    @property
    def group_id(self) -> str:
        if self.group:
            return self.group
        if self.namespace:
            return f"{DEFAULT_SCHEDULE_SERVICE_GROUP}.{self.namespace}"
        return DEFAULT_SCHEDULE_SERVICE_GROUP


@dataclass
class ScheduleStats:
    """What the service did; ``lateness_ms`` is forward time minus due time."""

    forwarded: int = 0
    reparked: int = 0
    invalid: int = 0
    early: int = 0
    send_failures: int = 0
    pauses: int = 0
    lateness: Reservoir = field(default_factory=Reservoir)

    def lateness_ms(self) -> LatencySummary:
        return self.lateness.summary()


def _token_ms(token: str) -> int:
    for unit in ("ms", "s", "m", "h", "d"):
        if token.endswith(unit) and token[: -len(unit)].isdigit():
            return int(token[: -len(unit)]) * UNIT_MS[unit]
    raise ValueError(token)


class ScheduleService:
    """Forwards delay-level entries to their real topics when due.  Scales as a group."""

    def __init__(self, config: Mapping[str, Any], **options: Any) -> None:
        self.options = build_options(ScheduleServiceOptions, options, "ScheduleService")
        self._config = check_kafka_config(config, "ScheduleService")
        self.group = self.options.group_id
        self.stats = ScheduleStats()
        self._topics = [
            naming.to_kafka(
                naming.schedule_topic(level, self.options.levels, self.options.namespace)
            )
            for level in self.options.levels.levels()
        ]
        self._dlq_logical = naming.dlq_topic(self.group)
        self._consumer: Any = None
        self._producer: Any = None
        self._errors = FatalErrorWatch(self._config.get("error_cb"))
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        self._trackers: dict[TP, PartitionTracker] = {}
        self._held: dict[TP, int] = {}  # paused partition -> due ms of its head
        self._wakeups: list[tuple[float, TP, int]] = []  # (monotonic, tp, generation)
        self._generation: dict[TP, int] = {}
        # (tp, offset, generation, error, source message, was a dead-letter send)
        self._acks: list[tuple[TP, int, int, Any, Any, bool]] = []
        #: entries refused within a record batch the broker found too large: sent again alone
        #: (the limit is per batch, so the refusal may be a neighbour's fault)
        self._solo: set[tuple[TP, int]] = set()
        self._acks_lock = threading.Lock()
        self._known_topics: dict[str, int] = {}
        self._txn_open = False
        #: what stopped the service loop, if it died
        self.error: Exception | None = None
        self._txn_tps: set[TP] = set()
        self._txn_failed = False
        self._eos_positions: dict[TP, int] = {}
        self._pending: dict[TP, deque[Any]] = {}  # fetched entries behind a head not yet due
        self.assignment: set[TP] = set()
        self._trace: TraceSink | None = self.options.trace_sink
        self._owned_trace: Any = None

    # -- clients ---------------------------------------------------------------------------
    def _make_clients(self) -> None:
        if self.options.trace_topic and self._trace is None:
            # imported on use: tracing is opt-in and lives with the analytics extra
            trace_module = importlib.import_module("adapter.analytics.trace")
            self._owned_trace = trace_module.KafkaTraceSink(self._config, self.options.trace_topic)
            self._trace = self._owned_trace
        eos = self.options.delivery is DeliveryGuarantee.EXACTLY_ONCE
        cconf = dict(self._config)
        cconf["group.id"] = self.group
        cconf["error_cb"] = self._errors
        cconf.setdefault("auto.offset.reset", "earliest")
        cconf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        # a resumed partition joins the next fetch request: keep the broker's long poll
        # short, or a due message waits for the fetch that was in flight while it was paused
        cconf.setdefault("fetch.wait.max.ms", 20)
        require_setting(cconf, "enable.auto.offset.store", False, "offsets are stored when settled")
        require_setting(cconf, "enable.auto.commit", not eos, "commits follow the delivery mode")
        require_setting(cconf, "isolation.level", "read_committed", "aborted entries are skipped")
        pconf = producer_config(self._config)
        pconf["error_cb"] = self._errors
        require_setting(pconf, "enable.idempotence", True, "forwards must not duplicate")
        pconf.setdefault("linger.ms", 5)
        # retry copies arrive bigger than the user records they copy (see HOP_MESSAGE_MAX_BYTES)
        pconf.setdefault("message.max.bytes", HOP_MESSAGE_MAX_BYTES)
        if eos:
            pconf["transactional.id"] = (
                self.options.transactional_id or f"{self.group}-{uuid.uuid4().hex}"
            )
            if "message.timeout.ms" not in pconf:
                # a crashed instance's open transaction blocks read_committed readers and
                # the successor's offset fetch until it times out (a fresh transactional.id
                # never fences it): keep that short, as Kafka Streams does (default 60 s)
                pconf.setdefault("transaction.timeout.ms", 10_000)
        else:
            pconf.setdefault("message.timeout.ms", 300_000)
        self._pconf = pconf
        self._producer = make_client(_KafkaProducer, pconf, what="ScheduleService producer")
        if eos:
            try:
                self._producer.init_transactions(30)
            except KafkaException as exc:
                raise client_error(exc, what="ScheduleService init_transactions") from exc
        self._cooperative = is_cooperative(cconf)
        self._consumer = make_client(Consumer, cconf, what="ScheduleService consumer")
        self._consumer.subscribe(
            self._topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ScheduleService:
        """Run the service on a background thread."""
        if self._thread is not None:
            return self
        self._prepare()
        self._thread = threading.Thread(target=self._loop, name="rmq-schedule-service", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Run the service on this thread until :meth:`shutdown` (e.g. from a signal handler)."""
        self._prepare()
        self._loop()

    def _prepare(self) -> None:
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
        self._make_clients()
        self._running.set()

    def shutdown(self, timeout: float = 30.0) -> None:
        self._running.clear()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> ScheduleService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- rebalance -------------------------------------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        for p in partitions:
            tp = (p.topic, p.partition)
            self._forget(tp)
            self._trackers[tp] = PartitionTracker()
            self.assignment.add(tp)
        apply_assignment(
            consumer, partitions, self._cooperative
        )  # pause state is rebuilt, never inherited
        log.info(
            "ScheduleService %s assigned %s",
            self.group,
            [(p.topic, p.partition) for p in partitions],
        )

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if self._eos and self._txn_open:
            # forwards of this iteration (``_wake_due`` runs before the poll that revokes)
            # must commit with their offsets while the trackers still exist: committed
            # without them, the new owner re-reads and forwards them a second time
            self._commit_transaction()
        if not self._eos:
            self._producer.flush(30)
            self._apply_acks()
            offsets = self._settled_offsets([(p.topic, p.partition) for p in partitions])
            if offsets:
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    log.warning("commit on revoke failed: %s", exc)
        for p in partitions:
            self._forget((p.topic, p.partition))
        release_assignment(consumer, partitions, self._cooperative)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        for p in partitions:
            self._forget((p.topic, p.partition))
        release_assignment(consumer, partitions, self._cooperative)

    def _forget(self, tp: TP) -> None:
        self._trackers.pop(tp, None)
        self._solo = {e for e in self._solo if e[0] != tp}
        self._held.pop(tp, None)
        self._pending.pop(tp, None)
        self.assignment.discard(tp)
        self._generation[tp] = self._generation.get(tp, 0) + 1

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        consumer = self._consumer
        try:
            while self._running.is_set():
                self._wake_due()
                timeout = self._poll_timeout()
                for msg in consume_available(consumer, self.options.batch_size, timeout):
                    self._accept(msg)
                self._finish_iteration()
        except Exception as exc:
            log.exception("ScheduleService loop failed")
            self.error = exc
            raise
        finally:
            self._close()

    def check_alive(self) -> None:
        """Raise what stopped the service loop, or a current fatal/authentication error."""
        if self.error is not None:
            raise self.error
        current = self._errors.current()
        if current is not None:
            raise current

    def _close(self) -> None:
        if self._producer is not None:
            if self._txn_open:
                self._finish_iteration()
            self._producer.flush(30)
            self._apply_acks()
            self._store_settled()
        if self._consumer is not None:
            try:
                if not self._eos:
                    offsets = self._settled_offsets(list(self._trackers))
                    if offsets:
                        self._consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                log.warning("final commit failed: %s", exc)
            self._consumer.close()  # may revoke, which flushes the producer (at-least-once)
            self._consumer = None
        # flushed: let its broker connections go now, not when this object is collected
        self._producer = None
        if self._owned_trace is not None:
            self._owned_trace.close()

    @property
    def _eos(self) -> bool:
        return self.options.delivery is DeliveryGuarantee.EXACTLY_ONCE

    def _poll_timeout(self) -> float:
        timeout = self.options.poll_timeout_s
        if self._wakeups:
            timeout = min(timeout, max(0.0, self._wakeups[0][0] - self.options.clock.monotonic()))
        return timeout

    def _schedule_wakeup(self, tp: TP, until_ms: int) -> None:
        self._held[tp] = until_ms
        wait_s = max(0.0, (until_ms - self.options.clock.now_ms()) / 1000)
        heapq.heappush(
            self._wakeups,
            (self.options.clock.monotonic() + wait_s, tp, self._generation.get(tp, 0)),
        )

    def _wake_due(self) -> None:
        """Serve partitions whose head became due: the buffered entries first, then resume."""
        now = self.options.clock.monotonic()
        while self._wakeups and self._wakeups[0][0] <= now:
            _, tp, gen = heapq.heappop(self._wakeups)
            if self._generation.get(tp, 0) != gen or tp not in self._held:
                continue
            del self._held[tp]
            pending = self._pending.get(tp)
            while pending:
                wait = self._process(tp, pending[0])
                if wait is not None:
                    self._schedule_wakeup(tp, wait.due_ms)
                    break
                pending.popleft()
            if not pending:
                self._pending.pop(tp, None)
                self._resume(tp)

    def _resume(self, tp: TP) -> None:
        self._consumer.resume([TopicPartition(tp[0], tp[1])])

    def _hold(self, tp: TP, offset: int, until_ms: int) -> None:
        """After a failure: pause ``tp``, rewind it to ``offset`` and retry at ``until_ms``."""
        self._pending.pop(tp, None)
        tpo = TopicPartition(tp[0], tp[1], offset)
        self._consumer.pause([tpo])
        self._consumer.seek(tpo)
        self.stats.pauses += 1
        self._schedule_wakeup(tp, until_ms)

    # -- one entry -------------------------------------------------------------------------
    def _accept(self, msg: Any) -> None:
        """A fetched entry: process it now, or keep it behind a head that is not due.

        When the head of a partition is not due the partition is paused until it is; the
        entries already fetched behind it stay in memory, in order (at most one fetch), so
        they are forwarded on time without a re-fetch.  Nothing kept is committed.
        """
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("ScheduleService consume error: %s", err.str())
            return
        tp = (msg.topic(), msg.partition())
        tracker = self._trackers.get(tp)
        if tracker is None:
            return  # no longer ours
        pending = self._pending.get(tp)
        if pending is None and tp in self._held:
            return  # rewound after a failure: re-read when the hold ends
        tracker.add(msg.offset())
        if pending is None:
            wait = self._process(tp, msg)
            if wait is None:
                return
            pending = self._pending[tp] = deque()
            self._consumer.pause([TopicPartition(tp[0], tp[1])])
            self.stats.pauses += 1
            self._schedule_wakeup(tp, wait.due_ms)
        pending.append(msg)

    def _process(self, tp: TP, msg: Any) -> Wait | None:
        """Forward, re-park or dead-letter ``msg``; a :class:`Wait` when it is not due."""
        decision, view = self._decide(msg)
        if isinstance(decision, Wait):
            return decision
        out = self._outgoing(msg, decision, view)
        assert out is not None
        self._send(tp, msg, out, to_dlq=isinstance(decision, Invalid))
        return None

    def _decide(self, msg: Any) -> tuple[Any, HeaderView]:
        parsed = naming.schedule_level_of(msg.topic())
        view = HeaderView.read(msg.headers())
        if parsed is None:
            return Invalid(f"{msg.topic()} is not a delay-level topic"), view
        decision = decide(
            view.text,
            level_delay_ms=_token_ms(parsed[1]),
            now_ms=self.options.clock.now_ms(),
            levels=self.options.levels,
        )
        if isinstance(decision, Forward):
            try:
                problem = self._check_destination(decision)
            except KafkaException as exc:  # metadata unavailable: try this entry again later
                log.warning("metadata for %s unavailable (%s); retrying", decision.real_topic, exc)
                now = self.options.clock.now_ms()
                return Wait(now + int(self.options.retry_after_failure_s * 1000)), view
            if problem is not None:
                decision = Invalid(problem)
        return decision, view

    def _check_destination(self, fwd: Forward) -> str | None:
        try:
            kafka_topic = naming.to_kafka(fwd.real_topic)
        except TopicNameError as exc:
            return str(exc)
        partitions = self._partition_count(kafka_topic)
        if partitions is None:
            return f"REAL_TOPIC {fwd.real_topic!r} does not exist"
        if fwd.real_queue_id is not None and fwd.real_queue_id >= partitions:
            return (
                f"REAL_QID={fwd.real_queue_id} but {fwd.real_topic!r} has {partitions} partitions"
            )
        return None

    def _partition_count(self, kafka_topic: str) -> int | None:
        if kafka_topic in self._known_topics:
            return self._known_topics[kafka_topic]
        # ask through the consumer: a producer's metadata request auto-creates the topic on
        # brokers with auto.create.topics.enable (the check itself would create it)
        md = self._consumer.list_topics(topic=kafka_topic, timeout=10)
        tmd = md.topics.get(kafka_topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            return None
        self._known_topics[kafka_topic] = len(tmd.partitions)
        return len(tmd.partitions)

    def _outgoing(
        self, msg: Any, decision: Any, view: HeaderView
    ) -> tuple[str, dict[str, Any]] | None:
        """The record to produce for a decision, or ``None`` when the partition is held."""
        now = self.options.clock.now_ms()
        if isinstance(decision, Forward):
            due = int(view.text.get(HEADER_DUE_MS, now))
            self.stats.lateness.add(now - due)
            if now < due:
                self.stats.early += 1
            self.stats.forwarded += 1
            if self._trace is not None:
                self._emit_forward(msg, view, decision, now, due)
            kwargs: dict[str, Any] = {"headers": forward_headers(view.raw)}
            if decision.real_queue_id is not None:
                kwargs["partition"] = decision.real_queue_id
            return naming.to_kafka(decision.real_topic), kwargs
        if isinstance(decision, Repark):
            self.stats.reparked += 1
            p = decision.placement
            headers = replace_headers(
                view.raw, {PROPERTY_DELAY_TIME_LEVEL: p.level, HEADER_DUE_MS: p.due_ms}
            )
            logical = naming.schedule_topic(p.level, self.options.levels, self.options.namespace)
            return naming.to_kafka(logical), {"headers": headers}
        assert isinstance(decision, Invalid)
        self.stats.invalid += 1
        return self._dead_letter(msg, decision, view)

    def _dead_letter(
        self, msg: Any, decision: Invalid, view: HeaderView
    ) -> tuple[str, dict[str, Any]]:
        log.warning(
            "invalid schedule entry %s[%d]@%d: %s -> %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            decision.reason,
            self._dlq_logical,
        )
        headers = replace_headers(
            view.raw,
            {
                HEADER_DLQ_REASON: INVALID_SCHEDULE_ENTRY,
                HEADER_FAILURE_TYPE: INVALID_SCHEDULE_ENTRY,
                HEADER_FAILURE_MESSAGE: decision.reason[:FAILURE_MESSAGE_MAX_CHARS],
                PROPERTY_DLQ_ORIGIN_TOPIC: _logical_or_raw(msg.topic()),
                HEADER_DLQ_TIME_MS: self.options.clock.now_ms(),
            },
        )
        return naming.to_kafka(self._dlq_logical), {"headers": headers}

    def _emit_forward(self, msg: Any, view: HeaderView, fwd: Forward, now: int, due: int) -> None:
        assert self._trace is not None
        props = view.text
        level = naming.schedule_level_of(msg.topic())
        event = TraceEvent(
            event_time_ms=now,
            source="schedule-service",
            group=self.group,
            topic=fwd.real_topic,
            partition=msg.partition(),
            offset=msg.offset(),
            msg_id=props.get(PROPERTY_UNIQ_KEY)
            or f"{msg.topic()}:{msg.partition()}:{msg.offset()}",
            origin_msg_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID)
            or props.get(PROPERTY_UNIQ_KEY)
            or "",
            status=TraceStatus.FORWARDED,
            reconsume_times=parse_non_negative(props.get(PROPERTY_RECONSUME_TIME)) or 0,
            tags=props.get(PROPERTY_TAGS),
            keys=props.get(PROPERTY_KEYS),
            delay_level=level[0] if level else None,
            lateness_ms=now - due,
        )
        try:
            self._trace(event)
        except Exception:  # tracing must never stop forwarding
            log.exception("trace sink failed")

    def _send(self, tp: TP, msg: Any, out: tuple[str, dict[str, Any]], *, to_dlq: bool) -> None:
        """Produce one outgoing record.  At-least-once: its acknowledgement settles ``msg``'s
        offset.  Exactly-once: it joins the open transaction and settles with its commit."""
        offset = msg.offset()
        if (tp, offset) in self._solo:
            self._send_alone(tp, msg, out, to_dlq=to_dlq)
            return
        if self._eos:
            if not self._txn_open:
                try:
                    self._producer.begin_transaction()
                except KafkaException as exc:  # a producer left unusable by an outage
                    log.error("begin_transaction failed: %s", exc)
                    self._new_transactional_producer()
                    self._producer.begin_transaction()
                self._txn_open = True
            self._txn_tps.add(tp)

            def on_eos_delivery(err: Any, _: Any) -> None:
                if err is not None and is_too_large(err):
                    self._solo.add((tp, offset))  # the transaction fails: sent alone next time
                    self._txn_failed = True

            try:
                self._produce(out[0], msg, out[1], on_eos_delivery)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                if not to_dlq and is_permanent(err):
                    self._send(tp, msg, self._refused(tp, msg, err), to_dlq=True)
                    return
                self._txn_failed = True
                log.warning("forward from %s[%d]@%d failed: %s", tp[0], tp[1], offset, exc)
                return
            self._trackers[tp].settle(offset)
            return
        gen = self._generation.get(tp, 0)

        def on_delivery(err: Any, _: Any) -> None:
            with self._acks_lock:
                self._acks.append((tp, offset, gen, err, msg, to_dlq))

        try:
            self._produce(out[0], msg, out[1], on_delivery)
        except KafkaException as exc:  # rejected before sending (e.g. too large)
            on_delivery(exc.args[0] if exc.args else exc, None)

    def _flush_or_raise(self, timeout_s: float) -> None:
        if self._producer.flush(timeout_s) > 0:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, "records still unacknowledged", retriable=True)
            )

    def _send_alone(
        self, tp: TP, msg: Any, out: tuple[str, dict[str, Any]], *, to_dlq: bool
    ) -> None:
        """Send one record in a batch (and, exactly-once, a transaction) of its own, so the
        broker's verdict on it is about this record only.  Refused as too large on its own,
        it is dead-lettered; a dead-letter copy that is too large goes without its body."""
        offset = msg.offset()
        if self._eos and self._txn_open:
            self._commit_transaction()  # its neighbours commit without it
        else:
            self._producer.flush(_TXN_CALL_TIMEOUT_S)  # nothing queued joins its batch
        if self._eos:
            self._producer.begin_transaction()
            self._txn_open = True
            self._txn_tps.add(tp)
        outcome: list[Any] = []
        try:
            self._produce(out[0], msg, out[1], lambda err, _: outcome.append(err))
            self._producer.flush(_TXN_CALL_TIMEOUT_S)
        except KafkaException as exc:
            outcome.append(exc.args[0] if exc.args else exc)
        err = outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT, "no acknowledgement")
        if err is None:
            self._solo.discard((tp, offset))
            self._trackers[tp].settle(offset)
            return
        self.stats.send_failures += 1
        if self._eos:  # only this record is in the transaction
            if not self._abort():
                self._new_transactional_producer()
            self._txn_tps.clear()
            self._txn_failed = False
        if not to_dlq and is_permanent(err):
            self._send(tp, msg, self._refused(tp, msg, err), to_dlq=True)
        elif to_dlq and is_too_large(err) and "value" not in out[1]:
            self._send(tp, msg, _without_body(tp, msg, out), to_dlq=True)
        else:
            text = err.str() if hasattr(err, "str") else str(err)
            log.error("sending %s[%d]@%d alone failed: %s", tp[0], tp[1], offset, text)
            self._rewind(tp, self._committed_position(tp) if self._eos else offset)

    def _refused(self, tp: TP, msg: Any, err: Any) -> tuple[str, dict[str, Any]]:
        """The DLQ record for an entry the broker refuses for good (never dropped)."""
        text = err.str() if hasattr(err, "str") else str(err)
        log.error(
            "forward from %s[%d]@%d impossible (%s): to %s",
            tp[0],
            tp[1],
            msg.offset(),
            text,
            self._dlq_logical,
        )
        self.stats.invalid += 1
        reason = Invalid(f"forward failed permanently: {text}")
        return self._dead_letter(msg, reason, HeaderView.read(msg.headers()))

    def _produce(
        self, topic: str, msg: Any, kwargs: dict[str, Any], on_delivery: Any = None
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic,
                    **{"value": msg.value(), "key": msg.key(), **kwargs},
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: serve deliveries, then retry

    def _finish_iteration(self) -> None:
        if self._eos:
            self._commit_transaction()
            return
        self._producer.poll(0)
        self._apply_acks()
        self._store_settled()

    def _apply_acks(self) -> None:
        with self._acks_lock:
            acks, self._acks = self._acks, []
        failed: dict[TP, int] = {}
        for tp, offset, gen, err, msg, to_dlq in acks:
            if self._generation.get(tp, 0) != gen or tp not in self._trackers:
                continue
            if err is None:
                self._trackers[tp].settle(offset)
                continue
            self.stats.send_failures += 1
            if is_too_large(err) and (tp, offset) not in self._solo:
                self._solo.add((tp, offset))  # its batch was refused: re-read, sent alone
                failed[tp] = min(offset, failed.get(tp, offset))
                continue
            if not to_dlq and is_permanent(err):
                # this record can never be forwarded: dead-letter it, never drop it
                self._send(tp, msg, self._refused(tp, msg, err), to_dlq=True)
                continue
            failed[tp] = min(offset, failed.get(tp, offset))
            text = err.str() if hasattr(err, "str") else str(err)
            log.warning("forward from %s[%d]@%d failed: %s", tp[0], tp[1], offset, text)
        for tp, offset in failed.items():
            # re-read from the failed entry after a pause; nothing is committed past it
            self._rewind(tp, offset)

    def _rewind(self, tp: TP, offset: int) -> None:
        tracker = self._trackers[tp] = PartitionTracker(start_offset=None)
        tracker.mark_committed(offset)
        self._generation[tp] = self._generation.get(tp, 0) + 1
        self._held.pop(tp, None)
        retry_ms = self.options.clock.now_ms() + int(self.options.retry_after_failure_s * 1000)
        self._hold(tp, offset, retry_ms)

    def _settled_offsets(self, tps: list[TP]) -> list[Any]:
        return commit_positions(self._trackers, tps)

    def _store_settled(self) -> None:
        offsets = self._settled_offsets(list(self._trackers))
        if offsets:
            try:
                self._consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:
                log.warning("store_offsets failed (partition revoked?): %s", exc)

    # -- exactly-once ----------------------------------------------------------------------
    def _commit_transaction(self) -> None:
        """Commit the forwards of this iteration together with the delay-topic offsets.

        librdkafka's rules: a retriable failure (a timeout while the broker is away) leaves the
        call in progress, and the *same* call must be repeated to learn its outcome (an abort
        would only conflict with it); an abortable failure is aborted; anything else, or an
        outcome that stays unknown, fences this producer with a fresh one.
        """
        if not self._txn_open:
            return
        tps = sorted(self._txn_tps)
        try:
            # deliveries first: a record the broker refused marks the transaction failed
            self._txn_call(lambda: self._flush_or_raise(_TXN_CALL_TIMEOUT_S))
            if self._txn_failed:
                raise KafkaException(
                    KafkaError(KafkaError._FAIL, "a forward failed", txn_requires_abort=True)
                )
            offsets = self._settled_offsets(tps)
            if offsets:
                metadata = self._consumer.consumer_group_metadata()
                self._txn_call(
                    lambda: self._producer.send_offsets_to_transaction(
                        offsets, metadata, _TXN_CALL_TIMEOUT_S
                    )
                )
            self._txn_call(lambda: self._producer.commit_transaction(_TXN_CALL_TIMEOUT_S))
            self._txn_open = False
            for tpo in offsets:
                self._eos_positions[(tpo.topic, tpo.partition)] = tpo.offset
        except KafkaException as exc:
            log.warning("transaction failed, aborting and re-reading: %s", exc)
            self.stats.send_failures += 1
            err = exc.args[0] if exc.args else None
            known = err is not None and err.txn_requires_abort() and self._abort()
            if not known:
                # the outcome is unknown (the commit may have gone through): fence the producer
                # and re-read the committed positions, which wait for the fenced transaction
                self._txn_open = False
                self._new_transactional_producer()
                for tp in tps:
                    self._eos_positions.pop(tp, None)
            for tp in tps:
                if tp in self._trackers and self._running.is_set():
                    self._rewind(tp, self._committed_position(tp))
        finally:
            self._txn_tps.clear()
            self._txn_failed = False

    def _txn_call(self, call: Callable[[], object]) -> None:
        """Repeat a transactional call while it fails retriably (its result is still pending),
        for at most ``_TXN_CALL_ATTEMPTS`` bounded calls; then let the caller fence."""
        for attempt in range(1, _TXN_CALL_ATTEMPTS + 1):
            try:
                _bounded(call, _TXN_CALL_TIMEOUT_S + _TXN_CALL_GRACE_S)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retry = err is not None and err.retriable() and not err.txn_requires_abort()
                if not retry or attempt == _TXN_CALL_ATTEMPTS or not self._running.is_set():
                    raise
                log.warning("transactional call pending (%s), repeating it", exc)

    def _committed_position(self, tp: TP) -> int:
        known = self._eos_positions.get(tp)
        if known is not None:
            return known
        while True:
            try:
                [c] = self._consumer.committed([TopicPartition(tp[0], tp[1])], timeout=30)
                return int(c.offset) if c.offset >= 0 else OFFSET_BEGINNING
            except KafkaException as exc:
                if not self._running.is_set():
                    raise
                log.warning("reading the committed offset of %s[%d] failed: %s", *tp, exc)

    def _abort(self) -> bool:
        """Abort the open transaction; ``False`` when that was not possible (the caller then
        fences the producer). Retriable failures are repeated a bounded number of times."""
        self._txn_open = False
        try:
            self._txn_call(lambda: self._producer.abort_transaction(_TXN_CALL_TIMEOUT_S))
        except KafkaException as exc:
            log.error("abort_transaction failed: %s", exc)
            return False
        return True

    def _new_transactional_producer(self) -> None:
        """A fresh transactional producer (same transactional.id: fences the old one)."""
        old = self._producer
        with contextlib.suppress(Exception):
            old.purge()
        while True:
            self._producer = make_client(
                _KafkaProducer, dict(self._pconf), what="ScheduleService producer"
            )
            try:
                self._producer.init_transactions(30)
                return
            except KafkaException as exc:
                log.error("init_transactions failed, retrying: %s", exc)
                if not self._running.is_set():
                    return


def _without_body(tp: TP, msg: Any, out: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The dead-letter record without the body the broker will not take even alone; the body
    stays in the delay topic (until its retention), named by ``RMQ_BODY_OMITTED``."""
    omitted = OmittedBody(len(msg.value() or b""), tp[0], tp[1], msg.offset())
    log.error(
        "the dead-letter copy of %s is too large: sent without its %d-byte body",
        omitted.where,
        omitted.size,
    )
    headers = [h for h in out[1].get("headers", []) if h[0] != HEADER_BODY_OMITTED]
    headers.append(omitted.header())
    return out[0], {**out[1], "headers": headers, "value": None}


def _bounded(call: Callable[[], object], timeout_s: float) -> None:
    """Run a transactional call with a deadline of our own.

    librdkafka does not always honour the timeout it is given: ``send_offsets_to_transaction``
    can wait forever for a group coordinator that went away with a broker restart
    (confluentinc/librdkafka#5456).  The call runs on a short-lived thread; past the deadline
    it is left behind and a fatal ``_TIMED_OUT`` is raised, so the caller fences the wedged
    producer with a fresh one (same ``transactional.id``) instead of blocking the service.
    """
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="rmq-schedule-txn-call", daemon=True).start()
    if not done.wait(timeout_s):
        raise KafkaException(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"transactional call still blocked after {timeout_s:.0f} s; fencing the producer",
                fatal=True,
            )
        )
    if outcome[0] is not None:
        raise outcome[0]


def _logical_or_raw(kafka_topic: str) -> str:
    try:
        return naming.from_kafka(kafka_topic)
    except TopicNameError:
        return kafka_topic
