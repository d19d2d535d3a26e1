"""Moved to :mod:`adapter.bench.orderly` (the orderly consumer's benchmark rows); this
module keeps the old import path working."""

from __future__ import annotations

from adapter.bench.orderly import (
    FAIL_BATCH,
    FAIL_PERCENT,
    SUSPEND_MS,
    OrderlyScenario,
    failing_scenario,
    noop_scenario,
    orderly_consume,
    orderly_scenarios,
)

__all__ = [
    "FAIL_BATCH",
    "FAIL_PERCENT",
    "SUSPEND_MS",
    "OrderlyScenario",
    "failing_scenario",
    "noop_scenario",
    "orderly_consume",
    "orderly_scenarios",
]
