"""Counters and latency summaries.  Pure."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (``q`` in [0, 100])."""
    if not sorted_values:
        return None
    # q * n first: q / 100 * n rounds 99.9 / 100 * 1000 up to 999.0000000000001 (rank 1000)
    rank = max(1, math.ceil(q * len(sorted_values) / 100))
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


@dataclass
class TopicStats:
    """RocketMQ ``ConsumerStatsManager``-like figures for one logical topic."""

    consume_ok: int = 0
    consume_failed: int = 0
    sent_back: int = 0
    dead_lettered: int = 0
    send_back_failed: int = 0
    local_retries: int = 0
    timeouts: int = 0
    rt_total_ms: float = 0.0
    rt_max_ms: float = 0.0
    rt_count: int = 0

    @property
    def consume_rt_avg_ms(self) -> float:
        return self.rt_total_ms / self.rt_count if self.rt_count else 0.0


class Histogram:
    """Counts per upper bound (Prometheus style, cumulative when read).  Not thread-safe:
    one writer; readers take :meth:`snapshot`."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """``([(bound, cumulative count), ...], sum, count)``; the last bound is +Inf."""
        running = 0
        out: list[tuple[float, int]] = []
        counts = list(self.counts)
        for bound, n in zip((*self.bounds, math.inf), counts, strict=True):
            running += n
            out.append((bound, running))
        return out, self.sum, running


#: Listener / lateness buckets in seconds.
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)  # fmt: skip


class ProducerStats:
    """What a producer sent, per logical topic: acknowledged messages, failures by error
    class, resends and flow-control back-offs.  One writer at a time (the poll thread or a
    sending thread, under the GIL); readers copy."""

    __slots__ = ("backoffs", "failures", "retries", "sent")

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.failures: dict[tuple[str, str], int] = {}
        self.retries: dict[str, int] = {}
        self.backoffs: dict[str, int] = {}

    def failed(self, topic: str, error: BaseException) -> None:
        key = (topic, type(error).__name__)
        self.failures[key] = self.failures.get(key, 0) + 1

    def retried(self, topic: str, *, flow_control: bool) -> None:
        self.retries[topic] = self.retries.get(topic, 0) + 1
        if flow_control:
            self.backoffs[topic] = self.backoffs.get(topic, 0) + 1
