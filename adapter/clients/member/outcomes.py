"""What became of consumed messages: a consumer's counters, and the broker's verdicts on
the copies it sent back (retry levels, the retry topic, the DLQ), and its trace events.

:class:`ConsumerStats` is written on the loop thread only (any thread may take a
``snapshot()``).  :class:`SendBackResults` takes each verdict the
:class:`~adapter.io.publisher.Publisher` reports: an acknowledged copy settles its
message's offset and is counted; a refused one goes back to the engine, which answers with
what to do next (send it again alone, to the DLQ, without its body, or consume it again
locally later).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from adapter.core import hops
from adapter.core.clock import Clock
from adapter.core.codec import Failure
from adapter.core.engine import Action, SendBack
from adapter.core.engine.actions import TraceInfo
from adapter.core.message import MessageExt
from adapter.core.publishing import Refusal
from adapter.core.routing import DeadLetter, Destination, RetryLater, RetryNow
from adapter.core.stats import LATENCY_BUCKETS_S, Histogram, TopicStats
from adapter.core.trace import (
    BATCHES,
    RUN,
    Pending,
    PendingBatches,
    PendingRun,
    TraceSink,
    TraceStatus,
    consumer_event,
)
from adapter.io.errors import error_text, refusal_of

__all__ = ["ConsumerStats", "ConsumerTracer", "Emit", "PublishOutcomes", "SendBackResults"]

log = logging.getLogger("adapter.consumer")


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


class PublishOutcomes(Protocol):
    """What :class:`SendBackResults` tells the engine (see :mod:`adapter.core.engine`)."""

    def published(self, action: SendBack) -> None: ...
    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]: ...


class Emit(Protocol):
    """Hands one consumer trace event to the sink (``GroupConsumer.emit``)."""

    def __call__(
        self,
        msg: MessageExt,
        status: TraceStatus,
        info: TraceInfo | None,
        failure: Failure | None = None,
        dest: Any = None,
    ) -> None: ...


class ConsumerTracer:
    """Builds one member's consumer trace events and hands them to its sink (tracing is
    opt-in; a failing sink is logged and never breaks consuming)."""

    def __init__(self, sink: TraceSink | None, *, name: str, group: str, clock: Clock) -> None:
        self.sink = sink
        self.name = name
        self.group = group
        self.clock = clock
        #: a sink that derives the event on its own thread (``KafkaTraceSink.defer``) is
        #: handed a :data:`~adapter.core.trace.Pending` tuple; any other gets the event
        self._defer: Callable[[Pending | PendingRun | PendingBatches], None] | None = getattr(
            sink, "defer", None
        )

    def emit(
        self,
        msg: MessageExt,
        status: TraceStatus,
        info: TraceInfo | None,
        failure: Failure | None = None,
        dest: Any = None,
    ) -> None:
        """Hand one trace event to the sink (tracing is opt-in; it never breaks consuming)."""
        assert self.sink is not None
        pending = (
            self.group,
            self.clock.now_ms(),
            msg,
            status,
            info,
            failure,
            dest,
            msg.consume_start_time,
        )
        try:
            if self._defer is not None:
                self._defer(pending)
            else:
                self.sink(consumer_event(pending))
        except Exception:
            log.exception("%s: trace sink failed", self.name)

    def emit_successes(
        self, batch: list[MessageExt], ok: Sequence[int], ack_index: int | None, rt_ms: float
    ) -> None:
        """Hand the SUCCESS events of ``batch[i] for i in ok`` to the sink: to a deferring
        sink as one :data:`~adapter.core.trace.PendingRun` for the whole batch.  ``batch``
        must be a list nobody changes afterwards (the listener got its own)."""
        if not ok:
            return
        if self._defer is None:
            size = len(batch)
            for i in ok:
                self.emit(batch[i], TraceStatus.SUCCESS, TraceInfo(size, i, ack_index, rt_ms))
            return
        # every message of a listener batch carries the batch's CONSUME_START_TIME
        run = (RUN, self.group, self.clock.now_ms(), batch, ok, ack_index, rt_ms,
               batch[0].consume_start_time)  # fmt: skip
        try:
            self._defer(run)
        except Exception:
            log.exception("%s: trace sink failed", self.name)

    def emit_batches(self, msgs: list[MessageExt], size: int, rt_ms: float) -> None:
        """Hand the SUCCESS events of consecutive whole listener batches of ``size`` (every
        message of ``msgs`` succeeded; they were started together) to the sink: to a
        deferring sink as one :data:`~adapter.core.trace.PendingBatches` for all of them
        (one hand-over per fetched run, whatever the batch size).  ``msgs`` must be a
        list nobody changes afterwards, of messages as fetched: never a local redelivery
        (the sink reads their records without looking; ``emit_successes`` checks)."""
        if not msgs:
            return
        if self._defer is None:
            for k in range(0, len(msgs), size):
                self.emit_successes(msgs[k : k + size], range(size), None, rt_ms)
            return
        run = (BATCHES, self.group, self.clock.now_ms(), msgs, size, rt_ms,
               msgs[0].consume_start_time)  # fmt: skip
        try:
            self._defer(run)
        except Exception:
            log.exception("%s: trace sink failed", self.name)


class SendBackResults:
    """The broker's verdicts on one consumer's send-back copies, and their counters.

    ``apply`` carries out the engine's next actions for a refused copy (the group member's
    ``apply``); ``emit`` is set while tracing is on."""

    def __init__(
        self,
        *,
        name: str,
        engine: PublishOutcomes,
        topics: hops.GroupTopics,
        stats: ConsumerStats,
        clock: Clock,
        apply: Callable[[list[Action]], None],
        emit: Emit | None = None,
    ) -> None:
        self.name = name
        self.engine = engine
        self.topics = topics
        self.stats = stats
        self.clock = clock
        self.apply = apply
        self.emit = emit
        #: copies acknowledged and not settled yet (see :meth:`settle`); a copy that is its
        #: own delivery callback (``SendBack.__call__``) joins it itself
        self.acked: list[SendBack] = []
        #: the engine's ``published`` for many copies in one call, where it has one
        self._published_all: Callable[[list[SendBack]], None] | None = getattr(
            engine, "published_all", None
        )

    def on_result(self, action: SendBack, err: Any, local: bool) -> None:
        """The broker's verdict on a copy (runs on the loop thread, inside ``poll``):
        ``err`` is ``None`` once acknowledged; ``local``: refused before it was sent."""
        if err is not None:
            self.refused(action, err, local)
            return
        self.acked.append(action)
        self.settle()

    def delivered(self, action: SendBack, err: Any, _msg: Any = None) -> None:
        """librdkafka's delivery report on a copy, as the publisher hands it over (bound
        to ``action`` with :func:`functools.partial`: no Python frame in between, one
        verdict per copy on the failure path).  An acknowledgement is only noted here:
        :meth:`settle` settles the copies a poll acknowledged together, once it returns
        (the publisher's ``on_served``); a refusal is dealt with at once."""
        if err is None:
            self.acked.append(action)
        else:
            self.refused(action, err, False)

    def settle(self) -> None:
        """Settle the copies acknowledged since the last call: their messages' offsets
        (the engine, in one call where it can), their counters and trace events.  Called
        after every poll and flush of the publisher, before anything reads what they
        settle (a step's ``tick``, a revoke's commit)."""
        acked = self.acked
        if not acked:
            return
        self.acked = []
        if self._published_all is not None:
            self._published_all(acked)
        else:
            published = self.engine.published
            for action in acked:
                published(action)
        stats = self.stats
        send_backs = stats.send_backs
        emit = self.emit
        # per (topic, level): the copies of a run mostly share both
        counts: dict[tuple[str, int], int] = {}
        for action in acked:
            dest = action.dest
            if type(dest) is RetryLater and emit is None:  # the common case: a count
                key = (action.msg.topic, dest.level)
                counts[key] = counts.get(key, 0) + 1
            else:
                self._settled(action, dest)
        for key, n in counts.items():
            stats.topic(key[0]).sent_back += n
            send_backs[key] = send_backs.get(key, 0) + n

    def _settled(self, action: SendBack, dest: Destination) -> None:
        """The counters and trace event of one settled copy (other than a retry copy of
        an untraced consumer, which :meth:`settle` counts in bulk)."""
        msg = action.msg
        stats = self.stats
        topic = msg.topic
        if type(dest) is RetryLater:
            stats.topic(topic).sent_back += 1
            key = (topic, dest.level)
            stats.send_backs[key] = stats.send_backs.get(key, 0) + 1
        elif isinstance(dest, DeadLetter):
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
        if self.emit is not None:
            status = TraceStatus.DLQ if isinstance(dest, DeadLetter) else TraceStatus.RETRY
            self.emit(msg, status, action.trace_info, action.failure, dest)

    def refused(self, action: SendBack, err: Any, local: bool) -> None:
        """A refused copy: the engine says what follows (nothing: consumed again locally)."""
        msg = action.msg
        dest = action.dest
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
                where(dest, self.topics),
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


def where(dest: Destination, topics: hops.GroupTopics) -> str:
    """Where a copy to ``dest`` goes, for log lines."""
    if isinstance(dest, RetryLater):
        return f"level {dest.level}"
    if isinstance(dest, RetryNow):
        return topics.retry_topic
    return topics.dlq_topic
