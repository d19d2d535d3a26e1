"""A client's metrics, to Prometheus and to the OpenTelemetry meter (imports
prometheus-client: a client imports it on use, when it has metrics to report).

Nothing here imports OpenTelemetry: the meter is reached through
:func:`adapter.telemetry.state.observe`, which is a no-op unless instrumented with one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapter.io.metrics import Exposition, expose
from adapter.telemetry import state as telemetry

__all__ = ["Reported", "report"]


class Reported:
    """A client's metrics on Prometheus (``exposition``, when asked for) and on the
    OpenTelemetry meter (``stop`` ends that, when instrumented with one)."""

    def __init__(self, exposition: Exposition | None, stop: Callable[[], None] | None) -> None:
        self.exposition = exposition
        self._stop = stop

    @property
    def endpoint(self) -> str | None:
        return None if self.exposition is None else self.exposition.endpoint

    def close(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()
        if self.exposition is not None:
            self.exposition.close()


def report(
    collector: Any, *, registry: Any, port: int | None, addr: str = "127.0.0.1"
) -> Reported | None:
    """:func:`expose` ``collector`` and report it to the OpenTelemetry meter when
    instrumented with one; ``None`` when neither."""
    exposition = expose(collector, registry=registry, port=port, addr=addr)
    stop = telemetry.observe(collector)
    if exposition is None and stop is None:
        return None
    return Reported(exposition, stop)
