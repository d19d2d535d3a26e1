"""The consume engines with a circuit breaker (:mod:`adapter.core.breaker`).  Pure.

What the breaker's states mean for a consumer:

* **closed**: as without a breaker; each batch result goes into the breaker's window and
  failures take the retry ladder with their usual ``reconsume_times``.
* **open** (from the batch that opened it on): every assigned partition is paused (the
  assignment stays; the poll loop keeps polling, so the member keeps its place in the
  group), and what fails is *held*: a concurrent batch's copies are not sent back (their
  offsets stay held, so nothing is committed past them), an orderly partition's next run
  (its suspended batch, or what follows) is not handed out.  Flow control's resumes wait.
* **half-open**: ``half_open_probes`` held batches are handed out again (a concurrent
  batch with its ``reconsume_times`` unchanged).  With nothing held, the partitions are
  resumed and the next fetched batches are the probes.
* **closed again**: every held batch is handed out, and the partitions resume where they
  stopped.

A partition revoked meanwhile forgets what was held for it: its next owner reads it again
from the committed offset, which never passed a held message.

The subclasses cost a consumer without a breaker nothing: it gets the plain engines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.core.breaker import Breaker, CircuitState
from adapter.core.engine.actions import Action, EngineOptions, Pause, Resume, RunWork, SendBack
from adapter.core.engine.concurrent import ConcurrentEngine
from adapter.core.engine.orderly import (
    BatchVerdict,
    OrderlyEngine,
    OrderlyOptions,
    judge_orderly,
)
from adapter.core.engine.tracking import Work
from adapter.core.listener import Outcome
from adapter.core.types import TP

__all__ = [
    "CircuitConcurrentEngine",
    "CircuitGate",
    "CircuitOrderlyEngine",
    "CircuitSnapshot",
    "OnCircuitChange",
]

#: told ``(old, new, reason, now)`` on each change of state
OnCircuitChange = Callable[[CircuitState, CircuitState, str, float], None]
#: why the breaker pauses a partition (the ``Pause`` action's reason)
PAUSE_REASON = "circuit open"


@dataclass(frozen=True, slots=True)
class CircuitSnapshot:
    """A consumer's breaker at one moment (metrics, ``running_info``)."""

    state: CircuitState
    #: seconds spent open or half-open in all
    open_seconds: float
    #: messages held: failed while open and not sent back, or (orderly) waiting behind
    held_messages: int
    #: held batches (each is handed out again as one)
    held_batches: int
    #: times the breaker opened
    opened: int

    def as_dict(self) -> dict[str, Any]:
        """What the consumers' ``circuit()`` returns (the state by its value)."""
        return {
            "state": self.state.value,
            "open_seconds": self.open_seconds,
            "held_messages": self.held_messages,
            "held_batches": self.held_batches,
            "opened": self.opened,
        }


