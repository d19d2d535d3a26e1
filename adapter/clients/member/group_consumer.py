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

Beside the loop itself (fetch, dispatch, carry out the engine's actions, commit, rebalance)
the member delegates: start positions to :mod:`adapter.clients.member.start_positions`, the
verdicts on its send-back copies, its counters and trace events to
:mod:`adapter.clients.member.outcomes`, a broadcasting instance's local offsets to
:mod:`adapter.clients.member.broadcast_offsets`, lag to :mod:`adapter.clients.member.lag_tracker`;
what it needs of an engine and a runner, and its settings, are in
:mod:`adapter.clients.member.contracts`.  Its Kafka clients come from factories
(confluent-kafka's classes by default) so that a test can use fakes.

What stays here is one member's loop: fetching, dispatching, carrying out actions,
committing and the rebalance callbacks all act on the same assignment and the same engine,
in an order that matters (a revoke commits what was handled before it forgets the
partition), so it stays one class.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient

from adapter.clients.member.broadcast_offsets import (
    PERSIST_INTERVAL_S,
    REDISCOVER_INTERVAL_S,
    BroadcastOffsets,
)
from adapter.clients.member.circuit_reporter import CircuitReporter
from adapter.clients.member.contracts import (
    CLOSE_S,
    REVOKE_DRAIN_S,
    ConsumeSettings,
    Engine,
    Runner,
)
from adapter.clients.member.lag_tracker import LAG_INTERVAL_S, LagTracker
from adapter.clients.member.outcomes import ConsumerStats, ConsumerTracer, Emit, SendBackResults
from adapter.clients.member.reset_receiver import ResetReceiver
from adapter.clients.member.start_positions import StartPositions
from adapter.constants import ANY_PARTITION, METADATA_REFRESH_MS, SUBSCRIPTION_CHECK_S
from adapter.core import hops
from adapter.core.clock import Clock
from adapter.core.codec import logical_topic
from adapter.core.engine import (
    Action,
    Drain,
    Dropped,
    Hurry,
    Pause,
    Resume,
    RunWork,
    SendBack,
    StoreOffsets,
    TimedOut,
)
from adapter.core.filter import TagFilter
from adapter.core.message import FetchedRun, MessageExt, body_bytes, split_fetch
from adapter.core.routing import RetryLater
from adapter.core.subscription import SubscriptionWatch
from adapter.core.trace import TraceSink, TraceStatus
from adapter.core.types import TP
from adapter.errors import AuthenticationError
from adapter.io.config import (
    admin_config,
    check_group_protocol,
    require_setting,
    set_rebalance_protocol,
)
from adapter.io.errors import (
    AUTH_CODES,
    FatalErrorWatch,
    client_error,
    make_client,
    permission_hint,
)
from adapter.io.offset_store import LocalFileOffsetStore
from adapter.io.offsets import LOOKUP_TIMEOUT_S
from adapter.io.polling import (
    apply_assignment,
    consume_available,
    held_by_no_other_member,
    is_cooperative,
    refresh_if_any_exists,
)
from adapter.io.polling import release_assignment as release
from adapter.io.protocols import AdminFactory, ConsumerFactory, ProducerFactory
from adapter.io.publisher import Publisher
from adapter.io.records import TopicNames
from adapter.telemetry import state as telemetry

__all__ = [
    "IDLE_FETCH_S",
    "LAG_INTERVAL_S",
    "MAX_FETCH_GAP_S",
    "PERSIST_INTERVAL_S",
    "REDISCOVER_INTERVAL_S",
    "REVOKE_DRAIN_S",
    "ConsumeSettings",
    "ConsumerStats",
    "Engine",
    "GroupConsumer",
    "Runner",
]

log = logging.getLogger("adapter.consumer")
#: a subscribed topic that does not exist (yet): librdkafka's codes for it
_TOPIC_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})

