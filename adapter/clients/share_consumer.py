"""``SimpleConsumer(config, backend="share")``: RocketMQ 5's SimpleConsumer on a Kafka share
group (KIP-932), through confluent-kafka's ``ShareConsumer`` in explicit acknowledgement mode.

The broker keeps what the classic backend keeps in the client: each record is locked to
the member that acquired it, counted per delivery, and any number of members read a
partition.  The adapter keeps RocketMQ's contract on top (docs/semantics.md §4.13.1): the
invisible duration of a receive inside the group's lock, the release of a message whose
invisible duration ran out, its own dead-letter queue one delivery before the broker's
limit, and the group's configuration at start.  The decisions are in
:mod:`adapter.core.share`.

librdkafka's share consumer is not thread-safe and refuses a poll while a record of the
previous one is unacknowledged.  So the consumer's state and every call into it sit behind
one lock, except ``poll``, which runs only when nothing of the previous poll is left (no
call could touch a record then); a background thread ends expired holds, dead-letters, and
sends acknowledgements that no poll has carried yet.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from adapter.clients.push_consumer import timestamp_ms
from adapter.clients.simple_consumer import (
    DEFAULT_AWAIT_DURATION_S,
    MAX_AWAIT_DURATION_S,
    FilterExpression,
    MessageView,
    PullFuture,
    SimpleConsumer,
)
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.core.codec import Failure, dlq_headers
from adapter.core.engine.pull import (
    EXPIRED_FAILURE_TYPE,
    MAX_INVISIBLE_S,
    MIN_RECEIVE_INVISIBLE_S,
    HandleState,
    receive_count,
    seconds_of,
)
from adapter.core.filter import TagFilter
from adapter.core.message import MessageExt, view_of
from adapter.core.offsets import ConsumeFromWhere, consume_from_where_of
from adapter.core.routing import DeadLetterReason
from adapter.core.share import (
    DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS,
    NOT_FOR_SHARE_CONSUMER,
    Verdict,
    auto_offset_reset,
    can_hold,
    delivery_limit,
    lock_ms,
    max_receive_invisible,
    on_arrival,
    on_expiry,
    usable_hold,
)
from adapter.core.types import TP
from adapter.errors import (
    ClientClosedError,
    ConfigError,
    InvalidInputError,
    InvalidReceiptHandleError,
)
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import (
    admin_config,
    build_options,
    check_int,
    check_kafka_config,
    check_seconds,
    producer_config,
)
from adapter.io.topics import ensure_topics, plan_topics

log = logging.getLogger("adapter.share_consumer")

__all__ = ["ShareMessageView", "ShareSimpleConsumer", "ShareSimpleConsumerOptions"]

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
#: RocketMQ's default for a new consumer's CONSUME_FROM_TIMESTAMP: half an hour back.
_DEFAULT_TIMESTAMP_BACK_MS = 30 * 60 * 1000
_GROUP_LOCK = "share.record.lock.duration.ms"
_GROUP_LIMIT = "share.delivery.count.limit"
_GROUP_RESET = "share.auto.offset.reset"


class ShareSimpleConsumerOptions(TypedDict, total=False):
    """Keyword options of the share backend (times in seconds)."""

    await_duration: float | timedelta
    max_delivery_attempts: int | None
    lock_duration: float | timedelta | None
    max_unacked_messages: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue: int
    consume_concurrently_max_span: int
    auto_create_topics: bool
    partitions: int
    consume_from_where: ConsumeFromWhere | str | None
    consume_timestamp: int | str | datetime | None
    shutdown_await: float
    clock: Clock
    on_error: Any


@dataclass(frozen=True, slots=True)
class ShareOptions:
    """The validated options of the share backend.  The classic backend's flow-control
    options are accepted (one word switches backends) and have no effect: the broker's
    locks bound what a member holds."""

    await_duration: float | timedelta = DEFAULT_AWAIT_DURATION_S
    #: deliveries before the DLQ; ``None``: :data:`DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS`
    max_delivery_attempts: int | None = None
    #: the group's record lock (``share.record.lock.duration.ms``), set at start; ``None``
    #: keeps the group's (broker default 30 s)
    lock_duration: float | timedelta | None = None
    max_unacked_messages: int = 10_000
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    consume_concurrently_max_span: int = 2000
    auto_create_topics: bool = True
    partitions: int = 3
    consume_from_where: ConsumeFromWhere | str | None = None
    consume_timestamp: int | str | datetime | None = None
    shutdown_await: float = 10.0
    clock: Clock = field(default_factory=lambda: SYSTEM_CLOCK)
    on_error: Any = None

    def __post_init__(self) -> None:
        seconds_of("await_duration", self.await_duration, minimum=0, maximum=MAX_AWAIT_DURATION_S)
        if self.max_delivery_attempts is not None:
            check_int("max_delivery_attempts", self.max_delivery_attempts, minimum=1)
        if self.lock_duration is not None:
            seconds_of("lock_duration", self.lock_duration, minimum=1, maximum=3600)
        check_int("partitions", self.partitions, minimum=1)
        check_seconds("shutdown_await", self.shutdown_await)
        if self.consume_from_where is not None:
            object.__setattr__(
                self, "consume_from_where", consume_from_where_of(self.consume_from_where, None)
            )
        if self.consume_timestamp is not None:
            timestamp_ms(self.consume_timestamp)
        if self.on_error is not None and not callable(self.on_error):
            raise ConfigError("on_error", self.on_error, "must be a callable(exception)")


class ShareHandle:
    """One received record of a share group and its hold (the receipt handle).

    ``token`` changes with each ``change_invisible_duration`` (the text form is the
    receipt handle); ``count`` is the broker's delivery count."""

    __slots__ = (
        "acquired_at",
        "consumer",
        "count",
        "deadline",
        "duration",
        "msg",
        "record",
        "state",
        "token",
    )

    def __init__(self, consumer: str, record: Any, msg: MessageExt, count: int, now: float) -> None:
        self.consumer = consumer
        self.record = record
        self.msg = msg
        self.count = count
        self.acquired_at = now
        self.deadline = 0.0
        self.duration = 0.0
        self.token = 0
        self.state = HandleState.INVISIBLE

    def __str__(self) -> str:
        rec = self.record
        return (
            f"{self.consumer}:{rec.topic()}:{rec.partition()}:{rec.offset()}:"
            f"{self.count}:{self.token}"
        )

    def __repr__(self) -> str:
        return f"ShareHandle({self}, {self.state.value})"


