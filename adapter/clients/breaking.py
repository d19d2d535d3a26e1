"""A push consumer's circuit breaker on the I/O side: the engine that carries it, and what
each change of state tells the outside (a log line, the application's
``on_circuit_change``).  The rules are in :mod:`adapter.core.breaker` and
:mod:`adapter.core.engine.circuit`."""

from __future__ import annotations

import logging

from adapter.core.breaker import Breaker, CircuitBreaker, CircuitChange, CircuitState
from adapter.core.engine.actions import EngineOptions
from adapter.core.engine.circuit import (
    CircuitConcurrentEngine,
    CircuitOrderlyEngine,
    OnCircuitChange,
)
from adapter.core.engine.orderly import OrderlyOptions

__all__ = ["circuit_engine", "circuit_notifier"]

log = logging.getLogger("adapter.consumer")


def circuit_notifier(name: str, group: str, settings: CircuitBreaker) -> OnCircuitChange:
    """Log each change of state (a warning when it opens) and tell ``on_circuit_change``;
    an error in the callback is logged, never raised into the poll loop."""
    callback = settings.on_circuit_change

    def changed(old: CircuitState, new: CircuitState, reason: str, at: float) -> None:
        level = logging.WARNING if new is CircuitState.OPEN else logging.INFO
        log.log(level, "%s: circuit %s -> %s: %s", name, old.value, new.value, reason)
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
) -> CircuitConcurrentEngine | CircuitOrderlyEngine:
    """The engine of a consumer with ``settings`` (``orderly``: an orderly listener's)."""
    notify = circuit_notifier(name, group, settings)
    if orderly is not None:
        return CircuitOrderlyEngine(options, orderly, Breaker(settings), notify)
    return CircuitConcurrentEngine(options, Breaker(settings), notify)
