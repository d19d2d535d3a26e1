"""A consumer's circuit breaker on the I/O side: the engine that carries it, what each
change of state tells the outside (a log line, the application's ``on_circuit_change``),
and the member's status on the control topic for ``rmq-kafka group progress``
(:class:`CircuitReporter`).  The rules are in :mod:`adapter.core.breaker`,
:mod:`adapter.core.engine.circuit` and :mod:`adapter.core.circuit_status`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from adapter.core.breaker import Breaker, CircuitBreaker, CircuitChange, CircuitState
from adapter.core.circuit_status import CircuitStatus, StatusSchedule
from adapter.core.clock import Clock
from adapter.core.engine.actions import EngineOptions
from adapter.core.engine.circuit import (
    CircuitConcurrentEngine,
    CircuitOrderlyEngine,
    CircuitSnapshot,
    OnCircuitChange,
)
from adapter.core.engine.orderly import OrderlyOptions
from adapter.errors import AdapterError

__all__ = ["CircuitReporter", "circuit_engine", "circuit_notifier"]

#: how often a reporter looks at the member (its id; whether a refresh is due)
CHECK_INTERVAL_S = 1.0
#: back-off after the status could not be published (doubling, capped)
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0

log = logging.getLogger("adapter.consumer")


def circuit_notifier(
    name: str, group: str, settings: CircuitBreaker, reporter: CircuitReporter | None = None
) -> OnCircuitChange:
    """Log each change of state (a warning when it opens), tell ``reporter`` and
    ``on_circuit_change``; an error in the callback is logged, never raised into the poll
    loop."""
    callback = settings.on_circuit_change

    def changed(old: CircuitState, new: CircuitState, reason: str, at: float) -> None:
        level = logging.WARNING if new is CircuitState.OPEN else logging.INFO
        log.log(level, "%s: circuit %s -> %s: %s", name, old.value, new.value, reason)
        if reporter is not None:
            reporter.changed(at)
        if callback is not None:
            try:
                callback(CircuitChange(group, old, new, reason, at))
            except Exception:
                log.exception("%s: on_circuit_change raised", name)

    return changed


def circuit_engine(
    options: EngineOptions,
    orderly: OrderlyOptions | None,
    settings: CircuitBreaker,
    *,
    name: str,
    group: str,
    reporter: CircuitReporter | None = None,
) -> CircuitConcurrentEngine | CircuitOrderlyEngine:
    """The engine of a consumer with ``settings`` (``orderly``: an orderly listener's);
    ``reporter`` publishes its state (bind it to the engine's ``circuit`` afterwards)."""
    notify = circuit_notifier(name, group, settings, reporter)
    if orderly is not None:
        return CircuitOrderlyEngine(options, orderly, Breaker(settings), notify)
    return CircuitConcurrentEngine(options, Breaker(settings), notify)


class StatusSink(Protocol):
    """What :class:`CircuitReporter` needs of :class:`adapter.io.control.StatusPublisher`."""

    def publish(self, status: CircuitStatus) -> None: ...
    def close(self) -> None: ...


class CircuitReporter:
    """Publishes a member's breaker state for ``group progress``: at once after each
    change, and refreshed (:class:`~adapter.core.circuit_status.StatusSchedule`).  Called
    from the member's loop thread: :meth:`changed` from the breaker's notifier,
    :meth:`step` every loop (it looks at most every :data:`CHECK_INTERVAL_S`, or right
    after a change).  A control topic that cannot be reached is retried with back-off; the
    consumer runs on either way.  A new member id (the member rejoined) gets a publisher of
    its own; the old one leaves a tombstone."""

    def __init__(
        self,
        group: str,
        name: str,
        clock: Clock,
        open_sink: Callable[[str], StatusSink],
    ) -> None:
        self._group = group
        self._name = name
        self._clock = clock
        self._open_sink = open_sink
        self._member_id: Callable[[], str | None] = lambda: None
        self._snapshot: Callable[[float], CircuitSnapshot] | None = None
        self._sink: StatusSink | None = None
        self._sink_member: str | None = None
        self._schedule = StatusSchedule()
        self._since_ms = clock.now_ms()
        self._next = 0.0
        self._backoff = RETRY_FIRST_S
        #: statuses published
        self.published = 0

    def bind(
        self, member_id: Callable[[], str | None], snapshot: Callable[[float], CircuitSnapshot]
    ) -> None:
        """Where the member id and the breaker's state come from."""
        self._member_id = member_id
        self._snapshot = snapshot

    def changed(self, at: float) -> None:
        """The breaker changed state at ``at`` (the member's monotonic clock)."""
        clock = self._clock
        self._since_ms = clock.now_ms() - max(0, round((clock.monotonic() - at) * 1000))
        self._schedule.changed()
        self._next = 0.0

    def step(self, now: float) -> None:
        if now < self._next or self._snapshot is None:
            return
        self._next = now + CHECK_INTERVAL_S
        member_id = self._member_id()
        if not member_id:
            return  # not in the group (yet)
        if member_id != self._sink_member:
            self.close()
            self._schedule.changed()
        if not self._schedule.due(now):
            return
        snap = self._snapshot(now)
        status = CircuitStatus(
            group=self._group,
            member_id=member_id,
            state=snap.state,
            since_ms=self._since_ms,
            held_messages=snap.held_messages,
            open_seconds=snap.open_seconds,
            opened=snap.opened,
            published_ms=self._clock.now_ms(),
        )
        try:
            if self._sink is None:
                self._sink = self._open_sink(member_id)
                self._sink_member = member_id
            self._sink.publish(status)
        except (AdapterError, BufferError) as exc:
            self._next = now + self._backoff
            log.warning(
                "%s: circuit status not published (%s); trying again in %.0f s",
                self._name,
                exc,
                self._backoff,
            )
            self._backoff = min(RETRY_MAX_S, self._backoff * 2)
            return
        self._backoff = RETRY_FIRST_S
        self._schedule.published(now, snap.state)
        self.published += 1

    def close(self) -> None:
        """Close the publisher (it leaves a tombstone); a later :meth:`step` opens another."""
        sink, self._sink, self._sink_member = self._sink, None, None
        if sink is not None:
            try:
                sink.close()
            except AdapterError as exc:
                log.debug("%s: closing the circuit status publisher: %s", self._name, exc)
