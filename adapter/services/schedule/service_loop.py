"""The ScheduleService's loop (:class:`ServiceLoop`): the consumer of the delay-level
topics, fed to the pure :class:`~adapter.core.engine.schedule.ScheduleEngine`, whose due
entries it forwards through the service's delivery (:mod:`.delivery`) or sends to the
service's DLQ when they cannot be scheduled; the rebalance callbacks and the trace events
of the forwards.  :class:`~adapter.services.schedule.service.ScheduleService` runs it on a
:class:`~adapter.io.loop.ClientLoop`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from adapter.constants import (
    METADATA_REFRESH_MS,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import hops, naming
from adapter.core.engine.actions import StoreOffsets
from adapter.core.engine.schedule import Entry, ScheduleAction, ScheduleEngine
from adapter.core.headers import HeaderView, parse_non_negative
from adapter.core.publishing import Escalation, escalate
from adapter.core.schedule import Forward, Invalid, Repark, decide_due
from adapter.core.stats import LATENCY_BUCKETS_S, Histogram
from adapter.core.trace import TraceEvent, TraceSink, TraceStatus
from adapter.core.types import TP
from adapter.errors import AuthenticationError, TopicNameError
from adapter.io.config import require_setting, set_rebalance_protocol
from adapter.io.errors import (
    AUTH_CODES,
    FatalErrorWatch,
    error_text,
    is_unknown_topic,
    make_client,
    permission_hint,
    refusal_of,
)
from adapter.io.polling import apply_assignment, consume_available, is_cooperative
from adapter.io.polling import release_assignment as release
from adapter.services.schedule.at_least_once import AtLeastOnce
from adapter.services.schedule.delivery import Copy, Delivery, omitted_body, purged
from adapter.services.schedule.destinations import DESTINATION_TTL_S, Destinations
from adapter.services.schedule.exactly_once import ExactlyOnce
from adapter.services.schedule.levels import level_delay_ms, level_topics_pattern
from adapter.services.schedule.options import (
    DeliveryGuarantee,
    ScheduleServiceSettings,
    ScheduleStats,
)
from adapter.services.schedule.pausing import PartitionPauser
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.schedule")

#: The strategy of each delivery guarantee.
DELIVERIES: dict[DeliveryGuarantee, type[AtLeastOnce] | type[ExactlyOnce]] = {
    DeliveryGuarantee.AT_LEAST_ONCE: AtLeastOnce,
    DeliveryGuarantee.EXACTLY_ONCE: ExactlyOnce,
}


class ServiceLoop:
    """The service's :class:`~adapter.io.loop.LoopHandler`, and the
    :class:`~adapter.services.schedule.delivery.Host` of its delivery."""

    def __init__(
        self,
        config: Mapping[str, Any],
        group: str,
        opts: ScheduleServiceSettings,
        stats: ScheduleStats,
        errors: FatalErrorWatch,
    ) -> None:
        self.config = config
        self.group = group
        self.opts = opts
        self.errors = errors
        self.clock = opts.clock
        self.stats = stats
        self.engine = ScheduleEngine(
            buffer_max=opts.buffer_max,
            retry_after_ms=int(opts.retry_after_failure_s * 1000),
        )
        self.topics = hops.GroupTopics(group, opts.levels, opts.namespace)
        self.dlq = naming.dlq_topic(group)
        self.delivery: Delivery | None = None
        self._consumer: Any = None
        self._pauser: PartitionPauser | None = None
        self._cooperative = True
        self._destinations = Destinations(config, DESTINATION_TTL_S, clock=self.clock)
        self._levels: dict[str, tuple[int, int]] = {}  # Kafka topic -> (level, delay ms)
        self._trace: TraceSink | None = opts.trace_sink
        self._owned_trace: Any = None
        self._guard: Callable[[Callable[..., None]], Callable[..., None]] = lambda cb: cb
        self._running: Callable[[], bool] = lambda: False

    def bind(
        self,
        *,
        guard: Callable[[Callable[..., None]], Callable[..., None]],
        running: Callable[[], bool],
    ) -> None:
        """Attach the loop's callback guard and its running flag before ``open()``."""
        self._guard = guard
        self._running = running

    # -- clients ---------------------------------------------------------------------------
    def _refused(self, err: Any, topic: str | None) -> None:
        """An authorization refusal on the service's consumer: logged as an error naming the
        missing permission, and raised by ``check_alive()`` while it lasts."""
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            hint = permission_hint(err.code(), self.group, "READ")
        else:
            hint = permission_hint(err.code(), topic or None, "READ")
        error = AuthenticationError(f"ScheduleService: {err.str()}{hint}", kafka_error=err)
        self.errors.report(error)
        log.error("%s", error)

    def open(self) -> None:
        opts = self.opts
        if opts.trace_topic and self._trace is None:
            from adapter.io.trace_sink import KafkaTraceSink  # on use: loads the Avro codec

            self._owned_trace = KafkaTraceSink(self.config, opts.trace_topic, clock=self.clock)
            self._trace = self._owned_trace
        mode = DELIVERIES[opts.delivery]
        cconf = dict(self.config)
        cconf["group.id"] = self.group
        cconf["error_cb"] = self.errors
        cconf["auto.offset.reset"] = "earliest"  # out of range: never skip an entry
        set_rebalance_protocol(cconf)
        # a resumed partition joins the next fetch request: keep the broker's long poll
        # short; and never sit out librdkafka's 1 s fetch back-off with entries due
        cconf.setdefault("fetch.wait.max.ms", 20)
        cconf.setdefault("fetch.queue.backoff.ms", 20)
        # level topics are subscribed by pattern: a new table's topics are found this soon
        cconf.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
        require_setting(cconf, "enable.auto.offset.store", False, "offsets are stored when settled")
        mode.configure_consumer(cconf)
        require_setting(cconf, "isolation.level", "read_committed", "aborted entries are skipped")
        delivery = mode(self, self.config, opts, errors=self.errors)
        self._cooperative = is_cooperative(cconf)
        self._consumer = make_client(Consumer, cconf, what="ScheduleService consumer")
        self._pauser = PartitionPauser(self._consumer, self.stats)
        delivery.start(self._consumer)
        self.delivery = delivery
        guard = self._guard
        self._consumer.subscribe(
            [level_topics_pattern(opts.namespace)],
            on_assign=guard(self._on_assign),
            on_revoke=guard(self._on_revoke),
            on_lost=guard(self._on_lost),
        )

    def running(self) -> bool:
        return self._running()

    # -- the loop --------------------------------------------------------------------------
    def step(self) -> None:
        engine = self.engine
        delivery = self.delivery
        assert delivery is not None
        now_ms = self.clock.now_ms()
        actions = engine.tick(now_ms)
        if actions:
            self.apply(actions)
        due = engine.due(now_ms)
        for entry in due:
            self._process(entry, now_ms)
        delivery.end_pass(bool(due))
        opts = self.opts
        wake = engine.next_wake_ms()
        linger_s = delivery.linger_s()
        if wake is None and linger_s is None:
            # nothing waits: take whatever comes first (it may be overdue already)
            fetched = consume_available(self._consumer, opts.batch_size, opts.poll_timeout_s)
        else:
            # entries wait (or a transaction gathers): sleep until the next is due (at least
            # tick_ms), taking in what arrives meanwhile as one batch
            timeout = opts.poll_timeout_s
            if wake is not None:
                timeout = min(timeout, max(opts.tick_ms, wake - self.clock.now_ms()) / 1000)
            if linger_s is not None:
                timeout = min(timeout, linger_s)
            fetched = self._consumer.consume(opts.batch_size, timeout)
        seen_ms = self.clock.now_ms()  # after the fetch: never before the sender sent it
        for kmsg in fetched:
            err = kmsg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise KafkaException(err)
                    if err.code() in AUTH_CODES:  # it cannot do its work: say what is missing
                        self._refused(err, kmsg.topic())
                        continue
                    log.warning("ScheduleService consume error: %s", err.str())
                continue
            engine.fetched(
                (kmsg.topic(), kmsg.partition()),
                kmsg.offset(),
                kmsg.value(),
                kmsg.key(),
                kmsg.headers(),
                seen_ms,
            )

    def stop_starting(self) -> None:
        """Nothing to stop at once: the loop forwards nothing after the step it is on, and
        ``close`` settles what was forwarded."""

    def close(self) -> None:
        try:
            if self.delivery is not None and self._consumer is not None:
                self.delivery.settle(self.engine.partitions)
            if self._consumer is not None:
                self._consumer.close()  # may revoke (cooperative): commits again, harmlessly
        finally:
            self._consumer = None
            self._pauser = None
            self._destinations.close()
            if self.delivery is not None:
                self.delivery.close()
            if self._owned_trace is not None:
                self._owned_trace.close()

    # -- one entry -------------------------------------------------------------------------
    def _process(self, entry: Entry, now_ms: int) -> None:
        """Forward, re-park or dead-letter a due entry."""
        if not self.engine.current(entry):
            return  # its partition was rewound or revoked meanwhile: it is read again
        mark = entry.mark
        if mark is not None and mark.refused is not None:
            self.dead_letter(entry, f"forward failed permanently: {mark.refused}", now_ms)
            return
        decision = decide_due(entry.info, now_ms=now_ms, levels=self.opts.levels)
        if isinstance(decision, Forward):
            try:
                problem, partitions = self._destinations.check(decision, self._consumer)
            except KafkaException as exc:  # the broker did not answer: not the entry's fault
                self._lookup_failed(entry, decision.real_topic, exc, now_ms)
                return
            if problem is not None:
                self.dead_letter(entry, problem, now_ms)
                return
            record = hops.forward(
                entry.headers,
                entry.value,
                entry.key,
                real_topic=decision.real_topic,
                real_queue_id=decision.real_queue_id,
                partitions=partitions,
            )
            self._forwarded(entry, now_ms, decision)
            hooks = telemetry.active
            if (
                hooks is not None and self.opts.tracing
            ):  # the forward's ``send`` span, its lateness on it
                hooks.forward(
                    record.headers,
                    record.topic,
                    record.partition,
                    level=self.level(entry.tp[0])[0],
                    lateness_ms=now_ms - entry.info.due_ms,
                )
        elif isinstance(decision, Repark):
            self.stats.reparked += 1
            record = hops.repark(
                entry.headers,
                entry.value,
                entry.key,
                placement=decision.placement,
                levels=self.opts.levels,
                namespace=self.opts.namespace,
            )
        else:
            assert isinstance(decision, Invalid)
            self.dead_letter(entry, decision.reason, now_ms)
            return
        delivery = self.delivery
        assert delivery is not None
        delivery.send(Copy(entry, record, alone=bool(mark and mark.alone)))

    def _forwarded(self, entry: Entry, now_ms: int, decision: Forward) -> None:
        stats = self.stats
        due = entry.info.due_ms
        stats.forwarded += 1
        stats.lateness.add(now_ms - due)
        if now_ms < due:
            stats.early += 1
        level = self.level(entry.tp[0])[0]
        stats.forwarded_by_level[level] = stats.forwarded_by_level.get(level, 0) + 1
        hist = stats.lateness_seconds.get(level)
        if hist is None:
            hist = stats.lateness_seconds[level] = Histogram(LATENCY_BUCKETS_S)
        hist.observe(max(0, now_ms - due) / 1000)
        if self._trace is not None:
            self._emit_forward(entry, decision, now_ms)

    def dead_letter(self, entry: Entry, reason: str, now_ms: int) -> None:
        tp = entry.tp
        log.warning(
            "invalid schedule entry %s[%d]@%d: %s -> %s",
            tp[0],
            tp[1],
            entry.offset,
            reason,
            self.dlq,
        )
        self.stats.invalid += 1
        record = hops.invalid_entry(
            entry.headers,
            entry.value,
            entry.key,
            dlq_topic=self.dlq,
            origin_topic=_logical_or_raw(tp[0]),
            reason=reason,
            now_ms=now_ms,
        )
        mark = entry.mark
        if mark is not None and mark.omit_body:
            record = hops.without_body(record, omitted_body(entry))
        delivery = self.delivery
        assert delivery is not None
        delivery.send(
            Copy(
                entry,
                record,
                dead_letter=True,
                alone=bool(mark and mark.alone),
                omitted=bool(mark and mark.omit_body),
            )
        )

    def _lookup_failed(
        self, entry: Entry, real_topic: str, exc: KafkaException, now_ms: int
    ) -> None:
        """Looking ``real_topic`` up failed even after retries (the broker is down or
        unreachable): the entry is neither forwarded nor dead-lettered.  Its partition is
        read again from its smallest unsettled entry after a hold; exactly-once, the open
        transaction aborts too (entries of the partition in it are read again with it)."""
        tp = entry.tp
        log.warning(
            "looking up %s for %s[%d]@%d failed (%s); holding the partition and reading it again",
            real_topic,
            tp[0],
            tp[1],
            entry.offset,
            exc,
        )
        delivery = self.delivery
        assert delivery is not None
        delivery.on_lookup_failed()
        rewind = self.engine.failed(entry, now_ms)
        if rewind is not None:
            self.apply([rewind])

    def level(self, kafka_topic: str) -> tuple[int, int]:
        known = self._levels.get(kafka_topic)
        if known is None:
            known = level_delay_ms(kafka_topic) or (0, 0)
            self._levels[kafka_topic] = known
        return known

    # -- refusals --------------------------------------------------------------------------
    def refused(self, copy: Copy, err: Any, local: bool) -> tuple[Escalation, str] | None:
        """A copy was refused: count and log it and say what comes next (``None``: nothing,
        its entry was rewound, revoked or aborted meanwhile and is read again).  What the
        step means for the copy is the delivery's business."""
        entry = copy.entry
        if not self.engine.current(entry) or purged(err):
            return None
        self.stats.send_failures += 1
        text = error_text(err)
        if is_unknown_topic(err):
            self._destinations.forget()  # deleted after it was cached: look again
        alone = copy.alone or local
        step = escalate(
            refusal_of(err), alone=alone, dead_letter=copy.dead_letter, body_omitted=copy.omitted
        )
        tp = entry.tp
        log.warning(
            "%s from %s[%d]@%d refused (%s): %s",
            "dead letter" if copy.dead_letter else "forward",
            tp[0],
            tp[1],
            entry.offset,
            text,
            step.value,
        )
        return step, text

    # -- actions ---------------------------------------------------------------------------
    def apply(self, actions: list[ScheduleAction]) -> None:
        pauser = self._pauser
        delivery = self.delivery
        assert pauser is not None and delivery is not None
        for action in actions:
            if isinstance(action, StoreOffsets):
                delivery.store_offsets(action.offsets)
            else:
                pauser.apply(action)

    # -- rebalance -------------------------------------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        for tp in tps:
            self.engine.assigned(tp, self.level(tp[0])[1])
        apply_assignment(consumer, partitions, self._cooperative)
        if self._pauser is not None:
            self._pauser.forget(tps)
        # one short line at INFO (the default table alone is 54 partitions); the list at DEBUG
        log.info(
            "ScheduleService %s assigned %d partition(s) of %d delay-level topic(s)",
            self.group,
            len(tps),
            len({topic for topic, _ in tps}),
        )
        log.debug("ScheduleService %s assigned %s", self.group, sorted(tps))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        if self.delivery is not None:
            self.delivery.settle(tps)
        self._given_up(consumer, partitions, tps)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._given_up(consumer, partitions, [(p.topic, p.partition) for p in partitions])

    def _given_up(self, consumer: Any, partitions: list[Any], tps: list[TP]) -> None:
        for tp in tps:
            self.engine.revoked(tp)
        release(consumer, partitions, self._cooperative)
        if self._pauser is not None:
            self._pauser.forget(tps)

    # -- traces ----------------------------------------------------------------------------
    def _emit_forward(self, entry: Entry, fwd: Forward, now: int) -> None:
        assert self._trace is not None
        props = HeaderView.read(entry.headers).text
        tp = entry.tp
        event = TraceEvent(
            event_time_ms=now,
            source="schedule-service",
            group=self.group,
            topic=fwd.real_topic,
            partition=tp[1],
            offset=entry.offset,
            msg_id=props.get(PROPERTY_UNIQ_KEY) or f"{tp[0]}:{tp[1]}:{entry.offset}",
            origin_msg_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID)
            or props.get(PROPERTY_UNIQ_KEY)
            or "",
            status=TraceStatus.FORWARDED,
            reconsume_times=parse_non_negative(props.get(PROPERTY_RECONSUME_TIME)) or 0,
            tags=props.get(PROPERTY_TAGS),
            keys=props.get(PROPERTY_KEYS),
            delay_level=self.level(tp[0])[0] or None,
            lateness_ms=now - entry.info.due_ms,
        )
        try:
            self._trace(event)
        except Exception:  # tracing must never stop forwarding
            log.exception("trace sink failed")


def _logical_or_raw(kafka_topic: str) -> str:
    try:
        return naming.from_kafka(kafka_topic)
    except TopicNameError:
        return kafka_topic
