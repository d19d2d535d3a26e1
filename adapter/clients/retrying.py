"""Tenacity policies for the producer: immediate retries, flow-control back-off."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import tenacity

from adapter.core.backoff import ExponentialBackoff
from adapter.errors import SendError


class FlowControlled(SendError):
    """Internal: the send hit flow control (local queue full, broker throttling)."""


class RetriableSendFailure(SendError):
    """Internal: the send failed definitely and may be retried at once."""


class wait_flow_control(tenacity.wait.wait_base):
    """No wait after ordinary failures; gRPC-style exponential back-off after flow control.

    The n-th flow-control failure in a row waits ``ExponentialBackoff.delay(n)``; an
    ordinary failure in between starts the streak again.
    """

    def __init__(
        self,
        backoff: ExponentialBackoff,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.backoff = backoff
        self.uniform = uniform
        self._streak = 0  # flow-control failures in a row (one policy object per send)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        if outcome is None or not isinstance(outcome.exception(), FlowControlled):
            self._streak = 0
            return 0.0
        self._streak += 1
        return self.backoff.delay(self._streak, self.uniform)


def send_retrying(
    *,
    retries: int,
    backoff: ExponentialBackoff,
    sleep: Callable[[float], Any] = tenacity.nap.sleep,
    uniform: Callable[[float, float], float] = random.uniform,
) -> tenacity.Retrying:
    """``1 + retries`` attempts; only definite failures and flow control are retried.

    ``PossiblyPersistedError`` is never retried (it would risk a duplicate).
    """
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(1 + retries),
        retry=tenacity.retry_if_exception_type((FlowControlled, RetriableSendFailure)),
        wait=wait_flow_control(backoff, uniform),
        sleep=sleep,
        reraise=True,
    )
