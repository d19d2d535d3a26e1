"""Benchmarks: every figure is a ratio against raw confluent-kafka in the same run.

``rmq-kafka bench`` pre-fills topics on one broker and runs each scenario and its raw
baseline alternately, ``--repeats`` times, reporting the median rate, the client CPU
microseconds per message and the ratio.  Results go to stdout (a table) and a JSON file.

* :mod:`adapter.bench.harness` -- what every row shares: :class:`Bench` (pre-filled topics,
  the raw confluent-kafka consumer loop and ours), :class:`Run`, :class:`Scenario` (the
  ratio), :func:`~adapter.bench.harness.measure`;
* one module per scenario family: :mod:`~adapter.bench.consumer`,
  :mod:`~adapter.bench.failures`, :mod:`~adapter.bench.pull`, :mod:`~adapter.bench.orderly`,
  :mod:`~adapter.bench.producer`, :mod:`~adapter.bench.forwarding`,
  :mod:`~adapter.bench.lateness`, :mod:`~adapter.bench.memory`,
  :mod:`~adapter.bench.analytics`;
* :mod:`adapter.bench.registry` -- scenario name -> rows (``--only`` picks from it);
* :mod:`adapter.bench.run` -- :func:`run_bench` and :func:`render_table`;
* ``python -m adapter.bench --rss-child|--raw-forwarder|--lateness-reader ...`` -- the
  child processes some rows measure in (:mod:`adapter.bench.__main__`).
"""

from __future__ import annotations

from adapter.bench.analytics import analytics_scenarios, pyspark_missing, trace_scenarios
from adapter.bench.harness import (
    BENCH_LEVELS,
    CONSUMER_SCALE,
    RAW_FETCH_SETTINGS,
    Bench,
    Run,
    Scenario,
    measure,
    noop_listener,
    uid,
)
from adapter.bench.lateness import ServiceProcess
from adapter.bench.orderly import orderly_scenarios
from adapter.bench.pull import pull_scenarios
from adapter.bench.registry import ALL, SCENARIOS
from adapter.bench.run import render_table, run_bench

__all__ = [
    "ALL",
    "BENCH_LEVELS",
    "CONSUMER_SCALE",
    "RAW_FETCH_SETTINGS",
    "SCENARIOS",
    "Bench",
    "Run",
    "Scenario",
    "ServiceProcess",
    "analytics_scenarios",
    "measure",
    "noop_listener",
    "orderly_consumer_scenarios",
    "pull_consumer_scenarios",
    "pyspark_missing",
    "render_table",
    "run_bench",
    "trace_scenarios",
    "uid",
]

# the names these had when this was one module
pull_consumer_scenarios = pull_scenarios
orderly_consumer_scenarios = orderly_scenarios
