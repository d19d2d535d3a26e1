"""The real clock (the only place the adapter reads time for decisions)."""

from __future__ import annotations

import time


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()