#: Longest the loop goes without calling ``consume()`` while it serves a backlog of work.
MAX_FETCH_GAP_S = 1.0
#: Longest ``consume()`` waits for records when nothing else is due (the loop's tick).
IDLE_FETCH_S = 0.1
#: Longest the loop waits for the verdicts on copies that hold a partition at its flow
#: limit before it pauses the partition (a healthy broker answers in a round trip).
HURRY_WAIT_S = 0.05
#: Longest the loop waits for the runs of orderly partitions at their flow limit to take
#: what was fetched ahead before it pauses them (RocketMQ's flow-control pull delay).
DRAIN_WAIT_S = 0.05
# REVOKE_DRAIN_S (adapter.clients.member.contracts), broadcasting's PERSIST_INTERVAL_S and
# REDISCOVER_INTERVAL_S (adapter.clients.member.broadcast_offsets) and LAG_INTERVAL_S
# (adapter.clients.member.lag_tracker) are importable from here too; the member reads
# REDISCOVER_INTERVAL_S from this module when it opens, so a test may shorten it here.
A = TypeVar("A", bound=Action)


class GroupConsumer:
    """One member of a consumer group (or a broadcasting reader); see the module docstring.

    ``consumer_factory``, ``producer_factory`` and ``admin_factory`` create its Kafka
    clients from their config dicts (confluent-kafka's classes unless a test says)."""

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
        consumer_factory: ConsumerFactory = Consumer,
        producer_factory: ProducerFactory = KafkaProducer,
        admin_factory: AdminFactory = AdminClient,
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
        self.starts = StartPositions(
            name=name,
            consume_from_where=settings.consume_from_where,
            consume_timestamp_ms=settings.consume_timestamp_ms,
            retry_kafka=self.retry_kafka,
        )
        #: hands one trace event to ``trace`` (listeners call it per message while tracing)
        tracer = ConsumerTracer(trace, name=name, group=group, clock=clock)
        self.emit: Emit = tracer.emit
        #: the SUCCESS events of one listener batch at once (one hand-over per batch)
        self.emit_successes = tracer.emit_successes
        self.emit_batches = tracer.emit_batches
        self.runner: Runner | None = None
        self.assignment: set[TP] = set()
        #: partitions whose running batches a revoke or shutdown is waiting for: runners
        #: start nothing new on them (replaced, never mutated: workers read it)
        self.draining: frozenset[TP] = frozenset()
        #: the member is stopping (:meth:`stop_starting`): no listener call starts any more
        self.halted = False
        #: subscribed topics said to be missing (logged once each, until they appear)
        self._waiting_for: set[str] = set()
        #: builds the retry copies (the common send-back) in one call each
        self._copier = hops.retry_copier(topics)
        self.results = SendBackResults(
            name=name,
            engine=engine,
            topics=topics,
            stats=self.stats,
            clock=clock,
            apply=self.apply,
            emit=self.emit if trace is not None else None,
        )
        self.publisher = Publisher(
            config,
            what=f"{name} send-back producer",
            on_result=self.results.on_result,
            errors=errors,
            # send-backs batch for up to 5 ms: a failing stream costs half the CPU of
            # linger.ms=0, and their offsets wait only that much longer
            defaults={"message.timeout.ms": 30_000, "linger.ms": 5},
            producer_factory=producer_factory,
            on_delivered=self.results.delivered,
            on_served=self.results.settle,
        )
        self._config = self._consumer_config(config)
        self._cooperative = is_cooperative(self._config)
        self._consumer_factory = consumer_factory
        self._consumer: Any = None
        self._guard: Callable[[Callable[..., None]], Callable[..., None]] = lambda f: f
        self._running: Callable[[], bool] = lambda: True
        self._last_fetch = 0.0
        #: a broadcasting instance's own offsets (created by ``open()``)
        self.broadcast: BroadcastOffsets | None = None
        self.on_message_error: Callable[[MessageExt, str], None] | None = None
        #: keep ``lag()`` fresh (metrics turn it on)
        self.track_lag = False
        self.lag_tracker = LagTracker(config, what=name, admin_factory=admin_factory)
        self._admin_factory = admin_factory
        self._admin: Any = None  # created when a subscribed topic looks orphaned
        #: forced offset resets from the control topic (set by the kind before ``open()``)
        self.resets: ResetReceiver | None = None
        #: the circuit breaker's state on the control topic (set by the kind before ``open()``)
        self.circuit_status: CircuitReporter | None = None
        #: ``False``: no OpenTelemetry span for this member's copies (its client opted out)
        self.tracing = True
        #: subscribed topics held nothing of, looked up again (clustering)
        self.subscription_watch = (
            SubscriptionWatch(SUBSCRIPTION_CHECK_S) if self.settings.clustering else None
        )
        #: ``apply``'s handler per action type
        self._handlers: dict[type[Any], Callable[[Any], None]] = {}
        self._handle(SendBack, self._send_back)
        self._handle(StoreOffsets, self._store_offsets)
        self._handle(RunWork, self._run_work)
        self._handle(Pause, self._pause)
        self._handle(Hurry, self._hurry)
        self._handle(Drain, self._drain_runs)
        self._handle(Resume, self._resume)
        self._handle(Dropped, self._dropped)
        self._handle(TimedOut, self._timed_out)

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
        # idle for 0.8 s, a fraction of the throughput of a short backoff
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
            set_rebalance_protocol(conf)
        else:
            check_group_protocol(conf)  # never subscribes: nothing to choose, but refused keys
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
        self._consumer = make_client(
            self._consumer_factory, dict(self._config), what=f"{self.name} consumer"
        )
        self.publisher.producer  # noqa: B018 - created now: a bad config fails start()
        topics = list(self.filters)
        # before subscribing: what is sent from now on is read, even to a topic created later
        self.starts.take_ends(self._consumer, topics, self.errors)
        if self.settings.clustering:
            self._subscribe()
        else:
            store = LocalFileOffsetStore(
                self.settings.offset_store_dir, self.group, self.settings.instance_name
            )
            self.broadcast = BroadcastOffsets(
                store, persist_s=PERSIST_INTERVAL_S, rediscover_s=REDISCOVER_INTERVAL_S
            )
            self._discover(first=True)

    def resubscribe(self, filters: Mapping[str, TagFilter]) -> None:
        """Replace the subscriptions of a running member (clustering; on the loop thread):
        ``filters`` maps every Kafka topic to read (the retry topic included) to its tag
        filter.  Partitions of topics left out are revoked the usual way."""
        self._set_filters(filters)
        self._subscribe()

    def _subscribe(self) -> None:
        """Subscribe the consumer to every topic of :attr:`filters` (again: a rebalance)."""
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
        if self.broadcast is not None:
            self.broadcast.upkeep(now, self._rediscover)
        if self.track_lag:
            self.lag_tracker.refresh(now, self._consumer, self.assignment, self.engine)
        if self.resets is not None and self.assignment:
            self.resets.step(now)
        if self.circuit_status is not None:
            self.circuit_status.step(now)
        watch = self.subscription_watch
        if watch is not None:
            unheld = watch.due(now, self.filters, self.assignment)
            if unheld:
                self._look_again(unheld, watch.repeated)

    def stop_starting(self) -> None:
        """The member is stopping (from any thread, a signal handler's included): no
        listener call starts from now on.  Batches fetched or queued for a worker and not
        started stay uncommitted and are read again by the next owner of their partition;
        orderly runs stop after the batch they are on."""
        self.halted = True
        runner = self.runner
        if runner is not None:
            runner.stop_starting()

    def close(self) -> None:
        """The stop contract (docs/semantics.md §4.7): start nothing new, wait up to
        ``shutdown_await`` for the listener calls under way, then, within
        :data:`CLOSE_S`, flush the send-backs, commit what is settled, leave the group."""
        self.stop_starting()  # also when the loop died or run() returned
        if self.resets is not None:
            self.resets.close()
        if self.circuit_status is not None:
            self.circuit_status.close()
        try:
            if self._consumer is not None:
                self._finish_calls(self.settings.shutdown_await)
                self.publisher.flush(CLOSE_S)
                self._commit(list(self.assignment), final=True)
                self._consumer.close()  # leaves the group: the others rebalance at once
        finally:
            self._consumer = None
            self.lag_tracker.close()
            if self.runner is not None:
                self.runner.close()
            self.publisher.close(CLOSE_S)

    def _finish_calls(self, timeout: float) -> None:
        """Wait (bounded) for the listener calls under way, applying their results; one
        warning names each call still running then (it is abandoned: its offsets stay
        uncommitted, the next owner reads its messages again)."""
        runner = self.runner
        assert runner is not None
        deadline = self.clock.monotonic() + timeout
        while True:
            runner.poll()
            self.publisher.poll(0)
            calls = runner.under_way()
            if not calls:
                runner.poll()  # the last results were handed over before the calls ended
                return
            now = self.clock.monotonic()
            if now >= deadline:
                log.warning(
                    "%s: %d listener call(s) still running after shutdown_await=%.1fs are "
                    "abandoned; their messages are delivered again to the next owner: %s",
                    self.name,
                    len(calls),
                    timeout,
                    "; ".join(call.describe(now) for call in calls),
                )
                return
            runner.wait(min(0.02, deadline - now))

    # -- fetching --------------------------------------------------------------------------
    def _set_filters(self, filters: Mapping[str, TagFilter]) -> None:
        """The tag filter of each Kafka topic read (``None``: every tag)."""
        self.filters = {t: (f if f.tags is not None else None) for t, f in filters.items()}

    def _dispatch(self, kmsgs: list[Any]) -> None:
        """Cut a fetch into runs per partition (viewed in the same pass) and hand each over."""
        if self.halted:
            return  # stopping: read again by the next owner (nothing of it was stored)
        runs, errors = split_fetch(kmsgs, self.names.resolve, self.filters)
        for run in runs:
            self._fetched(run)
        for kmsg in errors:
            self._consume_error(kmsg)

    def fetch_now(self, size: int) -> None:
        """Hand the engine up to ``size`` records librdkafka holds now, without waiting: a
        pull consumer's receiving thread reads this way instead of waiting for the loop to
        hand records over.  The caller makes sure the loop is not mid-step meanwhile (a
        rebalance callback this consume serves runs on the caller's thread)."""
        consumer = self._consumer
        if consumer is not None:
            kmsgs = consumer.consume(size, 0)
            if kmsgs:
                self._dispatch(kmsgs)

    def _fetched(self, run: FetchedRun) -> None:
        runner = self.runner
        assert runner is not None
        pooled = not runner.inline
        nbytes = body_bytes(run) if pooled else 0
        work = self.engine.fetched(run.tp, run.msgs, run.last.offset() + 1, nbytes, pooled=pooled)
        if work is not None:
            runner.run(work)

    def _consume_error(self, kmsg: Any) -> None:
        err = kmsg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise client_error(KafkaException(err), what=f"{self.name} consumer")
        if err.code() in AUTH_CODES:
            # the consumer cannot do its work (join its group, read a subscribed topic): say
            # what is missing, and let check_alive() raise it while it lasts
            if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                hint = permission_hint(err.code(), self.group, "READ")
            else:
                hint = permission_hint(err.code(), kmsg.topic() or None, "READ")
            error = AuthenticationError(f"{self.name}: {err.str()}{hint}", kafka_error=err)
            self.errors.report(error)
            log.error("%s", error)
            return
        if err.code() in _TOPIC_MISSING:  # a subscribed topic not created yet: said once
            topic = kmsg.topic() or err.str()
            if topic not in self._waiting_for:
                self._waiting_for.add(topic)
                log.info("%s: waiting for topic %s (it does not exist yet)", self.name, topic)
            return
        log.warning("%s: consume error: %s", self.name, err.str())

    # -- actions ---------------------------------------------------------------------------
    def apply(self, actions: list[Action]) -> None:
        """Carry out what the engine asked for (one handler per action type; the copies of
        failed messages, most of what a failing stream asks for, without the look-up, and
        stamped with one clock reading for all of them)."""
        hooks = telemetry.active
        if hooks is not None and self.tracing:  # a ``send`` span per copy of a message
            hooks.copies(actions, self.group, self.topics)
        handlers = self._handlers
        now_ms: int | None = None
        copy = self._copier.copy
        results = self.results
        produce: Any = None
        for action in actions:
            if type(action) is SendBack:
                if now_ms is None:
                    now_ms = self.clock.now_ms()
                    produce = self.publisher.batching()
                dest = action.dest
                if type(dest) is RetryLater:  # the common case: one call builds the copy
                    record = copy(action.msg, dest.level, now_ms + dest.delay_ms, action.failure)
                    if record is not None:
                        if action.alone:
                            self.publisher.send(record, action, True)
                            continue
                        # Publisher.send's work, inline (see Publisher.batching), the copy
                        # its own delivery callback: its verdict goes to ``results``
                        action.verdicts = results
                        try:
                            produce(record[0], record[1], record[2], ANY_PARTITION, action,
                                    None, 0, record[3])  # fmt: skip
                        except (BufferError, KafkaException):
                            self.publisher.send(record, action)
                        continue
                self._send_back(action, now_ms)
            else:
                handlers[type(action)](action)

    def _handle(self, kind: type[A], handler: Callable[[A], None]) -> None:
        """Register ``handler`` for the actions of type ``kind`` (typed as a pair)."""
        self._handlers[kind] = handler

    def _run_work(self, action: RunWork) -> None:
        assert self.runner is not None
        self.runner.run(action.work)

    def _pause(self, action: Pause) -> None:
        log.debug("%s: pause %s: %s", self.name, action.tp, action.reason)
        self._consumer.pause([TopicPartition(*action.tp)])

    def _hurry(self, action: Hurry) -> None:
        """Copies awaiting their verdict hold these partitions at a flow limit: flush them
        (sent at once, past ``linger.ms``; their verdicts served here) for at most
        :data:`HURRY_WAIT_S`, then let the engine decide again (a pause if still needed)."""
        log.debug("%s: hurry the copies holding %s", self.name, action.tps)
        self.publisher.flush(HURRY_WAIT_S)
        self._tick_now()

    def _drain_runs(self, action: Drain) -> None:
        """Orderly partitions at a flow limit with only their run's backlog: serve results
        (the runs taking what waits) for at most :data:`DRAIN_WAIT_S` instead of fetching
        more, then let the engine decide again (a pause if still needed)."""
        runner = self.runner
        assert runner is not None
        runner.wait(DRAIN_WAIT_S)
        self._tick_now()

    def _tick_now(self) -> None:
        """Let the engine decide again at once, after a bounded wait that changed what it
        holds (a flow-control verdict it deferred to its next tick)."""
        actions = self.engine.tick(self.clock.monotonic())
        if actions:
            self.apply(actions)

    def _resume(self, action: Resume) -> None:
        self._consumer.resume([TopicPartition(*action.tp)])

    def _send_back(self, action: SendBack, now_ms: int | None = None) -> None:
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
            now_ms=self.clock.now_ms() if now_ms is None else now_ms,
            failure=action.failure,
            omit_body=action.omit_body,
        )
        self.publisher.send(record, action, action.alone)

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
    def _store_offsets(self, action: StoreOffsets) -> None:
        offsets = action.offsets
        if self.broadcast is not None:
            self.broadcast.store(offsets)
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
        if self.broadcast is not None:
            self.broadcast.store(((o.topic, o.partition), o.offset) for o in offsets)
            if final:
                self.broadcast.persist()
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
            self.lag_tracker.started(tp, offset)
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
        initial = self.starts.resolve(consumer, partitions, lambda: self.halted)
        self._waiting_for.difference_update(p.topic for p in partitions)
        for p in partitions:
            tp = (p.topic, p.partition)
            self.engine.assigned(tp)
            self.assignment.add(tp)
            self.lag_tracker.started(tp, p.offset)
        apply_assignment(consumer, partitions, self._cooperative)
        if initial:
            try:  # a restart resumes where this first start began
                consumer.commit(offsets=initial, asynchronous=False)
            except KafkaException as exc:
                log.warning("%s: committing start positions failed: %s", self.name, exc)
        _log_partitions(self.name, "assigned", [(p.topic, p.partition) for p in partitions])

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        if not self.halted:  # stopping: close() already waited for the calls under way
            self._drain(set(tps), self.settings.revoke_await)
        self._commit(tps)
        for tp in tps:
            self.engine.revoked(tp)
            self.assignment.discard(tp)
        release(consumer, partitions, self._cooperative)
        _log_partitions(self.name, "revoked", tps)

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

    # -- broadcasting ----------------------------------------------------------------------
    def _discover(self, *, first: bool = False) -> None:
        """Assign every partition of the subscribed topics that is not assigned yet."""
        broadcast = self.broadcast
        assert broadcast is not None
        consumer = self._consumer
        new = broadcast.new_partitions(
            consumer.list_topics(timeout=LOOKUP_TIMEOUT_S),
            self.filters,
            self.assignment,
            lambda topic, partition: self.starts.first_offset(consumer, topic, partition),
            first=first,
        )
        for p in new:
            tp = (p.topic, p.partition)
            self.engine.assigned(tp)
            self.assignment.add(tp)
        if new:
            consumer.incremental_assign(new)
            log.info("%s reads %s", self.name, sorted((p.topic, p.partition) for p in new))
        broadcast.persist()

    def _look_again(self, unheld: list[str], repeated: list[str]) -> None:
        """Subscribed topics this member holds nothing of (:mod:`adapter.core.subscription`):
        refresh the metadata; a topic that exists, was unheld at the check before too and
        is held by no other member of the group makes this member subscribe again (a
        rebalance that assigns it)."""
        existing = refresh_if_any_exists(self._consumer, unheld, LOOKUP_TIMEOUT_S, self.name)
        stuck = [t for t in existing if t in repeated]
        if not stuck:
            return
        if self._admin is None:
            self._admin = make_client(
                self._admin_factory, admin_config(self._config), what=f"{self.name} admin client"
            )
        orphaned = held_by_no_other_member(
            self._admin, self.group, self._consumer.memberid() or "", stuck, LOOKUP_TIMEOUT_S
        )
        if orphaned:
            log.warning(
                "%s: subscribed topic(s) %s exist but no other member of the group holds any "
                "of their partitions, and this one reads none: rejoining the group "
                "(unsubscribe, subscribe) so that it assigns them",
                self.name,
                orphaned,
            )
            self._rejoin()

    def _rejoin(self) -> None:
        """Leave the group and join it again with the same subscription.

        ``subscribe()`` with the topics already subscribed is not a rejoin: librdkafka
        (cooperative protocol) rejoins only when its set of subscribed topics changes, and a
        member stuck without a topic it already counts among them stayed stuck (seen under a
        frozen broker: twelve such calls in six minutes, the retry topic never assigned).
        That call can also abort the process, by librdkafka's source: made while the member
        is (re)joining and a subscribed topic is missing from its metadata cache, it
        refreshes the metadata and asserts that no join is under way (not seen here; a
        candidate for a CI abort during a rolling restart).  ``unsubscribe()`` clears the
        subscription (its partitions are revoked and committed as on any rebalance), so the
        ``subscribe()`` after it is a fresh join, never that path, which librdkafka holds
        back until a rebalance in progress has ended."""
        self._consumer.unsubscribe()
        self._subscribe()

    def _rediscover(self) -> None:
        try:
            self._discover()
        except KafkaException as exc:
            log.warning("%s: looking for new partitions failed: %s", self.name, exc)

    # -- introspection ---------------------------------------------------------------------
    def lag(self) -> dict[TP, int]:
        """Per assigned partition: end offset minus committable offset (a snapshot the loop
        refreshes every second while ``track_lag`` is on; any thread may read it)."""
        return self.lag_tracker.snapshot()


def _log_partitions(name: str, what: str, tps: list[TP]) -> None:
    """One short INFO line (partitions per topic); the whole list at DEBUG."""
    per_topic = Counter(topic for topic, _ in tps)
    log.info(
        "%s %s %d partition(s): %s",
        name,
        what,
        len(tps),
        ", ".join(f"{logical_topic(t)} x{n}" for t, n in sorted(per_topic.items())) or "none",
    )
    log.debug("%s %s %s", name, what, sorted(tps))
