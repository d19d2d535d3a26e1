"""RocketMQ 5's SimpleConsumer (receive / ack / change invisible duration) as a state machine.
Pure: time comes in as ``now`` (seconds on a monotonic clock), Kafka stays outside.

Kafka has no per-message visibility, so the engine keeps it: fetched messages wait in a
buffer per partition; :meth:`PullEngine.receive` hands out up to *n* of them across
partitions and makes each *invisible* until a deadline, behind a :class:`ReceiptHandle`;
:meth:`~PullEngine.ack` settles one; a message whose deadline passes unacknowledged is
copied straight to the group's retry topic with ``reconsume_times + 1`` (the invisible
duration was its wait: :class:`~adapter.core.routing.RetryNow`), or to the DLQ
(:attr:`~adapter.core.routing.DeadLetterReason.MAX_DELIVERY_ATTEMPTS`) once it has been
delivered ``max_delivery_attempts`` times.  Any member of the group reads the copy, so a
message that is never acknowledged blocks neither the partition nor this consumer.

=============================================  ==============================================
``assigned(tp)`` / ``revoked(tp)``              a new generation / forget the partition (its
                                                handles become invalid)
``fetched(tp, msgs, end, nbytes)``              buffer them (returns a :class:`Work`: "there
                                                is something to receive")
``receive(n, invisible_s, now)``                up to ``n`` handles, invisible until
                                                ``now + invisible_s``
``ack(handle, now)``                            settle it (twice: harmless)
``renew(h, s, now)``                            invisible until ``now + s`` instead, under a
                                                new token (``change_invisible_duration``)
``tick(now)``                                   expired handles → :class:`SendBack` s; flow
                                                control; offsets that moved
``published`` / ``publish_failed``              a copy acknowledged (settled) / refused
                                                (:func:`~adapter.core.publishing.escalate`)
=============================================  ==============================================

Offsets: a message is in flight from fetch until it is acknowledged or its copy is
acknowledged by the broker; the committable offset of a partition is the smallest offset in
flight (buffered, invisible, or being copied), else the next offset to fetch.  A crash
therefore re-delivers what was invisible and never loses it.  A copy the broker does not
take for a transient reason makes the message visible again here, with its delivery attempt
counted (RocketMQ: visible again once the invisible time is over).

It stays one module, one state machine: the receipt handles and their leases, the deadline
heap and each partition's buffer and offsets in flight are read and written together by
every event (a receive, an ack, a renew, an expiry, a revoke), and the invariants (a
message stays in flight until acknowledged or copied, an offset never moves back) hold only
across all of them.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import Enum
from typing import Any

from adapter.constants import DEFAULT_MAX_RECONSUME_TIMES
from adapter.core.codec import Failure
from adapter.core.delay import resolve_max_reconsume_times
from adapter.core.engine.actions import Action, SendBack, flow_and_offsets, store_again
from adapter.core.engine.tracking import Work
from adapter.core.offsets import FlowLimits
from adapter.core.publishing import Escalation, Refusal, escalate
from adapter.core.routing import DeadLetter, DeadLetterReason, RetryNow
from adapter.core.types import TP
from adapter.errors import InvalidInputError, InvalidReceiptHandleError

#: RocketMQ 5: at most 32 messages per receive (the broker caps a pop there).
MAX_RECEIVE_BATCH = 32
#: RocketMQ 5: invisible durations up to 12 hours.
MAX_INVISIBLE_S = 12 * 3600.0
#: Shortest invisible duration for ``receive``.  RocketMQ's proxy asks for 10 s; here the
#: deadline is kept by the client itself (no broker round trip per expiry), so 1 s is
#: allowed, which keeps tests and interactive use quick (docs/semantics.md §8).
MIN_RECEIVE_INVISIBLE_S = 1.0
#: RocketMQ 5: 17 deliveries (16 retries) before the DLQ.
DEFAULT_MAX_DELIVERY_ATTEMPTS = DEFAULT_MAX_RECONSUME_TIMES + 1
#: Received messages neither acknowledged nor expired, per consumer (RocketMQ's broker
#: threshold for pop consumers, ``popInflightMessageThreshold``, is 10 000).
DEFAULT_MAX_UNACKED = 10_000
#: Failure type written on the copy of a message whose invisible duration ran out.
EXPIRED_FAILURE_TYPE = "InvisibleDurationExpired"

#: Settled handles the deadline heap may keep (beyond twice the live ones) before it is
#: compacted.  Small, so that acknowledged messages (handle, message, record) are freed
#: while still young: kept longer, they are promoted to the garbage collector's oldest
#: generation and set off its full collections, the costliest part of a receive/ack
#: loop; compacting stays amortised (at most two state checks per pushed handle).
_COMPACT_SLACK = 64

_NO_ACTIONS: list[Action] = []
_new = object.__new__


def seconds_of(
    field_name: str, value: object, *, minimum: float, maximum: float = MAX_INVISIBLE_S
) -> float:
    """A duration given in seconds (int or float) or as a ``timedelta``, checked against
    ``[minimum, maximum]``; an :class:`InvalidInputError` naming ``field_name`` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(field_name, value, "expected seconds (int or float) or a timedelta")
    else:
        seconds = float(value)
    if math.isnan(seconds) or seconds < minimum or seconds > maximum:
        raise InvalidInputError(
            field_name, value, f"must be between {minimum:g} s and {maximum:g} s"
        )
    return seconds


