"""The real clock: the one place the library reads the time.

Everything that decides on time (deadlines, back-off, expiry, timeouts) reads it through a
:class:`~adapter.core.clock.Clock`: the clients, services and waiting loops take one
(``clock=``, :data:`SYSTEM_CLOCK` by default; the lower-level helpers take its
``monotonic``), so a test drives their timing with a fake clock; the command line and the
console read :data:`SYSTEM_CLOCK`.  Only the tooling (``adapter.bench``,
``adapter.embedded``, ``adapter.demo``) reads :mod:`time` directly.  Waiting is not
reading: loops wait on an ``Event``, a client's ``poll(timeout)`` or tenacity's back-off.
"""

from __future__ import annotations

import time


class SystemClock:
    """The system's clock.  ``monotonic`` is :func:`time.monotonic` itself (no wrapper call),
    so a hot path reads ``clock.monotonic()`` at the price of a direct call."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    monotonic = staticmethod(time.monotonic)


SYSTEM_CLOCK = SystemClock()
