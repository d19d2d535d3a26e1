"""``ClassicBackend``: the classic backend of
:class:`~adapter.clients.simple.simple_consumer.SimpleConsumer`, RocketMQ 5's pull-style
consumer on a Kafka consumer group.

The application asks for messages (``receive``), each received message is invisible to
every other receiver of the group until its deadline, and it is acknowledged (``ack``) or
given more time (``change_invisible_duration``).  A message not acknowledged in time is
delivered again, to this or another member, with ``delivery_attempt + 1``; after
``max_delivery_attempts`` it goes to ``%DLQ%<group>``.  Names follow Apache RocketMQ's own
Python client (``rocketmq.SimpleConsumer``).

The rules live in the pure engine (:mod:`adapter.core.engine.pull`); the Kafka side is the
shared group member (:mod:`adapter.clients.member.group_consumer`) on the shared loop
(:mod:`adapter.io.loop`).  The application's threads call the engine under a lock that is
held only for the engine call.  A ``receive`` that finds fewer messages buffered than it
asks for reads librdkafka itself, on its own thread, when the loop is not mid-step
(:class:`~adapter.clients.simple.member_turns.MemberTurns`): handing records over from the
loop thread cost more than reading them, the two threads being serialised by the GIL.
While receives read this way the loop only keeps time (expiries, offsets, copies' reports);
a ``receive`` that still finds nothing waits (up to ``await_duration``) until the loop has
fetched something and hands it over.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Unpack, cast

from adapter.clients.member.contracts import Call
from adapter.clients.member.group_consumer import ConsumeSettings, GroupConsumer
from adapter.clients.simple.backend_calls import ack_settled, await_seconds, change_settled
from adapter.clients.simple.locked_engine import LockedEngine
from adapter.clients.simple.member_turns import MemberTurns
from adapter.clients.simple.message_view import (
    ClassicMessageView,
    FilterExpression,
    MessageView,
    PullFuture,
    handle_of,
    settled,
    tag_filter_of,
)
from adapter.clients.simple.simple_options import (
    SimpleConsumerOptions,
    SimpleOptions,
    group_config,
)
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.core.engine import Work
from adapter.core.engine.pull import (
    MAX_INVISIBLE_S,
    MIN_RECEIVE_INVISIBLE_S,
    PullEngine,
    PullOptions,
    receive_count,
    seconds_of,
)
from adapter.core.filter import TagFilter
from adapter.core.hops import GroupTopics
from adapter.core.offsets import FlowLimits, start_rule
from adapter.core.stats import TopicStats
from adapter.core.types import TP
from adapter.errors import (
    ClientClosedError,
    InvalidInputError,
    UnackedLimitError,
)
from adapter.io.config import build_options, check_group_protocol
from adapter.io.errors import FatalErrorWatch
from adapter.io.loop import ClientLoop
from adapter.io.topics import ensure_topics, plan_topics
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.simple_consumer")

__all__ = ["ClassicBackend"]

#: Records the loop takes per fetch (they wait in the buffer for ``receive``).
_FETCH_SIZE = 128
#: The loop stops taking records from librdkafka while this many fetched messages wait to
#: be received (librdkafka keeps prefetching meanwhile).  It must stay well below the flow
#: limit (``pull_threshold_for_queue``, 1000): a buffer that reached it paused the partition,
#: and each resume threw librdkafka's prefetched records away and fetched them again
#: (a larger buffer cycled pause/resume many times per 100 000 messages, at a fraction of
#: this one's throughput).
_SOFT_BACKLOG = 256
#: After a receive read librdkafka itself, the loop leaves the reading to the receiving
#: threads this long (it only keeps time); then it fetches ahead again.
_DIRECT_S = 0.1


@dataclass(slots=True, eq=False)
class _Waiting:
    """A receive waiting for messages (served on the loop thread)."""

    n: int
    invisible_s: float
    deadline: float
    future: PullFuture[list[MessageView]]


class _PullRunner:
    """Hands fetched work to ``receive``: wakes waiting receives, serves their deadlines."""

    def __init__(self, consumer: ClassicBackend) -> None:
        self._consumer = consumer
        self._taken = threading.Event()
        self.turns: MemberTurns | None = None

    @property
    def inline(self) -> bool:
        return False

    def run(self, work: Work) -> None:
        del work
        self._consumer._serve_waiting()

    def poll(self) -> None:
        self._consumer._loop_upkeep()

    def backlog(self) -> int:
        consumer = self._consumer
        if not consumer._waiting and consumer._clock.monotonic() < consumer._direct_until:
            return _SOFT_BACKLOG  # receives read librdkafka themselves: the loop keeps time
        return consumer._engine.available

    def wait(self, timeout: float) -> None:
        turns = self.turns
        woken = self._taken.wait(timeout) if turns is None else turns.wait(self._taken, timeout)
        if woken:
            self._taken.clear()

    def taken(self) -> None:
        self._taken.set()

    def stop_starting(self) -> None:
        """Nothing to stop: received messages are the application's (``shutdown`` does not
        wait for their acknowledgements; unacknowledged ones are delivered again)."""

    def under_way(self) -> list[Call]:
        return []

    def close(self) -> None:
        self._consumer._stopped = True
        self._consumer._fail_waiting(ClientClosedError(f"{self._consumer.name} was shut down"))


class ClassicBackend:
    """The classic backend of :class:`~adapter.clients.simple.simple_consumer.SimpleConsumer`
    (it satisfies :class:`~adapter.clients.simple.backend.Backend`): RocketMQ 5
    ``SimpleConsumer`` semantics on a classic consumer group.  Thread-safe: any number of
    threads may receive and acknowledge."""

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        **options: Unpack[SimpleConsumerOptions],
    ) -> None:
        self.options = build_options(SimpleOptions, options, "SimpleConsumer")
        conf, group = group_config(config, consumer_group)
        check_group_protocol(conf)  # a refused setting fails here, not at startup()
        self._config = conf
        self.consumer_group = group
        self.name = f"simple consumer {group}"
        self.retry_topic = naming.retry_topic(group)
        self.dlq_topic = naming.dlq_topic(group)
        self._await_s = self.options.await_s
        self._clock = self.options.clock
        #: the clock read of the receive/ack path (the system clock's is time.monotonic itself)
        self._monotonic: Callable[[], float] = self._clock.monotonic
        self._subscriptions: dict[str, TagFilter] = {}
        self._lock = threading.Lock()
        self._engine = PullEngine(
            PullOptions(
                max_delivery_attempts=self.options.max_delivery_attempts,
                flow=FlowLimits(
                    max_count=self.options.pull_threshold_for_queue,
                    max_bytes=self.options.pull_threshold_size_for_queue * 1024 * 1024,
                    max_span=self.options.consume_concurrently_max_span,
                ),
            ),
            uuid.uuid4().hex[:12],
            handle_type=ClassicMessageView,
        )
        self._waiting: deque[_Waiting] = deque()
        self._runner = _PullRunner(self)
        self._errors = FatalErrorWatch(conf.get("error_cb"), config=conf)
        self._member: GroupConsumer | None = None
        self._loop: ClientLoop | None = None
        self._turns: MemberTurns | None = None
        #: until when receives read librdkafka themselves (see :class:`MemberTurns`)
        self._direct_until = 0.0
        #: not started, shut down or closed after an error: ``ack`` and ``receive`` check
        #: the loop only then (one attribute read on their common path)
        self._stopped = True
        #: the last invisible duration given to ``receive`` and its value in seconds
        self._last_invisible: tuple[object, float] = (None, 0.0)
        self._resubscribe = False
        for topic, expression in (subscription or {}).items():
            self.subscribe(topic, expression)

    # -- subscriptions ---------------------------------------------------------------------
    def subscribe(self, topic: str, filter_expression: str | FilterExpression | None = "*") -> None:
        """Subscribe to a topic with a tag expression (``*``, ``TagA || TagB`` or a
        :class:`FilterExpression`), before or after ``startup()``."""
        if self._loop is not None and self._loop.closed:
            raise ClientClosedError(f"{self.name} was shut down; create a new SimpleConsumer")
        naming.check_user_topic(topic)
        self._subscriptions[topic] = tag_filter_of(filter_expression)
        self._changed()

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic`` (its received messages' handles become invalid)."""
        if self._subscriptions.pop(topic, None) is not None:
            self._changed()

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: f.expression for t, f in self._subscriptions.items()}

    def _changed(self) -> None:
        if self._loop is not None:
            self._resubscribe = True  # applied on the loop thread

    def _filters(self) -> dict[str, TagFilter]:
        filters = {naming.to_kafka(t): f for t, f in self._subscriptions.items()}
        filters[naming.to_kafka(self.retry_topic)] = TagFilter.parse("*")
        return filters

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self) -> ClassicBackend:
        """Create the clients and join the group (RocketMQ's name for :meth:`start`)."""
        return self.start()

    def start(self) -> ClassicBackend:
        """Create the clients and join the group on a background thread (idempotent)."""
        if self._loop is not None:
            self._loop.start()
            return self
        opts = self.options
        if opts.auto_create_topics:
            ensure_topics(
                self._config,
                plan_topics(
                    groups=[self.consumer_group],
                    partitions=opts.partitions,
                    include_schedule=False,
                ),
            )
        member = GroupConsumer(
            name=self.name,
            config=self._config,
            group=self.consumer_group,
            engine=LockedEngine(self._engine, self._lock),
            topics=GroupTopics(self.consumer_group, DelayLevels.DEFAULT),
            filters=self._filters(),
            settings=self._settings(),
            errors=self._errors,
            clock=self._clock,
        )
        member.tracing = opts.tracing  # its copies' ``send`` spans
        turns = MemberTurns(member)
        loop = ClientLoop(
            f"rmq-simple-{self.consumer_group}",
            turns,
            shutdown_timeout=opts.shutdown_await,
            errors=self._errors,
            on_error=self._loop_died,
        )
        member.bind(self._runner, guard=turns.guard(loop.guard), running=lambda: loop.running)
        self._runner.turns = turns
        self._member, self._loop, self._turns = member, loop, turns
        self._stopped = False
        loop.start()
        return self

    def _loop_died(self, exc: BaseException) -> None:
        """The loop's ``on_error``, called as it dies, before it drains and closes: from
        now on ``ack`` and ``receive`` raise its error (they check the loop only once
        ``_stopped`` is set), then the user's ``on_error`` hears of it."""
        self._stopped = True
        if self.options.on_error is not None:
            self.options.on_error(exc)

    def _settings(self) -> ConsumeSettings:
        opts = self.options
        where, ts = start_rule(
            opts.consume_from_where,
            self._config.get("auto.offset.reset"),
            opts.consume_timestamp,
            self._clock.now_ms(),
        )
        return ConsumeSettings(
            clustering=True,
            consume_from_where=where,
            consume_timestamp_ms=ts,
            fetch_size=_FETCH_SIZE,
            pull_batch_size=_FETCH_SIZE,
            soft_backlog=_SOFT_BACKLOG,
            shutdown_await=opts.shutdown_await,
        )

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the group: copies of expired messages are flushed, settled offsets
        committed.  Received messages not acknowledged are delivered again (their offsets
        are not committed); their handles become invalid."""
        loop = self._loop
        if loop is None:
            return
        self._stopped = True
        loop.shutdown(timeout)

    close = shutdown

    def check_alive(self) -> None:
        """Raise what stopped the consumer; :class:`ClientClosedError` when not running."""
        if self._loop is None:
            raise ClientClosedError(f"{self.name} is not started")
        self._loop.check_alive()

    # -- receiving -------------------------------------------------------------------------
    @property
    def await_duration(self) -> float:
        """Seconds ``receive`` waits for the first message."""
        return self._await_s

    @await_duration.setter
    def await_duration(self, value: float | timedelta) -> None:
        self._await_s = await_seconds(value)

    def receive(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> list[MessageView]:
        """Up to ``max_message_num`` (at most 32) messages, each invisible to every other
        receiver for ``invisible_duration`` (seconds or a ``timedelta``, 1 s to 12 h) and
        to be acknowledged within it.  Waits up to ``await_duration`` for the first
        message; an empty list when none came."""
        got = self._receive(max_message_num, invisible_duration, read=True)
        if type(got) is not list:
            assert isinstance(got, PullFuture)
            got = got.result(timeout=self._await_s + 60)
        hooks = telemetry.active
        if hooks is not None and self.options.tracing:  # a ``receive`` span
            hooks.received(got, self.consumer_group)
        return got

    def receive_async(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> PullFuture[list[MessageView]]:
        """:meth:`receive` without blocking: a future of the messages (awaitable)."""
        try:
            got = self._receive(max_message_num, invisible_duration, read=False)
        except Exception as exc:
            return settled(error=exc)
        fut = got if isinstance(got, PullFuture) else settled(got)
        hooks = telemetry.active
        if hooks is not None and self.options.tracing:  # a ``receive`` span once they came
            group = self.consumer_group

            def traced(done: PullFuture[list[MessageView]]) -> None:
                if not done.cancelled() and done.exception() is None:
                    hooks.received(done.result(), group)

            fut.add_done_callback(traced)  # type: ignore[arg-type]
        return fut

    def _receive(
        self, max_message_num: int, invisible_duration: float | timedelta, *, read: bool
    ) -> list[MessageView] | PullFuture[list[MessageView]]:
        """The messages available now, or a future of those a waiting receive gets.
        ``read``: with fewer buffered than asked for, read librdkafka on this thread when
        the loop lets it (not for ``receive_async``: a rebalance callback that read serves
        may block, and an event loop must not)."""
        n = receive_count(max_message_num)
        last, invisible_s = self._last_invisible
        if type(invisible_duration) is not type(last) or invisible_duration != last:
            invisible_s = seconds_of(
                "invisible_duration",
                invisible_duration,
                minimum=MIN_RECEIVE_INVISIBLE_S,
                maximum=MAX_INVISIBLE_S,
            )
            self._last_invisible = (invisible_duration, invisible_s)
        if self._stopped:
            self._require_running()
        if not self._subscriptions:
            raise InvalidInputError("subscription", None, "subscribe() to a topic before receive()")
        engine = self._engine
        limit = self.options.max_unacked_messages
        now = self._monotonic()
        lock = self._lock
        with lock:
            room = limit - engine.unacked
            if room <= 0:
                raise UnackedLimitError(limit, engine.unacked)
            short = engine.available < min(n, room)
            if not short:  # the common case: what is buffered serves it
                handles = engine.receive(min(n, room), invisible_s, now)
        if not short:
            if now >= self._direct_until:
                self._runner.taken()  # room in the buffer: the loop fetches ahead
            return cast("list[MessageView]", handles)  # the engine issues the views
        direct = now < self._direct_until
        if short and read and not self._waiting:
            turns = self._turns
            if turns is not None and turns.fetch(_FETCH_SIZE):
                direct = True
                self._direct_until = now + _DIRECT_S
        with lock:
            room = limit - engine.unacked
            if room <= 0:
                raise UnackedLimitError(limit, engine.unacked)
            handles = engine.receive(min(n, room), invisible_s, now)
            if not handles and self._await_s > 0:
                fut: PullFuture[list[MessageView]] = PullFuture()
                self._waiting.append(_Waiting(n, invisible_s, now + self._await_s, fut))
                self._runner.taken()  # the loop fetches (and waits) for this receive
                return fut
        if handles and not direct:
            self._runner.taken()  # room in the buffer: the loop fetches ahead
        return cast("list[MessageView]", handles)

    def _serve_waiting(self) -> None:
        """On the loop thread: hand what is available to waiting receives, in order."""
        if not self._waiting:
            return
        engine = self._engine
        limit = self.options.max_unacked_messages
        served: list[tuple[PullFuture[list[MessageView]], list[Any]]] = []
        with self._lock:
            now = self._clock.monotonic()
            waiting = self._waiting
            while waiting and engine.available and engine.unacked < limit:
                w = waiting.popleft()
                if not w.future.set_running_or_notify_cancel():
                    continue  # cancelled (an asyncio timeout): it takes nothing
                room = limit - engine.unacked
                served.append((w.future, engine.receive(min(w.n, room), w.invisible_s, now)))
        for fut, views in served:
            fut.set_result(views)
        if served:
            self._runner.taken()

    def _loop_upkeep(self) -> None:
        """On the loop thread, every iteration: subscription changes, waiting receives
        (messages that became visible again, deadlines)."""
        if self._resubscribe and self._member is not None:
            self._resubscribe = False
            self._member.resubscribe(self._filters())
        if not self._waiting:
            return
        self._serve_waiting()
        now = self._clock.monotonic()
        expired: list[_Waiting] = []
        with self._lock:
            if self._waiting and self._waiting[0].deadline <= now:
                keep: deque[_Waiting] = deque()
                for w in self._waiting:
                    (expired if w.deadline <= now else keep).append(w)
                self._waiting = keep
        for w in expired:
            if w.future.set_running_or_notify_cancel():
                w.future.set_result([])

    def _fail_waiting(self, error: BaseException) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, deque()
        for w in waiting:
            if w.future.set_running_or_notify_cancel():
                w.future.set_exception(error)

    # -- acknowledging ---------------------------------------------------------------------
    def ack(self, message: MessageView) -> None:
        """Acknowledge ``message``: it is consumed and its offset may be committed.
        Acknowledging it again is harmless; an expired or revoked handle, or one of another
        consumer, raises
        :class:`~adapter.errors.InvalidReceiptHandleError` and changes nothing."""
        # the checks of handle_of and _require_running only off the common path (the view
        # is its own receipt handle)
        if type(message) is not ClassicMessageView or self._stopped:
            message = handle_of(message)
            self._require_running()
        # acquire/release rather than ``with``: the statement's lookups cost more than the
        # lock itself, once per message.  The lock stays: the engine's counters and the
        # handle's state change together, and the loop thread expires handles under it (a
        # GIL-atomic hand-over drained by that thread costs as much as the lock and lets an
        # expiry slip between an ack's check and its hand-over).  The clock is read per
        # call: an ack after the deadline fails even when the loop has not expired the
        # handle yet.
        lock = self._lock
        lock.acquire()
        try:
            self._engine.ack(message, self._monotonic())
        finally:
            lock.release()

    def ack_async(self, message: MessageView) -> PullFuture[None]:
        """:meth:`ack` as a (completed) awaitable future."""
        return ack_settled(self.ack, message)

    def change_invisible_duration(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> str:
        """Make ``message`` invisible for ``invisible_duration`` from now (0 s to 12 h;
        shorter or longer than before; 0 delivers it again at once, with its attempt
        counted).  The message gets a new receipt handle, which is returned; the old one
        is no longer valid."""
        handle = handle_of(message)
        invisible_s = seconds_of(
            "invisible_duration", invisible_duration, minimum=0, maximum=MAX_INVISIBLE_S
        )
        self._require_running()
        with self._lock:
            self._engine.renew(handle, invisible_s, self._clock.monotonic())
            return handle.handle_text()

    def change_invisible_duration_async(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> PullFuture[str]:
        """:meth:`change_invisible_duration` as a (completed) awaitable future."""
        return change_settled(self.change_invisible_duration, message, invisible_duration)

    def _require_running(self) -> None:
        loop = self._loop
        if loop is None:
            raise ClientClosedError(f"{self.name} is not started; call startup() first")
        if not loop.running:
            loop.check_alive()  # the loop's error, or ClientClosedError

    # -- figures ---------------------------------------------------------------------------
    @property
    def assignment(self) -> set[TP]:
        """The partitions this member owns now, as ``(Kafka topic, partition)``."""
        return set(self._member.assignment) if self._member is not None else set()

    def stats(self) -> dict[str, TopicStats]:
        """Per logical topic: copies sent to the retry topic and dead letters."""
        return self._member.stats.snapshot() if self._member is not None else {}

    def running_info(self) -> dict[str, Any]:
        """A snapshot for diagnostics: messages waiting to be received, received and not
        acknowledged, and per partition the committable offset and what is in flight."""
        member, loop = self._member, self._loop
        if member is None or loop is None:
            return {"group": self.consumer_group, "started": False}
        engine = self._engine
        with self._lock:
            paused = set(engine.paused())
            parts = {
                f"{t}[{p}]": {
                    "committable": engine.committable((t, p)),
                    "in_flight": engine.in_flight((t, p)),
                    "paused": (t, p) in paused,
                }
                for t, p in sorted(engine.partitions)
            }
            available, unacked, waiting = engine.available, engine.unacked, len(self._waiting)
        return {
            "group": self.consumer_group,
            "started": True,
            "running": loop.running,
            "error": None if loop.error is None else repr(loop.error),
            "available": available,
            "unacked": unacked,
            "waiting_receives": waiting,
            "copies_in_flight": member.publisher.in_flight(),
            "partitions": parts,
        }