def receive_count(value: object) -> int:
    """``max_message_num``: an int > 0; more than 32 is served as 32 (RocketMQ's cap)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError("max_message_num", value, "must be an int")
    if value <= 0:
        raise InvalidInputError("max_message_num", value, "must be greater than 0")
    return min(value, MAX_RECEIVE_BATCH)


class HandleState(str, Enum):
    """Where a :class:`ReceiptHandle` stands."""

    INVISIBLE = "INVISIBLE"
    """Live: the message is invisible to every other receiver until the deadline."""
    ACKED = "ACKED"
    """Acknowledged (acknowledging again is harmless)."""
    EXPIRED = "EXPIRED"
    """The deadline passed: the message went to the retry path (or the DLQ)."""
    REVOKED = "REVOKED"
    """Its partition moved to another member, which reads the message again."""


_INVISIBLE = HandleState.INVISIBLE
_ACKED = HandleState.ACKED


class Lease:
    """One visibility period shared by the handles one receive issued on one partition
    (or by one handle, after ``change_invisible_duration``): who issued them, until when,
    for how long, on which assignment of the partition.  Kept once per receive instead of
    in every handle.  The deadline heap's entry holds the lease and its handles (the lease
    does not refer to them: no reference cycle, so a settled handle is freed as soon as the
    application and the heap let go of it, without the garbage collector)."""

    __slots__ = ("consumer", "deadline", "duration", "part", "token")

    def __init__(
        self, consumer: str, token: int, part: _Partition, deadline: float, duration: float
    ) -> None:
        self.consumer = consumer
        self.token = token
        #: the engine's state of the partition (``part.live``: still the same assignment)
        self.part = part
        self.deadline = deadline
        self.duration = duration


class ReceiptHandle:
    """One visibility period of one received message (RocketMQ's receipt handle).

    Handles are issued by the engine and only valid with the engine that issued them
    (``consumer``); :meth:`handle_text` (also ``str(handle)``) is an opaque text form for
    logs.  A consumer may have the engine issue a subclass (``PullEngine(handle_type=...)``,
    no slots of its own): the SimpleConsumer's message view is its own receipt handle, one
    object per received message.  What the handles of one receive share is their
    :class:`Lease`.
    """

    __slots__ = ("lease", "msg", "offset", "state")

    def __init__(self, lease: Lease, msg: Any) -> None:
        self.lease = lease
        self.msg = msg
        self.offset: int = msg.queue_offset
        self.state = HandleState.INVISIBLE

    @property
    def consumer(self) -> str:
        """The id of the engine that issued it."""
        return self.lease.consumer

    @property
    def token(self) -> int:
        return self.lease.token

    @property
    def tp(self) -> TP:
        return self.lease.part.tp

    @property
    def generation(self) -> int:
        """The partition's assignment it was received in."""
        return self.lease.part.generation

    @property
    def deadline(self) -> float:
        """Until when the message is invisible (the engine's clock)."""
        return self.lease.deadline

    @property
    def duration(self) -> float:
        return self.lease.duration

    def handle_text(self) -> str:
        """The handle's text form (what the message view shows as its receipt handle)."""
        lease = self.lease
        topic, partition = lease.part.tp
        return (
            f"{lease.consumer}:{topic}:{partition}:{self.offset}:{lease.part.generation}:"
            f"{lease.token}"
        )

    def __str__(self) -> str:
        return self.handle_text()

    def __repr__(self) -> str:
        return f"ReceiptHandle({self}, {self.state.value})"


@dataclass(frozen=True, slots=True)
class PullOptions:
    """The rules a pull engine applies (resolved SimpleConsumer options; times in seconds)."""

    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    flow: FlowLimits = field(default_factory=FlowLimits)
    #: committable offsets are handed out for storing at most this often
    store_interval_s: float = 0.02


class _Partition:
    """What the engine knows about one assigned partition."""

    __slots__ = (
        "again",
        "anchor",
        "buf",
        "generation",
        "held",
        "live",
        "nbytes",
        "offsets",
        "order",
        "paused",
        "position",
        "stored",
        "touched",
        "tp",
    )

    def __init__(self, tp: TP, generation: int) -> None:
        self.tp = tp
        self.generation = generation
        #: False once revoked or replaced by a new assignment: its handles are invalid
        self.live = True
        #: an ack put it in the dirty set, which still holds it (later acks read this flag
        #: instead of hashing the partition into the set; reset when the set is cleared)
        self.touched = False
        self.buf: deque[Any] = deque()  # fetched, never received, in offset order
        #: the offsets of ``buf``, one for one (a fetch's are usually a range: no call per
        #: message to learn them)
        self.offsets: deque[int] = deque()
        self.again: deque[Any] = deque()  # visible again after a refused copy
        #: every received message not settled yet: offset -> its owner (a live or expired
        #: handle's copy: ReceiptHandle / SendBack; visible again: the message)
        self.held: dict[int, Any] = {}
        self.order: deque[int] = deque()  # offsets as they entered ``held`` (increasing)
        self.position: int | None = None  # the offset after the last one fetched
        self.stored: int | None = None  # the last committable offset handed out
        self.nbytes = 0  # bytes of bodies in flight (buffered or held)
        self.paused = False
        # the Work every SendBack of this partition names (offsets are tracked here)
        self.anchor = Work(tp, generation, [], 1, 0)

    @property
    def count(self) -> int:
        return len(self.buf) + len(self.held)

    def committable(self) -> int | None:
        held, order = self.held, self.order
        while order and order[0] not in held:
            order.popleft()
        if order:
            return order[0]
        if self.offsets:
            return self.offsets[0]
        return self.position

    def take_commit(self) -> int | None:
        offset = self.committable()
        if offset is None or (self.stored is not None and offset <= self.stored):
            return None
        self.stored = offset
        return offset

    @property
    def span(self) -> int:
        if self.position is None or not self.count:
            return 0
        first = self.committable()
        return 0 if first is None else self.position - 1 - first


class PullEngine:
    """The pull (SimpleConsumer) engine of one consumer; see the module docstring."""

    def __init__(
        self,
        options: PullOptions,
        consumer_id: str,
        *,
        handle_type: type[ReceiptHandle] = ReceiptHandle,
    ) -> None:
        self.options = options
        #: the class of the handles issued (a subclass of ReceiptHandle without slots)
        self.handle_type = handle_type
        #: names this engine in its handles: a handle from another consumer is refused (the
        #: consumer makes it unique: the engine is pure)
        self.consumer_id = consumer_id
        self._parts: dict[TP, _Partition] = {}
        self._generations: dict[TP, int] = {}
        self._ready: dict[TP, None] = {}  # partitions with something to receive (ordered)
        self._dirty: set[TP] = set()
        #: (deadline, sequence, lease, the handles issued under it)
        self._deadlines: list[tuple[float, int, Lease, list[ReceiptHandle]]] = []
        self._in_heap = 0  # handles referenced from ``_deadlines`` (live or not)
        self._tokens = itertools.count(1)
        self._seq = itertools.count()
        self._next_store = 0.0
        self._available = 0  # messages waiting to be received
        self._invisible = 0  # live handles

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        generation = self._generations.get(tp, 0) + 1
        self._generations[tp] = generation
        old = self._parts.get(tp)
        if old is not None:
            old.live = False
        self._parts[tp] = _Partition(tp, generation)

    def revoked(self, tp: TP) -> None:
        """``tp`` is no longer ours: its handles become invalid and whatever it held is read
        again by the next owner from the committed offset."""
        part = self._parts.pop(tp, None)
        self._generations[tp] = self._generations.get(tp, 0) + 1
        self._dirty.discard(tp)
        self._ready.pop(tp, None)
        if part is None:
            return
        part.live = False
        self._available -= len(part.buf) + len(part.again)
        for owner in part.held.values():
            if isinstance(owner, ReceiptHandle) and owner.state is HandleState.INVISIBLE:
                owner.state = HandleState.REVOKED
                self._invisible -= 1

    def owns(self, tp: TP) -> bool:
        return tp in self._parts

    def generation_of(self, tp: TP) -> int | None:
        """The current generation of an owned partition (``None``: not ours)."""
        part = self._parts.get(tp)
        return None if part is None else part.generation

    @property
    def partitions(self) -> list[TP]:
        return list(self._parts)

    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool:
        """No listener runs here: a revoke never waits for the application."""
        del tps
        return False

    # -- fetching --------------------------------------------------------------------------
    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None:
        """``msgs`` (those that pass the subscription's filter) were fetched from ``tp``;
        ``end`` is the offset after the last record fetched.  Returns a :class:`Work` when
        there is something new to receive."""
        del pooled
        part = self._parts.get(tp)
        if part is None:
            return None
        if part.position is None or end > part.position:
            part.position = end
        self._dirty.add(tp)
        if not msgs:
            return None  # filtered out by tag: settled like a broker-side filter
        part.buf.extend(msgs)
        first = msgs[0].queue_offset
        if len(msgs) == end - first:  # consecutive offsets (none filtered out or skipped)
            part.offsets.extend(range(first, end))
        else:
            part.offsets.extend([m.queue_offset for m in msgs])
        part.nbytes += nbytes
        self._available += len(msgs)
        self._ready[tp] = None
        return Work(tp, part.generation, msgs, len(msgs), end, nbytes)

    # -- the application's calls -------------------------------------------------------------
    @property
    def available(self) -> int:
        """Messages fetched and waiting to be received."""
        return self._available

    @property
    def unacked(self) -> int:
        """Messages received and neither acknowledged nor expired."""
        return self._invisible

    def receive(self, n: int, invisible_s: float, now: float) -> list[ReceiptHandle]:
        """Up to ``n`` messages, each invisible until ``now + invisible_s``, taken across the
        partitions in turn (a partition served first goes to the back of the line).  The
        handles of one receive share a :class:`Lease` (and its token: partition, offset and
        generation tell them apart); the list returned is the caller's."""
        if n <= 0 or not self._available:
            return []
        out: list[ReceiptHandle] = []
        deadline = now + invisible_s
        consumer = self.consumer_id
        token = next(self._tokens)
        cls = self.handle_type
        ready = self._ready
        for tp in list(ready):
            part = self._parts[tp]
            held, again, buf = part.held, part.again, part.buf
            # Lease.__init__, inlined: one per partition a receive takes from
            lease = _new(Lease)
            lease.consumer = consumer
            lease.token = token
            lease.part = part
            lease.deadline = deadline
            lease.duration = invisible_s
            got: list[ReceiptHandle] = []
            while again and len(out) + len(got) < n:
                handle = cls(lease, again.popleft())
                held[handle.offset] = handle  # already in ``order``
                got.append(handle)
            room = n - len(out) - len(got)
            if buf and room > 0:
                popleft, order_append, append = buf.popleft, part.order.append, got.append
                next_offset = part.offsets.popleft
                invisible = _INVISIBLE
                for _ in range(min(room, len(buf))):
                    msg = popleft()
                    # ReceiptHandle.__init__, inlined: one object per message received
                    handle = _new(cls)
                    handle.lease = lease
                    handle.msg = msg
                    handle.offset = offset = next_offset()
                    handle.state = invisible
                    held[offset] = handle
                    order_append(offset)
                    append(handle)
            if got:
                out += got
                self._available -= len(got)
                self._invisible += len(got)
                self._push(lease, got)
            del ready[tp]
            if buf or again:
                ready[tp] = None  # still has messages: to the back of the line
            if len(out) >= n:
                break
        return out

    def ack(self, handle: ReceiptHandle, now: float) -> None:
        """Settle the message of ``handle``.  Acknowledging an acknowledged handle is
        harmless; any other unusable handle raises :class:`InvalidReceiptHandleError` and
        changes nothing."""
        lease = handle.lease if type(handle) is self.handle_type else None
        if (
            lease is None
            or not (part := lease.part).live  # still the assignment it was received in
            or handle.state is not _INVISIBLE
            or lease.consumer is not self.consumer_id
            or lease.deadline <= now
        ):
            # not the common case: acknowledged before (harmless), or unusable (raises)
            if (
                isinstance(handle, ReceiptHandle)
                and handle.state is HandleState.ACKED
                and handle.consumer == self.consumer_id
            ):
                return
            # usable after all (a handle of another type, say): the current assignment's
            part = self._live(handle, now)
        handle.state = _ACKED
        self._invisible -= 1
        del part.held[handle.offset]
        part.nbytes -= len(handle.msg.body)
        if not part.touched:
            part.touched = True
            self._dirty.add(part.tp)

    def renew(self, handle: ReceiptHandle, invisible_s: float, now: float) -> ReceiptHandle:
        """RocketMQ's ``change_invisible_duration``, in place: the message becomes
        invisible until ``now + invisible_s`` (shorter or longer than before; 0 makes it
        expire now) and ``handle`` itself stays its handle, under a new token (its earlier
        text form no longer names it): the consumer's message view is its handle, and the
        application keeps the object it received.  Returns ``handle``."""
        part = self._live(handle, now)
        lease = Lease(self.consumer_id, next(self._tokens), part, now + invisible_s, invisible_s)
        # its earlier lease keeps it in its list: _expire and _compact skip a handle whose
        # lease is no longer that one
        handle.lease = lease
        self._push(lease, [handle])
        return handle

    def _live(self, handle: ReceiptHandle, now: float) -> _Partition:
        """The partition of a handle that may be used now, or the error that says why not."""
        if not isinstance(handle, ReceiptHandle) or handle.consumer != self.consumer_id:
            raise InvalidReceiptHandleError(
                handle.handle_text() if isinstance(handle, ReceiptHandle) else str(handle),
                "the receipt handle belongs to another consumer",
            )
        text = handle.handle_text()
        state = handle.state
        part = self._parts.get(handle.tp)
        if state is HandleState.ACKED:
            raise InvalidReceiptHandleError(text, "the message was already acknowledged")
        if state is HandleState.REVOKED or part is None or part.generation != handle.generation:
            raise InvalidReceiptHandleError(
                text,
                f"partition {handle.tp[0]}[{handle.tp[1]}] was revoked; its new owner "
                "delivers the message again",
            )
        if state is HandleState.EXPIRED or handle.deadline <= now:
            raise InvalidReceiptHandleError(
                text,
                f"receipt handle is expired (invisible duration {handle.duration:g} s); the "
                "message is delivered again",
            )
        return part

    def _push(self, lease: Lease, handles: list[ReceiptHandle]) -> None:
        heapq.heappush(self._deadlines, (lease.deadline, next(self._seq), lease, handles))
        self._in_heap += len(handles)
        if self._in_heap > 2 * self._invisible + _COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drop settled handles from the deadline heap (long durations keep them there)."""
        items: list[tuple[float, int, Lease, list[ReceiptHandle]]] = []
        count = 0
        invisible = _INVISIBLE
        for deadline, seq, lease, handles in self._deadlines:
            # a renewed handle is kept under its latest lease only
            live = [h for h in handles if h.state is invisible and h.lease is lease]
            if live:
                items.append((deadline, seq, lease, live))
                count += len(live)
        heapq.heapify(items)
        self._deadlines = items
        self._in_heap = count

    # -- publishing ------------------------------------------------------------------------
    def published(self, action: SendBack) -> None:
        """The broker acknowledged ``action``'s copy: the message is settled."""
        part = self._parts.get(action.tp)
        if part is None or part.generation != action.generation:
            return
        offset = action.msg.queue_offset
        if part.held.get(offset) is action:
            del part.held[offset]
            part.nbytes -= len(action.msg.body)
            self._dirty.add(part.tp)

    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]:
        """The broker refused ``action``'s copy: the next step (shared rule)."""
        del now
        part = self._parts.get(action.tp)
        if part is None or part.generation != action.generation:
            return _NO_ACTIONS
        offset = action.msg.queue_offset
        if part.held.get(offset) is not action:
            return _NO_ACTIONS  # superseded
        step = escalate(
            refusal,
            alone=action.alone,
            dead_letter=isinstance(action.dest, DeadLetter),
            body_omitted=action.omit_body,
        )
        if step is Escalation.HOLD:
            # visible again here, this delivery counted (the offset stays held)
            msg = action.msg.redelivered()
            part.held[offset] = msg
            part.again.append(msg)
            self._available += 1
            self._ready[part.tp] = None
            return _NO_ACTIONS
        if step is Escalation.SEND_ALONE:
            nxt = replace(action, alone=True)
        elif step is Escalation.DEAD_LETTER:
            dead = DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, action.msg.reconsume_times + 1)
            nxt = replace(action, dest=dead, alone=False, omit_body=False)
        else:
            nxt = replace(action, omit_body=True, alone=False)
        part.held[offset] = nxt
        return [nxt]

    # -- time ------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Action]:
        """Expired handles (their copies), flow control and moved offsets."""
        actions: list[Action] = _NO_ACTIONS
        heap = self._deadlines
        if heap and heap[0][0] <= now:
            actions = self._expire(now)
        if self._dirty:
            store = now >= self._next_store
            if store:
                self._next_store = now + self.options.store_interval_s
                parts = self._parts
                for tp in self._dirty:  # the set is cleared below: acks add to it again
                    part = parts.get(tp)
                    if part is not None:
                        part.touched = False
            found = flow_and_offsets(self._parts, self._dirty, self.options.flow, store=store)
            if found:
                actions = actions if actions is not _NO_ACTIONS else []
                actions.extend(found)
        return actions

    def _expire(self, now: float) -> list[Action]:
        actions: list[Action] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, lease, handles = heapq.heappop(heap)
            self._in_heap -= len(handles)
            part = lease.part
            if not part.live:
                continue  # revoked handles were counted out then
            for handle in handles:
                if handle.state is not _INVISIBLE or handle.lease is not lease:
                    continue  # settled, or renewed: a later lease has it
                handle.state = HandleState.EXPIRED
                self._invisible -= 1
                action = self._copy(part, handle)
                part.held[handle.offset] = action
                actions.append(action)
        return actions

    def _copy(self, part: _Partition, handle: ReceiptHandle) -> SendBack:
        """The copy of an expired message: a straight retry, or the DLQ after the maximum."""
        msg = handle.msg
        times = msg.reconsume_times
        attempt = times + 1
        limit = self.max_attempts(msg)
        dest: RetryNow | DeadLetter
        if attempt >= limit:
            dest = DeadLetter(DeadLetterReason.MAX_DELIVERY_ATTEMPTS, times + 1)
        else:
            dest = RetryNow(times + 1)
        failure = Failure(
            EXPIRED_FAILURE_TYPE,
            f"not acknowledged within its invisible duration of {handle.duration:g} s "
            f"(delivery attempt {attempt} of {limit})",
        )
        return SendBack(part.tp, part.generation, part.anchor, msg, dest, failure)

    def max_attempts(self, msg: Any) -> int:
        """Deliveries allowed for ``msg``: the consumer's maximum, or the message's own
        ``MAX_RECONSUME_TIMES`` + 1 (-1 there means 16 retries)."""
        own = msg.max_reconsume_times
        if own is None:
            return self.options.max_delivery_attempts
        return resolve_max_reconsume_times(own) + 1

    # -- introspection ---------------------------------------------------------------------
    def store_failed(self, tps: list[TP]) -> None:
        """See :func:`~adapter.core.engine.actions.store_again`."""
        store_again(self._parts, self._dirty, tps)

    def committable(self, tp: TP) -> int | None:
        part = self._parts.get(tp)
        return None if part is None else part.committable()

    def in_flight(self, tp: TP) -> int:
        part = self._parts.get(tp)
        return 0 if part is None else part.count

    def paused(self) -> list[TP]:
        return [tp for tp, part in self._parts.items() if part.paused]

    @property
    def deadline_entries(self) -> int:
        """Handles the deadline heap refers to (live or settled, until compacted)."""
        return self._in_heap

    def local_retries(self) -> int:
        """Messages visible again here after their copy was refused for a transient reason."""
        return sum(len(part.again) for part in self._parts.values())

    def next_due(self) -> float | None:
        """When :meth:`tick` next has an invisible time to end (``None``: no handle is
        out); a message visible again waits for a receiver, not for a time."""
        return self._deadlines[0][0] if self._deadlines else None
