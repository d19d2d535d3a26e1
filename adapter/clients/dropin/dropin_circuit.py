"""The circuit breaker of the confluent-kafka drop-in (:mod:`adapter.kafka`).  Pure.

The drop-in runs no listener: the application's poll loop does.  So a message is one
"batch" for the breaker (:class:`~adapter.core.breaker.Breaker`), and:

* a message **fails** when the loop hands it back (``reconsume_later`` / ``open_circuit``);
* it **succeeded** when the loop comes back for more (the next ``poll()``/``consume()``)
  without having handed it back: the rule the emulated ``enable.auto.offset.store``
  already follows.

What the states mean for the drop-in (the PushConsumer's, :mod:`adapter.core.engine.circuit`):

* **closed**: failures take the retry ladder as usual.
* **open** (from the message that opened it on): every assigned partition is paused (the
  assignment stays; ``poll()`` keeps polling, so the member keeps its place), and a
  message handed back is *held* (its offset held, no copy sent).  ``poll()`` returns
  nothing.
* **half-open**: ``half_open_probes`` held messages are returned by ``poll()`` again, as
  they were (the probes); with nothing held the partitions resume and what is fetched next
  is the probe.
* **closed again**: every held message is returned again, then the partitions resume
  where they stopped.

:class:`DropInCircuit` decides; the I/O (pausing, holding offsets, sending copies) is the
drop-in's.  An item is the drop-in's ``(tp, offset, message)``; only ``(tp, offset)`` is
looked at.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from adapter.core.breaker import Breaker, CircuitState
from adapter.core.engine.circuit import CircuitSnapshot, OnCircuitChange
from adapter.core.types import TP

__all__ = ["DropInCircuit", "Fate", "Held", "Turn"]

#: ``(partition, offset, message as the application got it)``
Held = tuple[TP, int, Any]


class Fate(Enum):
    """What becomes of a message handed back."""

    SEND = "send"
    """Take the ladder: hold its offset and send a copy."""

    SEND_HELD = "send_held"
    """Take the ladder; its offset is held already (a held message handed out again)."""

    HOLD = "hold"
    """Hold it (offset held, no copy): the breaker is not closed."""

    HOLD_AGAIN = "hold_again"
    """Hold it again (its offset is held already)."""


class Turn(Enum):
    """What the drop-in does to its partitions after :meth:`DropInCircuit.step`."""

    NONE = "none"
    PAUSE = "pause"
    RESUME = "resume"


class DropInCircuit:
    """One drop-in consumer's breaker: the messages it holds, those it hands out again, and
    what each change of state calls for."""

    __slots__ = (
        "_failed",
        "_handed",
        "_out",
        "breaker",
        "held",
        "on_change",
        "opened",
        "paused",
        "queue",
    )

    def __init__(self, breaker: Breaker, on_change: OnCircuitChange | None = None) -> None:
        self.breaker = breaker
        self.on_change = on_change
        #: held messages, oldest first
        self.held: deque[Held] = deque()
        #: held messages to hand out again (probes, or everything once closed)
        self.queue: deque[Held] = deque()
        #: held messages handed out again since the last ``step`` (awaiting their verdict)
        self._out: dict[tuple[TP, int], Held] = {}
        #: fetched messages handed out, and handed back, since the last ``step``
        self._handed = 0
        self._failed = 0
        #: the partitions are paused by the breaker
        self.paused = False
        self.opened = 0

    # -- the loop --------------------------------------------------------------------------
    def handed_out(self, n: int) -> None:
        """``n`` fetched messages went to the application."""
        self._handed += n

    def hand_out(self) -> Held | None:
        """The next held message to return instead of fetching (``None``: fetch)."""
        if not self.queue:
            return None
        item = self.queue.popleft()
        self._out[(item[0], item[1])] = item
        return item

    def failed(
        self, now: float, tp: TP, offset: int, message: Any, *, trip: str | None = None
    ) -> Fate:
        """The application handed back ``message`` (at ``offset`` of ``tp``); ``trip``: it
        asked to open the breaker for that reason."""
        key = (tp, offset)
        again = self._out.pop(key, None) is not None
        if not again:
            self._failed += 1
        breaker = self.breaker
        if trip is not None:
            breaker.trip(now, trip)
        elif breaker.state is not CircuitState.OPEN:
            breaker.record(now, 0, 1)
        if breaker.state is CircuitState.CLOSED:
            return Fate.SEND_HELD if again else Fate.SEND
        self.held.append((tp, offset, message))
        return Fate.HOLD_AGAIN if again else Fate.HOLD

    def step(self, now: float) -> tuple[Turn, list[Held]]:
        """At each ``poll()``/``consume()``: what was handed out since the last call and not
        handed back succeeded (returned: the held ones among them, whose offsets are free
        now); time moves on; the state changes turn into a pause or a resume."""
        breaker = self.breaker
        released = list(self._out.values())
        ok = max(0, self._handed - self._failed) + len(released)
        self._out.clear()
        self._handed = self._failed = 0
        if ok and breaker.state is not CircuitState.OPEN:
            breaker.record(now, ok, 0)
        breaker.advance(now)
        turn = Turn.NONE
        changes = breaker.changes
        while changes:
            old, new, reason, at = changes.pop(0)
            if self.on_change is not None:
                self.on_change(old, new, reason, at)
            if new is CircuitState.OPEN:
                if old is CircuitState.CLOSED:
                    self.opened += 1
                if self.queue:  # not handed out again yet: held as before, in order
                    self.held.extendleft(reversed(self.queue))
                    self.queue.clear()
                if not self.paused:
                    self.paused = True
                    turn = Turn.PAUSE
            elif new is CircuitState.HALF_OPEN:
                n = breaker.settings.half_open_probes
                while self.held and len(self.queue) < n:
                    self.queue.append(self.held.popleft())
                if not self.queue and self.paused:
                    self.paused = False
                    turn = Turn.RESUME
            else:
                self.queue.extend(self.held)
                self.held.clear()
                if self.paused:
                    self.paused = False
                    turn = Turn.RESUME
        return turn, released

    # -- partitions ------------------------------------------------------------------------
    def revoked(self, tps: Iterable[TP]) -> None:
        """Forget what is held for ``tps``: their next owner reads them again from the
        committed offset, which never passed a held message."""
        gone = set(tps)
        if not gone:
            return
        keep: Callable[[Held], bool] = lambda item: item[0] not in gone  # noqa: E731
        self.held = deque(filter(keep, self.held))
        self.queue = deque(filter(keep, self.queue))
        self._out = {k: v for k, v in self._out.items() if k[0] not in gone}

    # -- introspection ---------------------------------------------------------------------
    def snapshot(self, now: float) -> CircuitSnapshot:
        held = len(self.held) + len(self.queue)
        return CircuitSnapshot(
            state=self.breaker.state,
            open_seconds=self.breaker.open_for(now),
            held_messages=held,
            held_batches=held,
            opened=self.opened,
        )
