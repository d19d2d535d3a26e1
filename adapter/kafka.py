"""A drop-in for ``confluent_kafka.Consumer`` with RocketMQ's retry path behind it.

Change the import and a poll loop keeps working; where it used to give up on a message it
can hand it to the retry path instead::

    from adapter.kafka import Consumer          # was: from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": ..., "group.id": "orders"})
    c.subscribe(["orders"])
    while True:
        msg = c.poll(1.0)
        if msg is None or msg.error():
            continue
        try:
            handle(msg)
        except Exception:
            c.reconsume_later(msg)              # back in 10 s, then 30 s, 1 min, ... DLQ

:class:`Consumer` *is* a ``confluent_kafka.Consumer`` (a subclass), created from the same
config dict, running on the application's thread (no thread of its own).  What it adds:

* the group's retry topic (``%RETRY%<group>``) is subscribed behind the application's
  topics (read from its beginning when the group has no offset there), and its records are
  returned as ``confluent_kafka.Message`` s whose ``topic()`` is the original topic;
  ``headers()`` carry the RocketMQ properties (``RECONSUME_TIME``, ``RETRY_TOPIC``, ...);
* ``reconsume_later(msg, delay_level=0)`` sends a copy along RocketMQ's delay ladder (0:
  level ``3 + reconsume_times``; > 0: that level; < 0: straight to ``%DLQ%<group>``; the
  DLQ too once ``max_reconsume_times`` is reached); a ScheduleService brings it back;
* ``reconsume_times(msg)`` says how many times the message was handed back;
* committing or storing an offset never goes past a message whose copy the broker has not
  acknowledged yet: the offset stops at that message, and what was asked is applied once
  the copy is acknowledged.  ``enable.auto.offset.store`` (default true) is kept by the
  adapter itself: a message's offset is stored once the loop comes back for more (or the
  consumer is closed, or the partition revoked), never past a message being handed back.

With ``circuit_breaker=CircuitBreaker()`` (off by default) a dependency that is down does
not flood the ladder: once the breaker opens, the partitions are paused (the assignment
stays), ``poll()`` returns nothing, and what the loop hands back is held (offset held, no
copy sent); every ``open_s`` a held message is returned again as a probe, and when one
succeeds (the loop comes back without handing it back) all held messages are returned
again and fetching resumes.  ``open_circuit(msg)`` hands a message back and opens the
breaker at once (its state: ``circuit()``; rules: :mod:`adapter.clients.dropin.dropin_circuit`).

A retried message's ``partition()`` and ``offset()`` are its position in the retry topic:
commit it with ``commit(message=msg)`` / ``store_offsets(message=msg)`` (which map it
there), not with a ``TopicPartition`` built from ``msg.topic()``.

The hot path adds one clock reading per ``poll()``/``consume()`` call (upkeep runs only when
due) and a topic comparison per record: no object is made for a record of the
application's own topics.

Why one module: :class:`Consumer` *is* the consumer (a subclass of the C type, with slots),
and every override -- ``poll``/``consume``, ``store_offsets``/``commit``, the rebalance
callbacks, ``close`` -- reads and writes the same state: the offsets held behind copies on
their way, the positions to store, the assignment, the breaker's held messages.  What needs
none of that state lives elsewhere: the pure rules in
:mod:`adapter.clients.dropin.copy_holds` (holds, resend timer) and
:mod:`adapter.clients.dropin.dropin_circuit` (the breaker's turns), the options and record
views in :mod:`adapter.clients.dropin.dropin_options` /
:mod:`adapter.clients.dropin.dropin_records`, the producer of copies in :mod:`adapter.io.publisher`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import confluent_kafka
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from adapter.clients.dropin.copy_holds import CopyHolds, RetryTimer
from adapter.clients.dropin.dropin_circuit import DropInCircuit, Fate, Turn
from adapter.clients.dropin.dropin_options import DropInOptions, DropInSettings, truthy
from adapter.clients.dropin.dropin_records import RetriedMessage, SendBackCopy
from adapter.clients.member.circuit_reporter import CircuitReporter, circuit_notifier
from adapter.constants import SUBSCRIPTION_CHECK_S
from adapter.core import hops, naming
from adapter.core.breaker import Breaker
from adapter.core.codec import Failure
from adapter.core.delay import DelayLevels, resolve_max_reconsume_times
from adapter.core.message import MessageExt
from adapter.core.publishing import Escalation, escalate
from adapter.core.routing import DeadLetter, DeadLetterReason, route_failed
from adapter.core.subscription import SubscriptionWatch
from adapter.core.types import TP
from adapter.errors import ClientClosedError, ConfigError, InvalidInputError
from adapter.io.config import build_options, check_group_protocol
from adapter.io.control import StatusPublisher
from adapter.io.errors import LIBRDKAFKA_LOG, error_text, refusal_of
from adapter.io.offsets import LOOKUP_TIMEOUT_S
from adapter.io.polling import is_cooperative, refresh_if_any_exists
from adapter.io.publisher import Publisher
from adapter.io.records import TopicNames
from adapter.io.signals import TerminateAsInterrupt
from adapter.io.topics import ensure_topics, plan_topics
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.kafka")

__all__ = [
    # re-exported from confluent_kafka as they are, so that ``import adapter.kafka as ck`` can
    # stand in for ``import confluent_kafka as ck`` in a consumer's module
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Consumer",
    "DropInOptions",
    "KafkaError",
    "KafkaException",
    "Message",
    "Producer",
    "RetriedMessage",
    "TopicPartition",
    "TracedConsumer",
]

#: The emulated ``enable.auto.offset.store`` stores positions at most this often.
STORE_INTERVAL_S = 0.05
#: How long ``close()`` and a revoke wait for copies still on their way.
FLUSH_TIMEOUT_S = 10.0
_LOOKUP_TIMEOUT_S = 10.0

_raw_poll = confluent_kafka.Consumer.poll
_raw_consume = confluent_kafka.Consumer.consume
_raw_store = confluent_kafka.Consumer.store_offsets
_raw_commit = confluent_kafka.Consumer.commit
_topic_of = confluent_kafka.Message.topic


class Consumer(confluent_kafka.Consumer):
    """``confluent_kafka.Consumer`` plus the retry path; see the module docstring."""

    # slots: an attribute of a subclass of the C type read through its instance dict costs
    # twice a slot's time, and poll() reads some on every call
    __slots__ = (
        "_assigned",
        "_auto_store",
        "_callback_assigned",
        "_circuit",
        "_circuit_paused",
        "_clock",
        "_closed",
        "_conf",
        "_cooperative",
        "_due",
        "_group",
        "_holds",
        "_in_callback",
        "_later",
        "_max",
        "_names",
        "_next_store",
        "_now",
        "_opts",
        "_positions",
        "_provisioned",
        "_publisher",
        "_reporter",
        "_retry_kafka",
        "_signals",
        "_subscribed",
        "_topics",
        "_user_callbacks",
        "_watch",
    )

    def __new__(cls, conf: Mapping[str, Any], **options: Unpack[DropInOptions]) -> Consumer:
        """A :class:`TracedConsumer` when made while :func:`adapter.telemetry.instrument`
        is in effect (and not ``tracing=False``): the untraced ``poll()``/``consume()``
        carry nothing of tracing, not even a check."""
        traced = cls is Consumer and telemetry.active is not None and options.get("tracing", True)
        return confluent_kafka.Consumer.__new__(TracedConsumer if traced else cls)

    def __init__(self, conf: Mapping[str, Any], **options: Unpack[DropInOptions]) -> None:
        opts = build_options(DropInSettings, options, "adapter.kafka.Consumer")
        if not isinstance(conf, Mapping):
            raise ConfigError("config", conf, "must be a dict of confluent-kafka settings")
        group = conf.get("group.id")
        if not isinstance(group, str) or not group:
            raise ConfigError("group.id", group, "a consumer group is required")
        naming.check_group(group)
        raw = dict(conf)
        check_group_protocol(raw)  # a refused setting named here, not by librdkafka
        # the adapter stores offsets itself, never past a message being handed back
        self._auto_store = truthy(raw.get("enable.auto.offset.store", True))
        raw["enable.auto.offset.store"] = False
        # librdkafka's own lines (a failed TLS handshake...) through Python logging, as
        # every client of the project, unless the application brings its logger
        raw.setdefault("logger", LIBRDKAFKA_LOG)
        super().__init__(raw)
        assert isinstance(opts.delay_levels, DelayLevels)
        self._opts = opts
        self._conf = dict(conf)
        self._group = group
        self._max = resolve_max_reconsume_times(opts.max_reconsume_times)
        self._topics = hops.GroupTopics(group, opts.delay_levels, opts.namespace)
        self._retry_kafka = self._topics.retry_kafka
        self._names = TopicNames(group)
        self._clock = opts.clock
        # poll() reads it every call: the system clock's is time.monotonic itself (no
        # Python frame)
        self._now: Callable[[], float] = opts.clock.monotonic
        self._holds = CopyHolds()
        self._later = RetryTimer()
        self._publisher = Publisher(
            conf,
            what=f"consumer {group} send-back producer",
            on_result=self._on_result,
            defaults={"message.timeout.ms": 30_000, "linger.ms": 5},
        )
        self._assigned: dict[TP, TopicPartition] = {}
        self._positions: list[TopicPartition] = []
        self._next_store = 0.0
        #: when poll()/consume() next have upkeep to do (storing positions, serving copies):
        #: one comparison per call on the hot path; 0 while copies are on their way
        self._due = 0.0
        self._in_callback = False
        self._callback_assigned = False
        self._user_callbacks: tuple[Any, Any, Any] = (None, None, None)
        self._cooperative = is_cooperative(raw)  # the consumer protocol is incremental too
        self._provisioned = False
        self._closed = False
        self._signals = TerminateAsInterrupt()
        #: the subscription (the retry topic included) and the check for topics of it this
        #: member holds nothing of (:mod:`adapter.core.subscription`)
        self._subscribed: list[str] = []
        self._watch = SubscriptionWatch(SUBSCRIPTION_CHECK_S)
        #: the circuit breaker (``None``: off, and nothing of it on the hot path)
        self._circuit: DropInCircuit | None = None
        self._reporter: CircuitReporter | None = None
        self._circuit_paused: list[TopicPartition] = []
        settings = opts.circuit_breaker
        if settings is not None:
            name = f"consumer {group}"
            self._reporter = CircuitReporter(
                group,
                name,
                opts.clock,
                lambda member: StatusPublisher(conf, group, member, clock=opts.clock),
            )
            self._circuit = DropInCircuit(
                Breaker(settings), circuit_notifier(name, group, settings, self._reporter)
            )
            self._reporter.bind(self._member_id, self._circuit.snapshot)

    # -- the retry path --------------------------------------------------------------------
    @property
    def retry_topic(self) -> str:
        """The group's retry topic (logical name; Kafka name: ``retry_kafka_topic``)."""
        return self._topics.retry_topic

    @property
    def retry_kafka_topic(self) -> str:
        return self._retry_kafka

    def reconsume_times(self, msg: confluent_kafka.Message) -> int:
        """How many times ``msg`` was handed back already (0 on its first delivery)."""
        return self._view(msg).reconsume_times

    def reconsume_later(
        self,
        msg: confluent_kafka.Message,
        delay_level: int = 0,
        *,
        error: BaseException | None = None,
    ) -> None:
        """Hand ``msg`` to the retry path: a copy goes to delay level ``delay_level`` (0:
        ``3 + reconsume_times``; > 0: that level, clamped; < 0: the DLQ), or to the DLQ once
        it was handed back ``max_reconsume_times`` times.  Until the broker acknowledges
        the copy, no offset of its partition is committed or stored past it.

        With a circuit breaker, ``msg`` counts as a failure; ``error`` (what the handler
        raised) of one of its ``trip_on`` types opens it at once; while it is not closed
        ``msg`` is held (offset held) instead of sent, and returned again later."""
        if isinstance(delay_level, bool) or not isinstance(delay_level, int):
            raise InvalidInputError("delay_level", delay_level, "must be an int")
        trip = None
        circuit = self._circuit
        if circuit is not None and error is not None and circuit.breaker.tripped_by(error):
            trip = f"listener raised {type(error).__name__}"
        self._hand_back(msg, delay_level, trip)

    def open_circuit(self, msg: confluent_kafka.Message, reason: str = "open_circuit()") -> None:
        """``msg`` failed for a reason that is not its own (what the handler calls is
        down): hold it and open the circuit breaker now.  Without a breaker it is
        ``reconsume_later(msg)``."""
        self._hand_back(msg, 0, reason if self._circuit is not None else None)

    def _hand_back(self, msg: confluent_kafka.Message, delay_level: int, trip: str | None) -> None:
        if self._closed:  # close() may have committed past it: a silent no-op would lose it
            raise ClientClosedError(
                f"consumer {self._group} was closed: no copy can be sent; the message is "
                "delivered again to the group's next consumer if close() did not commit it"
            )
        view = self._view(msg)
        tp = (view.kafka_topic, view.queue_id)
        circuit = self._circuit
        fate = Fate.SEND
        if circuit is not None:
            fate = circuit.failed(self._clock.monotonic(), tp, view.queue_offset, msg, trip=trip)
            if fate is Fate.HOLD:
                self._holds.hold(tp, view.queue_offset)
            if fate is Fate.HOLD or fate is Fate.HOLD_AGAIN:
                return
        dest = route_failed(
            reconsume_times=view.reconsume_times,
            max_reconsume_times=self._max,
            delay_level_when_next_consume=delay_level,
            levels=self._topics.levels,
            message_max_reconsume_times=view.max_reconsume_times,
        )
        failure = Failure("RECONSUME_LATER", "reconsume_later() called")
        if fate is Fate.SEND:  # (a held message handed out again has its offset held)
            self._holds.hold(tp, view.queue_offset)
        self._due = 0.0  # poll() serves the copy's verdict from now on
        self._send(SendBackCopy(tp, view.queue_offset, view, dest, failure))
        self._publisher.poll(0)

    def _view(self, msg: Any) -> MessageExt:
        if isinstance(msg, RetriedMessage):
            msg = msg.record
        if not isinstance(msg, confluent_kafka.Message) or msg.error() is not None:
            raise InvalidInputError("msg", msg, "expected a message returned by poll()/consume()")
        return self._names.view(msg)

    def _send(self, copy: SendBackCopy) -> None:
        hooks = telemetry.active
        if hooks is not None and self._opts.tracing:  # the copy's ``send`` span
            hooks.copies([copy], self._group, self._topics)
        record = hops.send_back(
            copy.msg,
            copy.dest,
            self._topics,
            now_ms=self._clock.now_ms(),
            failure=copy.failure,
            omit_body=copy.omit_body,
        )
        self._publisher.send(record, copy, alone=copy.alone)

    def _on_result(self, copy: SendBackCopy, err: Any, local: bool) -> None:
        """The broker's verdict on a copy (on the application's thread)."""
        if err is None:
            if isinstance(copy.dest, DeadLetter):
                log.warning(
                    "consumer %s: message %s moved to %s (%s)",
                    self._group,
                    copy.msg.msg_id,
                    self._topics.dlq_topic,
                    copy.dest.reason.value,
                )
            deferred = self._holds.release(copy.tp, copy.offset)
            if deferred is not None:
                self._apply(copy.tp, *deferred)
            return
        step = escalate(
            refusal_of(err),
            alone=copy.alone or local,
            dead_letter=isinstance(copy.dest, DeadLetter),
            body_omitted=copy.omit_body,
        )
        text = error_text(err)
        if step is Escalation.HOLD:
            log.warning(
                "consumer %s: copy of %s failed (%s); sent again in %ss, offset held",
                self._group,
                copy.msg.msg_id,
                text,
                self._opts.send_back_retry_interval,
            )
            self._later.later(self._clock.monotonic() + self._opts.send_back_retry_interval, copy)
            return
        if step is Escalation.SEND_ALONE:
            copy.alone = True
        elif step is Escalation.DEAD_LETTER:
            log.error(
                "consumer %s: the broker refuses the retry copy of %s (%s); sending it to %s",
                self._group,
                copy.msg.msg_id,
                text,
                self._topics.dlq_topic,
            )
            copy.dest = DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, copy.msg.reconsume_times + 1)
            copy.alone = False
        else:
            copy.omit_body, copy.alone = True, False
        self._send(copy)

    def _serve_copies(self) -> None:
        """Delivery reports and copies due again (only while some are on their way)."""
        self._publisher.poll(0)
        if self._later:
            for copy in self._later.due(self._clock.monotonic()):
                if self._holds.holds(copy.tp, copy.offset):
                    self._send(copy)

    def _apply(self, tp: TP, offset: int, commit: bool) -> None:
        """What the application asked for ``tp`` and was held back, now that it may go."""
        offsets = [TopicPartition(tp[0], tp[1], offset)]
        try:
            if commit:
                _raw_commit(self, offsets=offsets, asynchronous=True)
            else:
                _raw_store(self, offsets=offsets)
        except KafkaException as exc:
            log.debug("consumer %s: applying %s@%d failed: %s", self._group, tp, offset, exc)

    # -- fetching --------------------------------------------------------------------------
    def _upkeep(self) -> None:
        """Before a poll()/consume() that is due for it: store positions (the emulated
        ``enable.auto.offset.store``), serve copies on their way; then the next due time."""
        now = self._now()
        if self._auto_store and now >= self._next_store:
            self._store_positions()
        if self._holds:
            self._serve_copies()
        watch = self._watch
        if self._subscribed and watch.pending(now):
            unheld = watch.due(now, self._subscribed, self._assigned)
            if unheld:
                refresh_if_any_exists(self, unheld, LOOKUP_TIMEOUT_S, f"consumer {self._group}")
        if self._holds or self._later or self._circuit is not None:
            self._due = 0.0
        elif self._auto_store:
            self._due = self._next_store
        else:
            self._due = float("inf")
        if self._subscribed and watch.next_at is not None:
            self._due = min(self._due, watch.next_at)

    def poll(self, timeout: float | None = None) -> confluent_kafka.Message | None:
        if self._now() >= self._due:
            self._upkeep()
            if self._circuit is not None:
                out = self._circuit_consume(1, timeout)
                return out[0] if out else None
        msg = _raw_poll(self) if timeout is None else _raw_poll(self, timeout)
        if msg is not None and _topic_of(msg) == self._retry_kafka and msg.error() is None:
            return self._retried(msg)
        return msg

    def consume(
        self, num_messages: int = 1, timeout: float | None = None
    ) -> list[confluent_kafka.Message]:
        if self._now() >= self._due:
            self._upkeep()
            if self._circuit is not None:
                return self._circuit_consume(num_messages, timeout)
        msgs: list[confluent_kafka.Message] = (
            _raw_consume(self, num_messages)
            if timeout is None
            else _raw_consume(self, num_messages, timeout)
        )
        retry = self._retry_kafka
        topic_of = _topic_of
        for i, msg in enumerate(msgs):
            if topic_of(msg) == retry and msg.error() is None:
                msgs[i] = self._retried(msg)
        return msgs

    def _retried(self, record: confluent_kafka.Message) -> RetriedMessage:
        return RetriedMessage.of(record, self._names.view(record).topic)

    # -- the circuit breaker (only with ``circuit_breaker=``) -------------------------------
    def _circuit_consume(
        self, num_messages: int, timeout: float | None
    ) -> list[confluent_kafka.Message]:
        """``poll()``/``consume()`` with a breaker: settle what was handed out, apply its
        state changes, then return held messages due again or fetch."""
        circuit = self._circuit
        assert circuit is not None
        now = self._clock.monotonic()
        turn, released = circuit.step(now)
        for tp, offset, _ in released:  # succeeded when handed out again: free the offset
            deferred = self._holds.release(tp, offset)
            if deferred is not None:
                self._apply(tp, *deferred)
        if turn is Turn.PAUSE:
            self._pause_all()
        elif turn is Turn.RESUME:
            self._resume_all()
        if self._reporter is not None:
            self._reporter.step(now)
        again: list[confluent_kafka.Message] = []
        while len(again) < num_messages:
            item = circuit.hand_out()
            if item is None:
                break
            again.append(item[2])
        if again:
            _raw_poll(self, 0)  # serve the group's events meanwhile
            return again
        if timeout is None:
            msgs: list[confluent_kafka.Message] = _raw_consume(self, num_messages)
        else:
            msgs = _raw_consume(self, num_messages, timeout)
        retry = self._retry_kafka
        handed = 0
        for i, msg in enumerate(msgs):
            if msg.error() is None:
                handed += 1
                if _topic_of(msg) == retry:
                    msgs[i] = self._retried(msg)
        circuit.handed_out(handed)
        return msgs

    def _pause_all(self) -> None:
        parts = [TopicPartition(p.topic, p.partition) for p in self.assignment()]
        if parts:
            self.pause(parts)
        self._circuit_paused = parts

    def _resume_all(self) -> None:
        owned = {(p.topic, p.partition) for p in self.assignment()}
        parts = [p for p in self._circuit_paused if (p.topic, p.partition) in owned]
        self._circuit_paused = []
        if parts:
            self.resume(parts)

    def _member_id(self) -> str | None:
        try:
            member: str | None = self.memberid()
        except RuntimeError:  # closed
            return None
        return member

    def circuit(self) -> dict[str, Any] | None:
        """The circuit breaker's state (``None``: no breaker): ``state`` (closed / open /
        half_open), ``open_seconds`` in all, ``held_messages`` (handed back while open, not
        sent), ``held_batches`` (the same: a message is a batch here), ``opened``
        (times)."""
        if self._circuit is None:
            return None
        return self._circuit.snapshot(self._clock.monotonic()).as_dict()

    # -- offsets ---------------------------------------------------------------------------
    def _position_of(self, msg: Any) -> TopicPartition:
        if isinstance(msg, RetriedMessage):
            msg = msg.record
        return TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)

    def _clamped(self, offsets: Sequence[TopicPartition], *, commit: bool) -> list[Any]:
        holds = self._holds
        out = list(offsets)
        if not holds:
            return out
        for i, tp in enumerate(out):
            key = (tp.topic, tp.partition)
            if holds.holds(key) and tp.offset >= 0:
                offset = holds.clamp(key, tp.offset, commit=commit)
                if offset != tp.offset:
                    out[i] = TopicPartition(tp.topic, tp.partition, offset)
        return out

    def store_offsets(
        self,
        message: confluent_kafka.Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
    ) -> None:
        """``confluent_kafka.Consumer.store_offsets``, never past a message being handed
        back (a retried message maps to its place in the retry topic)."""
        if message is not None and offsets is not None:
            raise InvalidInputError("message", message, "give message or offsets, not both")
        if message is not None:
            if not self._holds and not isinstance(message, RetriedMessage):
                _raw_store(self, message=message)
                return
            offsets = [self._position_of(message)]
        if offsets is None:
            raise InvalidInputError("offsets", None, "give message or offsets")
        _raw_store(self, offsets=self._clamped(offsets, commit=False))

    def commit(
        self,
        message: confluent_kafka.Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> Any:
        """``confluent_kafka.Consumer.commit``, never past a message being handed back.
        Without ``message`` or ``offsets`` it commits the stored offsets (which include
        what the loop has handed out so far when ``enable.auto.offset.store`` is on)."""
        if message is not None and offsets is not None:
            raise InvalidInputError("message", message, "give message or offsets, not both")
        if message is not None:
            offsets = [self._position_of(message)]
        if offsets is None:
            if self._auto_store:
                self._store_positions()
            if asynchronous:
                return _raw_commit(self, asynchronous=True)
            return _raw_commit(self, asynchronous=False)
        clamped = self._clamped(offsets, commit=True)
        if asynchronous:
            return _raw_commit(self, offsets=clamped, asynchronous=True)
        return _raw_commit(self, offsets=clamped, asynchronous=False)

    def _store_positions(self, parts: list[TopicPartition] | None = None) -> None:
        """The emulated ``enable.auto.offset.store``: store where the loop has got to (the
        offset after the last message handed out), clamped."""
        self._next_store = self._now() + STORE_INTERVAL_S
        parts = self._positions if parts is None else parts
        if not parts:
            return
        try:
            positions = self.position(parts)
        except KafkaException as exc:
            log.debug("consumer %s: positions: %s", self._group, exc)
            return
        moved = [p for p in positions if p.offset >= 0 and p.error is None]
        if not moved:
            return
        try:
            _raw_store(self, offsets=self._clamped(moved, commit=False))
        except KafkaException as exc:
            log.debug("consumer %s: storing positions failed: %s", self._group, exc)

    # -- subscription and rebalance --------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: Callable[..., Any] | None = None,
        on_revoke: Callable[..., Any] | None = None,
        on_lost: Callable[..., Any] | None = None,
    ) -> None:
        """``confluent_kafka.Consumer.subscribe``; the group's retry topic is subscribed
        too (and created, with the DLQ and the delay-level topics, unless
        ``auto_create_topics=False``)."""
        if isinstance(topics, str) or not all(isinstance(t, str) for t in topics):
            raise InvalidInputError("topics", topics, "must be a list of topic names")
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost)):
            if cb is not None and not callable(cb):
                raise InvalidInputError(name, cb, "must be callable(consumer, partitions)")
        if self._opts.auto_create_topics and not self._provisioned:
            ensure_topics(
                self._conf,
                plan_topics(
                    groups=[self._group],
                    delay_levels=self._topics.levels,
                    namespace=self._topics.namespace,
                    partitions=self._opts.partitions,
                ),
            )
            self._provisioned = True
        self._user_callbacks = (on_assign, on_revoke, on_lost)
        wanted = [t for t in topics if t != self._retry_kafka] + [self._retry_kafka]
        self._subscribed = wanted
        self._due = 0.0  # the subscription check starts its interval at the next poll
        super().subscribe(
            wanted, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        del consumer
        retry = [p for p in partitions if p.topic == self._retry_kafka]
        if retry:
            self._start_retry_partitions(retry)
        if not self._user_callback(self._user_callbacks[0], partitions):
            if self._cooperative:
                self.incremental_assign(partitions)
            else:
                self.assign(partitions)
        if self._circuit is not None and self._circuit.paused and partitions:
            fresh = [TopicPartition(p.topic, p.partition) for p in partitions]
            self.pause(fresh)  # fetching is stopped: a new partition waits too
            self._circuit_paused.extend(fresh)

    def _user_callback(
        self, user: Callable[..., Any] | None, partitions: list[TopicPartition]
    ) -> bool:
        """Run the application's rebalance callback (if any); whether it (un)assigned the
        partitions itself, as confluent-kafka lets it."""
        self._callback_assigned = False
        if user is not None:
            self._in_callback = True
            try:
                user(self, partitions)
            finally:
                self._in_callback = False
        return self._callback_assigned

    def _start_retry_partitions(self, parts: list[TopicPartition]) -> None:
        """The retry topic is read from its beginning where the group has no offset."""
        try:
            committed = self.committed(
                [TopicPartition(p.topic, p.partition) for p in parts], timeout=_LOOKUP_TIMEOUT_S
            )
        except KafkaException as exc:
            log.warning("consumer %s: committed offsets of the retry topic: %s", self._group, exc)
            return
        for p, c in zip(parts, committed, strict=True):
            p.offset = c.offset if c.offset >= 0 else OFFSET_BEGINNING

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        del consumer
        tps = [(p.topic, p.partition) for p in partitions]
        if self._holds and any(self._holds.holds(tp) for tp in tps):
            self._flush_copies(FLUSH_TIMEOUT_S)
        if self._auto_store:
            self._store_positions([TopicPartition(t, p) for t, p in tps])
        self._release(partitions, tps, self._user_callbacks[1])

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        del consumer
        on_lost, on_revoke = self._user_callbacks[2], self._user_callbacks[1]
        tps = [(p.topic, p.partition) for p in partitions]
        self._release(partitions, tps, on_lost if on_lost is not None else on_revoke)

    def _release(
        self, partitions: list[TopicPartition], tps: list[TP], user: Callable[..., Any] | None
    ) -> None:
        if not self._user_callback(user, partitions):
            if self._cooperative:
                self.incremental_unassign(partitions)
            else:
                self.unassign()
        for tp in tps:
            self._holds.forget(tp)
        if self._circuit is not None:
            self._circuit.revoked(tps)

    def _flush_copies(self, timeout: float) -> None:
        """Serve the copies' deliveries until none is in flight or ``timeout`` passed on
        the consumer's clock."""
        now = self._now
        deadline = now() + timeout
        while self._publisher.in_flight() and now() < deadline:
            self._publisher.poll(0.05)

    # the assignment is tracked for the emulated offset store
    def assign(self, partitions: list[TopicPartition]) -> None:
        self._callback_assigned = True
        super().assign(partitions)
        self._track(partitions, replace=True)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._callback_assigned = True
        super().incremental_assign(partitions)
        self._track(partitions)

    def unassign(self) -> None:
        self._callback_assigned = True
        super().unassign()
        self._track([], replace=True)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._callback_assigned = True
        super().incremental_unassign(partitions)
        for p in partitions:
            self._assigned.pop((p.topic, p.partition), None)
        self._positions = list(self._assigned.values())

    def _track(self, partitions: list[TopicPartition], *, replace: bool = False) -> None:
        if replace:
            self._assigned = {}
        for p in partitions:
            self._assigned[(p.topic, p.partition)] = TopicPartition(p.topic, p.partition)
        self._positions = list(self._assigned.values())

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Store where the loop has got to, wait (bounded) for copies on their way, then
        close like ``confluent_kafka.Consumer.close`` (which commits the stored offsets)."""
        self._close(finished=True)

    def _close(self, *, finished: bool) -> None:
        """``finished``: the loop came back after the last poll (its messages are done);
        not so when an exception (Ctrl-C, SIGTERM, a handler's error) left the ``with``
        block: what the last poll returned is then delivered again, not committed."""
        if self._closed:
            super().close()
            return
        self._closed = True
        if not finished:
            self._auto_store = False  # nor when close() revokes the partitions below
        try:
            if self._auto_store:
                self._store_positions()
            if self._publisher.in_flight() or self._later:
                self._flush_copies(FLUSH_TIMEOUT_S)
                for copy in self._later.due(float("inf")):
                    if self._holds.holds(copy.tp, copy.offset):
                        self._send(copy)
                self._flush_copies(FLUSH_TIMEOUT_S)
        finally:
            if self._reporter is not None:
                self._reporter.close()
            left = self._publisher.close(0)
            if left:
                log.warning("consumer %s: %d copies unacknowledged at close", self._group, left)
            super().close()

    def __enter__(self) -> Consumer:
        self._signals.enter()  # SIGTERM leaves the block as Ctrl-C does
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            self._close(finished=exc_type is None)
        finally:
            self._signals.exit()


class TracedConsumer(Consumer):
    """:class:`Consumer` made while tracing is on: each ``poll()``/``consume()`` that
    returns messages is a ``receive`` span in their traces (one message: a child of its
    context, linked to it; several: a link to each).  ``Consumer(...)`` makes it itself."""

    __slots__ = ()

    def poll(self, timeout: float | None = None) -> confluent_kafka.Message | None:
        msg = Consumer.poll(self, timeout)
        if msg is not None and msg.error() is None:
            self._received([msg])
        return msg

    def consume(
        self, num_messages: int = 1, timeout: float | None = None
    ) -> list[confluent_kafka.Message]:
        msgs = Consumer.consume(self, num_messages, timeout)
        if msgs:
            self._received([m for m in msgs if m.error() is None])
        return msgs

    def _received(self, msgs: list[confluent_kafka.Message]) -> None:
        hooks = telemetry.active
        if hooks is None or not msgs:
            return
        try:
            hooks.receive([self._view(m) for m in msgs], self._group)
        except Exception:  # tracing never stops consuming
            log.debug("consumer %s: receive span not made", self._group, exc_info=True)
