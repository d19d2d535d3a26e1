"""A consumer's circuit breaker: when to stop consuming because everything fails.  Pure:
time comes in as ``now`` (seconds on a monotonic clock).

The retry ladder suits a few failing messages.  When what the listener calls is down,
every message fails, and each is copied to a delay topic, comes back, fails again and ends
in the DLQ hours later.  A :class:`CircuitBreaker` (the settings) and its per-consumer
:class:`Breaker` (the state) stop that flood:

* **closed** (normal): batch results go into a sliding time window of one-second buckets;
  once it holds at least ``minimum_batches`` results and the share of failed batches
  reaches ``failure_rate_threshold``, the breaker *opens*.  A batch that raised one of the
  ``trip_on`` exception types (or :class:`OpenCircuit`, what
  ``ctx.open_circuit()`` raises) opens it at once.
* **open**: the consumer stops fetching and holds the batches that fail instead of
  sending them back.  After ``open_s`` it turns **half-open**.
* **half-open**: ``half_open_probes`` held batches are consumed again (the probes).  A
  failure opens the breaker for another ``open_s``; once that many results succeeded it
  *closes*: the held batches run again and fetching resumes where it stopped.

What a consumer does in each state is the engines' part (:mod:`adapter.core.engine.circuit`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from adapter.errors import ConfigError

__all__ = [
    "Breaker",
    "CircuitBreaker",
    "CircuitChange",
    "CircuitState",
    "OpenCircuit",
]


class CircuitState(str, Enum):
    """Where a consumer's circuit breaker stands."""

    CLOSED = "closed"
    """Consuming as usual; failures take the retry ladder."""

    OPEN = "open"
    """Not fetching; failed batches are held (offsets held), not sent back."""

    HALF_OPEN = "half_open"
    """Probing: held batches run again to see whether the failures are over."""


class OpenCircuit(Exception):
    """Raised by ``ctx.open_circuit()`` (or by a listener itself): the batch failed for a
    reason that is not the message's fault, so the consumer's circuit breaker opens now.
    Without a breaker it counts as any exception (``RECONSUME_LATER``)."""


@dataclass(frozen=True, slots=True)
class CircuitChange:
    """What ``on_circuit_change`` is told: the breaker went from ``old`` to ``new`` at
    ``at`` (the consumer's monotonic clock) because of ``reason``."""

    group: str
    old: CircuitState
    new: CircuitState
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """The settings of a consumer's circuit breaker (``PushConsumer(circuit_breaker=...)``).

    The defaults open the breaker within ten seconds of a listener starting to fail every
    batch at a hundred messages a second (half of a full window fails after five seconds;
    from a cold start it takes ``minimum_batches`` failures), and probe every five seconds.
    One instance may configure many consumers: each keeps its own state.
    """

    #: the share of failed batches in the window that opens the breaker (0 < x <= 1)
    failure_rate_threshold: float = 0.5
    #: the sliding window the rate is taken over (seconds; one-second buckets)
    window_s: float = 10.0
    #: the rate counts once the window holds at least this many batch results
    minimum_batches: int = 10
    #: how long the breaker stays open before it probes (seconds)
    open_s: float = 5.0
    #: batches run while half-open: all must succeed to close, one failure reopens
    half_open_probes: int = 1
    #: exception types that open the breaker at once when a listener raises them
    trip_on: tuple[type[BaseException], ...] = ()
    #: called on the consumer's poll thread on each state change (errors are logged)
    on_circuit_change: Callable[[CircuitChange], Any] | None = None

    def __post_init__(self) -> None:
        rate = self.failure_rate_threshold
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
            raise ConfigError("failure_rate_threshold", rate, "must be > 0 and <= 1")
        for name in ("window_s", "open_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigError(name, value, "must be a number of seconds > 0")
        for name in ("minimum_batches", "half_open_probes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be an int >= 1")
        trip_on = self.trip_on
        if isinstance(trip_on, type):
            trip_on = (trip_on,)
        trip_on = tuple(trip_on)
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in trip_on):
            raise ConfigError("trip_on", self.trip_on, "must be exception types")
        object.__setattr__(self, "trip_on", (OpenCircuit, *trip_on))
        if self.on_circuit_change is not None and not callable(self.on_circuit_change):
            raise ConfigError("on_circuit_change", self.on_circuit_change, "must be callable")


