"""Exactly-once forwards (:class:`ExactlyOnce`): the forwards of one loop pass and the
delay-topic offsets they consume commit in one Kafka transaction.  A failed transaction is
aborted and its partitions are read again from where it began; a producer whose state is
unknown is fenced by a fresh one with the same ``transactional.id``; the transactional
calls themselves are bounded and repeated by :class:`~adapter.services.schedule.txn.TxnCaller`."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from adapter.core.engine.schedule import Mark, ScheduleAction
from adapter.core.publishing import Escalation
from adapter.core.types import TP
from adapter.io.config import require_setting
from adapter.io.errors import FatalErrorWatch, client_error, is_unknown_topic
from adapter.io.publisher import Publisher
from adapter.services.schedule.delivery import PRODUCER_NAME, Copy, Host, committed_position
from adapter.services.schedule.options import ScheduleServiceSettings
from adapter.services.schedule.txn import TXN_CALL_TIMEOUT_S, TxnCaller, repeat_pending

log = logging.getLogger("adapter.schedule")


class ExactlyOnce:
    """Forwards and consumed offsets commit together in one transaction, which gathers
    the forwards of the loop passes of up to ``txn_linger_ms``.

    A transaction commits, for each partition it touched, the offset after the last entry
    sent in it (:meth:`ScheduleEngine.txn_offset`); a failed one is aborted (or its
    producer fenced) and its partitions are read again from where it began (a failure
    whose cause is not known: from the committed position, after a hold).
    """

    exactly_once = True

    def __init__(
        self,
        host: Host,
        config: Mapping[str, Any],
        options: ScheduleServiceSettings,
        *,
        errors: FatalErrorWatch | None = None,
        make_publisher: Callable[..., Publisher] = Publisher,
        init_timeout_s: float = 30.0,
    ) -> None:
        self.host = host
        self.engine = host.engine
        self.stats = host.stats
        defaults: dict[str, Any] = {
            "linger.ms": 5,
            # after a commit the next transaction's first request is often answered
            # CONCURRENT_TRANSACTIONS until the markers are written: ask again within
            # 10 ms, not librdkafka's 100 ms
            "retry.backoff.ms": 10,
        }
        if "message.timeout.ms" not in config:
            # a crashed instance's open transaction blocks read_committed readers and the
            # successor's offset fetch until it times out (a fresh transactional.id never
            # fences it): keep that short, as Kafka Streams does (default 60 s)
            defaults["transaction.timeout.ms"] = 10_000
        self.publisher = make_publisher(
            config,
            what=PRODUCER_NAME,
            on_result=self.on_result,
            errors=errors,
            defaults=defaults,
            transactional_id=options.transactional_id or f"{options.group_id}-{uuid.uuid4().hex}",
        )
        self._linger_ms = options.txn_linger_ms
        self._init_timeout_s = init_timeout_s
        self._consumer: Any = None
        self._group_metadata: Callable[[], Any] | None = None
        self._call = TxnCaller("rmq-schedule-txn")
        self._open = False
        self._since: float | None = None  # when the open transaction's first pass ended
        self._starts: dict[TP, int] = {}  # where each touched partition began
        self._failed = False
        self._known = True  # every failure in the transaction had a known cause
        #: which transaction a record belongs to: a verdict served after its transaction
        #: ended (a purge of an aborted one, reported later) must not fail the next one
        self.epoch = 0

    @staticmethod
    def configure_consumer(cconf: dict[str, Any]) -> None:
        require_setting(cconf, "enable.auto.commit", False, "commits follow the delivery")

    @property
    def transaction_open(self) -> bool:
        return self._open

    def start(self, consumer: Any) -> None:
        """Register the transactional producer (fences an older instance with the same id);
        a failure raises here (``start()`` fails fast on a cluster without transactions or
        without the ``TransactionalId`` ACL)."""
        self._consumer = consumer
        self._group_metadata = consumer.consumer_group_metadata
        try:
            self.publisher.producer.init_transactions(self._init_timeout_s)
        except KafkaException as exc:
            raise client_error(exc, what="ScheduleService init_transactions") from exc

    # -- sending ---------------------------------------------------------------------------
    def send(self, copy: Copy) -> None:
        """Produce into the open transaction (begun if needed).  A copy sent ``alone``
        commits its neighbours' transaction first, and a transaction of its own right after
        it: the verdict is then about it alone."""
        if copy.alone and self._open:
            self.finish()  # its neighbours commit without it
            if not self.engine.current(copy.entry):
                return  # that transaction failed: the entry is read again
        # the transaction about to begin, or the open one
        copy.epoch = self.epoch if self._open else self.epoch + 1
        entry = copy.entry
        self.engine.in_transaction(entry)
        if not self._open:
            self._begin()
        self._starts.setdefault(entry.tp, entry.offset)
        self.publisher.send(copy.record, copy)
        if copy.alone:
            self.finish()

    def _begin(self) -> None:
        self.epoch += 1
        try:
            self.publisher.producer.begin_transaction()
        except KafkaException as exc:  # left unusable by an outage: fence it
            log.error("begin_transaction failed (%s); fencing the producer", exc)
            self._fence()
            self.publisher.producer.begin_transaction()
        self._open = True

    def on_result(self, copy: Copy, err: Any, local: bool) -> None:
        """A refusal fails the open transaction; the refused entry is marked so that the
        next attempt sends it differently (alone, to the DLQ, without its body)."""
        if err is None or copy.epoch != self.epoch:
            return  # settled by the commit, or a verdict on a transaction that ended
        refused = self.host.refused(copy, err, local)
        if refused is None:
            return
        step, text = refused
        entry = copy.entry
        mark = entry.mark or Mark()
        if step is Escalation.SEND_ALONE:
            mark = Mark(alone=True, refused=mark.refused, omit_body=mark.omit_body)
        elif step is Escalation.DEAD_LETTER:
            mark = Mark(alone=False, refused=text)
        elif step is Escalation.OMIT_BODY:
            mark = Mark(alone=False, refused=mark.refused or text, omit_body=True)
        known = step is not Escalation.HOLD or is_unknown_topic(err)
        if step is not Escalation.HOLD:
            self.engine.mark(entry, mark)
        self.mark_failed(known=known)

    def mark_failed(self, *, known: bool) -> None:
        """A record of the open transaction was refused: it must abort (``known``: the
        service already knows what to do differently next time)."""
        self._failed = True
        self._known = self._known and known

    def on_lookup_failed(self) -> None:
        if self._open:
            self.mark_failed(known=False)  # its entries are read again with the partition

    # -- committing ------------------------------------------------------------------------
    def end_pass(self, forwarded: bool) -> None:
        """Commit once the transaction has gathered for ``txn_linger_ms`` (a transaction
        per forward would make the commits, not the forwards, the cost)."""
        if not self._open:
            self._since = None
            return
        now = self.host.clock.monotonic()
        if self._since is None:
            self._since = now
        if not forwarded or (now - self._since) * 1000 >= self._linger_ms:
            self.finish()
            self._since = None

    def linger_s(self) -> float | None:
        return self._linger_ms / 1000 if self._open else None

    def store_offsets(self, offsets: tuple[tuple[TP, int], ...]) -> None:
        pass  # offsets commit with the transaction that forwarded their entries

    def settle(self, tps: list[TP]) -> None:
        # forwards of this pass commit with their offsets while the partitions are ours;
        # committed without them, the new owner would forward them a second time
        self.finish()

    def finish(self) -> None:
        """Commit the open transaction with its offsets; abort (or fence) and read its
        partitions again on failure.  The commit itself waits for the records'
        acknowledgements and serves their delivery reports (a refused record fails it); a
        separate flush first would make the loop wait for the acknowledgements and the
        offsets one after the other."""
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
                assert self._group_metadata is not None
                metadata = self._group_metadata()
                producer = self.publisher.producer
                repeat_pending(
                    self._call,
                    lambda: producer.send_offsets_to_transaction(
                        offsets, metadata, TXN_CALL_TIMEOUT_S
                    ),
                )
            repeat_pending(
                self._call, lambda: self.publisher.producer.commit_transaction(TXN_CALL_TIMEOUT_S)
            )
        except KafkaException as exc:
            self._abort(exc)
        else:
            log.debug("transaction %d committed: %s", self.epoch, _positions(offsets))
            self._open = False
            starts, self._starts = self._starts, {}
            self._failed, self._known = False, True
            self._committed(sorted(starts))

    def _offsets(self, tps: list[TP]) -> list[Any]:
        out = []
        for tp in tps:
            offset = self.engine.txn_offset(tp)
            if offset is not None:
                out.append(TopicPartition(tp[0], tp[1], offset))
        return out

    def _committed(self, tps: list[TP]) -> None:
        self.stats.transactions_committed += 1
        for tp in tps:
            self.engine.txn_committed(tp)

    def _abort(self, exc: KafkaException) -> None:
        known = self._known and self._failed
        log.warning(
            "transaction %d failed (%s): aborting, reading its partitions again (%s)",
            self.epoch,
            exc,
            _positions(self._starts.items()),
        )
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
        self._aborted(starts, known)

    def _aborted(self, starts: dict[TP, int], known: bool) -> None:
        """Read the failed transaction's partitions again from where it began (``known``:
        at once, its refusals are marked; else after a hold, from the committed position,
        which waits for a fenced producer's transaction to end)."""
        self.stats.transactions_aborted += 1
        engine = self.engine
        now_ms = self.host.clock.now_ms()
        rewinds: list[ScheduleAction] = []
        for tp, start in starts.items():
            if not engine.owns(tp):
                continue
            offset = start if known else committed_position(self._consumer, tp, start)
            log.info(
                "%s[%d] is read again from %d (the aborted transaction began at %d there%s)",
                *tp,
                offset,
                start,
                "" if known else "; from the committed offset",
            )
            rewind = engine.rewind(tp, offset, now_ms, hold_ms=0 if known else None)
            if rewind is not None:
                rewinds.append(rewind)
        self.host.apply(rewinds)

    def _try_abort(self) -> bool:
        try:
            repeat_pending(
                self._call, lambda: self.publisher.producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            )
        except KafkaException as exc:
            log.error("abort_transaction failed: %s", exc)
            return False
        return True

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
                if fence_on_error and self.host.running():
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


_NEVER = threading.Event()


def _positions(offsets: Any) -> str:
    """``topic[partition]@offset, ...`` of ``TopicPartition`` s or ``((topic, partition),
    offset)`` pairs (for logs)."""
    out = []
    for o in offsets:
        if isinstance(o, TopicPartition):
            out.append(f"{o.topic}[{o.partition}]@{o.offset}")
        else:
            (topic, partition), offset = o
            out.append(f"{topic}[{partition}]@{offset}")
    return ", ".join(out) or "nothing"
