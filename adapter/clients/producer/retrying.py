"""Tenacity policies for the producer: immediate retries, flow-control back-off.

One policy (:func:`send_retrying`) serves both ways the producer retries:

* ``send`` runs it as a plain ``tenacity.Retrying`` loop on the caller's thread (the
  back-off sleeps there);
* asynchronous sends are driven by delivery reports, so :func:`next_delay` takes one
  decision of the same policy per failed attempt and the producer schedules the resend on
  its poll thread: nothing sleeps in a librdkafka callback.

:class:`FlowControlled` and :class:`RetriableSendFailure` only steer the policy; when the
retries run out the caller gets the public :class:`~adapter.errors.FlowControlError` or
:class:`~adapter.errors.RetriesExhaustedError` instead (:func:`exhausted`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import tenacity

from adapter.core.backoff import ExponentialBackoff
from adapter.errors import FlowControlError, RetriesExhaustedError, SendError


class FlowControlled(SendError):
    """Internal: the send hit flow control (local queue full, broker throttling)."""


class RetriableSendFailure(SendError):
    """Internal: the send failed definitely and may be retried at once."""


#: What the policy resends; anything else (``PossiblyPersistedError`` above all) is final.
RETRIED = (FlowControlled, RetriableSendFailure)

T = TypeVar("T")


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


def exhausted(failure: Exception, attempts: int) -> Exception:
    """The public error for the last failure of a send whose retries ran out.

    Internal failures become :class:`FlowControlError` / :class:`RetriesExhaustedError`
    keeping the ``KafkaError`` and the raw message; anything else is returned unchanged.
    """
    if not isinstance(failure, RETRIED):
        return failure
    cls = FlowControlError if isinstance(failure, FlowControlled) else RetriesExhaustedError
    tries = "attempt" if attempts == 1 else "attempts"
    return cls(
        f"{failure} (gave up after {attempts} {tries})",
        attempts=attempts,
        kafka_error=failure.kafka_error,
        raw_message=failure.raw_message,
    )


def _raise_exhausted(retry_state: tenacity.RetryCallState) -> NoReturn:
    assert retry_state.outcome is not None
    failure = retry_state.outcome.exception()
    assert isinstance(failure, Exception)
    raise exhausted(failure, retry_state.attempt_number) from failure.__cause__


def send_retrying(
    *,
    retries: int,
    backoff: ExponentialBackoff,
    sleep: Callable[[float], Any] = tenacity.nap.sleep,
    uniform: Callable[[float, float], float] = random.uniform,
) -> tenacity.Retrying:
    """``1 + retries`` attempts; only definite failures and flow control are retried.

    ``PossiblyPersistedError`` is never retried (it would risk a duplicate).  When the
    attempts run out the last failure is raised as a public ``FlowControlError`` or
    ``RetriesExhaustedError``.
    """
    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(1 + retries),
        retry=tenacity.retry_if_exception_type(RETRIED),
        wait=wait_flow_control(backoff, uniform),
        sleep=sleep,
        reraise=True,
        retry_error_callback=_raise_exhausted,
    )


def next_delay(retrying: tenacity.Retrying, state: tenacity.RetryCallState) -> float | None:
    """One decision of ``retrying`` for the failed attempt recorded in ``state``.

    Returns the seconds to wait before the next attempt (and advances ``state`` to it), or
    ``None`` when the outcome is final: not retriable, or the attempts ran out.  This is
    ``tenacity.Retrying``'s own order (retry?, wait, stop?) for callers that cannot block.
    """
    if not retrying.retry(state):
        return None
    delay = float(retrying.wait(state))
    if retrying.stop(state):
        return None
    state.prepare_for_next_attempt()
    return max(delay, 0.0)


def failed_attempt(
    retrying: tenacity.Retrying, state: tenacity.RetryCallState | None, failure: BaseException
) -> tenacity.RetryCallState:
    """Record ``failure`` as the outcome of the current attempt (a new state for the first)."""
    if state is None:
        state = tenacity.RetryCallState(retrying, fn=None, args=(), kwargs={})
    state.set_exception((type(failure), failure, failure.__traceback__))
    return state


def retry_after(
    retrying: tenacity.Retrying,
    failure: Exception,
    attempt: Callable[..., T],
    *args: Any,
) -> T:
    """Go on with ``retrying`` after a first attempt that failed with ``failure``: sleep what
    the policy says (``retrying.sleep``, on the caller's thread), attempt again, and so on.

    Lets the common case -- the first attempt succeeds -- skip building a retry loop.
    Returns what an attempt returned; raises the final failure (public, see
    :func:`exhausted`).
    """
    state = failed_attempt(retrying, None, failure)
    while (delay := next_delay(retrying, state)) is not None:
        retrying.sleep(delay)
        try:
            return attempt(*args)
        except Exception as exc:  # every outcome is the policy's to judge
            state = failed_attempt(retrying, state, exc)
    last = state.outcome.exception() if state.outcome is not None else failure
    assert isinstance(last, Exception)
    raise exhausted(last, state.attempt_number) from last.__cause__
