"""The nearest-rank percentiles of the consumer's statistics."""

from __future__ import annotations

import pytest

from adapter.core.stats import Reservoir, percentile

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
