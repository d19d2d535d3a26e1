"""How the ScheduleService's forwards become final: :class:`AtLeastOnce` or
:class:`ExactlyOnce`.  Everything else (what is due, where it goes, what a refusal means)
is the same for both and lives in the service and :mod:`adapter.core`.

* at-least-once: each forward settles when the broker acknowledges it; offsets are stored
  and committed in the background.  A crash between a forward and the commit forwards the
  entry again (consumers de-duplicate on ``UNIQ_KEY``).
* exactly-once: the forwards of one loop pass and the delay-topic offsets they consume
  commit in one Kafka transaction.  A failed transaction is aborted and its partitions are
  read again from where it began; a producer whose state is unknown is fenced by a fresh
  one with the same ``transactional.id``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

import tenacity
from confluent_kafka import KafkaError, KafkaException

from adapter.core.engine.schedule import Entry
from adapter.core.hops import OutRecord
from adapter.io.errors import client_error
from adapter.io.publisher import Publisher

log = logging.getLogger("adapter.schedule")

#: Bound on one transactional call.  A call that times out is repeated (librdkafka goes on
#: with the same commit), so a short slice lets forwarding resume as soon as a moved
#: transaction coordinator answers: with one 10 s slice, a coordinator's broker killed -9
#: stalled forwarding 18.6 s on a three-node cluster (the slice that timed out, then the
#: next); in 2 s slices it resumes once the coordinator moved (its broker's session timeout
#: and the new leader loading the transaction log).
TXN_CALL_TIMEOUT_S = 2.0
#: librdkafka may overrun its own timeout (librdkafka#5456: ``send_offsets_to_transaction``
#: waits for a coordinator that went away until one answers again).  Our deadline leaves
#: room for a coordinator to move (measured: with 5 s the watchdog fenced the producer in
#: the middle of the move, and the fresh producer's registration waited for the old
#: transaction to end: 14.7 s without forwarding).
TXN_CALL_GRACE_S = 10.0
#: Pause between repeats of a pending call (a coordinator that is down fails it at once).
TXN_CALL_PAUSE_S = 0.25
#: A transactional call whose outcome stays pending is repeated at most this often (60 s
#: in all, then the transaction is aborted or the producer fenced).
TXN_CALL_ATTEMPTS = 30


class Delivery(Protocol):
    """What the service asks of a delivery guarantee (all on the service's loop thread)."""

    exactly_once: bool

    def send(self, entry: Entry, record: OutRecord, token: Any, *, alone: bool) -> None:
        """Produce ``record`` for ``entry``; its verdict reaches the service's result
        callback with ``token``."""

    def finish(self) -> None:
        """End of a loop pass: serve acknowledgements (at-least-once) or commit the open
        transaction with its offsets (exactly-once)."""

    def in_flight(self) -> int: ...

    def close(self) -> None: ...


class AtLeastOnce:
    """Forwards settle one by one on the broker's acknowledgement."""

    exactly_once = False

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def send(self, entry: Entry, record: OutRecord, token: Any, *, alone: bool) -> None:
        self.publisher.send(record, token, alone=alone)

    def finish(self) -> None:
        self.publisher.poll(0)

    def in_flight(self) -> int:
        return self.publisher.in_flight()

    def close(self) -> None:
        self.publisher.close(30)


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


class TransactionFailed(Exception):
    """The open transaction could not commit; ``fenced``: the producer was replaced."""

    def __init__(self, cause: BaseException, *, fenced: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.fenced = fenced


class ExactlyOnce:
    """Forwards and consumed offsets commit together, one transaction per loop pass.

    ``offsets()`` gives the delay-topic offsets to commit for the partitions the
    transaction touched; ``on_commit(tps)`` / ``on_abort(starts, known)`` report the
    outcome to the service (``starts``: where each touched partition must be read again).
    """

    exactly_once = True

    def __init__(
        self,
        publisher: Publisher,
        *,
        group_metadata: Callable[[], Any],
        offsets: Callable[[list[tuple[str, int]]], list[Any]],
        on_commit: Callable[[list[tuple[str, int]]], None],
        on_abort: Callable[[dict[tuple[str, int], int], bool], None],
        running: Callable[[], bool],
        init_timeout_s: float = 30.0,
    ) -> None:
        self.publisher = publisher
        self._group_metadata = group_metadata
        self._offsets = offsets
        self._on_commit = on_commit
        self._on_abort = on_abort
        self._running = running
        self._init_timeout_s = init_timeout_s
        self._call = TxnCaller("rmq-schedule-txn")
        self._open = False
        self._starts: dict[tuple[str, int], int] = {}  # where each touched partition began
        self._failed = False
        self._known = True  # every failure in the transaction had a known cause
        self.committed = 0
        self.aborted = 0
        #: which transaction a record belongs to: a verdict served after its transaction
        #: ended (a purge of an aborted one, reported later) must not fail the next one
        self.epoch = 0

    @property
    def open(self) -> bool:
        return self._open

    def init(self) -> None:
        """Register the transactional producer (fences an older instance with the same id);
        a failure raises here (``start()`` fails fast on a cluster without transactions or
        without the ``TransactionalId`` ACL)."""
        try:
            self.publisher.producer.init_transactions(self._init_timeout_s)
        except KafkaException as exc:
            raise client_error(exc, what="ScheduleService init_transactions") from exc

    def mark_failed(self, *, known: bool) -> None:
        """A record of the open transaction was refused: it must abort (``known``: the
        service already knows what to do differently next time)."""
        self._failed = True
        self._known = self._known and known

    def send(self, entry: Entry, record: OutRecord, token: Any, *, alone: bool) -> None:
        """Produce into the open transaction (begun if needed).  ``alone``: the caller has
        committed the transaction before; this one commits right after the record."""
        if not self._open:
            self._begin()
        self._starts.setdefault(entry.tp, entry.offset)
        self.publisher.send(record, token)
        if alone:
            self.finish()  # a transaction of its own: the verdict is about it alone

    def _begin(self) -> None:
        self.epoch += 1
        try:
            self.publisher.producer.begin_transaction()
        except KafkaException as exc:  # left unusable by an outage: fence it
            log.error("begin_transaction failed (%s); fencing the producer", exc)
            self._fence()
            self.publisher.producer.begin_transaction()
        self._open = True

    def finish(self) -> None:
        """Commit the open transaction with its offsets; abort (or fence) and report on
        failure.  The commit itself waits for the records' acknowledgements and serves
        their delivery reports (a refused record fails it); a separate flush first would
        make the loop wait for the acknowledgements and the offsets one after the other
        (measured: a commit's p99 spent 11-109 ms in that flush)."""
        if not self._open:
            return
        tps = sorted(self._starts)
        try:
            if self._failed:
                raise KafkaException(
                    KafkaError(KafkaError._FAIL, "a record was refused", txn_requires_abort=True)
                )
            offsets = self._offsets(tps)
            if offsets:
                metadata = self._group_metadata()
                producer = self.publisher.producer
                self._txn_call(
                    lambda: producer.send_offsets_to_transaction(
                        offsets, metadata, TXN_CALL_TIMEOUT_S
                    )
                )
            self._txn_call(lambda: self.publisher.producer.commit_transaction(TXN_CALL_TIMEOUT_S))
        except KafkaException as exc:
            self._abort(exc)
        else:
            self._open = False
            self.committed += 1
            starts, self._starts = self._starts, {}
            self._failed, self._known = False, True
            self._on_commit(sorted(starts))

    def _abort(self, exc: KafkaException) -> None:
        known = self._known and self._failed
        log.warning("transaction failed (%s): aborting, reading its partitions again", exc)
        self.aborted += 1
        err = exc.args[0] if exc.args else None
        aborted = isinstance(err, KafkaError) and err.txn_requires_abort() and self._try_abort()
        if not aborted:
            # the outcome is unknown (the commit may have gone through): fence the producer;
            # the committed positions tell where to read again
            self._fence()
            known = False
        self._open = False
        starts, self._starts = self._starts, {}
        self._failed, self._known = False, True
        self._on_abort(starts, known)

    def _try_abort(self) -> bool:
        try:
            self._txn_call(lambda: self.publisher.producer.abort_transaction(TXN_CALL_TIMEOUT_S))
        except KafkaException as exc:
            log.error("abort_transaction failed: %s", exc)
            return False
        return True

    def _txn_call(self, call: Callable[[], object]) -> None:
        """Repeat a call while it fails retriably (its result is still pending), a bounded
        number of times; then let the caller abort or fence."""
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
        retrying(self._call, call, TXN_CALL_TIMEOUT_S + TXN_CALL_GRACE_S)

    def _fence(self) -> None:
        """Replace the producer with a fresh one (same ``transactional.id``): the old one's
        open transaction is aborted by the broker and it can no longer commit."""
        self._open = False
        self.publisher.replace_producer()
        self._retrying(
            lambda: self.publisher.producer.init_transactions(self._init_timeout_s),
            what="init_transactions",
            fence_on_error=True,
        )

    def _retrying(self, call: Callable[[], object], *, what: str, fence_on_error: bool) -> None:
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(8) | tenacity.stop_when_event_set(_NEVER),
            retry=tenacity.retry_if_exception_type(KafkaException),
            wait=tenacity.wait_exponential(multiplier=0.5, max=10.0),
            before_sleep=lambda st: log.error(
                "%s failed (%s); retrying", what, st.outcome.exception() if st.outcome else None
            ),
            reraise=True,
        )

        def attempt() -> object:
            try:
                return call()
            except KafkaException:
                if fence_on_error and self._running():
                    self.publisher.replace_producer()
                raise

        retrying(attempt)

    def in_flight(self) -> int:
        return self.publisher.in_flight()

    def close(self) -> None:
        if self._open:
            self.finish()
        self.publisher.close(30)
        self._call.close()


def _pending_retriable(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.retriable() and not err.txn_requires_abort()


_NEVER = threading.Event()
