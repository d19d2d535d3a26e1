"""RocketMQ's orderly consumption (``MessageListenerOrderly``) as a state machine.  Pure: time
comes in as ``now`` (seconds on a monotonic clock), Kafka and threads stay outside.

A partition is consumed one *run* at a time: an :class:`OrderlyWork` of messages in offset
order, cut into batches of at most ``batch_size`` that one thread hands to the listener
back to back, stopping at the first batch that does not succeed.  Nothing else of the
partition runs meanwhile, so batches of a partition never overlap and never pass each other.

It stays one module, one state machine: every event reads and writes the same per-partition
state (the lanes of waiting messages, the ready heap, suspended batches, dead-letter copies in
flight, the committable offset), and its invariants (one run per partition or key, an offset
that never moves back) hold only across all of them together.  What needs no partition state,
the options and the judging of a listener's answer, is in :mod:`.orderly_rules`.

Events and what they return:

=============================================  ==============================================
``assigned(tp)`` / ``revoked(tp)``              a new generation / forget the partition
``fetched(tp, msgs, end, nbytes)``              the :class:`OrderlyWork` to run now, or
                                                ``None`` (a run is going on, or the partition
                                                is suspended: the messages wait)
``completed(work, succeeded, verdict, now)``    the run stopped after ``succeeded`` batches
                                                that succeeded, at a batch that did not
                                                (``verdict``) or because it was told to stop
``published(action)``                           a dead-letter copy was acknowledged
``publish_failed(action, refusal, now)``        the next step (:mod:`adapter.core.publishing`)
``tick(now)``                                   suspend times that passed, copies to send
                                                again, flow control, offsets that moved
=============================================  ==============================================

Rules (RocketMQ 4.9 ``ConsumeMessageOrderlyService``):

* ``SUSPEND_CURRENT_QUEUE_A_MOMENT``, an exception, ``None``, anything that is not a status,
  or a batch that ran past ``consume_timeout``: the batch is *suspended*.  The same messages
  come back to the listener after the suspend time (the context's value, ``-1``: the
  consumer's; clamped to [10, 30 000] ms), with ``reconsume_times + 1``; nothing later in
  the partition is delivered meanwhile and the offset does not move.  No retry topic.
* A message whose ``reconsume_times`` reached the maximum (the group's, ``-1`` = unlimited,
  or its own ``MAX_RECONSUME_TIMES``) goes to the DLQ instead (:class:`SendBack` with a
  :class:`~adapter.core.routing.DeadLetter`) and is settled once the broker has it; the
  partition waits for that.  The rest of the batch is retried.  A copy refused for a
  transient reason is sent again after the suspend time (the partition stays suspended);
  other refusals escalate as everywhere (:func:`~adapter.core.publishing.escalate`).
  The dead letter carries the count of its last delivery and the consumer's maximum
  (``MAX_RECONSUME_TIMES``), in either message model, as RocketMQ's orderly send-back; a
  group reading its own DLQ (``OrderlyOptions.dead_letters`` off) drops it instead.
* ``ordering=KEY``: the same per key (the Kafka record key) inside a partition.  Only the
  keys of a suspended batch wait (keyless messages count as one key); the other keys of
  the partition go on, still one run at a time.
* The committable offset is the smallest offset not settled (running, suspended, waiting,
  or awaiting a dead-letter copy); it never moves back.
* A partition pauses while it holds more than the flow limits (messages, bytes, offset
  span, and with ``ordering=KEY`` suspended keys), and resumes below half of them.
* A revoked partition's state is dropped (its suspended batch is read again by the next
  owner from the committed offset, with ``reconsume_times`` 0); results of an older
  generation are ignored.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from adapter.core.codec import Failure
from adapter.core.engine.actions import (
    Action,
    Drain,
    Dropped,
    EngineOptions,
    RunWork,
    SendBack,
    StoreOffsets,
    TraceInfo,
    pause_change,
    store_again,
)
from adapter.core.engine.orderly_rules import (
    ORDERLY_UNLIMITED,
    SUSPEND_MAX_MS,
    SUSPEND_MIN_MS,
    BatchVerdict,
    Judged,
    Ordering,
    OrderlyOptions,
    judge_orderly,
    orderly_max_reconsume_times,
    suspend_ms_of,
)
from adapter.core.engine.tracking import Work
from adapter.core.publishing import Escalation, Refusal, escalate
from adapter.core.routing import DeadLetter, DeadLetterReason
from adapter.core.types import TP

__all__ = [
    "ORDERLY_UNLIMITED",
    "SUSPEND_MAX_MS",
    "SUSPEND_MIN_MS",
    "BatchVerdict",
    "Judged",
    "Ordering",
    "OrderlyEngine",
    "OrderlyOptions",
    "OrderlyWork",
    "judge_orderly",
    "orderly_max_reconsume_times",
    "suspend_ms_of",
]

_NO_ACTIONS: list[Action] = []  # returned when nothing is to be done (never mutated)


class OrderlyWork(Work):
    """A run of one partition's messages for an orderly listener: its batches go to the
    listener one after the other on one thread.  ``fresh``: exactly the views of one fetch
    (they share their consume-start stamp); ``held``: the suspended batch this run retries."""

    __slots__ = ("fresh", "held")

    def __init__(
        self,
        tp: TP,
        generation: int,
        msgs: list[Any],
        size: int,
        end: int,
        *,
        fresh: bool = False,
        held: Held | None = None,
    ) -> None:
        super().__init__(tp, generation, msgs, size, end)
        self.fresh = fresh
        self.held = held


class Held:
    """A suspended batch: the messages to retry (``msgs``, already ``redelivered()``) once
    ``due`` has passed, and the dead-letter copies (``copies``, by offset) the broker has
    not acknowledged yet.  Its ``keys`` wait until it is released."""

    __slots__ = ("copies", "done", "due", "failure", "generation", "keys", "msgs", "tp")

    def __init__(  # noqa: PLR0917
        self,
        tp: TP,
        generation: int,
        msgs: list[Any],
        due: float,
        keys: set[Any],
        failure: Failure,
    ) -> None:
        self.tp = tp
        self.generation = generation
        self.msgs = msgs
        self.due = due
        self.keys = keys
        self.failure = failure
        self.copies: dict[int, SendBack] = {}
        self.done = False  # released (or its partition revoked)

    def first(self) -> int | None:
        """The smallest offset it holds."""
        offsets = [m.queue_offset for m in self.msgs]
        offsets.extend(self.copies)
        return min(offsets) if offsets else None

    def __repr__(self) -> str:
        return (
            f"Held(tp={self.tp!r}, offsets={[m.queue_offset for m in self.msgs]}, "
            f"copies={sorted(self.copies)}, due={self.due})"
        )


class _Lane:
    """The waiting messages of one key (``ordering=PARTITION``: of the whole partition)."""

    __slots__ = ("held", "key", "msgs", "seq")

    def __init__(self, key: Any) -> None:
        self.key = key
        self.msgs: deque[Any] = deque()
        self.held: Held | None = None  # the suspended batch this key waits for
        self.seq: int | None = None  # its valid entry in the partition's ready heap


@dataclass(eq=False)
class _Part:
    """What one consumer knows about one assigned partition."""

    tp: TP
    generation: int
    lanes: dict[Any, _Lane] = field(default_factory=dict)
    #: lanes that may run, by the offset of their first message: (offset, seq, lane)
    ready: list[tuple[int, int, _Lane]] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    copies: dict[int, Held] = field(default_factory=dict)  # dead-letter copies by offset
    running: OrderlyWork | None = None
    position: int | None = None  # the offset after the last one fetched
    stored: int | None = None  # the last committable offset handed out
    count: int = 0  # messages in flight
    nbytes: int = 0  # bytes of messages waiting (in lanes or suspended)
    held_keys: int = 0
    paused: bool = False


def _body_bytes(msgs: Iterable[Any]) -> int:
    return sum(len(m.body) for m in msgs)


class OrderlyEngine:
    """The orderly consume engine of one consumer (one instance per client)."""

    def __init__(self, options: EngineOptions, orderly: OrderlyOptions | None = None) -> None:
        self.options = options
        self.orderly = orderly or OrderlyOptions()
        self._by_key = self.orderly.ordering is Ordering.KEY
        size = options.batch_size
        self._cap = max(1, self.orderly.work_max // size) * size
        self._suspend_s = suspend_ms_of(self.orderly.suspend_ms, 1000)[0] / 1000
        self._parts: dict[TP, _Part] = {}
        self._generations: dict[TP, int] = {}
        self._dirty: set[TP] = set()
        #: partitions told to drain at the last tick: if still over a limit now, they pause
        self._drained: set[TP] = set()
        self._wake: set[TP] = set()  # partitions that may be able to run something now
        self._timers: list[tuple[float, int, Held]] = []  # suspended batches by due time
        self._resends: list[tuple[float, int, SendBack]] = []  # refused copies to send again
        self._seq = itertools.count()
        self._next_store = 0.0
        self._nheld = 0  # suspended batches over all partitions

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        """``tp`` is ours from now on (a new generation: older results are ignored)."""
        generation = self._generations.get(tp, 0) + 1
        self._generations[tp] = generation
        self._parts[tp] = _Part(tp, generation)

    def revoked(self, tp: TP) -> None:
        """``tp`` is no longer ours: suspended and waiting messages are dropped uncommitted
        (the next owner reads them again from the committed offset)."""
        part = self._parts.pop(tp, None)
        if part is not None:
            for held in part.held:
                held.done = True
            self._nheld -= len(part.held)
        self._generations[tp] = self._generations.get(tp, 0) + 1
        self._dirty.discard(tp)
        self._wake.discard(tp)

    def owns(self, tp: TP) -> bool:
        return tp in self._parts

    def is_current(self, work: Work) -> bool:
        """Whether ``work`` is the run going on in a partition we own."""
        part = self._parts.get(work.tp)
        return part is not None and part.generation == work.generation and part.running is work

    @property
    def partitions(self) -> list[TP]:
        return list(self._parts)

    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool:
        """Whether a run of ``tps`` (default: all) is with the listener."""
        parts = self._parts
        keys = parts.keys() if tps is None else tps
        return any((p := parts.get(tp)) is not None and p.running is not None for tp in keys)

    # -- fetching --------------------------------------------------------------------------
    def fetched(
        self, tp: TP, msgs: list[Any], end: int, nbytes: int = 0, *, pooled: bool = False
    ) -> Work | None:
        """``msgs`` were fetched from ``tp`` (those that pass the subscription's filter, in
        offset order; ``end`` is the offset after the last record fetched).  Returns the
        run to hand to the listener now, or ``None`` (they wait their turn).  ``nbytes`` and
        ``pooled`` are not needed: waiting messages are measured as they wait."""
        del nbytes, pooled
        part = self._parts.get(tp)
        if part is None:
            return None  # revoked meanwhile: the next owner reads these again
        if part.position is None or end > part.position:
            part.position = end
        self._dirty.add(tp)
        if not msgs:
            return None  # all filtered out by tag: settled like a broker-side filter
        part.count += len(msgs)
        if part.running is None and not part.lanes and len(msgs) <= self._cap:
            # the hot path: nothing waits in this partition, so these run now as they are
            work = OrderlyWork(tp, part.generation, msgs, self.options.batch_size, end, fresh=True)
            part.running = work
            return work
        self._enqueue(part, msgs)
        if part.running is not None:
            return None
        return self._next_work(part, None)

    # -- results ---------------------------------------------------------------------------
    def completed(
        self,
        work: Work,
        succeeded: int,
        verdict: BatchVerdict | None,
        now: float,
        *,
        chain: bool = True,
    ) -> list[Action]:
        """The run ``work`` stopped: its first ``succeeded`` batches succeeded; the next one
        ended with ``verdict`` (``None``: it was not run, nor anything after it: the run was
        told to stop).  ``chain``: return the partition's next run now (``False`` while
        its running batches are being drained: it waits for :meth:`tick`)."""
        part = self._parts.get(work.tp)
        if part is None or part.generation != work.generation or part.running is not work:
            return _NO_ACTIONS  # revoked meanwhile
        assert isinstance(work, OrderlyWork)
        part.running = None
        self._dirty.add(part.tp)
        judged: Judged | None = None
        if verdict is not None:
            judged = judge_orderly(
                verdict,
                timeout_s=self.options.consume_timeout_s,
                default_suspend_ms=self.orderly.suspend_ms,
            )
            if judged.failure is None:
                succeeded += 1  # it succeeded after all
                judged = verdict = None
        size = work.size
        msgs = work.msgs
        n_ok = min(len(msgs), succeeded * size)
        held = work.held
        if n_ok:
            if held is not None:
                self._release(part, held)  # the retry went through
            else:
                part.count -= n_ok
        actions: list[Action] = _NO_ACTIONS
        if judged is not None and verdict is not None:
            assert judged.failure is not None
            batch = msgs[n_ok : n_ok + size]
            rest = msgs[n_ok + size :]
            actions = self._suspend(part, work, batch, judged, verdict.rt_s, now)
        else:
            rest = msgs[n_ok:]
        if rest:
            if held is not None:  # a retry is one batch; it was not run at all
                held.msgs = list(rest)
                self._wake.add(part.tp)
            else:
                self._put_back(part, rest)
        if chain and part.running is None:
            nxt = self._next_work(part, now)
            if nxt is not None:
                actions = actions if actions is not _NO_ACTIONS else []
                actions.append(RunWork(nxt))
        elif part.running is None:
            self._wake.add(part.tp)
        return actions

    def _suspend(  # noqa: PLR0917
        self,
        part: _Part,
        work: OrderlyWork,
        batch: list[Any],
        judged: Judged,
        rt_s: float,
        now: float,
    ) -> list[Action]:
        """``batch`` of ``work`` failed: dead-letter what reached the maximum, suspend the
        rest (and the batch's keys) until the suspend time has passed."""
        failure = judged.failure
        assert failure is not None
        actions: list[Action] = []
        retry: list[Any] = []
        copies: dict[int, SendBack] = {}
        group_max = self.options.max_reconsume_times
        rt_ms = rt_s * 1000
        for i, msg in enumerate(batch):
            own = msg.max_reconsume_times
            limit = group_max if own is None else (ORDERLY_UNLIMITED if own == -1 else own)
            if msg.reconsume_times < limit:
                retry.append(msg.redelivered())
                continue
            info = TraceInfo(len(batch), i, None, rt_ms)
            if self.orderly.dead_letters:
                # RocketMQ's orderly send-back: the count of the last delivery, and the
                # consumer's maximum unless the message carries its own
                dest = DeadLetter(
                    DeadLetterReason.MAX_RECONSUME_TIMES,
                    msg.reconsume_times,
                    orderly=True,
                    max_reconsume_times=group_max if own is None else None,
                )
                action = SendBack(part.tp, part.generation, work, msg, dest, failure, info)
                copies[msg.queue_offset] = action
                actions.append(action)
            else:
                part.count -= 1
                actions.append(Dropped(part.tp, msg, failure, info))
        keys = {self._key(m) for m in batch}
        old = work.held
        if old is not None:  # a retry that failed again: the new suspension replaces it
            part.held.remove(old)
            self._nheld -= 1
            old.done = True
            part.held_keys -= len(old.keys)
            part.count -= len(old.msgs)
            part.nbytes -= _body_bytes(old.msgs)
            part.count += len(batch)  # the same messages, still in flight
        if not retry and not copies:  # all dropped (reading its own DLQ): nothing waits
            for key in keys:
                lane = part.lanes.get(key)
                if lane is not None and (lane.held is old or lane.held is None):
                    lane.held = None
                    self._ready_or_drop(part, lane)
            return actions
        held = Held(part.tp, part.generation, retry, now + judged.suspend_ms / 1000, keys, failure)
        held.copies = copies
        part.held.append(held)
        self._nheld += 1
        part.held_keys += len(keys)
        part.nbytes += _body_bytes(retry)
        for offset in copies:
            part.copies[offset] = held
        for key in keys:
            lane = part.lanes.get(key)
            if lane is None:
                lane = part.lanes[key] = _Lane(key)
            lane.held = held
            lane.seq = None  # out of the ready heap
        if retry:
            heapq.heappush(self._timers, (held.due, next(self._seq), held))
        return actions

    def _release(self, part: _Part, held: Held) -> None:
        """``held`` is over (its retry succeeded, or everything in it was dead-lettered):
        its messages are settled and its keys may run again."""
        if held.done:
            return
        held.done = True
        part.held.remove(held)
        self._nheld -= 1
        part.held_keys -= len(held.keys)
        part.count -= len(held.msgs)
        part.nbytes -= _body_bytes(held.msgs)
        held.msgs = []
        for key in held.keys:
            lane = part.lanes.get(key)
            if lane is not None and lane.held is held:
                lane.held = None
                self._ready_or_drop(part, lane)
        self._dirty.add(part.tp)
        self._wake.add(part.tp)

    # -- lanes -----------------------------------------------------------------------------
    def _key(self, msg: Any) -> Any:
        return msg.sharding_key if self._by_key else None

    def _lane(self, part: _Part, key: Any) -> _Lane:
        lane = part.lanes.get(key)
        if lane is None:
            lane = part.lanes[key] = _Lane(key)
        return lane

    def _push(self, part: _Part, lane: _Lane) -> None:
        """(Re-)enter ``lane`` in the ready heap at its first message."""
        seq = next(self._seq)
        lane.seq = seq
        heapq.heappush(part.ready, (lane.msgs[0].queue_offset, seq, lane))

    def _ready_or_drop(self, part: _Part, lane: _Lane) -> None:
        """``lane`` is not held: make it ready, or forget it when it is empty."""
        if lane.msgs:
            self._push(part, lane)
        else:
            lane.seq = None
            if part.lanes.get(lane.key) is lane:
                del part.lanes[lane.key]

    def _enqueue(self, part: _Part, msgs: list[Any]) -> None:
        """``msgs`` (newly fetched) wait in their lanes."""
        part.nbytes += _body_bytes(msgs)
        if not self._by_key:
            lane = self._lane(part, None)
            was_empty = not lane.msgs
            lane.msgs.extend(msgs)
            if was_empty and lane.held is None:
                self._push(part, lane)
            return
        lanes = part.lanes
        for msg in msgs:
            key = msg.sharding_key
            found = lanes.get(key)
            if found is None:
                found = lanes[key] = _Lane(key)
            found.msgs.append(msg)
            if found.held is None and found.seq is None:
                self._push(part, found)

    def _put_back(self, part: _Part, msgs: list[Any]) -> None:
        """``msgs`` of a run were not run: back to the front of their lanes, in order."""
        part.nbytes += _body_bytes(msgs)
        by_lane: dict[Any, list[Any]] = {}
        for msg in msgs:
            by_lane.setdefault(self._key(msg), []).append(msg)
        for key, mine in by_lane.items():
            lane = self._lane(part, key)
            lane.msgs.extendleft(reversed(mine))
            if lane.held is None:
                self._push(part, lane)  # a new first message: a new place in the heap

    def _top(self, part: _Part) -> tuple[int, int, _Lane] | None:
        """The ready lane with the smallest first offset (stale heap entries dropped)."""
        ready = part.ready
        while ready:
            entry = ready[0]
            lane = entry[2]
            if lane.seq == entry[1] and lane.held is None and lane.msgs:
                return entry
            heapq.heappop(ready)
        return None

    def _take(self, part: _Part, cap: int) -> list[Any]:
        """Up to ``cap`` waiting messages of lanes that are not held, in offset order."""
        out: list[Any] = []
        while len(out) < cap:
            top = self._top(part)
            if top is None:
                break
            heapq.heappop(part.ready)
            lane = top[2]
            lane.seq = None
            nxt = self._top(part)
            queue = lane.msgs
            if nxt is None:
                n = min(cap - len(out), len(queue))
                out.extend(queue.popleft() for _ in range(n))
            else:
                limit = nxt[0]
                while queue and len(out) < cap and queue[0].queue_offset < limit:
                    out.append(queue.popleft())
            self._ready_or_drop(part, lane)
        part.nbytes -= _body_bytes(out)
        return out

    def _next_work(self, part: _Part, now: float | None) -> OrderlyWork | None:
        """The partition's next run, if it may run one: a suspended batch whose time has
        come (and whose copies are acknowledged) first, else what waits in ready lanes."""
        if now is not None and part.held:
            best: Held | None = None
            for held in part.held:
                if (
                    held.msgs
                    and not held.copies
                    and held.due <= now
                    and (best is None or held.msgs[0].queue_offset < best.msgs[0].queue_offset)
                ):
                    best = held
            if best is not None:
                msgs = best.msgs
                size = max(self.options.batch_size, len(msgs))
                end = msgs[-1].queue_offset + 1
                work = OrderlyWork(part.tp, part.generation, msgs, size, end, held=best)
                part.running = work
                return work
        msgs = self._take(part, self._cap)
        if not msgs:
            return None
        end = msgs[-1].queue_offset + 1
        work = OrderlyWork(part.tp, part.generation, msgs, self.options.batch_size, end)
        part.running = work
        return work

    # -- publishing ------------------------------------------------------------------------
    def _holder(self, action: SendBack) -> tuple[_Part, Held] | None:
        part = self._parts.get(action.tp)
        if part is None or part.generation != action.generation:
            return None
        held = part.copies.get(action.msg.queue_offset)
        if held is None or held.copies.get(action.msg.queue_offset) is not action:
            return None  # superseded (or already settled)
        return part, held

    def holds(self, action: SendBack) -> bool:
        """Whether ``action`` is the copy its message is waiting for (not superseded, not
        settled, not of a revoked partition)."""
        return self._holder(action) is not None

    def published(self, action: SendBack) -> None:
        """The broker acknowledged ``action``'s dead-letter copy: the message is settled."""
        found = self._holder(action)
        if found is None:
            return
        part, held = found
        offset = action.msg.queue_offset
        del part.copies[offset]
        del held.copies[offset]
        part.count -= 1
        self._dirty.add(part.tp)
        if not held.copies:
            if not held.msgs:
                self._release(part, held)
            self._wake.add(part.tp)

    def publish_failed(self, action: SendBack, refusal: Refusal, now: float) -> list[Action]:
        """The broker refused ``action``'s copy (``refusal`` says how): the next step.  The
        partition stays suspended meanwhile."""
        found = self._holder(action)
        if found is None:
            return _NO_ACTIONS
        _, held = found
        step = escalate(
            refusal,
            alone=action.alone,
            dead_letter=isinstance(action.dest, DeadLetter),
            body_omitted=action.omit_body,
        )
        if step is Escalation.SEND_ALONE:
            nxt = replace(action, alone=True)
        elif step is Escalation.OMIT_BODY:
            nxt = replace(action, omit_body=True, alone=False)
        else:  # HOLD: the same copy again after the suspend time
            heapq.heappush(self._resends, (now + self._suspend_s, next(self._seq), action))
            return _NO_ACTIONS
        held.copies[action.msg.queue_offset] = nxt
        return [nxt]

    # -- time ------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Action]:
        """Suspend times that passed, copies to send again, flow control, moved offsets."""
        actions: list[Action] = _NO_ACTIONS
        timers = self._timers
        while timers and timers[0][0] <= now:
            held = heapq.heappop(timers)[2]
            if not held.done:
                self._wake.add(held.tp)
        resends = self._resends
        if resends and resends[0][0] <= now:
            actions = []
            while resends and resends[0][0] <= now:
                action = heapq.heappop(resends)[2]
                found = self._holder(action)
                if found is None:
                    continue
                nxt = replace(action)
                found[1].copies[action.msg.queue_offset] = nxt
                actions.append(nxt)
        if self._wake:
            wake, self._wake = self._wake, set()
            for tp in wake:
                part = self._parts.get(tp)
                if part is None or part.running is not None:
                    continue
                work = self._next_work(part, now)
                if work is not None:
                    actions = actions if actions is not _NO_ACTIONS else []
                    actions.append(RunWork(work))
        drained = self._drained
        if drained:
            self._drained = set()
        if self._dirty:
            store = now >= self._next_store
            if store:
                self._next_store = now + self.options.store_interval_s
            found_actions = self._flow_and_offsets(store=store, drained=drained)
            if found_actions:
                actions = actions if actions is not _NO_ACTIONS else []
                actions.extend(found_actions)
        return actions

    def _committable(self, part: _Part) -> int | None:
        """The smallest offset in flight, else the position.  Waiting messages of held
        lanes always come after their suspended batch, so the batches, the run and the
        first ready lane decide."""
        first: int | None = None
        if part.running is not None and part.running.msgs:
            first = part.running.msgs[0].queue_offset
        for held in part.held:
            offset = held.first()
            if offset is not None and (first is None or offset < first):
                first = offset
        top = self._top(part)
        if top is not None and (first is None or top[0] < first):
            first = top[0]
        return part.position if first is None else first

    def _flow_and_offsets(self, *, store: bool, drained: set[TP]) -> list[Action]:
        """Offsets to store and flow control's pauses and resumes.  A partition over a limit
        only because messages wait behind its run (nothing suspended, no dead-letter copy
        in flight) drains first (:class:`~adapter.core.engine.actions.Drain`); it pauses if
        it is still over a limit at the next tick (``drained``)."""
        actions: list[Action] = _NO_ACTIONS
        offsets: list[tuple[TP, int]] = []
        drain: list[TP] = []
        flow = self.options.flow
        for tp in self._dirty:
            part = self._parts.get(tp)
            if part is None:
                continue
            committable = self._committable(part)
            if (
                store
                and committable is not None
                and (part.stored is None or committable > part.stored)
            ):
                part.stored = committable
                offsets.append((tp, committable))
            if not part.count and not part.paused:
                continue
            span = 0
            if part.count and part.position is not None and committable is not None:
                span = part.position - 1 - committable
            reason = flow.reason(part.count, part.nbytes, span)
            if reason is None and self._by_key and part.held_keys > self.orderly.max_suspended_keys:
                reason = f"{part.held_keys} keys suspended > {self.orderly.max_suspended_keys}"
            below_half = part.paused and flow.below_half(part.count, part.nbytes, span)
            if (
                reason is not None
                and not part.paused
                and part.running is not None
                and not part.held
                and not part.copies
                and tp not in drained
            ):  # over a limit only behind its run: drained first, looked at again next tick
                drain.append(tp)
                continue
            change = pause_change(tp, part, reason, below_half=below_half)
            if change is not None:
                actions = actions if actions is not _NO_ACTIONS else []
                actions.append(change)
        if store:
            self._dirty.clear()
        if offsets:
            actions = actions if actions is not _NO_ACTIONS else []
            actions.append(StoreOffsets(tuple(offsets)))
        if drain:
            self._dirty.update(drain)
            self._drained.update(drain)
            actions = actions if actions is not _NO_ACTIONS else []
            actions.insert(0, Drain(tuple(drain)))
        return actions

    # -- introspection ---------------------------------------------------------------------
    def store_failed(self, tps: list[TP]) -> None:
        """See :func:`~adapter.core.engine.actions.store_again`."""
        store_again(self._parts, self._dirty, tps)

    def committable(self, tp: TP) -> int | None:
        part = self._parts.get(tp)
        return None if part is None else self._committable(part)

    def in_flight(self, tp: TP) -> int:
        part = self._parts.get(tp)
        return 0 if part is None else part.count

    def paused(self) -> list[TP]:
        return [tp for tp, part in self._parts.items() if part.paused]

    def local_retries(self) -> int:
        """Suspended batches (and refused copies) waiting to be tried again."""
        return self._nheld + len(self._resends)

    def next_due(self) -> float | None:
        """When :meth:`tick` next has a suspend time to end or a refused copy to send again
        (``None``: nothing waits for a time; a suspended batch waiting for its copies'
        acknowledgements is woken by them)."""
        dues = [heap[0][0] for heap in (self._timers, self._resends) if heap]
        return min(dues) if dues else None

    def suspended(self, tp: TP) -> int:
        """Suspended batches of ``tp`` (``ordering=KEY``: each holds its keys)."""
        part = self._parts.get(tp)
        return 0 if part is None else len(part.held)

    def suspended_keys(self, tp: TP) -> int:
        """Keys of ``tp`` that wait for a suspended batch (``ordering=PARTITION``: 1 while
        the partition is suspended)."""
        part = self._parts.get(tp)
        return 0 if part is None else part.held_keys
