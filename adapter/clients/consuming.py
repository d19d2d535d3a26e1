"""The I/O half of a consumer group member, shared by every consumer kind.

:class:`GroupConsumer` is the :class:`~adapter.io.loop.LoopHandler` of the push and simple
consumers.  It owns the Kafka consumer and the :class:`~adapter.io.publisher.Publisher`,
feeds the kind's engine (:mod:`adapter.core.engine`) what happens, and carries out what the
engine asks for.  How fetched work reaches the application is the kind's
:class:`Runner`: a listener called inline or on workers (push), or a buffer that
``receive()`` takes from (simple).

Where a partition starts: its committed offset; without one, ``consume_from_where`` (the
group's retry topic always from its beginning), committed at once so that a restart
resumes there.  An offset out of range (below the log start after retention, above the end
after a truncation) restarts at the earliest retained offset: RocketMQ corrects an illegal
offset to the minimum, and nothing retained is skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import tenacity
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from adapter.clients.resets import ResetReceiver
from adapter.constants import METADATA_REFRESH_MS
from adapter.core import hops
from adapter.core.clock import Clock
from adapter.core.codec import Failure
from adapter.core.engine import (
    Action,
    Dropped,
    Pause,
    Resume,
    RunWork,
    SendBack,
    StoreOffsets,
    TimedOut,
    Work,
)
from adapter.core.engine.actions import TraceInfo
from adapter.core.filter import TagFilter
from adapter.core.message import FetchedRun, MessageExt, split_fetch
from adapter.core.offsets import ConsumeFromWhere, StartAt, first_start
from adapter.core.publishing import Refusal
from adapter.core.routing import DeadLetter, RetryLater, RetryNow
from adapter.core.stats import LATENCY_BUCKETS_S, Histogram, TopicStats
from adapter.core.trace import TraceEvent, TraceSink, TraceStatus
from adapter.core.types import TP
from adapter.io.config import admin_config, require_setting
from adapter.io.errors import FatalErrorWatch, client_error, error_text, make_client, refusal_of
from adapter.io.offset_store import LocalFileOffsetStore
from adapter.io.polling import apply_assignment, consume_available, is_cooperative
from adapter.io.polling import release_assignment as release
from adapter.io.publisher import Publisher
from adapter.io.records import TopicNames

log = logging.getLogger("adapter.consumer")

#: Longest the loop goes without calling ``consume()`` while it serves a backlog of work.
MAX_FETCH_GAP_S = 1.0
#: Longest ``consume()`` waits for records when nothing else is due (the loop's tick).
IDLE_FETCH_S = 0.1
#: Broadcasting: local offsets are written this often (RocketMQ persists every 5 s) ...
PERSIST_INTERVAL_S = 5.0
#: ... and the topics' partitions are looked up again this often (RocketMQ rebalances
#: every 20 s), so partitions added later are read too.
REDISCOVER_INTERVAL_S = 20.0
#: How often the loop refreshes the partitions' lag while metrics are on.
LAG_INTERVAL_S = 1.0
#: How long a rebalance waits for running batches of revoked partitions while running.
REVOKE_DRAIN_S = 2.0
_LOOKUP_TIMEOUT_S = 10.0


class Engine(Protocol):
    """What :class:`GroupConsumer` needs of an engine (see :mod:`adapter.core.engine`)."""

    def assigned(self, tp: TP) -> None: ...
    def revoked(self, tp: TP) -> None: ...
    def owns(self, tp: TP) -> bool: ...
    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool: ...
    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None: ...
    def published(self, action: SendBack) -> None: ...
    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]: ...
    def tick(self, now: float) -> list[Action]: ...
    def committable(self, tp: TP) -> int | None: ...
    def store_failed(self, tps: list[TP]) -> None: ...
    def in_flight(self, tp: TP) -> int: ...
    def paused(self) -> list[TP]: ...
    def local_retries(self) -> int: ...
    def next_due(self) -> float | None: ...


class Runner(Protocol):
    """How a consumer kind hands fetched work to the application."""

    @property
    def inline(self) -> bool:
        """Whether the next work runs on the loop thread now (not watched for timeouts)."""

    def run(self, work: Work) -> None:
        """Run ``work`` now (inline) or hand it over; results reach the group later."""

    def poll(self) -> None:
        """Deliver results that came back from other threads (on the loop thread)."""

    def backlog(self) -> int:
        """Messages handed over and not finished yet."""

    def wait(self, timeout: float) -> None:
        """Block until a result comes back or ``timeout`` passes."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    """How a member fetches and where it starts (resolved consumer options)."""

    clustering: bool = True
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp_ms: int | None = None
    #: records taken per ``consume()`` while the listener runs inline (nothing piles up)
    fetch_size: int = 128
    #: ... and while it runs on workers (RocketMQ's ``pullBatchSize``: flow control counts
    #: what was handed out, so a fetch never overshoots the thresholds by more than this)
    pull_batch_size: int = 32
    soft_backlog: int = 1000
    shutdown_await: float = 30.0
    #: how long a rebalance waits for running batches of revoked partitions while the
    #: consumer runs (shutting down, ``shutdown_await`` applies); orderly consumers wait
    #: for the batch (up to ``consume_timeout``), so a new owner never starts beside it
    revoke_await: float = REVOKE_DRAIN_S
    offset_store_dir: str = ".rmq-offsets"
    instance_name: str = "DEFAULT"


class ConsumerStats:
    """Counters per logical topic, a listener-time histogram; written on the loop thread."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.listener_seconds: dict[str, Histogram] = {}
        self.send_backs: dict[tuple[str, int], int] = {}  # (topic, level) -> acknowledged
        self.dead_letters: dict[tuple[str, str], int] = {}  # (topic, reason) -> acknowledged

    def topic(self, name: str) -> TopicStats:
        st = self.topics.get(name)
        if st is None:
            st = self.topics[name] = TopicStats()
            self.listener_seconds[name] = Histogram(LATENCY_BUCKETS_S)
        return st

    def batches(
        self, topic: str, *, ok: int, failed: int, rt_total_s: float, rt_max_s: float, n: int
    ) -> None:
        st = self.topic(topic)
        st.consume_ok += ok
        st.consume_failed += failed
        st.rt_total_ms += rt_total_s * 1000
        st.rt_count += n
        st.rt_max_ms = max(st.rt_max_ms, rt_max_s * 1000)

    def snapshot(self) -> dict[str, TopicStats]:
        return {t: replace(s) for t, s in list(self.topics.items())}


