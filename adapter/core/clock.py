"""The clock protocol the I/O layer injects; the pure core only ever receives ``now_ms``."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds (due times travel in headers as these)."""
        ...

    def monotonic(self) -> float:
        """Seconds for measuring intervals (timeouts, back-off)."""
        ...