class CircuitGate:
    """What a consumer does as its breaker changes state; shared by both engines.

    Holds the batches the engine must not hand out (``item`` is the engine's: held copies
    of a concurrent batch, or an orderly :class:`RunWork`), the partitions it paused, and
    turns the breaker's changes into actions."""

    def __init__(self, breaker: Breaker, on_change: OnCircuitChange | None = None) -> None:
        self.breaker = breaker
        self.on_change = on_change
        #: (partition, item, messages) in the order they were held
        self.held: list[tuple[TP, Any, int]] = []
        self.held_messages = 0
        #: partitions the breaker paused (flow control's resumes for them wait)
        self.paused: set[TP] = set()
        #: partitions assigned while fetching is stopped, to pause at the next tick
        self.to_pause: set[TP] = set()
        #: fetching is stopped: from the open on until the partitions resume (half-open
        #: with nothing held to probe with, or closed); half-open, held batches are the
        #: probes.  Not ``bool(paused)``: a rebalance may have revoked every paused partition
        self.stopped = False
        self.opened = 0

    @property
    def closed(self) -> bool:
        return self.breaker.state is CircuitState.CLOSED

    @property
    def holding(self) -> bool:
        """Whether what fails now is held (open, or half-open while its probes run)."""
        state = self.breaker.state
        return state is CircuitState.OPEN or (state is CircuitState.HALF_OPEN and self.stopped)

    # -- results ---------------------------------------------------------------------------
    def record(self, now: float, ok: int, errors: Sequence[BaseException | None]) -> int:
        """``ok`` batches succeeded and one batch failed per entry of ``errors`` (what its
        listener raised, ``None``: it returned a failure), in that order.  Returns how many
        of the failed batches, counted from the end, are to be held (they failed once the
        breaker was no longer closed)."""
        breaker = self.breaker
        if not errors:
            if ok:
                breaker.record(now, ok, 0)
            return 0
        if breaker.state is CircuitState.HALF_OPEN:
            # a failed probe reopens the breaker, whatever succeeded beside it
            first = errors[0]
            if breaker.tripped_by(first):
                breaker.trip(now, f"listener raised {type(first).__name__}")
            else:
                breaker.record(now, 0, 1)
            return len(errors)
        if ok:
            breaker.record(now, ok, 0)
        held = 0
        for i, error in enumerate(errors):
            if breaker.state is not CircuitState.CLOSED:
                held = len(errors) - i
                break
            if breaker.tripped_by(error):
                breaker.trip(now, f"listener raised {type(error).__name__}")
            else:
                breaker.record(now, 0, 1)
            if breaker.state is not CircuitState.CLOSED:
                held = len(errors) - i
                break
        return held

    def hold(self, tp: TP, item: Any, messages: int) -> None:
        self.held.append((tp, item, messages))
        self.held_messages += messages

    def held_tps(self) -> set[TP]:
        return {tp for tp, _, _ in self.held}

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        if self.stopped:  # a new partition waits too
            self.to_pause.add(tp)

    def revoked(self, tp: TP) -> None:
        """Forget what was held for ``tp`` (its next owner reads it from the committed
        offset) and that it was paused."""
        self.paused.discard(tp)
        self.to_pause.discard(tp)
        if any(t == tp for t, _, _ in self.held):
            kept = [h for h in self.held if h[0] != tp]
            self.held_messages = sum(n for _, _, n in kept)
            self.held = kept

    def filter_resumes(self, actions: list[Action]) -> list[Action]:
        """Flow control's ``Resume`` of a partition the breaker paused waits for the
        breaker (the engine then counts it as resumed; the breaker resumes it on close)."""
        paused = self.paused
        if not paused or not any(type(a) is Resume for a in actions):
            return actions
        return [a for a in actions if not (type(a) is Resume and a.tp in paused)]

    # -- transitions -----------------------------------------------------------------------
    def pending(self) -> bool:
        return bool(self.breaker.changes or self.to_pause)

    def transitions(
        self,
        partitions: Sequence[TP],
        flow_paused: Callable[[], list[TP]],
        release: Callable[[Any], RunWork | None],
    ) -> list[Action]:
        """The actions for what changed since the last call: pause on open, probes on
        half-open, everything held and resumes on close.  ``release`` turns a held item
        into the action that hands it out (``None``: it is gone)."""
        actions: list[Action] = []
        if self.to_pause:
            for tp in sorted(self.to_pause):
                if tp in partitions:
                    self.paused.add(tp)
                    actions.append(Pause(tp, PAUSE_REASON))
            self.to_pause.clear()
        changes = self.breaker.changes
        while changes:
            old, new, reason, at = changes.pop(0)
            if self.on_change is not None:
                self.on_change(old, new, reason, at)
            if new is CircuitState.OPEN:
                self.stopped = True
                if old is CircuitState.CLOSED:
                    self.opened += 1
                for tp in partitions:
                    if tp not in self.paused:
                        self.paused.add(tp)
                        actions.append(Pause(tp, PAUSE_REASON))
            elif new is CircuitState.HALF_OPEN:
                probes = self._release(self.breaker.settings.half_open_probes, release)
                if probes:  # fetching stays stopped
                    actions.extend(probes)
                else:  # nothing held to probe with: what is fetched next is the probe
                    actions.extend(self._resume(flow_paused()))
            else:
                actions.extend(self._release(len(self.held), release))
                actions.extend(self._resume(flow_paused()))
        return actions

    def _release(self, n: int, release: Callable[[Any], RunWork | None]) -> list[Action]:
        out: list[Action] = []
        while self.held and len(out) < n:
            _, item, messages = self.held.pop(0)
            self.held_messages -= messages
            action = release(item)
            if action is not None:
                out.append(action)
        return out

    def _resume(self, flow_paused: list[TP]) -> list[Action]:
        """Resume what the breaker paused, except what flow control still pauses."""
        still = set(flow_paused)
        actions: list[Action] = [Resume(tp) for tp in sorted(self.paused) if tp not in still]
        self.paused.clear()
        self.stopped = False
        return actions

    # -- introspection ---------------------------------------------------------------------
    def snapshot(self, now: float) -> CircuitSnapshot:
        return CircuitSnapshot(
            state=self.breaker.state,
            open_seconds=self.breaker.open_for(now),
            held_messages=self.held_messages,
            held_batches=len(self.held),
            opened=self.opened,
        )

    def next_due(self, due: float | None) -> float | None:
        """The engine's next timer, or the breaker's if it comes first."""
        mine = self.breaker.due()
        if mine is None:
            return due
        return mine if due is None else min(due, mine)


