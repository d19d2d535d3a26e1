"""The records a share consumer's polls acquired, from the poll until they are settled.

:class:`PollState` keeps them (waiting to be received, held by a receive, due for the
dead-letter queue) and applies :mod:`adapter.clients.share.share_rules`'s decisions to them:
which record is handed out, which hold ran out, which record is released or dead-lettered.
The consumer (:mod:`adapter.clients.share.share_backend`) owns the lock, the threads and
the Kafka calls around it; every method here runs under that lock.
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

from adapter.clients.share.share_group import BROKER_DEFAULT_LOCK_S
from adapter.clients.share.share_rules import Verdict, earliest_acquisition, on_arrival, on_expiry
from adapter.clients.share.share_view import ShareHold, ShareMessageView, share_view_of
from adapter.clients.simple.message_view import MessageView
from adapter.core.engine.pull import MIN_RECEIVE_INVISIBLE_S, HandleState
from adapter.core.filter import TagFilter
from adapter.core.message import view_of
from adapter.errors import InvalidReceiptHandleError

# the consumer's logger: these lines are the consumer's
log = logging.getLogger("adapter.share_consumer")

__all__ = ["PollState"]

_ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
_RELEASE = confluent_kafka.AcknowledgeType.RELEASE
_INVISIBLE = HandleState.INVISIBLE
_VIEW = ShareMessageView
_HOLD = ShareHold
_new = object.__new__
#: a record's topic, delivery count and error, unbound (:meth:`PollState.judge` maps them
#: over a poll's records in C)
_TOPIC_OF = confluent_kafka.Message.topic
_COUNT_OF = confluent_kafka.Message.delivery_count
_ERROR_OF = confluent_kafka.Message.error
_FIRST = {1}


class PollState:
    """The records of one share consumer's polls and the holds on them (all under the
    consumer's lock, whose condition is ``cond``).

    ``kc`` is the consumer's ``ShareConsumer`` (``None`` before start and after shutdown);
    ``owner`` the consumer's id in its receipt handles; ``lock_duration`` the group's record
    lock (``None`` until known: the broker's default is assumed)."""

    __slots__ = (
        "acked",
        "acquired_at",
        "buffer",
        "clean",
        "cond",
        "dead",
        "delivery_limit",
        "holds",
        "kc",
        "lock_duration",
        "max_delivery_attempts",
        "name",
        "next_deadline",
        "owner",
        "pending_acks",
        "plain",
        "released",
        "subs",
        "tokens",
        "unacked",
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
        self.subs: dict[str, tuple[str, TagFilter | None]] = {}
        #: Kafka topic → topic, of the subscriptions that take every tag (what ``take``
        #: looks up per record: one lookup and no tuple to unpack on its common path)
        self.plain: dict[str, str] = {}
        #: the records of the last poll not received yet, as librdkafka gave them
        self.buffer: deque[Any] = deque()
        #: when the poll that brought the buffered records returned (their lock started)
        self.acquired_at = 0.0
        #: the Kafka topic of every buffered record when they are all first deliveries of
        #: that one topic, none in error (judged per poll in C: :meth:`judge`); ``take``
        #: then hands them out without a look at each while the topic takes every tag
        self.clean: str | None = None
        #: the views handed out since nothing was last held, one list per receive (a view
        #: is held while its state is INVISIBLE; settled ones stay until the lists go)
        self.holds: list[list[ShareMessageView]] = []
        #: the views held (handed out, not settled): the receive path counts them instead
        #: of keeping them in a dict, the rare paths scan ``holds``
        self.unacked = 0
        #: no hold ends before this (a lower bound: skips scans of ``holds``)
        self.next_deadline = math.inf
        self.dead: list[ShareMessageView] = []
        #: acknowledgements made locally that no poll or commit has sent yet
        self.pending_acks = False
        self.acked = self.released = 0

    @property
    def by_kafka(self) -> dict[str, tuple[str, TagFilter | None]]:
        """Kafka topic → (topic, its tag filter or ``None`` when it takes every tag)."""
        return self.subs

    @by_kafka.setter
    def by_kafka(self, subs: dict[str, tuple[str, TagFilter | None]]) -> None:
        self.subs = subs
        self.plain = {k: topic for k, (topic, tags) in subs.items() if tags is None}

    def accept(self, batch: Any, now: float) -> None:
        """Under the lock, after a poll: keep the records acquired as they are.  Each is
        looked at when a receive reaches it (:meth:`take`: its view is made then), so a
        poll's records cost no Python object or call each while they wait."""
        if not self.buffer:
            self.acquired_at = now  # else the older poll's time holds for all (the earlier)
            self.clean = self.judge(batch)
        elif self.clean is not None and self.judge(batch) != self.clean:
            self.clean = None
        self.buffer.extend(batch)

    @staticmethod
    def judge(records: Any) -> str | None:
        """The Kafka topic of ``records`` when they are all first deliveries of that one
        topic, none in error (C-level passes, no Python call per record); else ``None``."""
        try:
            topics: set[str | None] = set(map(_TOPIC_OF, records))
            if len(topics) != 1 or set(map(_COUNT_OF, records)) != _FIRST:
                return None
            if any(map(_ERROR_OF, records)):  # a KafkaError is true
                return None
        except TypeError:  # records that are not librdkafka's (a test's fakes)
            return None
        return topics.pop()

    def view(self, rec: Any, topic: str, count: int, acquired_at: float) -> ShareMessageView:
        """The view of a record of this consumer, not handed out yet."""
        v: ShareMessageView = _new(_VIEW)
        v.hold = _HOLD(self.owner, acquired_at, 0.0, 0.0)
        v.record = rec
        v.user_topic = topic
        v.msg = None
        v.count = count
        v.state = _INVISIBLE
        v.token = 0
        return v

    def take(self, n: int, invisible_s: float, now: float) -> list[MessageView]:
        """Under the lock: up to ``n`` buffered records, viewed and held for
        ``invisible_s``; when their lock is too short for that, they are released unseen
        (or dead-lettered).  A record in error is logged and skipped; one unsubscribed
        meanwhile is released, one filtered out by tag accepted (settled), one past its
        last delivery set aside for the dead-letter queue."""
        buf = self.buffer
        if not buf:
            return []
        acquired_at = self.acquired_at
        lock_s = self.lock_duration or BROKER_DEFAULT_LOCK_S
        if acquired_at < earliest_acquisition(lock_s, now, invisible_s):  # not can_hold
            self.expire_buffer()
            return []
        out: list[ShareMessageView] = []
        append, pop, plain = out.append, buf.popleft, self.plain
        deadline = now + invisible_s
        hold = _HOLD(self.owner, acquired_at, deadline, invisible_s)  # shared by the views
        clean = self.clean
        topic = None if clean is None else plain.get(clean)
        if topic is not None:
            # the common case: the buffered records are first deliveries of one topic that
            # takes every tag, none in error (judged when they came): a view each, nothing
            # looked at (ShareMessageView.__init__, inlined)
            for _ in range(min(n, len(buf))):
                view: ShareMessageView = _new(_VIEW)
                view.hold = hold
                view.record = pop()
                view.user_topic = topic
                view.count = 1
                view.state = _INVISIBLE
                append(view)
        while buf and len(out) < n:
            # a for loop over as many records as are still wanted (a record skipped makes
            # the outer loop go round again)
            for _ in range(min(n - len(out), len(buf))):
                rec = pop()
                topic = plain.get(rec.topic())
                count = rec.delivery_count()
                if topic is None or count != 1 or rec.error() is not None:
                    # in error, unsubscribed, filtered by tag, redelivered (or no count)
                    kept = self.kept(rec)
                    if kept is None:
                        continue
                    topic, count = kept
                # ShareMessageView.__init__, inlined: one object per record handed out,
                # the receive's shared fields in ``hold``
                v: ShareMessageView = _new(_VIEW)
                v.hold = hold
                v.record = rec
                v.user_topic = topic
                # ``msg`` and ``token`` stay unset (read with their defaults: no
                # MessageExt yet, a delivery's first handle): two stores fewer a record
                v.count = count
                v.state = _INVISIBLE
                append(v)
        if out:
            self.holds.append(out)
            self.unacked += len(out)
            self.next_deadline = min(self.next_deadline, deadline)
        views: list[MessageView] = list(out)  # a copy: the application may change it
        return views

    def kept(self, rec: Any) -> tuple[str, int] | None:
        """Under the lock: a record :meth:`take` reached off its common path (in error,
        unsubscribed, filtered by tag or redelivered): its topic and delivery count when
        it is to be handed out, else ``None`` (logged, settled or set aside)."""
        if rec.error() is not None:
            log.warning("%s: %s", self.name, rec.error())
            return None
        sub = self.subs.get(rec.topic())
        count = rec.delivery_count() or 1
        if not self.keep(rec, sub, count):
            return None
        assert sub is not None
        return sub[0], count

    def keep(self, rec: Any, sub: tuple[str, TagFilter | None] | None, count: int) -> bool:
        """Under the lock: whether a record :meth:`take` reached is to be handed out; one
        unsubscribed, filtered out or past its last delivery is settled or set aside."""
        if sub is None:  # unsubscribed meanwhile: let another member have it
            self.kc.acknowledge(rec, _RELEASE)
            self.pending_acks = True
            return False
        topic, tags = sub
        if tags is not None and not tags.matches(view_of(rec, topic, False, [None]).tags):
            self.kc.acknowledge(rec, _ACCEPT)  # filtered: settled
            self.pending_acks = True
            return False
        if on_arrival(count, self.max_delivery_attempts) is Verdict.DEAD_LETTER:
            v = self.view(rec, topic, count, self.acquired_at)
            v.state = HandleState.EXPIRED
            self.dead.append(v)
            return False
        return True

    def expire(self, now: float) -> None:
        """Under the lock: end the holds whose invisible duration ran out, and the buffered
        records that could no longer be held for the shortest receive."""
        self.expire_holds(now)
        if self.buffer:
            lock_s = self.lock_duration or BROKER_DEFAULT_LOCK_S
            if self.acquired_at < earliest_acquisition(lock_s, now, MIN_RECEIVE_INVISIBLE_S):
                self.expire_buffer()

    def expire_holds(self, now: float) -> None:
        """Under the lock: end the holds whose invisible duration ran out (a receive's
        part of :meth:`expire`: :meth:`take` checks the buffered records itself)."""
        if now >= self.next_deadline:
            held = self.held()
            self.next_deadline = min(
                (v.hold.deadline for v in held if v.hold.deadline > now), default=math.inf
            )
            for v in held:
                if v.hold.deadline <= now:
                    self.unhold(v)
                    self.expire_one(v)

    def drain(self) -> list[ShareMessageView]:
        """Under the lock: the buffered records (those to be handed out) as views, taken
        out of the buffer; the others are settled or set aside as :meth:`take` would."""
        views = []
        by_kafka, buf = self.by_kafka, self.buffer
        while buf:
            rec = buf.popleft()
            if rec.error() is not None:
                continue
            sub = by_kafka.get(rec.topic())
            count = rec.delivery_count() or 1
            if self.keep(rec, sub, count):
                assert sub is not None
                views.append(self.view(rec, sub[0], count, self.acquired_at))
        return views

    def expire_buffer(self) -> None:
        """Under the lock: the buffered records' lock is too short for a receive now."""
        for v in self.drain():
            self.expire_one(v)

    def held(self) -> list[ShareMessageView]:
        """Under the lock: the views held (handed out, not settled)."""
        return [v for out in self.holds for v in out if v.state is _INVISIBLE]

    def unhold(self, v: ShareMessageView) -> None:
        """Under the lock: the held view ``v`` is about to be settled or set aside (the
        caller changes its state next)."""
        self.unacked -= 1
        if not self.unacked:
            self.holds.clear()

    def revoke_all(self) -> list[ShareMessageView]:
        """Under the lock: every held view, no longer held (shutdown)."""
        held = self.held()
        self.holds.clear()
        self.unacked = 0
        return held

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
        if not self.unacked:  # a receive waiting for the batch to be settled may poll now
            self.cond.notify_all()

    def live(self, message: object, now: float) -> ShareMessageView:
        """Under the lock: the held view ``message``, or the reason it is not."""
        v = share_view_of(message)
        if v.hold.owner != self.owner:
            raise InvalidReceiptHandleError(v.handle_text(), "issued by another consumer")
        if v.state is _INVISIBLE:  # held (a view handed out is held until settled)
            if v.hold.deadline > now:
                return v
            self.unhold(v)
            self.expire_one(v)
        reason = {
            HandleState.ACKED: "already acknowledged",
            HandleState.REVOKED: "released when the consumer was shut down",
        }.get(v.state, "its invisible duration ran out")
        raise InvalidReceiptHandleError(v.handle_text(), reason)
