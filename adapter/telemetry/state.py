"""Whether the adapter is instrumented: the one attribute its hot paths read.

``active`` is ``None`` until :func:`adapter.telemetry.instrument` sets it to the
:class:`~adapter.telemetry.hooks.Hooks` that make spans and carry the context; a producer
or consumer checks it once per send, listener set-up or run of copies, and a client reads
it once when it starts for its metrics (:func:`observe`).  Nothing here
imports OpenTelemetry: the extra is optional.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapter.telemetry.hooks import Hooks

#: the hooks in use (``None``: not instrumented, nothing is traced)
active: Hooks | None = None


def metered() -> bool:
    """Whether the clients started now report their metrics to an OpenTelemetry meter."""
    hooks = active
    return hooks is not None and hooks.metrics is not None


def observe(collector: Any) -> Callable[[], None] | None:
    """Report ``collector``'s metrics (one of :mod:`adapter.io.metrics`) to the meter when
    :func:`metered`; returns what stops reporting it (``None``: nothing to stop)."""
    hooks = active
    if hooks is None or hooks.metrics is None:
        return None
    return hooks.metrics.add(collector)
