"""A clock for integration tests: the system's, moved forward by hand (``skip``).

Real time still passes (a broker and librdkafka run on it), so loops that wait keep going;
what the adapter measures on the injected clock (invisible durations, cache ages, linger)
jumps ahead when the test says so.
"""

from __future__ import annotations

import threading
import time


class SkippingClock:
    """``monotonic`` and ``now_ms`` of the system, plus what :meth:`skip` added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._skipped_s = 0.0

    def skip(self, seconds: float) -> None:
        with self._lock:
            self._skipped_s += seconds

    def monotonic(self) -> float:
        return time.monotonic() + self._skipped_s

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + int(self._skipped_s * 1000)