def gate_changes(
    gate: CircuitGate,
    actions: list[Action],
    partitions: Sequence[TP],
    flow_paused: Callable[[], list[TP]],
    release: Callable[[Any], RunWork | None],
) -> list[Action]:
    """``actions`` plus what the breaker's pending state changes call for (either engine)."""
    if not gate.pending():
        return actions
    more = gate.transitions(partitions, flow_paused, release)
    return [*actions, *more] if actions else more


class CircuitConcurrentEngine(ConcurrentEngine):
    """:class:`ConcurrentEngine` with a circuit breaker: see the module docstring."""

    def __init__(
        self,
        options: EngineOptions,
        breaker: Breaker,
        on_change: OnCircuitChange | None = None,
    ) -> None:
        super().__init__(options)
        self.gate = CircuitGate(breaker, on_change)

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        super().assigned(tp)
        self.gate.assigned(tp)

    def revoked(self, tp: TP) -> None:
        super().revoked(tp)
        self.gate.revoked(tp)

    # -- results ---------------------------------------------------------------------------
    def completed(
        self, work: Work, index: int, outcome: Outcome | None, now: float, rt_s: float = 0.0
    ) -> list[Action]:
        applies = self.is_current(work) and not (work.done is not None and work.done[index])
        actions = super().completed(work, index, outcome, now, rt_s)
        if not applies:
            return actions
        if outcome is None and rt_s <= self.options.consume_timeout_s:
            self.gate.record(now, 1, ())
        elif self.gate.record(now, 0, (None if outcome is None else outcome.error,)):
            actions = self._hold(actions, None)
        return self._changes(actions)

    def settle_run(
        self, work: Work, failures: Sequence[tuple[int, Outcome | None, float]], now: float
    ) -> list[Action]:
        if not self.is_current(work):
            return super().settle_run(work, failures, now)
        limit = self.options.consume_timeout_s
        failed = sorted(
            (index, None if outcome is None else outcome.error)
            for index, outcome, rt_s in failures
            if outcome is not None or rt_s > limit
        )
        # read before the run settles: a finished run lets its messages go
        starts = [work.msgs[index * work.size].queue_offset for index, _ in failed]
        actions = super().settle_run(work, failures, now)
        gate = self.gate
        held = gate.record(now, work.nbatches - len(failed), [error for _, error in failed])
        if held:
            actions = self._hold(actions, starts[len(failed) - held])
        return self._changes(actions)

    def _hold(self, actions: list[Action], from_offset: int | None) -> list[Action]:
        """Keep the copies in ``actions`` (from ``from_offset`` on) instead of sending them:
        held in batches of ``batch_size``.  They are one run's (``completed`` and
        ``settle_run`` apply the results of one run), so they are held together."""
        kept: list[Action] = []
        group: list[SendBack] = []
        size = self.options.batch_size
        gate = self.gate
        for action in actions:
            if type(action) is SendBack and (
                from_offset is None or action.msg.queue_offset >= from_offset
            ):
                group.append(action)
                if len(group) == size:
                    gate.hold(action.tp, tuple(group), size)
                    group = []
            else:
                kept.append(action)
        if group:
            gate.hold(group[0].tp, tuple(group), len(group))
        return kept

    def _hand_out(self, item: Any) -> RunWork | None:
        return self.rerun(item)

    # -- time ------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Action]:
        actions = super().tick(now)
        gate = self.gate
        if gate.closed and not gate.pending():
            return actions
        if actions:
            actions = gate.filter_resumes(actions)
        gate.breaker.advance(now)
        return self._changes(actions)

    def _changes(self, actions: list[Action]) -> list[Action]:
        return gate_changes(self.gate, actions, self.partitions, self.paused, self._hand_out)

    def next_due(self) -> float | None:
        return self.gate.next_due(super().next_due())

    # -- introspection ---------------------------------------------------------------------
    def circuit(self, now: float) -> CircuitSnapshot:
        return self.gate.snapshot(now)


