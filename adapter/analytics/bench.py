"""Moved to :mod:`adapter.bench.analytics` (the analytics rows of ``rmq-kafka bench``); this
module keeps the old import path and ``python -m adapter.analytics.bench <bootstrap>
[rows]`` working."""

from __future__ import annotations

import sys

from adapter.bench.analytics import (
    fill_trace_topic,
    main,
    run_analytics_bench,
    spark_scenario,
    trace_overhead_scenario,
)

__all__ = [
    "fill_trace_topic",
    "run_analytics_bench",
    "spark_scenario",
    "trace_overhead_scenario",
]

if __name__ == "__main__":  # pragma: no cover - manual run
    main(sys.argv[1:])
