"""The consumer's and producer's statistics: nearest-rank percentiles, the latency
reservoir, the Prometheus-style histogram and the producer's counters."""

from __future__ import annotations

import math

import pytest

from adapter.core.stats import LATENCY_BUCKETS_S, Histogram, ProducerStats, Reservoir, percentile

pytestmark = pytest.mark.unit


def test_percentiles_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([], 50) is None
    r = Reservoir(size=10)
    r.extend(float(v) for v in range(100))
    s = r.summary()
    assert s.count == 10 and s.max == 99 and s.p50 == 94


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0], 0, 1.0),  # the lowest percentiles are the smallest value, not the second
        ([1.0, 2.0], 10, 1.0),
        ([1.0, 2.0], 50, 1.0),
        ([1.0, 2.0], 51, 2.0),
        ([float(v) for v in range(1, 201)], 100, 200.0),  # p100 is the maximum
        ([float(v) for v in range(1, 203)], 50, 101.0),
        ([7.0], 99.9, 7.0),
        # rank ceil(99.9 / 100 * 1000) is 999, not 1000 as a float rounding would make it
        ([float(v) for v in range(1, 1001)], 99.9, 999.0),
        ([float(v) for v in range(1, 100_001)], 99.9, 99_900.0),
    ],
)
def test_percentile_ranks(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_reservoir_summary_of_added_samples() -> None:
    r = Reservoir(size=2000)
    for v in range(1000, 0, -1):  # added out of order: the summary sorts them
        r.add(float(v))
    s = r.summary()
    assert (s.count, s.p50, s.p99, s.p999, s.max) == (1000, 500.0, 990.0, 999.0, 1000.0)


def test_empty_reservoir_summary_has_no_figures() -> None:
    s = Reservoir().summary()
    assert (s.count, s.p50, s.p99, s.p999, s.max) == (0, None, None, None, None)


def test_reservoir_keeps_the_last_100_000_samples_by_default() -> None:
    r = Reservoir()
    r.extend(float(v) for v in range(100_001))
    s = r.summary()
    assert (s.count, s.max) == (100_000, 100_000.0)
    assert percentile([float(v) for v in range(1, 100_001)], 0) == 1.0


def test_histogram_snapshot_is_cumulative_with_an_inf_bucket() -> None:
    h = Histogram((0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 1.0, 1.0, 7.5, 42.0):  # a value on a bound counts in it (le)
        h.observe(v)
    buckets, total, count = h.snapshot()
    assert buckets == [(0.1, 2), (1.0, 5), (10.0, 6), (math.inf, 7)]
    assert total == pytest.approx(52.15)
    assert count == 7


def test_histogram_snapshot_without_observations() -> None:
    buckets, total, count = Histogram(LATENCY_BUCKETS_S).snapshot()
    assert [b for b, _ in buckets] == [*LATENCY_BUCKETS_S, math.inf]
    assert all(n == 0 for _, n in buckets)
    assert (total, count) == (0.0, 0)


def test_histogram_snapshot_is_a_copy() -> None:
    h = Histogram((1.0,))
    h.observe(0.5)
    before = h.snapshot()
    h.observe(2.0)
    assert before == ([(1.0, 1), (math.inf, 1)], 0.5, 1)
    assert h.snapshot() == ([(1.0, 1), (math.inf, 2)], 2.5, 2)


def test_producer_stats_count_failures_per_topic_and_error_class() -> None:
    stats = ProducerStats()
    stats.failed("orders", TimeoutError("t1"))
    stats.failed("orders", TimeoutError("t2"))
    stats.failed("orders", KeyError("k"))
    stats.failed("payments", TimeoutError("t3"))
    assert stats.failures == {
        ("orders", "TimeoutError"): 2,
        ("orders", "KeyError"): 1,
        ("payments", "TimeoutError"): 1,
    }
    assert stats.retries == {} and stats.backoffs == {} and stats.sent == {}


def test_producer_stats_count_retries_and_flow_control_backoffs_per_topic() -> None:
    stats = ProducerStats()
    stats.retried("orders", flow_control=False)
    stats.retried("orders", flow_control=True)
    stats.retried("orders", flow_control=True)
    stats.retried("payments", flow_control=False)
    stats.retried("audit", flow_control=True)
    assert stats.retries == {"orders": 3, "payments": 1, "audit": 1}
    assert stats.backoffs == {"orders": 2, "audit": 1}
    assert stats.failures == {}
