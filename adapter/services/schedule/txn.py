"""Transactional calls with a deadline of our own (exactly-once delivery): librdkafka does
not always honour the timeout it is given (librdkafka#5456), so each call runs on a caller
thread the service can give up on, and a call whose outcome is still pending is repeated
(bounded) before the transaction is aborted or its producer fenced."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "TXN_CALL_ATTEMPTS",
    "TXN_CALL_GRACE_S",
    "TXN_CALL_PAUSE_S",
    "TXN_CALL_TIMEOUT_S",
    "TxnCaller",
    "repeat_pending",
]

log = logging.getLogger("adapter.schedule")

#: Bound on one transactional call.  A call that times out is repeated (librdkafka goes on
#: with the same commit), so a short slice lets forwarding resume as soon as a moved
#: transaction coordinator answers: with one long slice, a coordinator's broker killed -9
#: stalled forwarding for the slice that timed out and then the next; in short slices it
#: resumes once the coordinator moved (its broker's session timeout and the new leader
#: loading the transaction log).  BENCHMARKS.md, "Cluster failover", has the figures.
TXN_CALL_TIMEOUT_S = 2.0
#: librdkafka may overrun its own timeout (librdkafka#5456: ``send_offsets_to_transaction``
#: waits for a coordinator that went away until one answers again).  Our deadline leaves
#: room for a coordinator to move: a shorter one fenced the producer in the middle of the
#: move, and the fresh producer's registration then waited for the old transaction to end.
TXN_CALL_GRACE_S = 10.0
#: Pause between repeats of a pending call (a coordinator that is down fails it at once).
TXN_CALL_PAUSE_S = 0.25
#: A transactional call whose outcome stays pending is repeated at most this often (60 s
#: in all, then the transaction is aborted or the producer fenced).
TXN_CALL_ATTEMPTS = 30


class TxnCaller:
    """Runs transactional calls with a deadline of our own on one long-lived thread.

    librdkafka does not always honour the timeout it is given (``send_offsets_to_transaction``
    can wait for a group coordinator that went away: librdkafka#5456).  A call still
    blocked past its deadline raises a fatal ``_TIMED_OUT`` so the caller fences the wedged
    producer; its thread stays blocked in librdkafka and is replaced by a fresh one.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[Any] | None = None
        self.abandoned = 0

    def _worker(self) -> queue.SimpleQueue[Any]:
        if self._calls is None:
            calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(calls,), name=self.name, daemon=True).start()
            self._calls = calls
        return self._calls

    def __call__(self, call: Callable[[], object], timeout_s: float) -> None:
        done = threading.Event()
        outcome: list[BaseException | None] = []
        self._worker().put((call, outcome, done))
        if not done.wait(timeout_s):
            self._calls = None  # that thread is stuck in librdkafka: use a new one
            self.abandoned += 1
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT,
                    f"transactional call still blocked after {timeout_s:.0f} s; fencing",
                    fatal=True,
                )
            )
        if outcome and outcome[0] is not None:
            raise outcome[0]

    def close(self) -> None:
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None


def _serve(calls: queue.SimpleQueue[Any]) -> None:
    while True:
        item = calls.get()
        if item is None:
            return
        call, outcome, done = item
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        finally:
            done.set()


def repeat_pending(caller: TxnCaller, call: Callable[[], object]) -> None:
    """Run ``call`` through ``caller``; repeat it while it fails retriably (its result is
    still pending), a bounded number of times; then let the caller abort or fence."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(TXN_CALL_ATTEMPTS),
        retry=tenacity.retry_if_exception(_pending_retriable),
        wait=tenacity.wait_fixed(TXN_CALL_PAUSE_S),
        before_sleep=lambda st: log.warning(
            "transactional call pending (attempt %d: %s); repeating it",
            st.attempt_number,
            st.outcome.exception() if st.outcome else None,
        ),
        reraise=True,
    )
    retrying(caller, call, TXN_CALL_TIMEOUT_S + TXN_CALL_GRACE_S)


def _pending_retriable(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.retriable() and not err.txn_requires_abort()