class CircuitOrderlyEngine(OrderlyEngine):
    """:class:`OrderlyEngine` with a circuit breaker: see the module docstring.  What is
    held is a partition's next run (its suspended batch, or what follows it); the run
    counts as the partition's, so nothing else of it runs meanwhile."""

    def __init__(
        self,
        options: EngineOptions,
        orderly: OrderlyOptions | None,
        breaker: Breaker,
        on_change: OnCircuitChange | None = None,
    ) -> None:
        super().__init__(options, orderly)
        self.gate = CircuitGate(breaker, on_change)

    # -- partitions ------------------------------------------------------------------------
    def assigned(self, tp: TP) -> None:
        super().assigned(tp)
        self.gate.assigned(tp)

    def revoked(self, tp: TP) -> None:
        super().revoked(tp)
        self.gate.revoked(tp)

    def running(self, tps: Sequence[TP] | set[TP] | None = None) -> bool:
        """A held run is not running: a rebalance does not wait for it."""
        held = self.gate.held_tps()
        if not held:
            return super().running(tps)
        keys = self.partitions if tps is None else tps
        return super().running([tp for tp in keys if tp not in held])

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
        if not self.is_current(work):
            return super().completed(work, succeeded, verdict, now, chain=chain)
        errors: tuple[BaseException | None, ...] = ()
        ok = succeeded
        if verdict is not None:
            judged = judge_orderly(
                verdict,
                timeout_s=self.options.consume_timeout_s,
                default_suspend_ms=self.orderly.suspend_ms,
            )
            if judged.failure is None:
                ok += 1
            else:
                result = verdict.result
                errors = (result if isinstance(result, BaseException) else None,)
        self.gate.record(now, ok, errors)
        actions = super().completed(work, succeeded, verdict, now, chain=chain)
        if actions and self.gate.holding:
            actions = self._hold(actions)
        return self._changes(actions)

    def _hold(self, actions: list[Action]) -> list[Action]:
        kept: list[Action] = []
        for action in actions:
            if type(action) is RunWork:
                self.gate.hold(action.work.tp, action, len(action.work.msgs))
            else:
                kept.append(action)
        return kept

    @staticmethod
    def _hand_out(item: Any) -> RunWork | None:
        assert isinstance(item, RunWork)
        return item

    # -- time ------------------------------------------------------------------------------
    def tick(self, now: float) -> list[Action]:
        actions = super().tick(now)
        gate = self.gate
        if gate.closed and not gate.pending():
            return actions
        if actions:
            actions = gate.filter_resumes(actions)
            if gate.holding:
                actions = self._hold(actions)
        gate.breaker.advance(now)
        return self._changes(actions)

    def _changes(self, actions: list[Action]) -> list[Action]:
        return gate_changes(self.gate, actions, self.partitions, self.paused, self._hand_out)

    def next_due(self) -> float | None:
        return self.gate.next_due(super().next_due())

    # -- introspection ---------------------------------------------------------------------
    def circuit(self, now: float) -> CircuitSnapshot:
        return self.gate.snapshot(now)
