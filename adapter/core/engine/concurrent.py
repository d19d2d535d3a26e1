"""RocketMQ's concurrent consumption as a state machine.  Pure: time comes in as ``now``
(seconds on a monotonic clock), Kafka stays outside.

Events and what they return:

=============================================  ==============================================
``assigned(tp)`` / ``revoked(tp)``              a new generation / forget the partition
``fetched(tp, msgs, end, nbytes)``              a :class:`Work` to run (batches of at most
                                                ``batch_size``)
``completed(work, i, outcome, now)``            batch ``i`` done (from a worker): actions
``settle_run(work, failures, now)``             every batch of ``work`` done (run inline)
``published(action)``                           a copy was acknowledged: its offset settles
``publish_failed(action, refusal, now)``        the next step (:mod:`adapter.core.publishing`)
``tick(now)``                                   consume timeouts, local retries due, flow
                                                control, offsets that moved
=============================================  ==============================================

Rules (RocketMQ 4.9 ``ConsumeMessageConcurrentlyService`` + the broker's send-back):

* a batch's result splits it by ``ack_index``; each failed message goes to the delay level
  ``3 + reconsume_times`` (or the listener's ``delay_level_when_next_consume``), or to the
  DLQ once ``reconsume_times`` reaches the maximum (a ``MAX_RECONSUME_TIMES`` header
  overrides the group's); broadcasting consumers drop failures;
* a batch that runs past ``consume_timeout`` counts as ``RECONSUME_LATER``; its late
  result is ignored;
* a copy the broker does not take for a transient reason is consumed again locally after
  ``send_back_retry_interval`` with ``reconsume_times + 1``, its offset held meanwhile;
* a partition pauses while it has more than the flow limits in flight, and resumes below
  half of them (a resume throws away what librdkafka fetched ahead); when a copy awaiting
  the broker's verdict is what holds it there, it goes on to ``COPY_ALLOWANCE`` times the
  count and span limits, then the copies are hurried
  (:class:`~adapter.core.engine.actions.Hurry`) and it pauses only if that did not help;
* results that come back for a revoked partition (an old generation) are ignored.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from adapter.core.engine.actions import (
    Action,
    Dropped,
    EngineOptions,
    Hurry,
    Pause,
    RunWork,
    SendBack,
    TimedOut,
    TraceInfo,
    flow_and_offsets,
    store_again,
)
from adapter.core.engine.tracking import PartitionState, Work
from adapter.core.listener import Outcome, timed_out
from adapter.core.publishing import Escalation, Refusal, escalate
from adapter.core.routing import DeadLetter, DeadLetterReason, Destination, route_failed
from adapter.core.types import TP

_NO_ACTIONS: list[Action] = []  # returned when nothing is to be done (never mutated)

#: Destinations remembered at most (see ``ConcurrentEngine._routes``).
_ROUTES_MAX = 1024

#: How many times its count and span limits a partition may reach while what holds its
#: committable offset is a copy awaiting the broker's verdict (see ``docs/semantics.md``).
COPY_ALLOWANCE = 10


class ConcurrentEngine:
    """The concurrent consume engine of one consumer (one instance per client)."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self._parts: dict[TP, PartitionState] = {}
        self._generations: dict[TP, int] = {}
        self._dirty: set[TP] = set()
        self._retries: list[tuple[float, int, SendBack]] = []  # (due, seq, failed copy)
        self._running: deque[tuple[Work, int]] = deque()  # pooled batches, in start order
        self._seq = itertools.count()
        self._next_store = 0.0
        #: partitions hurried at the last tick: if still over a limit now, they pause
        self._hurried: set[TP] = set()
        #: where a failed message goes, per (reconsume_times, its own maximum, the
        #: listener's delay level): the same few answers over and over (one failure per
        #: batch of one would otherwise work out and build its destination each time);
        #: destinations are immutable, so copies share them
        self._routes: dict[tuple[int, int | None, int], Destination] = {}

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        """``tp`` is ours from now on (a new generation: older results are ignored)."""
        generation = self._generations.get(tp, 0) + 1
        self._generations[tp] = generation
        self._parts[tp] = PartitionState(tp, generation)

    def revoked(self, tp: TP) -> None:
        """``tp`` is no longer ours: whatever is still in flight is read again by its next
        owner from the committed offset."""
        self._parts.pop(tp, None)
        self._generations[tp] = self._generations.get(tp, 0) + 1
        self._dirty.discard(tp)

    def owns(self, tp: TP) -> bool:
        return tp in self._parts

    def is_current(self, work: Work) -> bool:
        """Whether ``work`` belongs to the current generation of a partition we own."""
        part = self._parts.get(work.tp)
        return part is not None and part.generation == work.generation

    @property
    def partitions(self) -> list[TP]:
        return list(self._parts)

    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool:
        """Whether a listener batch of ``tps`` (default: all) is still running."""
        parts = self._parts
        keys = parts.keys() if tps is None else tps
        return any((p := parts.get(tp)) is not None and p.running() for tp in keys)

    # -- fetching --------------------------------------------------------------------------
    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None:
        """``msgs`` were fetched from ``tp`` (those that pass the subscription's filter, in
        offset order; ``end`` is the offset after the last record fetched, filtered ones
        included).  Returns the work to hand to the listener, or ``None``.  ``pooled``: its
        batches go to worker threads (they are watched for consume timeouts)."""
        part = self._parts.get(tp)
        if part is None:
            return None  # revoked meanwhile: the next owner reads these again
        part.advance(end)
        self._dirty.add(tp)
        if not msgs:
            return None  # all filtered out by tag: settled like a broker-side filter
        work = Work(tp, part.generation, msgs, self.options.batch_size, end, nbytes)
        part.add(work)
        part.count += len(msgs)
        part.nbytes += nbytes
        if pooled:
            work.started = [None] * work.nbatches
            running = self._running
            for i in range(work.nbatches):
                running.append((work, i))
        return work

    # -- results ---------------------------------------------------------------------------
    def completed(
        self, work: Work, index: int, outcome: Outcome | None, now: float, rt_s: float = 0.0
    ) -> list[Action]:
        """Batch ``index`` of ``work`` returned ``outcome`` (``None``: all succeeded) after
        running ``rt_s`` seconds."""
        part = self._parts.get(work.tp)
        if part is None or part.generation != work.generation:
            return _NO_ACTIONS  # revoked meanwhile
        if not work.mark_done(index):
            return _NO_ACTIONS  # already timed out: a late result is ignored
        if rt_s > self.options.consume_timeout_s:
            outcome = timed_out(self.options.consume_timeout_s, work.batch_len(index))
        actions = self._apply(part, work, index, outcome, rt_s)
        self._finish(part, work)
        return actions

    def settle_run(
        self, work: Work, failures: Sequence[tuple[int, Outcome | None, float]], now: float
    ) -> list[Action]:
        """Every batch of ``work`` ran (inline); ``failures`` lists ``(index, outcome, rt_s)``
        for the batches that did not simply succeed in time; all others succeeded."""
        part = self._parts.get(work.tp)
        if part is None or part.generation != work.generation:
            return _NO_ACTIONS
        if not failures and work.origin is None:  # the healthy run: all settle at once
            part.count -= len(work.msgs)
            work.mark_all_done()
            self._finish(part, work)
            return _NO_ACTIONS
        actions: list[Action] = _NO_ACTIONS
        limit = self.options.consume_timeout_s
        reported: set[int] = set()
        for index, given, rt_s in failures:
            outcome = timed_out(limit, work.batch_len(index)) if rt_s > limit else given
            reported.add(index)
            found = self._apply(part, work, index, outcome, rt_s)
            if found:
                actions = actions if actions is not _NO_ACTIONS else []
                actions.extend(found)
        if work.origin is None:
            part.count -= len(work.msgs) - sum(work.batch_len(i) for i in reported)
        else:
            for i in range(work.nbatches):
                if i not in reported:
                    for msg in work.batch(i):
                        self._settle(part, work.origin, msg)
        work.mark_all_done()
        self._finish(part, work)
        return actions

    def _apply(
        self, part: PartitionState, work: Work, index: int, outcome: Outcome | None, rt_s: float
    ) -> list[Action]:
        """Apply one batch's result: successes settle, failures are routed."""
        batch = work.batch(index)
        origin = work.origin
        if outcome is None:
            if origin is None:
                part.count -= len(batch)
            else:
                for msg in batch:
                    self._settle(part, origin, msg)
            return _NO_ACTIONS
        if origin is None:
            part.count -= len(outcome.succeeded)
        else:
            for i in outcome.succeeded:
                self._settle(part, origin, batch[i])
        actions: list[Action] = []
        rt_ms = rt_s * 1000
        opts = self.options
        size, ack_index, failure = len(batch), outcome.ack_index, outcome.failure
        tp, generation, home = part.tp, part.generation, work.home
        routes = self._routes
        delay_level = outcome.delay_level
        append = actions.append
        if not opts.clustering:
            for i in outcome.failed:
                msg = batch[i]
                if origin is None:
                    part.count -= 1
                else:
                    self._settle(part, origin, msg)
                append(Dropped(tp, msg, failure, TraceInfo(size, i, ack_index, rt_ms)))
            return actions
        pending = home.pending
        if pending is None:
            pending = home.pending = {}
        added = 0  # bytes of messages held from now on (a run's own bytes are let go)
        # the failed messages of a batch mostly share their counts: the last destination
        # is taken again without a look-up
        last_times, last_limit, dest = -1, None, None
        # where the batch's copies were, for their traces: one tuple for all of them (a
        # copy carries its index beside it: no object of its own per copy)
        where = (size, ack_index, rt_ms)
        for i in outcome.failed:
            msg = batch[i]
            times, limit, offset, nbytes = msg.retry_fields()  # one call, not four
            if times != last_times or limit != last_limit or dest is None:
                last_times, last_limit = times, limit
                dest = routes.get((times, limit, delay_level))
                if dest is None:
                    if len(routes) >= _ROUTES_MAX:
                        routes.clear()
                    dest = routes[times, limit, delay_level] = route_failed(
                        reconsume_times=times,
                        max_reconsume_times=opts.max_reconsume_times,
                        delay_level_when_next_consume=delay_level,
                        levels=opts.levels,
                        message_max_reconsume_times=limit,
                    )
            # SendBack(tp, generation, home, msg, dest, failure, offset=, nbytes=, batch=,
            # index=), positional: the failure path's one object per copy
            action = SendBack(
                tp, generation, home, msg, dest, failure, None, False, False, offset, nbytes,
                where, i,
            )  # fmt: skip
            if offset not in pending:
                added += nbytes
            pending[offset] = action  # Work.hold, inline: one per failed message
            append(action)
        part.nbytes += added
        return actions

    def _settle(self, part: PartitionState, home: Work, msg: Any) -> None:
        """``msg``, held in ``home``, is settled."""
        if home.release(msg.queue_offset):
            part.count -= 1
            part.nbytes -= len(msg.body)
            self._dirty.add(part.tp)

    def _finish(self, part: PartitionState, work: Work) -> None:
        """Bookkeeping once a batch of ``work`` completed."""
        if work.origin is None and work.left == 0:
            if work.nbytes:
                part.nbytes -= work.nbytes
                work.nbytes = 0
            # a finished run is let go at once, so that its messages die young instead of
            # being promoted by the garbage collector (whose collections then come at the
            # allocation rate): a settled run leaves the queue from either end, and a run
            # whose failed messages await their copies keeps only those (their actions
            # hold them), not the messages that succeeded around them
            if work.pending:
                work.let_go()
            else:
                works = part.works
                if works and works[-1] is work:
                    works.pop()
            part.release_settled()
        self._dirty.add(part.tp)

    # -- publishing ------------------------------------------------------------------------
    def published(self, action: SendBack) -> None:
        """The broker acknowledged ``action``'s copy: the message is settled."""
        self.published_all((action,))

    def published_all(self, actions: Sequence[SendBack]) -> None:
        """:meth:`published` for each of ``actions`` (the copies one poll of the producer
        saw acknowledged), in one call: the failure path's verdicts come in runs."""
        parts, dirty = self._parts, self._dirty
        tp: TP | None = None
        part: PartitionState | None = None
        for action in actions:
            if action.tp is not tp:  # a run's copies share their partition's key
                tp = action.tp
                part = parts.get(tp)
            if part is None or part.generation != action.generation:
                continue
            pending = action.work.pending
            offset = action.offset
            if offset < 0:
                offset = action.msg.queue_offset
            if pending is not None and pending.get(offset) is action:
                del pending[offset]
                part.count -= 1
                nbytes = action.nbytes
                part.nbytes -= nbytes if nbytes >= 0 else len(action.msg.body)
                dirty.add(tp)

    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]:
        """The broker refused ``action``'s copy (``refusal`` says how): the next step."""
        part = self._parts.get(action.tp)
        if part is None or part.generation != action.generation:
            return _NO_ACTIONS
        if action.work.holder(action.msg.queue_offset) is not action:
            return _NO_ACTIONS  # superseded
        step = escalate(
            refusal,
            alone=action.alone,
            dead_letter=isinstance(action.dest, DeadLetter),
            body_omitted=action.omit_body,
        )
        if step is Escalation.HOLD:
            # consumed again locally later, with reconsume_times + 1; the offset stays held
            due = now + self.options.send_back_retry_interval_s
            heapq.heappush(self._retries, (due, next(self._seq), action))
            return _NO_ACTIONS
        if step is Escalation.SEND_ALONE:
            nxt = replace(action, alone=True)
        elif step is Escalation.DEAD_LETTER:
            times = action.msg.reconsume_times + 1
            dead = DeadLetter(DeadLetterReason.SEND_BACK_REFUSED, times)
            nxt = replace(action, dest=dead, alone=False, omit_body=False)
        else:
            nxt = replace(action, omit_body=True, alone=False)
        action.work.hold(action.msg.queue_offset, nxt)
        return [nxt]

    # -- time ------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Action]:
        """Consume timeouts, local retries that are due, flow control and moved offsets."""
        actions: list[Action] = _NO_ACTIONS
        if self._running:
            actions = self._timeouts(now)
        if self._retries and self._retries[0][0] <= now:
            actions = actions if actions is not _NO_ACTIONS else []
            actions.extend(self._due_retries(now))
        hurried = self._hurried
        if hurried:
            self._hurried = set()
        if self._dirty:
            store = now >= self._next_store
            if store:
                self._next_store = now + self.options.store_interval_s
            found = flow_and_offsets(self._parts, self._dirty, self.options.flow, store=store)
            if found:
                found = self._hurry_first(found, hurried)
                actions = actions if actions is not _NO_ACTIONS else []
                actions.extend(found)
        return actions

    def _hurry_first(self, found: list[Action], hurried: set[TP]) -> list[Action]:
        """Flow control's pauses, except for a partition held at its limit by a copy that
        awaits the broker's verdict: up to :data:`COPY_ALLOWANCE` times its count and span
        limits it keeps fetching (the copy is answered within a round trip or two; a pause
        would cost far more); past that the copies are hurried first (:class:`Hurry`), and
        the partition pauses at the next tick only if it is still over a limit then."""
        parts = self._parts
        flow = self.options.flow
        hurry: list[TP] = []
        kept: list[Action] = []
        for action in found:
            if type(action) is not Pause or action.tp in hurried:
                kept.append(action)
                continue
            part = parts[action.tp]
            if not self._held_by_copy(part):
                kept.append(action)
                continue
            part.paused = False  # not yet: looked at again at the next tick
            self._dirty.add(action.tp)
            allowance = COPY_ALLOWANCE
            if flow.reason(part.count // allowance, part.nbytes, part.span // allowance) is None:
                continue
            self._hurried.add(action.tp)
            hurry.append(action.tp)
        if hurry:
            kept.insert(0, Hurry(tuple(hurry)))
        return kept

    def _held_by_copy(self, part: PartitionState) -> bool:
        """Whether ``part``'s smallest offset in flight is held by a copy sent and not
        answered yet (not a running batch, not a copy waiting for its local retry)."""
        for work in part.works:
            first = work.first_unsettled()
            if first is None:
                continue
            holder = work.holder(first)
            return isinstance(holder, SendBack) and all(
                waiting is not holder for _, _, waiting in self._retries
            )
        return False

    def _timeouts(self, now: float) -> list[Action]:
        running = self._running
        limit = self.options.consume_timeout_s
        actions: list[Action] = _NO_ACTIONS
        while running:
            work, index = running[0]
            part = self._parts.get(work.tp)
            done = work.done
            if (
                part is None
                or part.generation != work.generation
                or not work.left  # all done (a run settled inline has no ``done`` flags)
                or (done and done[index])
            ):
                running.popleft()
                continue
            started = work.started[index] if work.started is not None else None
            if started is None or now - started <= limit:
                break  # batches start in order: the rest started later
            running.popleft()
            if actions is _NO_ACTIONS:
                actions = []
            actions.append(TimedOut(work.tp, tuple(work.batch(index)), limit))
            actions.extend(
                self.completed(
                    work, index, timed_out(limit, work.batch_len(index)), now, now - started
                )
            )
        return actions

    def _due_retries(self, now: float) -> list[Action]:
        actions: list[Action] = []
        while self._retries and self._retries[0][0] <= now:
            _, _, failed = heapq.heappop(self._retries)
            part = self._parts.get(failed.tp)
            if part is None or part.generation != failed.generation:
                continue
            offset = failed.msg.queue_offset
            if failed.work.holder(offset) is not failed:
                continue
            retry = Work(
                failed.tp,
                part.generation,
                [failed.msg.redelivered()],
                1,
                offset + 1,
                origin=failed.work,
            )
            failed.work.hold(offset, retry)  # held by the retry until its result
            retry.started = [None]
            self._running.append((retry, 0))
            actions.append(RunWork(retry))
        return actions

    def rerun(self, held: Sequence[SendBack]) -> RunWork | None:
        """Consume the messages of ``held`` again, as one batch with their
        ``reconsume_times`` unchanged: copies that were never sent (a circuit breaker held
        them; their offsets stayed held).  ``held`` come from one fetched run; those that
        are no longer held by these actions (revoked, superseded) are left out."""
        first = held[0]
        part = self._parts.get(first.tp)
        if part is None or part.generation != first.generation:
            return None
        home = first.work
        msgs = [a.msg for a in held if home.holder(a.msg.queue_offset) is a]
        if not msgs:
            return None
        end = msgs[-1].queue_offset + 1
        retry = Work(first.tp, part.generation, msgs, len(msgs), end, origin=home)
        for msg in msgs:
            home.hold(msg.queue_offset, retry)  # held by the run until its result
        retry.started = [None]
        self._running.append((retry, 0))
        return RunWork(retry)

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

    def local_retries(self) -> int:
        return len(self._retries)

    def next_due(self) -> float | None:
        """When :meth:`tick` next has a local retry to hand out (``None``: none waits)."""
        return self._retries[0][0] if self._retries else None
