"""Counters and latency summaries.  Pure."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (``q`` in [0, 100])."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class Reservoir:
    """The last ``size`` samples, for percentiles (bounded memory)."""

    __slots__ = ("_values",)

    def __init__(self, size: int = 100_000) -> None:
        self._values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self._values.append(value)

    def extend(self, values: Iterable[float]) -> None:
        self._values.extend(values)

    def summary(self) -> LatencySummary:
        ordered = sorted(self._values)
        return LatencySummary(
            count=len(ordered),
            p50=percentile(ordered, 50),
            p99=percentile(ordered, 99),
            p999=percentile(ordered, 99.9),
            max=ordered[-1] if ordered else None,
        )


@dataclass(frozen=True, slots=True)
class LatencySummary:
    count: int
    p50: float | None
    p99: float | None
    p999: float | None
    max: float | None
