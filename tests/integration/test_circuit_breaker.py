"""The circuit breaker on a real broker: a listener whose dependency is down for a while.

The issue's run (a 60 s outage, 20 000 messages sent during it, every message succeeding
within 30 s of recovery) is scaled to half its length at the same rate (30 s, 10 000
messages, 15 s to settle), to keep the test short; the full run's figures, with and without
the breaker, are in the README ("When a dependency is down"; ``python -m
adapter.bench.breaker``).  The default ladder is used (first retry after 10 s), so what is
sent back before the breaker opens comes back within the run.
"""

from __future__ import annotations

import pytest

from adapter import CircuitBreaker
from adapter.bench.breaker import outage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

MESSAGES = 10_000
OUTAGE_S = 30.0
SETTLE_S = 15.0


def test_an_outage_with_the_breaker_holds_instead_of_flooding_the_ladder(
    kafka_bootstrap_servers: str,
) -> None:
    result = outage(
        kafka_bootstrap_servers,
        breaker=CircuitBreaker(),
        messages=MESSAGES,
        outage_s=OUTAGE_S,
        settle_s=SETTLE_S,
    )
    print(result.row())
    assert result.sent_back <= MESSAGES // 100, result.row()
    assert result.dead_letters == 0, result.row()
    assert result.all_ok_after_s is not None, result.row()  # every message, in time
    assert result.all_ok_after_s <= SETTLE_S
    assert result.retry_records + result.delay_records <= 300, result.row()
    # it opened, probed while the dependency was down, and closed once it was back
    assert result.changes[0].startswith("closed->open"), result.changes
    assert result.changes[-1].startswith("half_open->closed"), result.changes
    assert any(c.startswith("half_open->open") for c in result.changes), result.changes
