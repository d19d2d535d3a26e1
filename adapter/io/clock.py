"""The real clock (the only place the adapter reads time for decisions)."""

from __future__ import annotations

import time


class SystemClock:
    """The system's clock.  ``monotonic`` is :func:`time.monotonic` itself (no wrapper call),
    so a hot path reads ``clock.monotonic()`` at the price of a direct call."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    monotonic = staticmethod(time.monotonic)


SYSTEM_CLOCK = SystemClock()
