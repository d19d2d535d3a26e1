"""``SimpleConsumer(config, backend="share")``: RocketMQ 5's SimpleConsumer on a Kafka share
group (KIP-932), through confluent-kafka's ``ShareConsumer`` in explicit acknowledgement mode.

The broker keeps what the classic backend keeps in the client: each record is locked to
the member that acquired it, counted per delivery, and any number of members read a
partition.  The adapter keeps RocketMQ's contract on top (docs/semantics.md §4.13.1): the
invisible duration of a receive inside the group's lock, the release of a message whose
invisible duration ran out, its own dead-letter queue one delivery before the broker's
limit, and the group's configuration at start.  The decisions are in
:mod:`.share_rules`; the group's configuration in :mod:`.share_group`, the message view
(which is its own receipt handle) in :mod:`.share_view`, the records of the polls and the
holds on them in :mod:`.poll_state`, the dead-letter writes in :mod:`.dead_letters`.

librdkafka's share consumer is not thread-safe and refuses a poll while a record of the
previous one is unacknowledged.  So the consumer's state and every call into it sit behind
one lock, except ``poll``, which runs only when nothing of the previous poll is left (no
call could touch a record then); a background thread ends expired holds, dead-letters, and
sends acknowledgements that no poll has carried yet.

Why one module (about 680 lines): :class:`ShareBackend` is one state machine around that one
consumer and its one lock: receive, ack, the invisible-duration changes, the upkeep thread
and shutdown all read and change the same holds under it, and the order of those calls is
what keeps librdkafka's rule.  What can stand alone already does, in the modules above.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Unpack

import confluent_kafka

from adapter.clients.share.dead_letters import write_dead_letters
from adapter.clients.share.poll_state import PollState
from adapter.clients.share.share_group import (
    BROKER_DEFAULT_LOCK_S,
    GROUP_LOCK,
    ResetRefresher,
    configure_share_group,
    share_group_configs,
)
from adapter.clients.share.share_rules import (
    DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS,
    NOT_FOR_SHARE_CONSUMER,
    can_hold,
    delivery_limit,
    max_receive_invisible,
    usable_hold,
)
from adapter.clients.share.share_view import ShareHold, ShareMessageView, share_view_of
from adapter.clients.simple.backend_calls import ack_settled, await_seconds, change_settled
from adapter.clients.simple.message_view import (
    FilterExpression,
    MessageView,
    PullFuture,
    tag_filter_of,
)
from adapter.clients.simple.simple_options import (
    SimpleConsumerOptions,
    SimpleOptions,
    group_config,
)
from adapter.core import naming
from adapter.core.engine.pull import (
    MAX_INVISIBLE_S,
    MIN_RECEIVE_INVISIBLE_S,
    HandleState,
    receive_count,
    seconds_of,
)
from adapter.core.filter import TagFilter
from adapter.core.offsets import start_rule
from adapter.core.types import TP
from adapter.errors import (
    ClientClosedError,
    ClientLoopError,
    ConfigError,
    InvalidInputError,
    UnackedLimitError,
)
from adapter.io.config import build_options, check_int, producer_config
from adapter.io.errors import LIBRDKAFKA_LOG, make_client
from adapter.io.topics import ensure_topics, plan_topics
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.share_consumer")

__all__ = ["ShareBackend", "ShareMessageView", "ShareSimpleConsumerOptions"]

#: The share backend takes the classic backend's keyword options (one word switches
#: backends); ``lock_duration`` is its own, ``max_delivery_attempts`` defaults differently.
ShareSimpleConsumerOptions = SimpleConsumerOptions
#: The view is its own receipt handle (one object per received record).
ShareHandle = ShareMessageView

#: Records librdkafka is asked for per poll (a soft limit: a fetch may bring more).
POLL_RECORDS = 32
#: Longest single ``poll`` (seconds): a receive polls in slices so shutdown is prompt.
_POLL_SLICE_S = 1.0
#: The background thread's period (seconds): expiries are acted on this late at most.
_TICK_S = 0.05
#: Acknowledgements no poll has carried are sent after this long (seconds).
_ACK_FLUSH_S = 0.1
#: How long a dead-letter write may take before the record is released instead.
_DLQ_TIMEOUT_S = 30.0
_ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
_RELEASE = confluent_kafka.AcknowledgeType.RELEASE
_REJECT = confluent_kafka.AcknowledgeType.REJECT
_INVISIBLE = HandleState.INVISIBLE
_ACKED = HandleState.ACKED


@dataclass(frozen=True, slots=True)
class ShareOptions(SimpleOptions):
    """The validated options of the share backend: the classic backend's, with
    ``lock_duration`` (the group's record lock, ``share.record.lock.duration.ms``, set at
    start; ``None`` keeps the group's, broker default 30 s) and ``max_delivery_attempts``
    defaulting to :data:`DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS` (the consumer fills it in).
    The classic backend's flow-control options are accepted and have no effect: the
    broker's locks bound what a member holds.  ``max_unacked_messages`` still bounds the
    received messages held, as on the classic backend (same API, same limit)."""

    def __post_init__(self) -> None:
        check_int("max_delivery_attempts", self.max_delivery_attempts, minimum=1)
        if self.lock_duration is not None:
            seconds_of("lock_duration", self.lock_duration, minimum=1, maximum=3600)
        self.check_common()


class ShareBackend:
    """The share-group backend of :class:`~adapter.clients.simple.simple_consumer.SimpleConsumer`
    (create it as ``SimpleConsumer(config, group, backend="share")``; it satisfies
    :class:`~adapter.clients.simple.backend.Backend`).  Same calls, errors and message
    views; where the models differ, docs/semantics.md §4.13.1 says what happens."""

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        **options: Unpack[ShareSimpleConsumerOptions],
    ) -> None:
        given: dict[str, Any] = dict(options)
        if given.get("max_delivery_attempts") is None:
            given["max_delivery_attempts"] = DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS
        self.share_options = build_options(ShareOptions, given, "SimpleConsumer(share)")
        self._given = options
        conf, group = group_config(config, consumer_group)
        opts = self.share_options
        self._config = conf
        self.consumer_group = group
        self.name = f"simple consumer {group} (share)"
        self.retry_topic = naming.retry_topic(group)
        self.dlq_topic = naming.dlq_topic(group)
        self.max_delivery_attempts: int = opts.max_delivery_attempts
        self.delivery_limit = delivery_limit(self.max_delivery_attempts)
        self._await_s = seconds_of("await_duration", opts.await_duration, minimum=0)
        self._clock = opts.clock
        #: every time read of this backend (the system clock's is time.monotonic itself)
        self._monotonic: Callable[[], float] = self._clock.monotonic
        self._subs: dict[str, TagFilter] = {}
        # the hot paths take the plain lock (entered in C); waits go through the condition
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        #: threads waiting on ``_cond`` (changed under the lock): ``ack`` notifies only
        #: when one waits (a notification is a chain of Python calls, once per receive)
        self._waiters = 0
        #: the records of the polls (buffered, held, due for the DLQ), under ``_lock``
        self._poll = PollState(
            self.name,
            max_delivery_attempts=self.max_delivery_attempts,
            delivery_limit=self.delivery_limit,
            lock_duration=(
                None
                if opts.lock_duration is None
                else seconds_of("lock_duration", opts.lock_duration, minimum=1, maximum=3600)
            ),
            cond=self._cond,
        )
        self._producer: confluent_kafka.Producer | None = None
        #: the ack path's call into librdkafka: ``kc.acknowledge`` bound at start, then
        #: :meth:`_raise_stopped` once the upkeep thread died (so ``ack`` raises at once
        #: without a test of its own on its common path)
        self._acknowledge: Callable[[Any, Any], None] = self._raise_stopped
        #: ``PollState.acked`` when acknowledgements were last sent (a poll or a commit):
        #: the upkeep sends those made since (``ack`` only counts them)
        self._acked_sent = 0
        self._dead_in_flight = 0
        self._polling = False
        self._last_sent = 0.0
        self._resubscribe = False
        #: the last invisible duration given to ``receive``, the lock it was checked
        #: against, and its value in seconds
        self._last_receive_hold: tuple[object, float, float] = (None, 0.0, 0.0)
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._upkeep: threading.Thread | None = None
        self._reset: ResetRefresher | None = None
        self._dead_lettered = self._ack_failures = 0
        for topic, expression in (subscription or {}).items():
            self.subscribe(topic, expression)

    # -- subscriptions ---------------------------------------------------------------------
    def subscribe(self, topic: str, filter_expression: str | FilterExpression | None = "*") -> None:
        """Subscribe to a topic with a tag expression, before or after ``startup()``."""
        naming.check_user_topic(topic)
        with self._lock:
            self._subs[topic] = tag_filter_of(filter_expression)
            self._subscribed()

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic`` (records of it received later are released)."""
        with self._lock:
            if self._subs.pop(topic, None) is not None:
                self._subscribed()

    def _subscribed(self) -> None:
        """Under the lock: the subscriptions changed (the next poll subscribes again)."""
        self._poll.by_kafka = {
            naming.to_kafka(t): (t, None if f.tags is None else f) for t, f in self._subs.items()
        }
        self._resubscribe = True

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: f.expression for t, f in self._subs.items()}

    @property
    def lock_duration(self) -> float | None:
        """The group's record lock in seconds (read from the group at start when not
        given; ``None`` before that)."""
        return self._poll.lock_duration

    @lock_duration.setter
    def lock_duration(self, value: float | None) -> None:
        self._poll.lock_duration = value

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ShareBackend:
        """Configure the share group, create the clients and join (idempotent)."""
        if self._started:
            return self
        opts = self.share_options
        if opts.auto_create_topics:
            ensure_topics(
                self._config,
                plan_topics(
                    groups=[self.consumer_group],
                    partitions=opts.partitions,
                    include_schedule=False,
                ),
            )
        self._configure_group()
        conf = {k: v for k, v in self._config.items() if k not in NOT_FOR_SHARE_CONSUMER}
        conf["share.acknowledgement.mode"] = "explicit"
        conf.setdefault("max.poll.records", POLL_RECORDS)
        conf.setdefault("logger", LIBRDKAFKA_LOG)  # librdkafka's lines through logging
        try:
            kc = confluent_kafka.ShareConsumer(conf)
        except confluent_kafka.KafkaException as exc:
            raise ConfigError("config", None, f"share consumer refused: {exc}") from exc
        kc.set_acknowledgement_commit_callback(self._on_commit)
        self._poll.kc = kc
        self._acknowledge = kc.acknowledge
        self._producer = make_client(
            confluent_kafka.Producer,
            {**producer_config(self._config), "acks": "all", "linger.ms": 0},
            what="share dead-letter producer",
        )
        self._started = True
        self._upkeep = threading.Thread(
            target=self._upkeep_loop, name=f"rmq-share-{self.consumer_group}", daemon=True
        )
        self._upkeep.start()
        return self

    def startup(self) -> ShareBackend:
        return self.start()

    def _configure_group(self) -> None:
        """Set the group's start rule, delivery limit and (when given) lock duration; read
        the lock duration in force when none was given."""
        opts = self.share_options
        now_ms = self._clock.now_ms()
        where, ts = start_rule(
            opts.consume_from_where,
            self._config.get("auto.offset.reset"),
            opts.consume_timestamp,
            now_ms,
        )
        self._reset = ResetRefresher(
            self._config,
            self.consumer_group,
            where,
            start_ms=now_ms,
            timestamp_ms=ts,
            clock=self._clock,
        )
        first = self._reset.first()
        wanted = share_group_configs(first.value, self.delivery_limit, self.lock_duration)
        lock_s = configure_share_group(self._config, self.consumer_group, wanted, self._given)
        self._reset.start(first)
        if self.lock_duration is None:
            self.lock_duration = lock_s

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the group: records held or waiting here are released (visible again at
        once; dead-lettered when the broker would otherwise archive them), pending
        acknowledgements are sent.  Handles become invalid.  After its upkeep thread died:
        all that, then :class:`ClientLoopError` (with the cause), as the classic backend's
        shutdown raises its loop's: whoever stops the consumer learns it had stopped
        working."""
        if not self._started:
            return
        wait = self.share_options.shutdown_await if timeout is None else timeout
        self._stop.set()
        if self._reset is not None:
            self._reset.stop()
        if self._upkeep is not None:
            self._upkeep.join(wait)
        with self._lock:
            if self._closed:
                self._raise_if_died()
                return
            self._closed = True
            end = self._monotonic() + wait
            while self._polling and self._monotonic() < end:
                self._wait(0.1)
            for v in [*self._poll.revoke_all(), *self._poll.drain()]:
                if v.count >= self.delivery_limit:
                    v.state = HandleState.EXPIRED
                    self._poll.dead.append(v)
                else:
                    self._poll.settle(v, _RELEASE, HandleState.REVOKED)
            self._cond.notify_all()
        self._flush_dead_letters()
        kc, self._poll.kc = self._poll.kc, None
        if kc is not None:
            try:
                kc.close()
            except confluent_kafka.KafkaException as exc:
                log.warning("%s: closing the share consumer failed: %s", self.name, exc)
        if self._producer is not None:
            self._producer.flush(wait)
        self._raise_if_died()

    close = shutdown

    def _raise_if_died(self) -> None:
        if self._error is not None:
            raise ClientLoopError(self.name, self._error) from self._error

    def check_alive(self) -> None:
        """Raise what stopped the consumer (:class:`ClientLoopError` when its upkeep thread
        died, with the cause); :class:`ClientClosedError` when not running."""
        if not self._started:
            raise ClientClosedError(f"{self.name} is not started")
        self._raise_if_died()
        if self._closed:
            raise ClientClosedError(f"{self.name} was shut down")

    def _require_running(self) -> None:
        if not self._started:
            raise ClientClosedError(f"{self.name} is not started; call startup() first")
        self.check_alive()

    # -- receiving -------------------------------------------------------------------------
    def receive(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> list[MessageView]:
        """Up to ``max_message_num`` (at most 32) messages, each invisible to every other
        receiver for ``invisible_duration`` (1 s up to the group's lock less a margin).
        Waits up to ``await_duration`` for the first message; while messages of this
        consumer's previous poll are held, it waits for them to be settled first."""
        n = receive_count(max_message_num)
        if not self._started or self._closed or self._error is not None:
            self._require_running()
        lock_s = self.lock_duration or BROKER_DEFAULT_LOCK_S
        last, last_lock_s, invisible_s = self._last_receive_hold
        if (
            type(invisible_duration) is not type(last)
            or invisible_duration != last
            or lock_s != last_lock_s
        ):
            invisible_s = seconds_of(
                "invisible_duration",
                invisible_duration,
                minimum=MIN_RECEIVE_INVISIBLE_S,
                maximum=max(MIN_RECEIVE_INVISIBLE_S, max_receive_invisible(lock_s)),
            )
            self._last_receive_hold = (invisible_duration, lock_s, invisible_s)
        if not self._subs:
            raise InvalidInputError("subscription", None, "subscribe() to a topic before receive()")
        state = self._poll
        clock = self._monotonic
        end = clock() + self._await_s
        limit = self.share_options.max_unacked_messages
        while True:
            with self._lock:
                self.check_alive()
                now = clock()
                state.expire_holds(now)  # the buffered records: ``take`` checks them
                # the same bound as the classic backend (§4.13): held here and not settled
                unacked = state.unacked
                if unacked >= limit:
                    raise UnackedLimitError(limit, unacked)
                if state.buffer:
                    views = state.take(min(n, limit - unacked), invisible_s, now)
                    if views:
                        hooks = telemetry.active if self.share_options.tracing else None
                        if hooks is not None:  # a ``receive`` span in the messages' traces
                            hooks.received(views, self.consumer_group)
                        return views
                idle = not (state.buffer or unacked or state.dead or self._dead_in_flight)
                if not idle or self._polling:
                    if now >= end:
                        return []
                    self._wait(min(end - now, _TICK_S))
                    continue
                self._polling = True
                resubscribe, self._resubscribe = self._resubscribe, False
                topics = sorted(state.by_kafka)
            batch: Any = ()
            try:
                if resubscribe:
                    state.kc.subscribe(topics)
                batch = state.kc.poll(max(0.0, min(end - clock(), _POLL_SLICE_S)))
            finally:
                with self._lock:
                    self._polling = False
                    self._last_sent = clock()
                    state.pending_acks = False  # the poll carried them
                    self._acked_sent = state.acked
                    if batch:
                        state.accept(batch, clock())
                    self._cond.notify_all()
            if state.dead:
                self._flush_dead_letters()
            if not batch and clock() >= end:
                with self._lock:
                    views = state.take(max(0, min(n, limit - state.unacked)), invisible_s, clock())
                hooks = telemetry.active
                if hooks is not None and self.share_options.tracing:
                    hooks.received(views, self.consumer_group)
                return views

    def receive_async(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> PullFuture[list[MessageView]]:
        """:meth:`receive` on a short-lived thread, as an awaitable future."""
        fut: PullFuture[list[MessageView]] = PullFuture()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(self.receive(max_message_num, invisible_duration))
            except Exception as exc:
                fut.set_exception(exc)

        threading.Thread(target=run, name="rmq-share-receive", daemon=True).start()
        return fut

    # -- dead letters ----------------------------------------------------------------------
    def _flush_dead_letters(self) -> None:
        """Write the records due for the DLQ, wait for the broker, then REJECT each one
        written (RELEASE one that was not: it comes back and is tried again)."""
        with self._lock:
            dead, self._poll.dead = self._poll.dead, []
            self._dead_in_flight += len(dead)
        if not dead:
            return
        producer = self._producer
        assert producer is not None
        results = write_dead_letters(
            producer,
            dead,
            dlq_kafka_topic=naming.to_kafka(self.dlq_topic),
            group=self.consumer_group,
            max_delivery_attempts=self.max_delivery_attempts,
            now_ms=self._clock.now_ms(),
            timeout=_DLQ_TIMEOUT_S,
            tracing=self.share_options.tracing,
        )
        with self._lock:
            self._dead_in_flight -= len(dead)
            if self._poll.kc is None:
                return
            for v, err in zip(dead, results, strict=True):
                if err is None:
                    self._poll.kc.acknowledge(v.record, _REJECT)
                    self._dead_lettered += 1
                else:
                    log.error(
                        "%s: dead letter of %s not written: %s", self.name, v.handle_text(), err
                    )
                    self._poll.kc.acknowledge(v.record, _RELEASE)
                    self._poll.released += 1
            self._poll.pending_acks = True
            self._cond.notify_all()

    # -- background ------------------------------------------------------------------------
    def _upkeep_loop(self) -> None:
        try:
            while not self._stop.wait(_TICK_S):
                with self._lock:
                    if self._closed:
                        return
                    now = self._monotonic()
                    poll = self._poll
                    if not self._polling:
                        poll.expire(now)
                        pending = poll.pending_acks or poll.acked != self._acked_sent
                        if pending and now - self._last_sent >= _ACK_FLUSH_S:
                            poll.kc.commit_async()
                            poll.pending_acks = False
                            self._acked_sent = poll.acked
                            self._last_sent = now
                if self._poll.dead:
                    self._flush_dead_letters()
        except Exception as exc:  # the consumer stops: receive, ack, ... raise it
            log.exception("%s: upkeep failed", self.name)
            self._error = exc
            self._acknowledge = self._raise_stopped
            on_error = self.share_options.on_error
            if on_error is not None:
                on_error(exc)

    def _on_commit(self, offsets: Any, exc: Any) -> None:
        """librdkafka's acknowledgement results (on whichever thread called it)."""
        if exc is not None:
            self._ack_failures += 1
            log.warning("%s: acknowledgement failed at the broker: %s", self.name, exc)

    def _wait(self, timeout: float) -> None:
        """Under the lock: wait on the condition up to ``timeout`` seconds, counted in
        ``_waiters`` meanwhile."""
        self._waiters += 1
        try:
            self._cond.wait(timeout)
        finally:
            self._waiters -= 1

    def _raise_stopped(self, *args: Any) -> None:
        """``_acknowledge`` before start and once the upkeep thread died: what stopped the
        consumer, raised before the view changes."""
        del args
        self._require_running()
        raise ClientClosedError(f"{self.name} is not running")

    # -- acknowledging ---------------------------------------------------------------------
    def ack(self, message: MessageView) -> None:
        """Acknowledge ``message`` (ACCEPT; sent with the next poll or within a tick).
        Again: harmless; expired or another consumer's: :class:`InvalidReceiptHandleError`;
        after the upkeep thread died: :class:`ClientLoopError`.

        Thread-safe: the check and the acknowledgement run under the consumer's lock (the
        upkeep thread ends expired holds under it, and librdkafka's share consumer is not
        thread-safe).  The deadline is checked against the clock on every call: the upkeep
        may end an expired hold late (it writes dead letters outside the lock), and an
        acknowledgement it has not seen yet must not be taken after the hold's deadline."""
        v = message if type(message) is ShareMessageView else share_view_of(message)
        poll = self._poll
        lock = self._lock
        now = self._monotonic
        # acquire/release rather than ``with``: the statement's lookups cost more than the
        # lock itself, once per message
        lock.acquire()
        try:
            # the common case, inline: a live hold of this consumer (a view handed out is
            # held while invisible; a shutdown revokes every hold, so a closed consumer
            # fails the first test; the unhold, inlined).  ``_acknowledge`` raises when the
            # upkeep died, before anything changes; the acknowledgement is counted, and the
            # upkeep sends what the counts say no poll carried yet.
            hold = v.hold
            if v.state is _INVISIBLE and hold.owner is poll.owner and hold.deadline > now():
                self._acknowledge(v.record, _ACCEPT)
                v.state = _ACKED
                poll.acked += 1
                poll.unacked -= 1
                if not poll.unacked:
                    poll.holds.clear()
                    if self._waiters:  # a receive waits for the batch to be settled
                        self._cond.notify_all()
                return
            self._ack_slow(v)
        finally:
            lock.release()

    def _ack_slow(self, v: ShareMessageView) -> None:
        """Under the lock: :meth:`ack` of anything but a live hold of this consumer."""
        if v.state is _ACKED and v.hold.owner == self._poll.owner:
            return
        if self._poll.kc is None or self._closed or self._error is not None:
            self._require_running()
        v = self._poll.live(v, self._monotonic())
        self._poll.unhold(v)
        self._poll.settle(v, _ACCEPT, _ACKED)

    def ack_async(self, message: MessageView) -> PullFuture[None]:
        """:meth:`ack` as a (completed) awaitable future."""
        return ack_settled(self.ack, message)

    def change_invisible_duration(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> str:
        """Hold ``message`` for ``invisible_duration`` from now, within the record's lock
        (librdkafka cannot renew it): longer is refused with :class:`InvalidInputError`
        and changes nothing; 0 releases it at once (delivered again, attempt counted).
        Returns the new receipt handle (the message view shows it)."""
        invisible_s = seconds_of(
            "invisible_duration", invisible_duration, minimum=0, maximum=MAX_INVISIBLE_S
        )
        self._require_running()
        with self._lock:
            now = self._monotonic()
            v = self._poll.live(message, now)
            lock_s = self.lock_duration or BROKER_DEFAULT_LOCK_S
            if invisible_s > 0 and not can_hold(v.acquired_at, lock_s, now, invisible_s):
                room = max(0.0, v.acquired_at + usable_hold(lock_s) - now)
                raise InvalidInputError(
                    "invisible_duration",
                    invisible_duration,
                    f"at most {room:.1f} s for this message: the share group's record lock "
                    f"({lock_s:g} s, {GROUP_LOCK}) cannot be extended",
                )
            v.token = next(self._poll.tokens)
            # a hold of its own: the receive's is shared by its other views
            v.hold = ShareHold(v.hold.owner, v.acquired_at, now + invisible_s, invisible_s)
            if invisible_s == 0:
                self._poll.unhold(v)
                self._poll.expire_one(v)
            else:
                self._poll.next_deadline = min(self._poll.next_deadline, v.deadline)
            return v.handle_text()

    # -- figures ---------------------------------------------------------------------------
    def change_invisible_duration_async(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> PullFuture[str]:
        """:meth:`change_invisible_duration` as a (completed) awaitable future."""
        return change_settled(self.change_invisible_duration, message, invisible_duration)

    @property
    def await_duration(self) -> float:
        """Seconds ``receive`` waits for the first message."""
        return self._await_s

    @await_duration.setter
    def await_duration(self, value: float | timedelta) -> None:
        self._await_s = await_seconds(value)

    @property
    def assignment(self) -> set[TP]:
        """Unknown on a share group (the broker assigns; every member may read each
        partition): always empty."""
        return set()

    def stats(self) -> dict[str, Any]:
        """Counts since start: acknowledged, released, dead-lettered, failed acks."""
        return {
            "acked": self._poll.acked,
            "released": self._poll.released,
            "dead_lettered": self._dead_lettered,
            "ack_failures": self._ack_failures,
        }

    def running_info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "group": self.consumer_group,
                "backend": "share",
                "started": self._started,
                "running": self._started and not self._closed and self._error is None,
                "lock_duration": self.lock_duration,
                "max_delivery_attempts": self.max_delivery_attempts,
                "delivery_limit": self.delivery_limit,
                "available": len(self._poll.buffer),
                "unacked": self._poll.unacked,
                "dead_letters_pending": len(self._poll.dead) + self._dead_in_flight,
                **self.stats(),
            }