class GroupConsumer:
    """One member of a consumer group (or a broadcasting reader); see the module docstring."""

    def __init__(
        self,
        *,
        name: str,
        config: Mapping[str, Any],
        group: str,
        engine: Engine,
        topics: hops.GroupTopics,
        filters: Mapping[str, TagFilter],
        settings: ConsumeSettings,
        errors: FatalErrorWatch,
        clock: Clock,
        trace: TraceSink | None = None,
    ) -> None:
        self.name = name
        self.group = group
        self.engine = engine
        self.topics = topics
        self.settings = settings
        self.errors = errors
        self.clock = clock
        self.trace = trace
        self.stats = ConsumerStats()
        self.names = TopicNames(group)
        self._set_filters(filters)
        self.retry_kafka = topics.retry_kafka if settings.clustering else None
        self.runner: Runner | None = None
        self.assignment: set[TP] = set()
        #: partitions whose running batches a revoke or shutdown is waiting for: runners
        #: start nothing new on them (replaced, never mutated: workers read it)
        self.draining: frozenset[TP] = frozenset()
        self.publisher = Publisher(
            config,
            what=f"{name} send-back producer",
            on_result=self._on_result,
            errors=errors,
            # send-backs batch for up to 5 ms: a failing stream costs half the CPU of
            # linger.ms=0, and their offsets wait only that much longer
            defaults={"message.timeout.ms": 30_000, "linger.ms": 5},
        )
        self._config = self._consumer_config(config)
        self._cooperative = is_cooperative(self._config)
        self._consumer: Any = None
        self._guard: Callable[[Callable[..., None]], Callable[..., None]] = lambda f: f
        self._running: Callable[[], bool] = lambda: True
        self._last_fetch = 0.0
        self._local: LocalFileOffsetStore | None = None
        self._local_offsets: dict[TP, int] = {}
        self._local_dirty = False
        self._next_persist = 0.0
        self._next_discover = 0.0
        self.on_message_error: Callable[[MessageExt, str], None] | None = None
        #: keep ``lag()`` fresh (metrics turn it on)
        self.track_lag = False
        self._lag: dict[TP, int] = {}
        self._next_lag = 0.0
        self._ends: dict[TP, tuple[int, int]] = {}  # (log start, end) per partition
        self._starts: dict[TP, int] = {}  # where each assigned partition starts
        self._ends_pending: dict[Any, Any] = {}
        self._admin: Any = None
        self._admin_base = dict(config)
        #: forced offset resets from the control topic (set by the kind before ``open()``)
        self.resets: ResetReceiver | None = None

    # -- config ----------------------------------------------------------------------------
    def _consumer_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        conf = dict(config)
        conf["error_cb"] = self.errors
        # a partition resumed after a flow-control pause is fetched with the next request;
        # librdkafka sends one fetch per broker at a time, so a long-polling fetch of idle
        # partitions (the retry topic) would hold it back for up to this long
        conf.setdefault("fetch.wait.max.ms", 100)
        # once the local queue holds queued.min.messages, librdkafka waits this long before it
        # fetches again (1 s by default): a consumer that drains the queue in 0.2 s then sits
        # idle for 0.8 s (measured: 125 k msg/s at 1000 ms, 430-460 k msg/s at 10-50 ms)
        conf.setdefault("fetch.queue.backoff.ms", 20)
        # a subscribed topic the consumer was told is missing is looked up again this soon
        conf.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        # out of range: the earliest retained offset, for every topic (never skip ahead)
        conf["auto.offset.reset"] = "earliest"
        require_setting(conf, "enable.auto.offset.store", False, "only settled offsets are stored")
        if self.settings.clustering:
            require_setting(
                conf, "enable.auto.commit", True, "stored offsets commit in the background"
            )
            conf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        else:
            conf["enable.auto.commit"] = False
            conf.setdefault("group.id", f"{self.group}.broadcast")
        return conf

    # -- LoopHandler -----------------------------------------------------------------------
    def bind(
        self,
        runner: Runner,
        *,
        guard: Callable[[Callable[..., None]], Callable[..., None]],
        running: Callable[[], bool],
    ) -> None:
        """Attach the kind's runner and the loop's callback guard before ``open()``."""
        self.runner = runner
        self._guard = guard
        self._running = running

    def open(self) -> None:
        self._consumer = make_client(Consumer, dict(self._config), what=f"{self.name} consumer")
        self.publisher.producer  # noqa: B018 - created now: a bad config fails start()
        topics = list(self.filters)
        if self.settings.clustering:
            self._consumer.subscribe(
                topics,
                on_assign=self._guard(self._on_assign),
                on_revoke=self._guard(self._on_revoke),
                on_lost=self._guard(self._on_lost),
            )
        else:
            self._local = LocalFileOffsetStore(
                self.settings.offset_store_dir, self.group, self.settings.instance_name
            )
            self._local_offsets = self._local.load()
            self._discover(first=True)

    def resubscribe(self, filters: Mapping[str, TagFilter]) -> None:
        """Replace the subscriptions of a running member (clustering; on the loop thread):
        ``filters`` maps every Kafka topic to read (the retry topic included) to its tag
        filter.  Partitions of topics left out are revoked the usual way."""
        self._set_filters(filters)
        self._consumer.subscribe(
            list(self.filters),
            on_assign=self._guard(self._on_assign),
            on_revoke=self._guard(self._on_revoke),
            on_lost=self._guard(self._on_lost),
        )

    def step(self) -> None:
        runner = self.runner
        assert runner is not None
        engine = self.engine
        now = self.clock.monotonic()
        actions = engine.tick(now)
        if actions:
            self.apply(actions)
        runner.poll()
        backlog = runner.backlog()
        if backlog >= self.settings.soft_backlog and now - self._last_fetch < MAX_FETCH_GAP_S:
            runner.wait(0.05)  # enough work waits: serve results instead of fetching more
        else:
            if backlog or self.publisher.in_flight():
                timeout = 0.005  # results or acknowledgements are on their way
            else:  # wake when the engine's next timer (a local retry, a suspend) is due
                due = engine.next_due()
                if due is None:
                    timeout = IDLE_FETCH_S
                else:  # the clock read again: an inline listener may have run since ``now``
                    timeout = min(IDLE_FETCH_S, max(0.0, due - self.clock.monotonic()))
            settings = self.settings
            size = settings.fetch_size if runner.inline else settings.pull_batch_size
            kmsgs = consume_available(self._consumer, size, timeout)
            self._last_fetch = now
            if kmsgs:
                self._dispatch(kmsgs)
        self.publisher.poll(0)
        if not self.settings.clustering:
            self._broadcast_upkeep(now)
        if self.track_lag:
            self._refresh_lag(now)
        if self.resets is not None and self.assignment:
            self.resets.step(now)

    def close(self) -> None:
        if self.resets is not None:
            self.resets.close()
        try:
            if self._consumer is not None:
                self._drain(set(self.assignment), self.settings.shutdown_await)
                self.publisher.flush(30)
                self._commit(list(self.assignment), final=True)
                self._consumer.close()  # may revoke (cooperative): commits again, harmlessly
        finally:
            self._consumer = None
            self._admin = None
            if self.runner is not None:
                self.runner.close()
            self.publisher.close(30)

    # -- fetching --------------------------------------------------------------------------
    def _set_filters(self, filters: Mapping[str, TagFilter]) -> None:
        """The tag filter of each Kafka topic read (``None``: every tag)."""
        self.filters = {t: (f if f.tags is not None else None) for t, f in filters.items()}

    def _dispatch(self, kmsgs: list[Any]) -> None:
        """Cut a fetch into runs per partition (viewed in the same pass) and hand each over."""
        runs, errors = split_fetch(kmsgs, self.names.resolve, self.filters)
        for run in runs:
            self._fetched(run)
        for kmsg in errors:
            self._consume_error(kmsg)

    def _fetched(self, run: FetchedRun) -> None:
        runner = self.runner
        assert runner is not None
        pooled = not runner.inline
        views = run.msgs
        nbytes = sum(len(m.body) for m in views) if pooled else 0
        work = self.engine.fetched(run.tp, views, run.last.offset() + 1, nbytes, pooled=pooled)
        if work is not None:
            runner.run(work)

    def _consume_error(self, kmsg: Any) -> None:
        err = kmsg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise client_error(KafkaException(err), what=f"{self.name} consumer")
        log.warning("%s: consume error: %s", self.name, err.str())

    # -- actions ---------------------------------------------------------------------------
    def apply(self, actions: list[Action]) -> None:
        """Carry out what the engine asked for."""
        for action in actions:
            kind = type(action)
            if kind is SendBack:
                self._send_back(action)  # type: ignore[arg-type]
            elif kind is StoreOffsets:
                self._store(action.offsets)  # type: ignore[union-attr]
            elif kind is RunWork:
                assert self.runner is not None
                self.runner.run(action.work)  # type: ignore[union-attr]
            elif kind is Pause:
                log.debug("%s: pause %s: %s", self.name, action.tp, action.reason)  # type: ignore[union-attr]
                self._consumer.pause([TopicPartition(*action.tp)])  # type: ignore[union-attr]
            elif kind is Resume:
                self._consumer.resume([TopicPartition(*action.tp)])  # type: ignore[union-attr]
            elif kind is Dropped:
                self._dropped(action)  # type: ignore[arg-type]
            elif kind is TimedOut:
                self._timed_out(action)  # type: ignore[arg-type]

    def _send_back(self, action: SendBack) -> None:
        msg = action.msg
        if msg.header_errors:
            log.warning(
                "%s: message %s has malformed headers: %s",
                self.name,
                msg.msg_id,
                "; ".join(msg.header_errors),
            )
        record = hops.send_back(
            msg,
            action.dest,
            self.topics,
            now_ms=self.clock.now_ms(),
            failure=action.failure,
            omit_body=action.omit_body,
        )
        self.publisher.send(record, action, alone=action.alone)

    def _on_result(self, action: SendBack, err: Any, local: bool) -> None:
        """The broker's verdict on a copy (runs on the loop thread, inside ``poll``)."""
        msg = action.msg
        dest = action.dest
        if err is None:
            self.engine.published(action)
            stats = self.stats
            topic = msg.topic
            if isinstance(dest, DeadLetter):
                stats.topic(topic).dead_lettered += 1
                reason = (topic, dest.reason.value)
                stats.dead_letters[reason] = stats.dead_letters.get(reason, 0) + 1
                log.warning(
                    "%s: message %s moved to %s (%s)",
                    self.name,
                    msg.msg_id,
                    self.topics.dlq_topic,
                    dest.reason.value,
                )
            else:
                stats.topic(topic).sent_back += 1
                key = (topic, dest.level if isinstance(dest, RetryLater) else 0)
                stats.send_backs[key] = stats.send_backs.get(key, 0) + 1
            if self.trace is not None:
                status = TraceStatus.DLQ if isinstance(dest, DeadLetter) else TraceStatus.RETRY
                self.emit(msg, status, action.info, action.failure, dest)
            return
        st = self.stats.topic(msg.topic)
        if local:
            action.alone = True  # refused before sending: the verdict is about it alone
        refusal = refusal_of(err)
        text = error_text(err)
        nxt = self.engine.publish_failed(action, refusal, self.clock.monotonic())
        if not nxt:
            st.send_back_failed += 1
            st.local_retries += 1
            log.warning(
                "%s: copy of %s to %s failed (%s); consumed again locally later, offset held",
                self.name,
                msg.msg_id,
                _where(dest, self.topics),
                text,
            )
        for step in nxt:
            if isinstance(step, SendBack) and step.omit_body and not action.omit_body:
                log.error(
                    "%s: the broker refuses the dead-letter copy of %s too (%s); sending it to "
                    "%s without its %d-byte body (left at %s[%d]@%d)",
                    self.name,
                    msg.msg_id,
                    text,
                    self.topics.dlq_topic,
                    len(msg.body),
                    msg.kafka_topic,
                    msg.queue_id,
                    msg.queue_offset,
                )
            elif isinstance(step, SendBack) and step.dest is not dest:
                st.send_back_failed += 1
                log.error(
                    "%s: the broker refuses the retry copy of %s (%s); sending it to %s",
                    self.name,
                    msg.msg_id,
                    text,
                    self.topics.dlq_topic,
                )
        self.apply(nxt)

    def _timed_out(self, action: TimedOut) -> None:
        log.warning(
            "%s: listener ran past consume_timeout=%ss on %s; counted as RECONSUME_LATER",
            self.name,
            action.limit_s,
            action.tp,
        )
        st = self.stats.topic(action.msgs[0].topic)
        st.timeouts += 1
        st.consume_failed += len(action.msgs)

    def _dropped(self, action: Dropped) -> None:
        log.warning(
            "%s (broadcasting): message %s failed and is dropped", self.name, action.msg.msg_id
        )
        if self.trace is not None:
            self.emit(action.msg, TraceStatus.DROPPED, action.info, action.failure)

    # -- offsets ---------------------------------------------------------------------------
    def _store(self, offsets: Sequence[tuple[TP, int]]) -> None:
        if not self.settings.clustering:
            self._local_offsets.update(offsets)
            self._local_dirty = True
            return
        try:
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets])
        except KafkaException as exc:
            log.debug("%s: store_offsets failed (revoked?): %s; trying again", self.name, exc)
            self.engine.store_failed([tp for tp, _ in offsets])

    def _commit(self, tps: Sequence[TP], *, final: bool = False) -> None:
        """Commit what is settled for ``tps`` now (revoke, shutdown)."""
        offsets = []
        for tp in tps:
            offset = self.engine.committable(tp)
            if offset is not None:
                offsets.append(TopicPartition(tp[0], tp[1], offset))
        if not self.settings.clustering:
            self._local_offsets.update({(o.topic, o.partition): o.offset for o in offsets})
            self._local_dirty = True
            if final:
                self._persist()
            return
        if not offsets:
            return
        try:
            # stored too: librdkafka commits its stored offsets once more when it closes,
            # and an older stored offset would take the committed one back
            self._consumer.store_offsets(offsets=offsets)
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("%s: commit failed: %s", self.name, exc)

    def _drain(self, tps: set[TP], timeout: float) -> None:
        """Wait (bounded) for running batches of ``tps`` and for copies in flight."""
        runner = self.runner
        assert runner is not None
        deadline = self.clock.monotonic() + timeout
        self.draining = frozenset(tps)
        try:
            while True:
                runner.poll()
                self.publisher.poll(0)
                if not self.engine.running(tps) and self.publisher.in_flight() == 0:
                    return
                if self.clock.monotonic() >= deadline:
                    break
                runner.wait(0.02)
        finally:
            self.draining = frozenset()
        if self.engine.running(tps):
            log.warning(
                "%s: batches still running after %.1fs; their offsets stay uncommitted",
                self.name,
                timeout,
            )

    # -- forced offset resets (ResetReceiver's Member) ---------------------------------------
    def member_id(self) -> str | None:
        """The Kafka member id once the member has joined its group."""
        try:
            member_id: str | None = self._consumer.memberid()
        except (KafkaException, RuntimeError):
            return None
        return member_id

    def owned(self) -> list[TP]:
        return sorted(self.assignment)

    def reset_partitions(self, targets: Mapping[TP, int]) -> dict[TP, int]:
        """Move owned partitions to new offsets (on the loop thread): wait for their running
        batches, forget what the engine holds for them, seek, and commit.  Returns what was
        applied (partitions no longer owned are left out)."""
        tps = {tp for tp in targets if tp in self.assignment}
        if not tps:
            return {}
        self._drain(tps, self.settings.revoke_await)
        applied = {tp: targets[tp] for tp in sorted(tps)}
        offsets = [TopicPartition(t, p, o) for (t, p), o in applied.items()]
        for tp, offset in applied.items():
            self.engine.revoked(tp)  # unsettled work of the old position is dropped
            self.engine.assigned(tp)
            self._starts[tp] = offset
        try:
            self._consumer.resume(offsets)  # a flow-control pause belonged to the old position
            for tpo in offsets:
                self._consumer.seek(tpo)
            self._consumer.store_offsets(offsets=offsets)
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise client_error(exc, what=f"{self.name}: resetting offsets") from exc
        log.warning("%s: offsets reset by request: %s", self.name, applied)
        return applied

    # -- rebalance -------------------------------------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        initial = self._resolve_starts(consumer, partitions)
        for p in partitions:
            tp = (p.topic, p.partition)
            self.engine.assigned(tp)
            self.assignment.add(tp)
            self._starts[tp] = p.offset
        apply_assignment(consumer, partitions, self._cooperative)
        if initial:
            try:  # a restart resumes where this first start began
                consumer.commit(offsets=initial, asynchronous=False)
            except KafkaException as exc:
                log.warning("%s: committing start positions failed: %s", self.name, exc)
        log.info("%s assigned %s", self.name, sorted((p.topic, p.partition) for p in partitions))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        wait = self.settings.revoke_await if self._running() else self.settings.shutdown_await
        self._drain(set(tps), wait)
        self._commit(tps)
        for tp in tps:
            self.engine.revoked(tp)
            self.assignment.discard(tp)
        release(consumer, partitions, self._cooperative)
        log.info("%s revoked %s", self.name, sorted(tps))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # the session expired: another member may own these now, so nothing is committed;
        # whatever was in flight is read again by the next owner
        for p in partitions:
            tp = (p.topic, p.partition)
            self.engine.revoked(tp)
            self.assignment.discard(tp)
        release(consumer, partitions, self._cooperative)
        log.warning(
            "%s lost %s (session expired)",
            self.name,
            sorted((p.topic, p.partition) for p in partitions),
        )

    def _resolve_starts(self, consumer: Any, partitions: list[Any]) -> list[Any]:
        """Set where each partition starts; returns the start positions to commit (those
        the group had none for, fixed now so that a restart resumes there)."""
        committed = _committed(consumer, partitions)
        if committed is None:
            log.warning(
                "%s: committed offsets unknown after retries; librdkafka reads them itself",
                self.name,
            )
            return []  # OFFSET_STORED: the committed offset, else the earliest
        initial = []
        for p, c in zip(partitions, committed, strict=True):
            if c.offset >= 0:
                p.offset = c.offset
                continue
            offset = self._first_offset(consumer, p.topic, p.partition)
            p.offset = offset
            if offset >= 0:
                initial.append(TopicPartition(p.topic, p.partition, offset))
        return initial

    def _first_offset(self, consumer: Any, topic: str, partition: int) -> int:
        """Where a partition without a committed offset starts (an offset, or a logical one)."""
        start = first_start(self.settings.consume_from_where, retry_topic=topic == self.retry_kafka)
        if start is StartAt.BEGINNING:
            return OFFSET_BEGINNING
        try:
            if start is StartAt.TIMESTAMP:
                ts = self.settings.consume_timestamp_ms or 0
                [found] = consumer.offsets_for_times(
                    [TopicPartition(topic, partition, ts)], timeout=_LOOKUP_TIMEOUT_S
                )
                if found.offset >= 0:
                    return int(found.offset)
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=_LOOKUP_TIMEOUT_S
            )
            return int(high)
        except KafkaException as exc:
            log.warning("%s: start position of %s[%d]: %s", self.name, topic, partition, exc)
            return OFFSET_END

    # -- broadcasting ----------------------------------------------------------------------
    def _discover(self, *, first: bool = False) -> None:
        """Assign every partition of the subscribed topics that is not assigned yet."""
        md = self._consumer.list_topics(timeout=_LOOKUP_TIMEOUT_S)
        new = []
        for topic in self.filters:
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                if first:
                    raise client_error(
                        KafkaException(tmd.error if tmd else KafkaError(KafkaError._UNKNOWN_TOPIC)),
                        what=f"topic {topic}",
                    )
                continue
            for partition in sorted(tmd.partitions):
                tp = (topic, partition)
                if tp in self.assignment:
                    continue
                offset = self._local_offsets.get(tp)
                if offset is None:
                    offset = self._first_offset(self._consumer, topic, partition)
                    if offset >= 0:
                        self._local_offsets[tp] = offset
                        self._local_dirty = True
                new.append(TopicPartition(topic, partition, offset))
                self.engine.assigned(tp)
                self.assignment.add(tp)
        if new:
            self._consumer.incremental_assign(new)
            log.info("%s reads %s", self.name, sorted((p.topic, p.partition) for p in new))
        self._persist()

    def _broadcast_upkeep(self, now: float) -> None:
        if now >= self._next_persist:
            self._next_persist = now + PERSIST_INTERVAL_S
            self._persist()
        if now >= self._next_discover:
            if self._next_discover:
                try:
                    self._discover()
                except KafkaException as exc:
                    log.warning("%s: looking for new partitions failed: %s", self.name, exc)
            self._next_discover = now + REDISCOVER_INTERVAL_S

    def _persist(self) -> None:
        if self._local is not None and self._local_dirty:
            self._local.save(dict(self._local_offsets))
            self._local_dirty = False

    # -- traces ----------------------------------------------------------------------------
    def emit(
        self,
        msg: MessageExt,
        status: TraceStatus,
        info: TraceInfo | None,
        failure: Failure | None = None,
        dest: Any = None,
    ) -> None:
        """Hand one trace event to the sink (tracing is opt-in; it never breaks consuming)."""
        assert self.trace is not None
        info = info or TraceInfo(1, 0, None, None)
        event = TraceEvent(
            event_time_ms=self.clock.now_ms(),
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
            batch_index=info.batch_index,
            ack_index=info.ack_index,
            delay_level=dest.level if isinstance(dest, RetryLater) else None,
            consume_rt_ms=info.rt_ms,
            born_timestamp_ms=msg.born_timestamp,
            origin_born_timestamp_ms=msg.origin_born_timestamp,
            store_timestamp_ms=msg.store_timestamp,
            consume_timestamp_ms=msg.consume_start_time,
            failure_type=failure.type if failure else None,
            failure_message=failure.truncated() if failure else None,
            dlq_reason=dest.reason.value if isinstance(dest, DeadLetter) else None,
        )
        try:
            self.trace(event)
        except Exception:
            log.exception("%s: trace sink failed", self.name)

    # -- introspection ---------------------------------------------------------------------
    def lag(self) -> dict[TP, int]:
        """Per assigned partition: end offset minus committable offset (a snapshot the loop
        refreshes every second while ``track_lag`` is on; any thread may read it)."""
        return dict(self._lag)

    def _refresh_lag(self, now: float) -> None:
        """On the loop thread.  End offsets come from an asynchronous admin request (fetch
        responses leave idle partitions out, so a consumer does not know their end)."""
        if now < self._next_lag:
            return
        self._next_lag = now + LAG_INTERVAL_S
        self._collect_ends()
        out: dict[TP, int] = {}
        tps = list(self.assignment)
        fetched = self._fetch_positions(tps)
        for tp in tps:
            ends = self._ends.get(tp)
            if ends is None:
                continue
            low, high = ends
            position = self.engine.committable(tp)
            if position is None:  # nothing fetched from it yet: where it starts
                start = self._starts.get(tp)
                position = start if start is not None and start >= 0 else low
            if not self.engine.in_flight(tp):
                # all settled: the fetch position, which is past transaction markers (the
                # end offset of a transactionally written topic counts its last marker)
                position = max(position, fetched.get(tp, -1))
            out[tp] = max(0, high - max(position, low))
        self._lag = out
        self._ask_ends()

    def _fetch_positions(self, tps: list[TP]) -> dict[TP, int]:
        try:
            positions = self._consumer.position([TopicPartition(*tp) for tp in tps])
        except KafkaException:
            return {}
        return {(p.topic, p.partition): p.offset for p in positions if p.offset >= 0}

    def _ask_ends(self) -> None:
        if self._ends_pending or not self.assignment:
            return
        if self._admin is None:
            self._admin = make_client(
                AdminClient, admin_config(self._admin_base), what=f"{self.name} admin client"
            )
        spec: Any = OffsetSpec
        tps = [TopicPartition(*tp) for tp in list(self.assignment)]
        self._ends_pending = {
            "low": self._admin.list_offsets(
                {tp: spec.earliest() for tp in tps}, request_timeout=_LOOKUP_TIMEOUT_S
            ),
            "high": self._admin.list_offsets(
                {tp: spec.latest() for tp in tps}, request_timeout=_LOOKUP_TIMEOUT_S
            ),
        }

    def _collect_ends(self) -> None:
        pending = self._ends_pending
        if not pending or not all(f.done() for fs in pending.values() for f in fs.values()):
            return
        self._ends_pending = {}
        for tp, future in pending["high"].items():
            try:
                high = int(future.result().offset)
                low = int(pending["low"][tp].result().offset)
            except (KafkaException, KeyError):
                continue
            self._ends[(tp.topic, tp.partition)] = (low, high)


def _where(dest: Any, topics: hops.GroupTopics) -> str:
    if isinstance(dest, RetryLater):
        return f"level {dest.level}"
    if isinstance(dest, RetryNow):
        return topics.retry_topic
    return topics.dlq_topic


def _committed(consumer: Any, partitions: list[Any]) -> list[Any] | None:
    """The group's committed offsets for ``partitions``; ``None`` when the lookup failed
    even after retries (a transient error must never rewind anything)."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(4),
        wait=tenacity.wait_exponential(multiplier=0.2, max=2.0),
        retry=tenacity.retry_if_exception_type(KafkaException),
        before_sleep=lambda state: log.warning(
            "reading committed offsets failed (%s); retrying",
            state.outcome.exception() if state.outcome else None,
        ),
        sleep=time.sleep,
        reraise=True,
    )
    try:
        result: list[Any] = retrying(
            consumer.committed, [TopicPartition(p.topic, p.partition) for p in partitions], 10
        )
        return result
    except KafkaException:
        return None
