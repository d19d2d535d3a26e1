"""Moved to :mod:`adapter.bench.pull` (the pull-style consumers' benchmark rows); this
module keeps the old import path working."""

from __future__ import annotations

from adapter.bench.pull import (
    BATCH,
    dropin_consume_scenario,
    dropin_poll_scenario,
    pull_scenarios,
    simple_consumer_scenario,
)

__all__ = [
    "BATCH",
    "dropin_consume_scenario",
    "dropin_poll_scenario",
    "pull_scenarios",
    "simple_consumer_scenario",
]