class ShareMessageView(MessageView):
    """A :class:`MessageView` of the share backend (same attributes)."""

    __slots__ = ("handle",)

    def __init__(self, handle: ShareHandle) -> None:
        super().__init__(handle)  # type: ignore[arg-type]
        self.handle = handle


class ShareSimpleConsumer(SimpleConsumer):
    """:class:`SimpleConsumer` on a share group (create it as
    ``SimpleConsumer(config, group, backend="share")``).  Same calls, errors and message
    views; where the models differ, docs/semantics.md §4.13.1 says what happens."""

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        *,
        backend: str = "share",
        **options: Unpack[ShareSimpleConsumerOptions],
    ) -> None:
        # the classic state is not built: every public method is defined here
        del backend
        self.share_options = build_options(ShareOptions, options, "SimpleConsumer(share)")
        conf = check_kafka_config(config, "consumer")
        if consumer_group is not None:
            naming.check_group(consumer_group, "consumer_group")
            given = conf.get("group.id")
            if given is not None and given != consumer_group:
                raise ConfigError(
                    "group.id", given, f"differs from consumer_group={consumer_group!r}"
                )
            conf["group.id"] = consumer_group
        group = conf.get("group.id")
        if not isinstance(group, str) or not group:
            raise ConfigError("group.id", group, "a consumer group is required")
        opts = self.share_options
        self._config = conf
        self.consumer_group = group
        self.name = f"simple consumer {group} (share)"
        self.retry_topic = naming.retry_topic(group)
        self.dlq_topic = naming.dlq_topic(group)
        self.max_delivery_attempts = (
            opts.max_delivery_attempts
            if opts.max_delivery_attempts is not None
            else DEFAULT_SHARE_MAX_DELIVERY_ATTEMPTS
        )
        self.delivery_limit = delivery_limit(self.max_delivery_attempts)
        self.lock_duration: float | None = (
            None
            if opts.lock_duration is None
            else seconds_of("lock_duration", opts.lock_duration, minimum=1, maximum=3600)
        )
        self._await_s = seconds_of("await_duration", opts.await_duration, minimum=0)
        self._clock = opts.clock
        self._id = uuid.uuid4().hex[:12]
        self._tokens = itertools.count(1)
        self._subs: dict[str, TagFilter] = {}
        self._by_kafka: dict[str, tuple[str, TagFilter]] = {}
        self._cond = threading.Condition(threading.Lock())
        self._kc: Any = None
        self._producer: confluent_kafka.Producer | None = None
        self._buffer: deque[ShareHandle] = deque()
        self._held: dict[int, ShareHandle] = {}
        self._dead: list[ShareHandle] = []
        self._dead_in_flight = 0
        self._polling = False
        self._pending_acks = False
        self._last_sent = 0.0
        self._resubscribe = False
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._upkeep: threading.Thread | None = None
        self._counts = {"acked": 0, "released": 0, "dead_lettered": 0, "ack_failures": 0}
        for topic, expression in (subscription or {}).items():
            self.subscribe(topic, expression)

    # -- subscriptions ---------------------------------------------------------------------
    def subscribe(self, topic: str, filter_expression: str | FilterExpression | None = "*") -> None:
        """Subscribe to a topic with a tag expression, before or after ``startup()``."""
        naming.check_user_topic(topic)
        with self._cond:
            self._subs[topic] = _filter_of(filter_expression)
            self._by_kafka = {naming.to_kafka(t): (t, f) for t, f in self._subs.items()}
            self._resubscribe = True

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic`` (records of it received later are released)."""
        with self._cond:
            if self._subs.pop(topic, None) is not None:
                self._by_kafka = {naming.to_kafka(t): (t, f) for t, f in self._subs.items()}
                self._resubscribe = True

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: f.expression for t, f in self._subs.items()}

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ShareSimpleConsumer:
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
        try:
            kc = confluent_kafka.ShareConsumer(conf)
        except confluent_kafka.KafkaException as exc:
            raise ConfigError("config", None, f"share consumer refused: {exc}") from exc
        kc.set_acknowledgement_commit_callback(self._on_commit)
        self._kc = kc
        self._producer = confluent_kafka.Producer(
            {**producer_config(self._config), "acks": "all", "linger.ms": 0}
        )
        self._started = True
        self._upkeep = threading.Thread(
            target=self._upkeep_loop, name=f"rmq-share-{self.consumer_group}", daemon=True
        )
        self._upkeep.start()
        return self

    def startup(self) -> ShareSimpleConsumer:
        return self.start()

    def _configure_group(self) -> None:
        """Set the group's start rule, delivery limit and (when given) lock duration; read
        the lock duration in force."""
        opts = self.share_options
        where = consume_from_where_of(
            opts.consume_from_where, self._config.get("auto.offset.reset")
        )
        now_ms = self._clock.now_ms()
        ts = (
            timestamp_ms(opts.consume_timestamp)
            if opts.consume_timestamp is not None
            else now_ms - _DEFAULT_TIMESTAMP_BACK_MS
        )
        wanted = {
            _GROUP_RESET: auto_offset_reset(where, ts, now_ms),
            _GROUP_LIMIT: str(self.delivery_limit),
        }
        if self.lock_duration is not None:
            wanted[_GROUP_LOCK] = str(lock_ms(self.lock_duration))
        admin = AdminClient(admin_config(self._config))
        resource = ConfigResource(
            ResourceType.GROUP,
            self.consumer_group,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in wanted.items()
            ],
        )
        try:
            for fut in admin.incremental_alter_configs([resource]).values():
                fut.result(timeout=30)
        except confluent_kafka.KafkaException as exc:
            field_name = (
                "max_delivery_attempts" if _GROUP_LIMIT in str(exc) else "lock_duration"
            )
            raise ConfigError(
                field_name,
                getattr(opts, field_name),
                f"the broker refused the share group's configuration {wanted}: {exc}",
            ) from exc
        if self.lock_duration is None:
            group = ConfigResource(ResourceType.GROUP, self.consumer_group)
            for fut in admin.describe_configs([group]).values():
                entry = fut.result(timeout=30).get(_GROUP_LOCK)
                self.lock_duration = int(entry.value) / 1000 if entry is not None else 30.0

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the group: records held or waiting here are released (visible again at
        once; dead-lettered when the broker would otherwise archive them), pending
        acknowledgements are sent.  Handles become invalid."""
        if not self._started:
            return
        wait = self.share_options.shutdown_await if timeout is None else timeout
        self._stop.set()
        if self._upkeep is not None:
            self._upkeep.join(wait)
        with self._cond:
            if self._closed:
                return
            self._closed = True
            end = time.monotonic() + wait
            while self._polling and time.monotonic() < end:
                self._cond.wait(0.1)
            for h in [*self._held.values(), *self._buffer]:
                if h.count >= self.delivery_limit:
                    self._dead.append(h)
                else:
                    self._settle(h, confluent_kafka.AcknowledgeType.RELEASE, HandleState.REVOKED)
            self._held.clear()
            self._buffer.clear()
            self._cond.notify_all()
        self._flush_dead_letters()
        kc, self._kc = self._kc, None
        if kc is not None:
            try:
                kc.close()
            except confluent_kafka.KafkaException as exc:
                log.warning("%s: closing the share consumer failed: %s", self.name, exc)
        if self._producer is not None:
            self._producer.flush(wait)

    close = shutdown

    def check_alive(self) -> None:
        """Raise what stopped the consumer; :class:`ClientClosedError` when not running."""
        if not self._started:
            raise ClientClosedError(f"{self.name} is not started")
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ClientClosedError(f"{self.name} was shut down")

    def _require_running(self) -> None:
        if not self._started:
            raise ClientClosedError(f"{self.name} is not started; call startup() first")
        self.check_alive()

    def __enter__(self) -> ShareSimpleConsumer:
        return self.start()

    # -- receiving -------------------------------------------------------------------------
    @property
    def await_duration(self) -> float:
        return self._await_s

    @await_duration.setter
    def await_duration(self, value: float | timedelta) -> None:
        self._await_s = seconds_of("await_duration", value, minimum=0, maximum=MAX_AWAIT_DURATION_S)

    def receive(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> list[MessageView]:
        """Up to ``max_message_num`` (at most 32) messages, each invisible to every other
        receiver for ``invisible_duration`` (1 s up to the group's lock less a margin).
        Waits up to ``await_duration`` for the first message; while messages of this
        consumer's previous poll are held, it waits for them to be settled first."""
        n = receive_count(max_message_num)
        self._require_running()
        lock_s = self.lock_duration or 30.0
        invisible_s = seconds_of(
            "invisible_duration",
            invisible_duration,
            minimum=MIN_RECEIVE_INVISIBLE_S,
            maximum=max(MIN_RECEIVE_INVISIBLE_S, max_receive_invisible(lock_s)),
        )
        if not self._subs:
            raise InvalidInputError("subscription", None, "subscribe() to a topic before receive()")
        clock = time.monotonic
        end = clock() + self._await_s
        while True:
            with self._cond:
                self.check_alive()
                now = clock()
                self._expire(now)
                views = self._take(n, invisible_s, now)
                if views:
                    return views
                idle = not (self._buffer or self._held or self._dead or self._dead_in_flight)
                if not idle or self._polling:
                    if now >= end:
                        return []
                    self._cond.wait(min(end - now, _TICK_S))
                    continue
                self._polling = True
                resubscribe, self._resubscribe = self._resubscribe, False
                topics = sorted(self._by_kafka)
            batch: Any = ()
            try:
                if resubscribe:
                    self._kc.subscribe(topics)
                batch = self._kc.poll(max(0.0, min(end - clock(), _POLL_SLICE_S)))
            finally:
                with self._cond:
                    self._polling = False
                    self._last_sent = clock()
                    self._pending_acks = False  # the poll carried them
                    if batch:
                        self._accept(batch, clock())
                    self._cond.notify_all()
            if self._dead:
                self._flush_dead_letters()
            if not batch and clock() >= end:
                with self._cond:
                    return self._take(n, invisible_s, clock())

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

    def _accept(self, batch: Any, now: float) -> None:
        """Under the lock, after a poll: view, filter and sort the records acquired."""
        kc = self._kc
        for rec in batch:
            if rec.error() is not None:
                log.warning("%s: %s", self.name, rec.error())
                continue
            sub = self._by_kafka.get(rec.topic())
            count = rec.delivery_count() or 1
            if sub is None:  # unsubscribed meanwhile: let another member have it
                kc.acknowledge(rec, confluent_kafka.AcknowledgeType.RELEASE)
                self._pending_acks = True
                continue
            topic, tags = sub
            msg = view_of(rec, topic, False, [None])
            if tags.tags is not None and not tags.matches(msg.tags):
                kc.acknowledge(rec, confluent_kafka.AcknowledgeType.ACCEPT)  # filtered: settled
                self._pending_acks = True
                continue
            for _ in range(count - 1):
                msg = msg.redelivered()
            h = ShareHandle(self._id, rec, msg, count, now)
            if on_arrival(count, self.max_delivery_attempts) is Verdict.DEAD_LETTER:
                h.state = HandleState.EXPIRED
                self._dead.append(h)
            else:
                self._buffer.append(h)

    def _take(self, n: int, invisible_s: float, now: float) -> list[MessageView]:
        """Under the lock: up to ``n`` buffered records, held for ``invisible_s``; one whose
        lock is too short for that is released unseen (or dead-lettered)."""
        out: list[MessageView] = []
        buf, lock_s = self._buffer, self.lock_duration or 30.0
        while buf and len(out) < n:
            h = buf.popleft()
            if not can_hold(h.acquired_at, lock_s, now, invisible_s):
                self._expire_one(h)
                continue
            h.deadline = now + invisible_s
            h.duration = invisible_s
            h.token = next(self._tokens)
            self._held[h.token] = h
            out.append(ShareMessageView(h))
        return out

    def _expire(self, now: float) -> None:
        """Under the lock: end the holds whose invisible duration ran out, and the buffered
        records that could no longer be held for the shortest receive."""
        if self._held:
            for h in [h for h in self._held.values() if h.deadline <= now]:
                del self._held[h.token]
                self._expire_one(h)
        lock_s = self.lock_duration or 30.0
        buf = self._buffer
        while buf and not can_hold(buf[0].acquired_at, lock_s, now, MIN_RECEIVE_INVISIBLE_S):
            self._expire_one(buf.popleft())

    def _expire_one(self, h: ShareHandle) -> None:
        verdict = on_expiry(h.count, h.count, self.max_delivery_attempts, self.delivery_limit)
        if verdict is Verdict.DEAD_LETTER:
            h.state = HandleState.EXPIRED
            self._dead.append(h)
        else:
            self._settle(h, confluent_kafka.AcknowledgeType.RELEASE, HandleState.EXPIRED)

    def _settle(self, h: ShareHandle, kind: Any, state: HandleState) -> None:
        """Under the lock: acknowledge ``h`` locally (sent with the next poll or commit)."""
        self._kc.acknowledge(h.record, kind)
        h.state = state
        self._pending_acks = True
        key = "acked" if kind == confluent_kafka.AcknowledgeType.ACCEPT else "released"
        self._counts[key] += 1
        if not self._held:  # a receive waiting for the batch to be settled may poll now
            self._cond.notify_all()

    # -- dead letters ----------------------------------------------------------------------
    def _flush_dead_letters(self) -> None:
        """Write the records due for the DLQ, wait for the broker, then REJECT each one
        written (RELEASE one that was not: it comes back and is tried again)."""
        with self._cond:
            dead, self._dead = self._dead, []
            self._dead_in_flight += len(dead)
        if not dead:
            return
        producer = self._producer
        assert producer is not None
        results: dict[int, BaseException | None] = {}
        dlq = naming.to_kafka(self.dlq_topic)
        now_ms = self._clock.now_ms()
        for i, h in enumerate(dead):
            msg = h.msg
            failure = Failure(
                EXPIRED_FAILURE_TYPE,
                f"not acknowledged within its invisible duration of {h.duration:g} s "
                f"(delivery attempt {msg.reconsume_times + 1} of {self.max_delivery_attempts})",
            )
            headers: list[Any] = dlq_headers(
                msg,
                group=self.consumer_group,
                reason=DeadLetterReason.MAX_DELIVERY_ATTEMPTS.value,
                now_ms=now_ms,
                failure=failure,
            )

            def done(err: Any, _rec: Any, i: int = i) -> None:
                results[i] = None if err is None else confluent_kafka.KafkaException(err)

            try:
                producer.produce(
                    dlq, value=msg.body, key=h.record.key(), headers=headers, on_delivery=done
                )
            except (confluent_kafka.KafkaException, BufferError) as exc:
                results[i] = exc
        producer.flush(_DLQ_TIMEOUT_S)
        with self._cond:
            self._dead_in_flight -= len(dead)
            if self._kc is None:
                return
            for i, h in enumerate(dead):
                err = results.get(i, TimeoutError("no delivery report"))
                if err is None:
                    self._kc.acknowledge(h.record, confluent_kafka.AcknowledgeType.REJECT)
                    self._counts["dead_lettered"] += 1
                else:
                    log.error("%s: dead letter of %s not written: %s", self.name, h, err)
                    self._kc.acknowledge(h.record, confluent_kafka.AcknowledgeType.RELEASE)
                    self._counts["released"] += 1
            self._pending_acks = True
            self._cond.notify_all()

    # -- background ------------------------------------------------------------------------
    def _upkeep_loop(self) -> None:
        try:
            while not self._stop.wait(_TICK_S):
                with self._cond:
                    if self._closed:
                        return
                    now = time.monotonic()
                    if not self._polling:
                        self._expire(now)
                        if self._pending_acks and now - self._last_sent >= _ACK_FLUSH_S:
                            self._kc.commit_async()
                            self._pending_acks = False
                            self._last_sent = now
                if self._dead:
                    self._flush_dead_letters()
        except Exception as exc:  # the consumer stops; check_alive() raises it
            log.exception("%s: upkeep failed", self.name)
            self._error = exc
            on_error = self.share_options.on_error
            if on_error is not None:
                on_error(exc)

    def _on_commit(self, offsets: Any, exc: Any) -> None:
        """librdkafka's acknowledgement results (on whichever thread called it)."""
        if exc is not None:
            self._counts["ack_failures"] += 1
            log.warning("%s: acknowledgement failed at the broker: %s", self.name, exc)

    # -- acknowledging ---------------------------------------------------------------------
    def _live(self, message: object, now: float) -> ShareHandle:
        """Under the lock: the held handle of ``message``, or the reason it is not."""
        h = _share_handle(message)
        if h.consumer != self._id:
            raise InvalidReceiptHandleError(str(h), "issued by another consumer")
        if h.state is HandleState.INVISIBLE and self._held.get(h.token) is h:
            if h.deadline > now:
                return h
            del self._held[h.token]
            self._expire_one(h)
        reason = {
            HandleState.ACKED: "already acknowledged",
            HandleState.REVOKED: "released when the consumer was shut down",
        }.get(h.state, "its invisible duration ran out")
        raise InvalidReceiptHandleError(str(h), reason)

    def ack(self, message: MessageView) -> None:
        """Acknowledge ``message`` (ACCEPT; sent with the next poll or within a tick).
        Again: harmless; expired or another consumer's: :class:`InvalidReceiptHandleError`."""
        h = _share_handle(message)
        with self._cond:
            if h.state is HandleState.ACKED and h.consumer == self._id:
                return
            if self._kc is None or self._closed:
                self._require_running()
            h = self._live(message, time.monotonic())
            del self._held[h.token]
            self._settle(h, confluent_kafka.AcknowledgeType.ACCEPT, HandleState.ACKED)

    def ack_async(self, message: MessageView) -> PullFuture[None]:
        fut: PullFuture[None] = PullFuture()
        try:
            self.ack(message)
        except Exception as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        return fut

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
        with self._cond:
            now = time.monotonic()
            h = self._live(message, now)
            lock_s = self.lock_duration or 30.0
            if invisible_s > 0 and not can_hold(h.acquired_at, lock_s, now, invisible_s):
                room = max(0.0, h.acquired_at + usable_hold(lock_s) - now)
                raise InvalidInputError(
                    "invisible_duration",
                    invisible_duration,
                    f"at most {room:.1f} s for this message: the share group's record lock "
                    f"({lock_s:g} s, {_GROUP_LOCK}) cannot be extended",
                )
            del self._held[h.token]
            h.token = next(self._tokens)
            h.deadline = now + invisible_s
            h.duration = invisible_s
            self._held[h.token] = h
            if invisible_s == 0:
                del self._held[h.token]
                self._expire_one(h)
            return str(h)

    def change_invisible_duration_async(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> PullFuture[str]:
        fut: PullFuture[str] = PullFuture()
        try:
            fut.set_result(self.change_invisible_duration(message, invisible_duration))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    # -- figures ---------------------------------------------------------------------------
    @property
    def assignment(self) -> set[TP]:
        """Unknown on a share group (the broker assigns; every member may read each
        partition): always empty."""
        return set()

    def stats(self) -> dict[str, Any]:
        """Counts since start: acknowledged, released, dead-lettered, failed acks."""
        return dict(self._counts)

    def running_info(self) -> dict[str, Any]:
        with self._cond:
            return {
                "group": self.consumer_group,
                "backend": "share",
                "started": self._started,
                "running": self._started and not self._closed and self._error is None,
                "lock_duration": self.lock_duration,
                "max_delivery_attempts": self.max_delivery_attempts,
                "delivery_limit": self.delivery_limit,
                "available": len(self._buffer),
                "unacked": len(self._held),
                "dead_letters_pending": len(self._dead) + self._dead_in_flight,
                **self._counts,
            }


def _share_handle(message: object) -> ShareHandle:
    if not isinstance(message, ShareMessageView):
        raise InvalidInputError(
            "message", message, "expected a MessageView from receive() of this consumer"
        )
    return message.handle


def _filter_of(expression: str | FilterExpression | None) -> TagFilter:
    """A subscription's tag filter (SQL92 refused, as on the classic backend)."""
    if isinstance(expression, FilterExpression):
        if str(expression.filter_type).upper() not in ("TAG", "1", "FILTERTYPE.TAG"):
            raise InvalidInputError(
                "filter_expression",
                expression,
                "only tag expressions are supported (Kafka has no broker-side SQL92 filter)",
            )
        return TagFilter.parse(expression.expression)
    return TagFilter.parse(expression)
