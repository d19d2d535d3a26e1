"""Whether the adapter is instrumented: the one attribute its hot paths read.

``active`` is ``None`` until :func:`adapter.telemetry.instrument` sets it to the
:class:`~adapter.telemetry.hooks.Hooks` that make spans and carry the context; a producer
or consumer checks it once per send, listener set-up or run of copies.  Nothing here
imports OpenTelemetry: the extra is optional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapter.telemetry.hooks import Hooks

#: the hooks in use (``None``: not instrumented, nothing is traced)
active: Hooks | None = None
