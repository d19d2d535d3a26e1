"""Asynchronous sends in flight: the pooled record each one is (:class:`Pending`), its
resends once an attempt failed (:class:`Resend`), and the heap of resends waiting for their
back-off (:class:`ResendHeap`), all sharing one :class:`InFlight` per producer.

Nothing here waits on the poll thread: a resend "at once" is produced from the delivery
callback, one after a back-off goes on the heap the poll thread serves.  Only a caller's
own thread sleeps, in :meth:`InFlight.back_off` (back-pressure from a full local queue).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import tenacity

from adapter.clients.producer.options import ProducerSettings
from adapter.clients.producer.produce import classify, produce, produce_error, queue_full
from adapter.clients.producer.results import (
    SEND_OK,
    SendCallback,
    SendResult,
    new_object,
    send_ok,
    set_msg_id,
    set_queue_id,
    set_queue_offset,
    set_status,
    set_topic,
)
from adapter.clients.producer.retrying import (
    RETRIED,
    FlowControlled,
    exhausted,
    failed_attempt,
    next_delay,
    send_retrying,
)
from adapter.constants import ANY_PARTITION, PROPERTY_UNIQ_KEY
from adapter.core.clock import Clock
from adapter.core.stats import ProducerStats
from adapter.errors import ClientClosedError, SendError

log = logging.getLogger("adapter.producer")

#: Longest poll: how soon the poll thread notices shutdown (and the longest wait
#: :meth:`ResendHeap.run_due` returns).
POLL_INTERVAL_S = 0.1
#: Idle in-flight records a producer keeps for reuse (see :class:`Pending`), at most (about
#: 130 bytes each; as many as are in flight at once is enough):
POOL_MAX = 8192


class Due(Protocol):
    """What waits on a :class:`ResendHeap`: something to attempt when it is due."""

    def attempt(self) -> None: ...


DueT = TypeVar("DueT", bound=Due)


class ResendHeap(Generic[DueT]):
    """Resends waiting for their back-off, earliest first (in order of scheduling when due
    at the same time); the poll thread runs the due ones and polls until the next."""

    __slots__ = ("_clock", "_due", "_lock", "_seq")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._due: list[tuple[float, int, DueT]] = []
        self._lock = threading.Lock()
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def push(self, delay: float, resend: DueT) -> None:
        """Attempt ``resend`` once ``delay`` seconds have passed."""
        due = self._clock.monotonic() + delay
        with self._lock:
            heapq.heappush(self._due, (due, next(self._seq), resend))

    def run_due(self) -> float:
        """Attempt the resends that are due; returns how long to poll until the next one
        (at most :data:`POLL_INTERVAL_S`)."""
        due = self._due
        if not due:
            return POLL_INTERVAL_S
        now = self._clock.monotonic()
        ready: list[DueT] = []
        with self._lock:
            while due and due[0][0] <= now:
                ready.append(heapq.heappop(due)[2])
        for resend in ready:
            resend.attempt()
        with self._lock:
            if not due:
                return POLL_INTERVAL_S
            wait = due[0][0] - self._clock.monotonic()
        return min(max(wait, 0.0), POLL_INTERVAL_S)

    def drain(self) -> list[DueT]:
        """Take every waiting resend off the heap (at shutdown; in heap order: the earliest
        first, the rest as the heap holds them)."""
        with self._lock:
            taken = [entry[2] for entry in self._due]
            self._due.clear()
        return taken


class InFlight:
    """What the asynchronous sends of one producer share: its options and stats, the pool
    of idle :class:`Pending` records, the resend heap, the client resends go to (``live``:
    ``None`` once shut down) and ``kick``, which wakes the poll thread."""

    __slots__ = ("due", "kick", "live", "options", "pool", "stats")

    def __init__(
        self,
        options: ProducerSettings,
        stats: ProducerStats,
        due: ResendHeap[Resend],
        kick: Callable[[], None],
    ) -> None:
        self.options = options
        self.stats = stats
        self.due = due
        self.kick = kick
        #: idle in-flight records for reuse (``list.append``/``pop`` are atomic)
        self.pool: list[Pending] = []
        #: the client resends go to (the poll thread serves it while shutting down)
        self.live: Any = None

    def schedule(self, delay: float, resend: Resend) -> None:
        """Resend after ``delay`` seconds (on the poll thread)."""
        self.due.push(delay, resend)
        self.kick()

    def back_off(self, pending: Pending, exc: BufferError, on_poll_thread: bool) -> None:
        """The local queue was full at the first attempt of an asynchronous send.

        Inside a send callback (``on_poll_thread``: on the poll thread, or on a sender
        serving reports inline) the resend is scheduled: sleeping there would stop the very
        delivery reports that drain the queue.  On the caller's own thread the caller backs
        off (back-pressure), as ``send`` does.  A queue that stays full through every retry
        raises :class:`FlowControlError` here.
        """
        resend = Resend(pending)
        failure = queue_full(exc, pending.logical)
        while (delay := resend.next_delay(failure)) is not None:
            self.stats.retried(pending.logical, flow_control=True)
            if on_poll_thread:
                self.schedule(delay, resend)
                return
            self.options.sleep(delay)
            client = self.live
            if client is None:
                raise ClientClosedError("producer shut down while backing off from a full queue")
            try:
                produce(
                    client,
                    pending.topic,
                    value=pending.value,
                    key=pending.key,
                    partition=pending.partition,
                    on_delivery=resend.delivered,
                    headers=pending.record_headers(),
                )
                return
            except BufferError as again:
                failure = queue_full(again, pending.logical)
            except Exception as error:
                raise produce_error(error, pending.logical, pending.value) from error
        final = exhausted(failure, resend.attempts)
        self.stats.failed(pending.logical, final)
        raise final from exc

    def abandon_due(self) -> None:
        """Fail the callbacks of the resends still waiting (the producer shut down)."""
        for resend in self.due.drain():
            resend.abandon()


class Pending:
    """One asynchronous send in flight: what its delivery report needs, what a resend needs.

    It is its own first ``on_delivery`` (no closure per message).  And it is pooled: once
    its report succeeded it goes back to its producer's pool for a later send, so in-flight sends
    create nothing the garbage collector has to track -- at high rates collecting thousands
    of short-lived in-flight objects cost more than the sends themselves.
    """

    __slots__ = (
        "callback",
        "headers",
        "key",
        "logical",
        "msg_id",
        "owner",
        "partition",
        "retries",
        "topic",
        "value",
    )

    def __init__(self, owner: InFlight) -> None:
        self.owner = owner
        self.callback: SendCallback | None = None
        self.retries = 0
        self.msg_id = b""  # UNIQ_KEY as sent (ASCII)
        self.logical = ""
        self.topic = ""  # Kafka topic
        self.value: bytes | None = None
        self.key: bytes | str | None = None
        self.partition = ANY_PARTITION  # librdkafka's partitioner
        #: ``None``: only ``UNIQ_KEY`` (rebuilt for a resend)
        self.headers: list[tuple[str, bytes | None]] | None = None

    def record_headers(self) -> list[tuple[str, bytes | None]]:
        headers = self.headers
        return [(PROPERTY_UNIQ_KEY, self.msg_id)] if headers is None else headers

    def __call__(self, err: Any, kmsg: Any) -> None:
        """The delivery report of the first attempt (on the poll thread)."""
        if err is not None:
            failure = classify(err, kmsg, self.logical)
            if isinstance(failure, RETRIED):
                Resend(self).failed(failure)  # keeps this object: it is not pooled
            else:
                self.owner.stats.failed(self.logical, failure)
                safe_call(self.callback, None, failure)
            return
        callback = self.callback
        result = new_object(SendResult)  # send_ok, inlined: the hottest path
        set_status(result, SEND_OK)
        set_msg_id(result, self.msg_id.decode())
        set_topic(result, self.logical)
        set_queue_id(result, kmsg.partition())
        set_queue_offset(result, kmsg.offset())
        owner = self.owner
        sent = owner.stats.sent
        sent[self.logical] = sent.get(self.logical, 0) + 1
        # back to the pool before the callback runs (it may send again), without the body
        # and the callback (key and headers are small, and overwritten on reuse)
        pool = owner.pool
        self.callback = self.value = None
        self.owner = None  # type: ignore[assignment]  # set again when reused
        if len(pool) < POOL_MAX:
            pool.append(self)
        try:
            callback(result, None)  # type: ignore[misc]
        except Exception:
            log.exception("send callback raised")


class Resend:
    """The resends of one asynchronous send once an attempt failed.

    The tenacity policy of :func:`send_retrying` decides; delivery reports and the poll
    thread drive it, so nothing waits: a resend "at once" is produced from the delivery
    callback, one after a back-off goes on the producer's heap of due resends.
    """

    __slots__ = ("pending", "policy", "state")

    def __init__(self, pending: Pending) -> None:
        opts = pending.owner.options
        self.pending = pending
        self.policy = send_retrying(
            retries=pending.retries, backoff=opts.backoff, sleep=opts.sleep, uniform=opts.uniform
        )
        self.state: tenacity.RetryCallState | None = None

    def next_delay(self, failure: SendError) -> float | None:
        """Record the failed attempt; the wait before the next one (``None``: give up)."""
        self.state = failed_attempt(self.policy, self.state, failure)
        return next_delay(self.policy, self.state)

    @property
    def attempts(self) -> int:
        return 1 if self.state is None else self.state.attempt_number

    def failed(self, failure: SendError) -> None:
        """An attempt failed with a retriable error (in a callback: never waits)."""
        delay = self.next_delay(failure)
        p = self.pending
        if delay is None:
            final = exhausted(failure, self.attempts)
            p.owner.stats.failed(p.logical, final)
            safe_call(p.callback, None, final)
            return
        p.owner.stats.retried(p.logical, flow_control=isinstance(failure, FlowControlled))
        if delay <= 0:
            self.attempt()
        else:
            p.owner.schedule(delay, self)

    def attempt(self) -> None:
        """Send again (on the poll thread); failures go on to :meth:`failed`."""
        p = self.pending
        client = p.owner.live
        if client is None:
            self.abandon()
            return
        try:
            produce(
                client,
                p.topic,
                value=p.value,
                key=p.key,
                partition=p.partition,
                on_delivery=self.delivered,
                headers=p.record_headers(),
            )
        except BufferError as exc:
            self.failed(queue_full(exc, p.logical))
        except Exception as exc:  # delivered to the callback, never lost silently
            safe_call(p.callback, None, produce_error(exc, p.logical, p.value))
        else:
            p.owner.kick()

    def delivered(self, err: Any, kmsg: Any) -> None:
        """The delivery report of a resend."""
        p = self.pending
        if err is None:
            sent = p.owner.stats.sent
            sent[p.logical] = sent.get(p.logical, 0) + 1
            safe_call(
                p.callback,
                send_ok(p.msg_id.decode(), p.logical, kmsg.partition(), kmsg.offset()),
                None,
            )
            return
        failure = classify(err, kmsg, p.logical)
        if isinstance(failure, RETRIED):
            self.failed(failure)
        else:
            p.owner.stats.failed(p.logical, failure)
            safe_call(p.callback, None, failure)

    def abandon(self) -> None:
        """The producer shut down before this resend was due."""
        p = self.pending
        safe_call(
            p.callback,
            None,
            SendError(
                f"producer shut down before resending to {p.logical!r} "
                f"(after {self.attempts} attempt(s)); the message is not in Kafka"
            ),
        )


def safe_call(
    callback: SendCallback | None, result: SendResult | None, exc: Exception | None
) -> None:
    """Run a send callback; what it raises is logged (it must not stop the reports)."""
    if callback is None:  # a pooled record's: cannot happen
        return
    try:
        callback(result, exc)
    except Exception:
        log.exception("send callback raised")
