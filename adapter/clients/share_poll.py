"""The records a share consumer's polls acquired, from the poll until they are settled.

:class:`PollState` keeps them (waiting to be received, held by a receive, due for the
dead-letter queue) and applies :mod:`adapter.core.share`'s decisions to them: which record
is handed out, which hold ran out, which record is released or dead-lettered.  The consumer
(:mod:`adapter.clients.share_consumer`) owns the lock, the threads and the Kafka calls
around it; every method here runs under that lock.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import uuid
from collections import deque
from typing import Any

import confluent_kafka

from adapter.clients.share_group import BROKER_DEFAULT_LOCK_S
from adapter.clients.share_view import ShareMessageView, share_view_of
from adapter.clients.simple_view import MessageView
from adapter.core.engine.pull import MIN_RECEIVE_INVISIBLE_S, HandleState
from adapter.core.filter import TagFilter
from adapter.core.share import Verdict, earliest_acquisition, on_arrival, on_expiry
from adapter.errors import InvalidReceiptHandleError

# the consumer's logger: these lines are the consumer's
log = logging.getLogger("adapter.share_consumer")

__all__ = ["PollState"]

_ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
_RELEASE = confluent_kafka.AcknowledgeType.RELEASE
_INVISIBLE = HandleState.INVISIBLE


class PollState:
    """The records of one share consumer's polls and the holds on them (all under the
    consumer's lock, whose condition is ``cond``).

    ``kc`` is the consumer's ``ShareConsumer`` (``None`` before start and after shutdown);
    ``owner`` the consumer's id in its receipt handles; ``lock_duration`` the group's record
    lock (``None`` until known: the broker's default is assumed)."""

    __slots__ = (
        "acked",
        "buffer",
        "by_kafka",
        "cond",
        "dead",
        "delivery_limit",
        "held",
        "kc",
        "lock_duration",
        "max_delivery_attempts",
        "name",
        "next_deadline",
        "owner",
        "pending_acks",
        "released",
        "tokens",
    )

    def __init__(
        self,
        name: str,
        *,
        max_delivery_attempts: int,
        delivery_limit: int,
        lock_duration: float | None,
        cond: threading.Condition,
    ) -> None:
        self.name = name
        self.max_delivery_attempts = max_delivery_attempts
        self.delivery_limit = delivery_limit
        self.lock_duration = lock_duration
        self.cond = cond
        self.owner = uuid.uuid4().hex[:12]
        self.tokens = itertools.count(1)
        self.kc: Any = None
        #: Kafka topic → (topic, its tag filter or ``None`` when it takes every tag)
        self.by_kafka: dict[str, tuple[str, TagFilter | None]] = {}
        self.buffer: deque[ShareMessageView] = deque()
        self.held: dict[int, ShareMessageView] = {}
        #: no hold in ``held`` ends before this (a lower bound: skips scans of ``held``)
        self.next_deadline = math.inf
        self.dead: list[ShareMessageView] = []
        #: acknowledgements made locally that no poll or commit has sent yet
        self.pending_acks = False
        self.acked = self.released = 0

    def accept(self, batch: Any, now: float) -> None:
        """Under the lock, after a poll: view, filter and sort the records acquired (the
        receive path: one object per record, no call that is not needed)."""
        kc = self.kc
        owner, by_kafka, max_attempts = self.owner, self.by_kafka, self.max_delivery_attempts
        append = self.buffer.append
        new, cls = object.__new__, ShareMessageView
        for rec in batch:
            if rec.error() is not None:
                log.warning("%s: %s", self.name, rec.error())
                continue
            sub = by_kafka.get(rec.topic())
            if sub is None:  # unsubscribed meanwhile: let another member have it
                kc.acknowledge(rec, _RELEASE)
                self.pending_acks = True
                continue
            topic, tags = sub
            # ShareMessageView.__init__, inlined; deadline, duration and token are set
            # when the view is handed out
            v: ShareMessageView = new(cls)
            v.owner = owner
            v.record = rec
            v.user_topic = topic
            v.msg = None
            v.acquired_at = now
            v.state = _INVISIBLE
            count = v.count = rec.delivery_count() or 1
            if tags is not None and not tags.matches(v.message.tags):
                kc.acknowledge(rec, _ACCEPT)  # filtered: settled
                self.pending_acks = True
                continue
            if count == 1:
                append(v)
                continue
            v.deadline = v.duration = 0.0
            v.token = 0
            if on_arrival(count, max_attempts) is Verdict.DEAD_LETTER:
                v.state = HandleState.EXPIRED
                self.dead.append(v)
            else:
                append(v)

    def take(self, n: int, invisible_s: float, now: float) -> list[MessageView]:
        """Under the lock: up to ``n`` buffered records, held for ``invisible_s``; one whose
        lock is too short for that is released unseen (or dead-lettered)."""
        out: list[MessageView] = []
        buf, held, tokens = self.buffer, self.held, self.tokens
        earliest = earliest_acquisition(
            self.lock_duration or BROKER_DEFAULT_LOCK_S, now, invisible_s
        )
        deadline = now + invisible_s
        while buf and len(out) < n:
            v = buf.popleft()
            if v.acquired_at < earliest:  # not can_hold(...)
                self.expire_one(v)
                continue
            v.deadline = deadline
            v.duration = invisible_s
            v.token = token = next(tokens)
            held[token] = v
            out.append(v)
        if out and deadline < self.next_deadline:
            self.next_deadline = deadline
        return out

    def expire(self, now: float) -> None:
        """Under the lock: end the holds whose invisible duration ran out, and the buffered
        records that could no longer be held for the shortest receive."""
        if now >= self.next_deadline:
            held = self.held
            for v in [v for v in held.values() if v.deadline <= now]:
                del held[v.token]
                self.expire_one(v)
            self.next_deadline = min((v.deadline for v in held.values()), default=math.inf)
        buf = self.buffer
        if buf:
            lock_s = self.lock_duration or BROKER_DEFAULT_LOCK_S
            earliest = earliest_acquisition(lock_s, now, MIN_RECEIVE_INVISIBLE_S)
            while buf and buf[0].acquired_at < earliest:
                self.expire_one(buf.popleft())

    def expire_one(self, v: ShareMessageView) -> None:
        """Under the lock: the hold of ``v`` ended (or it can no longer be held): release
        it, or keep it for the dead-letter queue when this was its last delivery."""
        verdict = on_expiry(v.count, v.count, self.max_delivery_attempts, self.delivery_limit)
        if verdict is Verdict.DEAD_LETTER:
            v.state = HandleState.EXPIRED
            self.dead.append(v)
        else:
            self.settle(v, _RELEASE, HandleState.EXPIRED)

    def settle(self, v: ShareMessageView, kind: Any, state: HandleState) -> None:
        """Under the lock: acknowledge ``v`` locally (sent with the next poll or commit)."""
        self.kc.acknowledge(v.record, kind)
        v.state = state
        self.pending_acks = True
        if kind == _ACCEPT:
            self.acked += 1
        else:
            self.released += 1
        if not self.held:  # a receive waiting for the batch to be settled may poll now
            self.cond.notify_all()

    def live(self, message: object, now: float) -> ShareMessageView:
        """Under the lock: the held view ``message``, or the reason it is not."""
        v = share_view_of(message)
        if v.owner != self.owner:
            raise InvalidReceiptHandleError(v.handle_text(), "issued by another consumer")
        if v.state is _INVISIBLE and self.held.get(v.token) is v:
            if v.deadline > now:
                return v
            del self.held[v.token]
            self.expire_one(v)
        reason = {
            HandleState.ACKED: "already acknowledged",
            HandleState.REVOKED: "released when the consumer was shut down",
        }.get(v.state, "its invisible duration ran out")
        raise InvalidReceiptHandleError(v.handle_text(), reason)
