"""The producer's resends: flow-control back-off counts the streak of refusals."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_flow_control_backoff_counts_the_streak_not_all_attempts() -> None:
    from adapter.clients.producer.retrying import (
        FlowControlled,
        RetriableSendFailure,
        send_retrying,
    )
    from adapter.core.backoff import ExponentialBackoff

    sleeps: list[float] = []
    failures = iter(
        [FlowControlled("q"), RetriableSendFailure("r"), FlowControlled("q"), FlowControlled("q")]
    )

    def attempt() -> str:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return "ok"

    retrying = send_retrying(
        retries=4, backoff=ExponentialBackoff(), sleep=sleeps.append, uniform=lambda a, b: 0.0
    )
    assert retrying(attempt) == "ok"
    assert sleeps == [1.0, 0.0, 1.0, 1.6]
