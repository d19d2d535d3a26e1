"""Back-off values.  Pure: randomness and time are passed in."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from adapter.constants import BACKOFF_INITIAL_S, BACKOFF_JITTER, BACKOFF_MAX_S, BACKOFF_MULTIPLIER
from adapter.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """gRPC connection-backoff: ``current = min(initial * multiplier^(n-1), max)``, then
    ``current ± jitter * current`` (uniform), for flow-control errors of the producer.
    """

    initial_s: float = BACKOFF_INITIAL_S
    multiplier: float = BACKOFF_MULTIPLIER
    jitter: float = BACKOFF_JITTER
    max_s: float = BACKOFF_MAX_S

    def __post_init__(self) -> None:
        for name in ("initial_s", "multiplier", "jitter", "max_s"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(name, getattr(self, name), "must be a finite number")
        if self.initial_s <= 0:
            raise ConfigError("initial_s", self.initial_s, "must be > 0")
        if self.multiplier < 1:
            raise ConfigError("multiplier", self.multiplier, "must be >= 1")
        if not 0 <= self.jitter < 1:
            raise ConfigError("jitter", self.jitter, "must be in [0, 1)")
        if self.max_s < self.initial_s:
            raise ConfigError("max_s", self.max_s, "must be >= initial_s")

    def base(self, attempt: int) -> float:
        """The un-jittered back-off before retry ``attempt`` (1-based)."""
        if attempt < 1:
            raise ConfigError("attempt", attempt, "attempts are counted from 1")
        value = self.initial_s
        for _ in range(attempt - 1):
            value = min(value * self.multiplier, self.max_s)
            if value == self.max_s:
                break
        return value

    def delay(self, attempt: int, uniform: Callable[[float, float], float]) -> float:
        """The jittered back-off; ``uniform(a, b)`` draws from [a, b] (``random.uniform``)."""
        current = self.base(attempt)
        spread = self.jitter * current
        return current + uniform(-spread, spread)
