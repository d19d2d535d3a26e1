"""The switch: :func:`instrument` and :func:`uninstrument`, the way OpenTelemetry's
instrumentors work (global providers unless given)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from adapter.errors import ConfigError
from adapter.telemetry import state

#: the instrumentation scope the adapter's spans are made under
SCOPE = "rmq-kafka-adapter"


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Trace producers, consumers and the ScheduleService created from now on, and report
    the metrics of those started from now on to the meter.

    ``tracer_provider``/``meter_provider``: OpenTelemetry providers (``None``: the global
    ones; metrics only once the application has set a global meter provider).  Raises
    :class:`~adapter.errors.ConfigError` when the ``otel`` extra (``opentelemetry-api``) is
    not installed.  Calling it again replaces the providers.
    """
    if importlib.util.find_spec("opentelemetry") is None:
        raise ConfigError(
            "tracer_provider",
            tracer_provider,
            "OpenTelemetry is not installed: pip install 'rmq-kafka-adapter[otel]'",
        )
    from adapter.telemetry.hooks import Hooks

    hooks = Hooks(tracer_provider, meter_provider, SCOPE, _version())
    previous, state.active = state.active, hooks
    if previous is not None and previous.metrics not in (None, hooks.metrics):
        previous.metrics.close()


def uninstrument() -> None:
    """Stop tracing: no span is made and no header added from now on, and the metrics of
    the clients made while instrumented are no longer reported to the meter."""
    previous, state.active = state.active, None
    if previous is not None and previous.metrics is not None:
        previous.metrics.close()


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return state.active is not None


def _version() -> str | None:
    """The installed distribution's version (the instrumentation scope's)."""
    try:
        return importlib.metadata.version(SCOPE)
    except importlib.metadata.PackageNotFoundError:
        return None