class Breaker:
    """The state of one consumer's circuit breaker (see the module docstring).

    ``record`` takes batch results in the order they complete; ``due``/``advance`` move
    time on (open to half-open).  Every change is appended to ``changes`` for the caller
    to take (log, callback, metrics)."""

    __slots__ = (
        "_buckets",
        "_failed",
        "_total",
        "changes",
        "opened_at",
        "probes_ok",
        "settings",
        "state",
        "time_open_s",
    )

    def __init__(self, settings: CircuitBreaker) -> None:
        self.settings = settings
        self.state = CircuitState.CLOSED
        #: (second, batches, failed batches), oldest first
        self._buckets: deque[list[int]] = deque()
        self._total = 0
        self._failed = 0
        self.opened_at: float | None = None  # when it last opened (None: closed)
        self.probes_ok = 0
        #: seconds spent open or half-open before the current spell (see ``open_for``)
        self.time_open_s = 0.0
        self.changes: list[tuple[CircuitState, CircuitState, str, float]] = []

    # -- results ---------------------------------------------------------------------------
    def record(self, now: float, ok: int, failed: int) -> CircuitState:
        """``ok`` batches succeeded and ``failed`` batches failed at ``now``; returns the
        state after them (``OPEN`` when they opened it)."""
        state = self.state
        if state is CircuitState.CLOSED:
            self._count(now, ok, failed)
            total = self._total
            if (
                failed
                and total >= self.settings.minimum_batches
                and self._failed >= self.settings.failure_rate_threshold * total
            ):
                rate = self._failed / total
                self._open(now, f"{rate:.0%} of {total} batches failed")
        elif state is CircuitState.HALF_OPEN:
            if failed:
                self._open(now, "a probe failed")
            elif ok:
                self.probes_ok += ok
                if self.probes_ok >= self.settings.half_open_probes:
                    self._close(now)
        return self.state

    def trip(self, now: float, reason: str) -> None:
        """Open now (a listener asked to, or raised a ``trip_on`` type)."""
        if self.state is not CircuitState.OPEN:
            self._open(now, reason)

    def tripped_by(self, error: BaseException | None) -> bool:
        """Whether ``error`` (what a listener raised) opens the breaker at once."""
        return error is not None and isinstance(error, self.settings.trip_on)

    def _count(self, now: float, ok: int, failed: int) -> None:
        second = int(now)
        buckets = self._buckets
        if buckets and buckets[-1][0] == second:
            bucket = buckets[-1]
            bucket[1] += ok + failed
            bucket[2] += failed
        else:
            buckets.append([second, ok + failed, failed])
        self._total += ok + failed
        self._failed += failed
        oldest = second - math.ceil(self.settings.window_s) + 1
        while buckets and buckets[0][0] < oldest:
            _, n, f = buckets.popleft()
            self._total -= n
            self._failed -= f

    # -- time ------------------------------------------------------------------------------
    def due(self) -> float | None:
        """When the open breaker turns half-open (``None``: not open)."""
        if self.state is CircuitState.OPEN and self.opened_at is not None:
            return self.opened_at + self.settings.open_s
        return None

    def advance(self, now: float) -> CircuitState:
        """Move time on to ``now``: an open breaker whose ``open_s`` passed turns half-open."""
        due = self.due()
        if due is not None and now >= due:
            self._change(CircuitState.HALF_OPEN, f"open for {self.settings.open_s:g}s", now)
            self.probes_ok = 0
        return self.state

    def open_for(self, now: float) -> float:
        """Seconds spent open or half-open in all, up to ``now``."""
        if self.opened_at is None:
            return self.time_open_s
        return self.time_open_s + max(0.0, now - self.opened_at)

    # -- transitions -----------------------------------------------------------------------
    def _open(self, now: float, reason: str) -> None:
        if self.opened_at is not None:  # half-open to open: the spell goes on
            self.time_open_s += now - self.opened_at
        self.opened_at = now
        self._change(CircuitState.OPEN, reason, now)

    def _close(self, now: float) -> None:
        if self.opened_at is not None:
            self.time_open_s += now - self.opened_at
        self.opened_at = None
        self._buckets.clear()  # a fresh window: the old failures are over
        self._total = self._failed = 0
        self._change(CircuitState.CLOSED, f"{self.probes_ok} probe(s) succeeded", now)

    def _change(self, new: CircuitState, reason: str, now: float) -> None:
        old, self.state = self.state, new
        self.changes.append((old, new, reason, now))
