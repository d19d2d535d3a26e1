"""``Producer``: RocketMQ-style sends on confluent-kafka.

* idempotent producer always on; librdkafka retries what is safe inside
  ``send_msg_timeout_ms`` (``message.timeout.ms``);
* the adapter resends only after a *definite* failure (``retry_times_when_send_failed``),
  at once, or after a gRPC-style back-off when it hit flow control (queue full, throttling);
* an outcome Kafka reports as possibly persisted raises :class:`PossiblyPersistedError`
  and is never resent (``UNIQ_KEY`` lets consumers de-duplicate);
* one poll thread per producer serves delivery reports, runs send callbacks and every
  delayed resend (a heap of due resends: its poll timeout is the next due time).  Nothing
  sleeps there: a resend that meets flow control on that thread is scheduled, not waited
  for.  Only a caller's own thread sleeps, when ``send``/``send_async`` back off from a
  full local queue.  While a thread keeps calling ``send_async``, that thread serves the
  reports that are ready at each call (as a raw confluent-kafka loop calls ``poll(0)``
  after ``produce``) and the poll thread steps aside: a report served on the poll thread
  costs a hand-off of the GIL between two busy threads, measured at about half of the
  throughput;
* a topic is looked up before its first send; one that is not there yet is looked up
  again until ``topic.metadata.propagation.max.ms`` (librdkafka's bound, 30 s by default)
  has passed since the producer first met it, and only then is an
  :class:`UnknownTopicError` (Kafka's metadata lags topic creation).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, TypedDict, Unpack

import tenacity
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _KafkaProducer

from adapter.clients.retrying import (
    RETRIED,
    FlowControlled,
    RetriableSendFailure,
    exhausted,
    failed_attempt,
    next_delay,
    retry_after,
    send_retrying,
)
from adapter.constants import (
    ANY_PARTITION,
    DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_MSG_TIMEOUT_MS,
    MAX_BLOCK_MS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core import naming
from adapter.core.backoff import ExponentialBackoff
from adapter.core.clock import Clock
from adapter.core.codec import encode_message_headers, schedule_headers
from adapter.core.delay import DelayLevels
from adapter.core.message import Message
from adapter.core.schedule import place_delay_level, place_deliver_time
from adapter.core.stats import ProducerStats
from adapter.errors import (
    AdapterError,
    BrokerUnavailableError,
    ClientClosedError,
    InvalidDelayLevelError,
    InvalidInputError,
    KafkaClientError,
    MessageTooLargeError,
    SendError,
    SendTimeoutError,
    UnknownTopicError,
)
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.config import (
    build_options,
    check_int,
    check_kafka_config,
    producer_config,
    require_setting,
)
from adapter.io.errors import (
    AUTH_CODES,
    FatalErrorWatch,
    client_error,
    is_flow_control,
    is_possibly_persisted,
    make_client,
    send_error,
)
from adapter.io.topics import ensure_topics, plan_topics

log = logging.getLogger("adapter.producer")

#: The counter part of a message id: 12 hex digits.
_ID_COUNTER_MASK = 0xFFFFFFFFFFFF
#: librdkafka's default ``topic.metadata.propagation.max.ms``.
_DEFAULT_PROPAGATION_MS = 30_000
#: Longest poll: how soon the poll thread notices shutdown.
_POLL_INTERVAL_S = 0.1
#: A topic lookup asks for metadata in slices this long (see _lookup_topic).
_LOOKUP_SLICE_S = 1.0
#: A synchronous send flushes its record in slices this long and checks its report between
#: (the poll thread may serve it: a flush then waits out its slice for nothing).
_FLUSH_SLICE_S = 0.001
#: While ``send_async`` is being called, the poll thread looks this often whether the
#: sender has stopped (then it serves the reports left itself).
_SENDER_SERVES_S = 0.005
_UNKNOWN_TOPIC_CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
#: Idle in-flight records a producer keeps for reuse (see ``_Pending``), at most (about
#: 130 bytes each; as many as are in flight at once is enough):
_POOL_MAX = 8192
_RESULT_FIELDS = ("status", "msg_id", "topic", "queue_id", "queue_offset")


class SendStatus(str, Enum):
    """The result of a send that reached Kafka."""

    SEND_OK = "SEND_OK"
    """Acknowledged by every in-sync replica (``acks=all``, idempotent)."""


@dataclass(frozen=True, slots=True)
class SendResult:
    """RocketMQ ``SendResult``: ``queue_id`` is the Kafka partition, ``queue_offset`` the offset.

    For a scheduled message these describe where it is parked (its delay-level topic).
    """

    status: SendStatus
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int


SendCallback = Callable[[SendResult | None, Exception | None], None]


# ``SendResult(SEND_OK, ...)`` on the delivery-report hot path: the same frozen object, built
# through its slots instead of the frozen dataclass ``__init__`` (half the cost)
assert tuple(f.name for f in fields(SendResult)) == _RESULT_FIELDS, "SendResult changed"
_set_status, _set_msg_id, _set_topic, _set_queue_id, _set_queue_offset = (
    SendResult.__dict__[name].__set__ for name in _RESULT_FIELDS
)
_new_object = object.__new__
_SEND_OK = SendStatus.SEND_OK


def _send_ok(msg_id: str, topic: str, queue_id: int, queue_offset: int) -> SendResult:
    result: SendResult = _new_object(SendResult)
    _set_status(result, _SEND_OK)
    _set_msg_id(result, msg_id)
    _set_topic(result, topic)
    _set_queue_id(result, queue_id)
    _set_queue_offset(result, queue_offset)
    return result


class ProducerOptionsDict(TypedDict, total=False):
    """Keyword options of :class:`Producer` (RocketMQ's ``DefaultMQProducer`` settings,
    snake_case; see :class:`ProducerOptions` for each one's meaning and default)."""

    retry_times_when_send_failed: int
    retry_times_when_send_async_failed: int
    send_msg_timeout_ms: int
    delay_levels: DelayLevels | str | None
    namespace: str | None
    backoff: ExponentialBackoff
    auto_create_delay_topics: bool
    clock: Clock
    sleep: Callable[[float], Any]
    uniform: Callable[[float, float], float]
    client_factory: Callable[[dict[str, Any]], Any]
    metrics_port: int | None
    metrics_registry: Any
    metrics_addr: str


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    """DefaultMQProducer settings, snake_case.

    ``client_factory`` makes the confluent-kafka client from its config dict
    (``confluent_kafka.Producer``; a stand-in in tests).
    """

    retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED
    retry_times_when_send_async_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED
    send_msg_timeout_ms: int = DEFAULT_SEND_MSG_TIMEOUT_MS
    delay_levels: DelayLevels | str | None = None
    namespace: str | None = None
    backoff: ExponentialBackoff = field(default_factory=ExponentialBackoff)
    auto_create_delay_topics: bool = True
    clock: Clock = SYSTEM_CLOCK
    sleep: Callable[[float], Any] = tenacity.nap.sleep
    uniform: Callable[[float, float], float] = random.uniform
    client_factory: Callable[[dict[str, Any]], Any] = _KafkaProducer
    #: serve Prometheus metrics on this port / register them in this registry
    metrics_port: int | None = None
    metrics_registry: Any = None
    metrics_addr: str = "127.0.0.1"

    def __post_init__(self) -> None:
        check_int("retry_times_when_send_failed", self.retry_times_when_send_failed, minimum=0)
        check_int(
            "retry_times_when_send_async_failed", self.retry_times_when_send_async_failed, minimum=0
        )
        check_int("send_msg_timeout_ms", self.send_msg_timeout_ms, minimum=1)
        object.__setattr__(self, "delay_levels", DelayLevels.coerce(self.delay_levels))

    @property
    def levels(self) -> DelayLevels:
        assert isinstance(self.delay_levels, DelayLevels)
        return self.delay_levels


@dataclass(frozen=True, slots=True)
class _Record:
    topic: str  # Kafka topic
    logical_topic: str
    value: bytes
    key: bytes | str | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    msg_id: str


class _Pending:
    """One asynchronous send in flight: what its delivery report needs, what a resend needs.

    It is its own first ``on_delivery`` (no closure per message).  And it is pooled: once
    its report succeeded it goes back to its producer's pool for a later send, so in-flight sends
    create nothing the garbage collector has to track -- at high rates collecting thousands
    of short-lived in-flight objects cost more than the sends themselves.
    """

    __slots__ = (
        "callback",
        "headers",
        "key",
        "logical",
        "msg_id",
        "partition",
        "producer",
        "retries",
        "topic",
        "value",
    )

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.callback: SendCallback | None = None
        self.retries = 0
        self.msg_id = b""  # UNIQ_KEY as sent (ASCII)
        self.logical = ""
        self.topic = ""  # Kafka topic
        self.value: bytes | None = None
        self.key: bytes | str | None = None
        self.partition = ANY_PARTITION  # librdkafka's partitioner
        #: ``None``: only ``UNIQ_KEY`` (rebuilt for a resend)
        self.headers: list[tuple[str, bytes | None]] | None = None

    def record_headers(self) -> list[tuple[str, bytes | None]]:
        headers = self.headers
        return [(PROPERTY_UNIQ_KEY, self.msg_id)] if headers is None else headers

    def __call__(self, err: Any, kmsg: Any) -> None:
        """The delivery report of the first attempt (on the poll thread)."""
        if err is not None:
            failure = _classify(err, kmsg, self.logical)
            if isinstance(failure, RETRIED):
                _Resend(self).failed(failure)  # keeps this object: it is not pooled
            else:
                self.producer.stats.failed(self.logical, failure)
                _safe_call(self.callback, None, failure)
            return
        callback = self.callback
        result = _new_object(SendResult)  # _send_ok, inlined: the hottest path
        _set_status(result, _SEND_OK)
        _set_msg_id(result, self.msg_id.decode())
        _set_topic(result, self.logical)
        _set_queue_id(result, kmsg.partition())
        _set_queue_offset(result, kmsg.offset())
        producer = self.producer
        sent = producer.stats.sent
        sent[self.logical] = sent.get(self.logical, 0) + 1
        # back to the pool before the callback runs (it may send again), without the body
        # and the callback (key and headers are small, and overwritten on reuse)
        pool = producer._pool
        self.callback = self.value = None
        self.producer = None  # type: ignore[assignment]  # set again when reused
        if len(pool) < _POOL_MAX:
            pool.append(self)
        try:
            callback(result, None)  # type: ignore[misc]
        except Exception:
            log.exception("send callback raised")


class _Resend:
    """The resends of one asynchronous send once an attempt failed.

    The tenacity policy of :func:`send_retrying` decides; delivery reports and the poll
    thread drive it, so nothing waits: a resend "at once" is produced from the delivery
    callback, one after a back-off goes on the producer's heap of due resends.
    """

    __slots__ = ("pending", "policy", "state")

    def __init__(self, pending: _Pending) -> None:
        opts = pending.producer.options
        self.pending = pending
        self.policy = send_retrying(
            retries=pending.retries, backoff=opts.backoff, sleep=opts.sleep, uniform=opts.uniform
        )
        self.state: tenacity.RetryCallState | None = None

    def next_delay(self, failure: SendError) -> float | None:
        """Record the failed attempt; the wait before the next one (``None``: give up)."""
        self.state = failed_attempt(self.policy, self.state, failure)
        return next_delay(self.policy, self.state)

    @property
    def attempts(self) -> int:
        return 1 if self.state is None else self.state.attempt_number

    def failed(self, failure: SendError) -> None:
        """An attempt failed with a retriable error (in a callback: never waits)."""
        delay = self.next_delay(failure)
        p = self.pending
        if delay is None:
            final = exhausted(failure, self.attempts)
            p.producer.stats.failed(p.logical, final)
            _safe_call(p.callback, None, final)
            return
        p.producer.stats.retried(p.logical, flow_control=isinstance(failure, FlowControlled))
        if delay <= 0:
            self.attempt()
        else:
            self.pending.producer._schedule(delay, self)

    def attempt(self) -> None:
        """Send again (on the poll thread); failures go on to :meth:`failed`."""
        p = self.pending
        client = p.producer._live
        if client is None:
            self.abandon()
            return
        try:
            client.produce(
                p.topic, p.value, p.key, p.partition, self.delivered, None, 0, p.record_headers()
            )
        except BufferError as exc:
            self.failed(_queue_full(exc, p.logical))
        except Exception as exc:  # delivered to the callback, never lost silently
            _safe_call(p.callback, None, _produce_error(exc, p.logical, p.value))
        else:
            p.producer._kick()

    def delivered(self, err: Any, kmsg: Any) -> None:
        """The delivery report of a resend."""
        p = self.pending
        if err is None:
            sent = p.producer.stats.sent
            sent[p.logical] = sent.get(p.logical, 0) + 1
            _safe_call(
                p.callback,
                _send_ok(p.msg_id.decode(), p.logical, kmsg.partition(), kmsg.offset()),
                None,
            )
            return
        failure = _classify(err, kmsg, p.logical)
        if isinstance(failure, RETRIED):
            self.failed(failure)
        else:
            p.producer.stats.failed(p.logical, failure)
            _safe_call(p.callback, None, failure)

    def abandon(self) -> None:
        """The producer shut down before this resend was due."""
        p = self.pending
        _safe_call(
            p.callback,
            None,
            SendError(
                f"producer shut down before resending to {p.logical!r} "
                f"(after {self.attempts} attempt(s)); the message is not in Kafka"
            ),
        )


class _NotYetVisible(AdapterError):
    """Internal: a topic lookup to repeat (never escapes :meth:`Producer._check_topic`)."""

    def __init__(self, kafka_error: Any) -> None:
        super().__init__(str(kafka_error))
        self.kafka_error = kafka_error


class Producer:
    """A RocketMQ-style producer over a confluent-kafka config dict.

    >>> with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as p:   # doctest: +SKIP
    ...     p.send(Message(topic="orders", body=b"hi", tags="TagA"))
    """

    def __init__(self, config: Mapping[str, Any], **options: Unpack[ProducerOptionsDict]) -> None:
        self.options = build_options(ProducerOptions, options, "Producer")
        self._async_retries = self.options.retry_times_when_send_async_failed
        conf = producer_config(check_kafka_config(config, "producer"))
        require_setting(conf, "enable.idempotence", True, "sends must not create duplicates")
        conf.setdefault("message.timeout.ms", self.options.send_msg_timeout_ms)
        # librdkafka's and Kafka's own default: asynchronous sends go in batches (at
        # linger.ms=0 each record of a steady stream became a request of its own: at
        # 2000/s the broker's load and pauses made forwarded messages 200+ ms late, p99);
        # a synchronous send waives it for its record (see _push)
        conf.setdefault("linger.ms", 5)
        self._errors = FatalErrorWatch(conf.get("error_cb"))
        conf["error_cb"] = self._errors
        self._config = conf
        #: idle in-flight records for reuse (``list.append``/``pop`` are atomic)
        self._pool: list[_Pending] = []
        #: what was sent, failed and resent, per logical topic (Prometheus reads it)
        self.stats = ProducerStats()
        self._metrics: Any = None
        self._client: Any = None
        #: the client the poll thread serves (resends still go out while shutting down)
        self._live: Any = None
        self._poller: threading.Thread | None = None
        self._poll_ident: int | None = None
        self._running = threading.Event()
        self._lock = threading.Lock()
        # message ids: core.ids.MessageIdGenerator's format (20 hex digits of process prefix,
        # 12 of counter), from a lock-free counter (next() on itertools.count is atomic)
        prefix = os.getpid().to_bytes(4, "big") + random.getrandbits(48).to_bytes(6, "big")
        self._id_format = prefix.hex().upper().encode() + b"%012X"
        self._id_counter = itertools.count()
        #: logical topic -> Kafka topic, for topics known to exist
        self._topics: dict[str, str] = {}
        #: Kafka topic -> when this producer first looked it up without finding it
        self._first_lookup: dict[str, float] = {}
        self._delay_topics_ready = False
        # delayed resends, served by the poll thread: (due, seq, resend)
        self._due: list[tuple[float, int, _Resend]] = []
        self._due_lock = threading.Lock()
        self._due_seq = itertools.count()
        # flush()/shutdown() wait on the poll thread (callbacks stay on it)
        self._progress = threading.Condition()
        self._flush_waiters = 0
        #: ``send_async`` calls so far (only compared: the poll thread steps aside while it
        #: moves) and the lock of the one sender serving reports inline at a time
        self._sends = 0
        self._serving = threading.Lock()
        self._inline_ident: int | None = None  # the thread serving reports inline now
        #: the poll thread's waits: idle it waits on ``_wake`` (set by :meth:`_kick`, and at
        #: shutdown) instead of polling; while a thread sends it naps on it
        self._idle = False
        self._wake = threading.Event()
        #: threads in a synchronous send that serve their own report (see ``_push``)
        self._pushers: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Producer:
        with self._lock:
            if self._client is not None:
                return self
            client = make_client(self.options.client_factory, dict(self._config), what="producer")
            running = threading.Event()
            running.set()
            poller = threading.Thread(
                target=self._poll_loop,
                args=(client, running),
                name="rmq-producer-poll",
                daemon=True,
            )
            self._client = self._live = client
            self._running, self._poller = running, poller
            poller.start()
            opts = self.options
            if self._metrics is None and (
                opts.metrics_port is not None or opts.metrics_registry is not None
            ):
                from adapter.io.metrics import ProducerCollector, expose  # on use

                self._metrics = expose(
                    ProducerCollector(self.stats),
                    registry=opts.metrics_registry,
                    port=opts.metrics_port,
                    addr=opts.metrics_addr,
                )
        return self

    @property
    def metrics_endpoint(self) -> str | None:
        """Where the metrics are served (``metrics_port``)."""
        return None if self._metrics is None else self._metrics.endpoint

    def shutdown(self, timeout: float | None = None) -> int:
        """Wait for what is queued or waiting for a resend (``timeout``, by default
        ``send_msg_timeout_ms`` + 1 s) and stop; returns how many messages were left unsent.

        Resends still waiting for their back-off then fail their callbacks with a
        ``SendError``.  Called from a send callback it cannot wait (the poll thread is busy
        running that callback): it stops at once.
        """
        with self._lock:
            client, self._client = self._client, None
            poller, self._poller = self._poller, None
            running = self._running
            metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.close()
        if client is None:
            return 0
        limit = self.options.send_msg_timeout_ms / 1000 + 1 if timeout is None else timeout
        left = self._wait_sent(client, limit)
        running.clear()
        self._wake.set()
        if poller is not None and poller is not threading.current_thread():
            poller.join(timeout=5)
        if self._live is client:
            self._live = None
        with self._due_lock:
            abandoned = [entry[2] for entry in self._due]
            self._due.clear()
        for resend in abandoned:
            resend.abandon()
        if left:
            log.warning("producer shut down with %d message(s) unsent", left)
        return left

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _poll_loop(self, client: Any, running: threading.Event) -> None:
        self._poll_ident = threading.get_ident()
        sends = -1
        wake = self._wake
        while running.is_set():
            timeout = self._run_due()
            try:
                if self._flush_waiters and len(client):
                    client.flush(timeout)  # a flush is waiting: linger.ms does not apply
                elif self._sends != sends:
                    # a thread is sending: it serves the reports (see send_async)
                    sends = self._sends
                    wake.wait(min(timeout, _SENDER_SERVES_S))
                    wake.clear()
                else:
                    self._idle = True  # before looking: a send from now on wakes us
                    if len(client) and not self._pushers:
                        client.poll(timeout)
                    else:
                        # nothing in flight, or only synchronous sends, which serve their
                        # own reports (two threads polling race for each report): serve
                        # what is ready (errors) and wait to be woken
                        client.poll(0)
                        wake.wait(timeout)
                    self._idle = False
                    wake.clear()
            except KafkaException as exc:  # fatal: surfaced by the next send
                self._errors(exc.args[0])
                log.error("producer error: %s", exc)
            except Exception:  # a bug in a callback must not stop the delivery reports
                log.exception("error in a producer callback")
            if self._flush_waiters:
                with self._progress:
                    self._progress.notify_all()

    def _kick(self) -> None:
        """A record (or a flush, a resend) needs the poll thread: wake it if it is idle."""
        if self._idle:
            self._wake.set()

    def _serve_inline(self, client: Any) -> None:
        """Serve the delivery reports that are ready, on the sending thread (one thread at
        a time, never inside a callback that sends)."""
        serving = self._serving
        if not serving.acquire(False):
            return
        self._inline_ident = threading.get_ident()
        try:
            client.poll(0)
        except KafkaException as exc:  # fatal: surfaced by the next send
            self._errors(exc.args[0])
            log.error("producer error: %s", exc)
        except Exception:
            log.exception("error in a producer callback")
        finally:
            self._inline_ident = None
            serving.release()

    def _schedule(self, delay: float, resend: _Resend) -> None:
        due = self.options.clock.monotonic() + delay
        with self._due_lock:
            heapq.heappush(self._due, (due, next(self._due_seq), resend))
        self._kick()

    def _run_due(self) -> float:
        """Send the resends that are due; returns the poll timeout until the next one."""
        due = self._due
        if not due:
            return _POLL_INTERVAL_S
        now = self.options.clock.monotonic()
        ready: list[_Resend] = []
        with self._due_lock:
            while due and due[0][0] <= now:
                ready.append(heapq.heappop(due)[2])
        for resend in ready:
            resend.attempt()
        with self._due_lock:
            if not due:
                return _POLL_INTERVAL_S
            wait = due[0][0] - self.options.clock.monotonic()
        return min(max(wait, 0.0), _POLL_INTERVAL_S)

    def _wait_sent(self, client: Any, timeout: float) -> int:
        """Wait until nothing is queued, in flight or due for a resend, or ``timeout``;
        returns how many messages are left.  Delivery reports stay on the poll thread."""
        deadline = time.monotonic() + max(timeout, 0.0)
        if threading.get_ident() == self._poll_ident:
            # called from a send callback: what it would wait for needs this very thread
            # (and confluent-kafka must not poll from inside its own callback)
            return len(client) + len(self._due)
        with self._progress:
            self._flush_waiters += 1
            self._kick()
            try:
                while True:
                    left = len(client) + len(self._due)
                    remaining = deadline - time.monotonic()
                    if not left or remaining <= 0:
                        return left
                    self._progress.wait(min(remaining, _POLL_INTERVAL_S))
            finally:
                self._flush_waiters -= 1

    def _raise_fatal(self) -> None:
        """Raise the authentication/fatal error librdkafka reported, if any."""
        last = self._errors.current()
        # "all brokers down" is transient: it must not fail every send after the cluster is
        # back (each send reports an outage itself, naming the topic)
        if last is not None and not isinstance(last, BrokerUnavailableError):
            raise last

    @property
    def client(self) -> Any:
        """The underlying ``confluent_kafka.Producer`` (started lazily)."""
        if self._client is None:
            self.start()
        return self._client

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until every message sent so far is acknowledged or failed (its callback ran),
        including resends still waiting for their back-off; returns how many are left.

        The callbacks keep running on the poll thread (``linger.ms`` is waived meanwhile);
        from a send callback it does not wait and returns the count.
        """
        return self._wait_sent(self.client, timeout)

    # -- topics ----------------------------------------------------------------------------
    @property
    def _propagation_s(self) -> float:
        value = self._config.get("topic.metadata.propagation.max.ms", _DEFAULT_PROPAGATION_MS)
        try:
            return max(int(value), 0) / 1000
        except (TypeError, ValueError):
            return _DEFAULT_PROPAGATION_MS / 1000

    def _kafka_topic(self, logical: str) -> str:
        """The Kafka topic of a user topic, checked to exist (once per producer)."""
        kafka_topic = self._topics.get(logical) if type(logical) is str else None
        if kafka_topic is None:
            kafka_topic = naming.to_kafka(logical)  # bad names fail before any broker call
            self._check_topic(kafka_topic, logical)
            self._topics[logical] = kafka_topic
        return kafka_topic

    def _check_topic(self, kafka_topic: str, logical: str) -> None:
        """Look the topic up, again and again (back-off) while it is not visible, until
        ``topic.metadata.propagation.max.ms`` after this producer first looked for it."""
        now = time.monotonic()
        first = self._first_lookup.setdefault(kafka_topic, now)
        bound = self._propagation_s
        deadline = first + bound
        backoff = tenacity.wait_exponential(multiplier=0.05, max=1.0)

        def wait(state: tenacity.RetryCallState) -> float:
            return min(backoff(state), max(deadline - time.monotonic(), 0.0))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_NotYetVisible),
            stop=tenacity.stop_after_delay(max(deadline - now, 0.0)),
            wait=wait,
            reraise=True,
        )
        try:
            retrying(self._lookup_topic, kafka_topic, logical)
        except _NotYetVisible as exc:
            err = exc.kafka_error
            if err is not None and err.code() not in _UNKNOWN_TOPIC_CODES:
                raise client_error(KafkaException(err), what=f"topic {logical!r}") from None
            raise UnknownTopicError(
                f"topic {logical!r} does not exist (Kafka topic {kafka_topic!r}; not in the "
                f"cluster's metadata {time.monotonic() - first:.1f}s after its first use, "
                f"topic.metadata.propagation.max.ms={round(bound * 1000)}); create it or "
                "enable auto-creation on the broker",
                kafka_error=err,
            ) from None
        self._first_lookup.pop(kafka_topic, None)

    def _lookup_topic(self, kafka_topic: str, logical: str) -> None:
        # one metadata request at most MAX_BLOCK_MS in all, asked in slices of a second so
        # that a fatal error (refused credentials) ends the wait at once
        bound = min(self.options.send_msg_timeout_ms, MAX_BLOCK_MS) / 1000
        started = time.monotonic()

        def ask() -> Any:
            try:
                slice_s = min(_LOOKUP_SLICE_S, max(bound - (time.monotonic() - started), 0.01))
                return self.client.list_topics(topic=kafka_topic, timeout=slice_s)
            except KafkaException:
                self._raise_fatal()
                raise

        try:
            md = tenacity.Retrying(
                retry=tenacity.retry_if_exception(_timed_out),
                stop=tenacity.stop_after_delay(bound),
                reraise=True,
            )(ask)
        except KafkaException as exc:
            raise client_error(exc, what=f"metadata for topic {logical!r}") from exc
        tmd = md.topics.get(kafka_topic)
        err = None if tmd is None else tmd.error
        if tmd is not None and (err is None or err.code() == KafkaError.LEADER_NOT_AVAILABLE):
            return  # it exists (librdkafka waits for a leader being elected)
        if err is None or err.code() in _UNKNOWN_TOPIC_CODES or err.retriable():
            raise _NotYetVisible(err)
        raise client_error(KafkaException(err), what=f"topic {logical!r}")

    def _ensure_delay_topics(self) -> None:
        if self._delay_topics_ready or not self.options.auto_create_delay_topics:
            return
        ensure_topics(
            self._config,
            plan_topics(delay_levels=self.options.levels, namespace=self.options.namespace),
        )
        self._delay_topics_ready = True

    # -- building records ------------------------------------------------------------------
    def _next_id(self) -> str:
        return (self._id_format % (next(self._id_counter) & _ID_COUNTER_MASK)).decode()

    @staticmethod
    def _headers(msg: Message, msg_id: str) -> list[tuple[str, bytes | None]]:
        if not msg.properties and msg.tags is None and msg.keys is None:
            return [(PROPERTY_UNIQ_KEY, msg_id.encode())]  # what encode_message_headers makes
        return encode_message_headers(msg, msg_id)

    def prepare(self, msg: Message) -> _Record:
        """Validate ``msg`` and turn it into the Kafka record to produce."""
        if not isinstance(msg, Message):
            raise InvalidInputError("msg", msg, "expected adapter.Message")
        if not isinstance(msg.body, bytes | bytearray):
            raise InvalidInputError("body", msg.body, "must be bytes")
        level = msg.delay_time_level
        if isinstance(level, bool) or not isinstance(level, int):
            raise InvalidDelayLevelError("delay_time_level", level, "must be an int")
        if level < 0:
            raise InvalidDelayLevelError("delay_time_level", level, "must be >= 0 (0 = no delay)")
        if msg.deliver_time_ms is not None:
            if level:
                raise InvalidInputError(
                    "deliver_time_ms",
                    msg.deliver_time_ms,
                    "cannot be combined with delay_time_level",
                )
            check_int("deliver_time_ms", msg.deliver_time_ms, minimum=0)
        kafka_topic = self._kafka_topic(msg.topic)  # bad input is reported before this
        msg_id = self._next_id()
        headers = self._headers(msg, msg_id)
        placement = None
        if msg.deliver_time_ms is not None:
            now_ms = self.options.clock.now_ms()
            placement = place_deliver_time(msg.deliver_time_ms, now_ms, self.options.levels)
        elif level > 0:
            now_ms = self.options.clock.now_ms()
            placement = place_delay_level(level, now_ms, self.options.levels)
        if placement is None:
            return _Record(
                kafka_topic,
                msg.topic,
                bytes(msg.body),
                msg.sharding_key,
                headers,
                msg.partition,
                msg_id,
            )
        self._ensure_delay_topics()
        headers = schedule_headers(
            dict(headers),
            real_topic=msg.topic,
            real_queue_id=msg.partition,
            level=placement.level,
            due_ms=placement.due_ms,
            deliver_time_ms=msg.deliver_time_ms,
            born_ms=now_ms,
        )
        logical = naming.schedule_topic(
            placement.level, self.options.levels, self.options.namespace
        )
        kafka_schedule_topic = self._topics.get(logical)
        if kafka_schedule_topic is None:
            kafka_schedule_topic = self._topics[logical] = naming.to_kafka(logical)
        return _Record(
            kafka_schedule_topic, logical, bytes(msg.body), msg.sharding_key, headers, None, msg_id
        )

    # -- producing -------------------------------------------------------------------------
    def _produce(self, record: _Record, on_done: Callable[[Any, Any], None]) -> None:
        client = self._client
        if client is None:
            raise ClientClosedError(
                "producer is not started (call start() or use it as a context manager)"
            )
        partition = ANY_PARTITION if record.partition is None else record.partition
        try:
            client.produce(
                record.topic, record.value, record.key, partition, on_done, None, 0, record.headers
            )
        except BufferError as exc:
            raise _queue_full(exc, record.logical_topic) from exc
        except Exception as exc:
            raise _produce_error(
                exc, record.logical_topic, record.value, record.key, record.partition
            ) from exc

    def _attempt(self, record: _Record, timeout: float) -> SendResult:
        """One attempt of a synchronous send: produce, wait for its delivery report."""
        report = _Report()
        ident = threading.get_ident()
        self._pushers.add(ident)  # before producing: the poll thread keeps out of the way
        try:
            self._produce(record, report)
            self._push(report, timeout)
        finally:
            self._pushers.discard(ident)
        if not report.wait(timeout):
            raise SendTimeoutError(
                f"no answer from the broker for the send to {record.logical_topic!r} "
                f"(message id {record.msg_id}) within {timeout:g}s; it may still be written "
                "and is not resent"
            )
        kmsg = report.kmsg
        if report.err is None:
            sent = self.stats.sent
            sent[record.logical_topic] = sent.get(record.logical_topic, 0) + 1
            return _send_ok(record.msg_id, record.logical_topic, kmsg.partition(), kmsg.offset())
        raise _classify(report.err, kmsg, record.logical_topic)

    def _push(self, report: _Report, timeout: float) -> None:
        """A synchronous send does not wait out ``linger.ms``: while its record is the only
        one in flight, this thread flushes it (which sends at once) and serves the reports
        that come meanwhile; with other records in flight it goes with their batches and
        the poll thread (or a sending thread) serves its report."""
        client = self._client
        serving = self._serving
        if client is None or len(client) > 1 or not serving.acquire(False):
            self._pushers.discard(threading.get_ident())
            self._kick()  # the poll thread (or a sending thread) serves it
            return
        self._inline_ident = threading.get_ident()
        try:
            deadline = time.monotonic() + timeout
            while not report.done() and (left := deadline - time.monotonic()) > 0:
                client.flush(min(left, _FLUSH_SLICE_S))
        except KafkaException as exc:  # fatal: surfaced by this send's report or the next
            self._errors(exc.args[0])
        except Exception:
            log.exception("error in a producer callback")
        finally:
            self._inline_ident = None
            serving.release()

    def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's acknowledgement."""
        self.client  # noqa: B018 - start lazily
        self._raise_fatal()
        record = self.prepare(msg)
        wait = timeout if timeout is not None else self.options.send_msg_timeout_ms / 1000 + 5
        try:
            return self._attempt(record, wait)
        except RETRIED as failure:  # the policy takes over (most sends never get here)
            first = failure
        except SendError as failure:
            self.stats.failed(record.logical_topic, failure)
            raise
        retrying = send_retrying(
            retries=self.options.retry_times_when_send_failed,
            backoff=self.options.backoff,
            sleep=self.options.sleep,
            uniform=self.options.uniform,
        )
        last: list[SendError] = [first]

        def again(record: _Record, wait: float) -> SendResult:
            self.stats.retried(
                record.logical_topic, flow_control=isinstance(last[0], FlowControlled)
            )
            try:
                return self._attempt(record, wait)
            except SendError as failure:
                last[0] = failure
                raise

        try:
            result: SendResult = retry_after(retrying, first, again, record, wait)
        except SendError as failure:
            self.stats.failed(record.logical_topic, failure)
            raise
        return result

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> list[SendResult]:
        """Send several messages and wait for all (each keeps its own retries)."""
        self.client  # noqa: B018
        records = [self.prepare(m) for m in msgs]
        futures: list[Future[SendResult]] = []
        for record in records:
            fut: Future[SendResult] = Future()
            self._send_record(
                record, _future_callback(fut), self.options.retry_times_when_send_failed
            )
            futures.append(fut)
        wait = timeout if timeout is not None else self.options.send_msg_timeout_ms / 1000 + 5
        wait *= 1 + self.options.retry_times_when_send_failed
        results = []
        for record, fut in zip(records, futures, strict=True):
            try:
                results.append(fut.result(timeout=wait))
            except TimeoutError:
                if fut.done():
                    raise
                raise SendTimeoutError(
                    f"no answer from the broker for the send to {record.logical_topic!r} "
                    f"(message id {record.msg_id}) within {wait:g}s; it may still be written "
                    "and is not resent"
                ) from None
        return results

    def send_async(self, msg: Message, callback: SendCallback) -> None:
        """Send without waiting; ``callback(result, None)`` or ``callback(None, error)`` runs
        later, once: on the producer's poll thread, or in a later ``send_async`` call on the
        thread that keeps sending (which serves the reports ready by then, as a raw
        ``produce`` + ``poll(0)`` loop does).  Errors in building the record raise here,
        and so does a local queue that stays full through the back-off (the caller's thread
        backs off; inside a send callback the resend is scheduled instead and its outcome goes
        to ``callback``).
        """
        client = self._client
        if client is None:
            client = self.client
        if msg.__class__ is Message:  # the common case, without building a record
            body = msg.body
            level = msg.delay_time_level
            topic = msg.topic
            kafka_topic = self._topics.get(topic) if type(topic) is str else None
            if (
                kafka_topic is not None
                and type(body) is bytes
                and type(level) is int
                and not level
                and msg.deliver_time_ms is None
            ):
                msg_id = self._id_format % (next(self._id_counter) & _ID_COUNTER_MASK)  # bytes
                headers: list[tuple[str, bytes | None]]
                kept: list[tuple[str, bytes | None]] | None
                if not msg.properties and msg.tags is None and msg.keys is None:
                    headers = [(PROPERTY_UNIQ_KEY, msg_id)]
                    kept = None
                else:
                    headers = kept = encode_message_headers(msg, msg_id.decode())
                partition = msg.partition
                if partition is None:
                    partition = ANY_PARTITION
                key = msg.sharding_key
                pool = self._pool
                try:
                    pending = pool.pop() if pool else _Pending(self)
                except IndexError:  # another thread took the last one
                    pending = _Pending(self)
                pending.producer = self
                pending.callback = callback
                pending.retries = self._async_retries
                pending.msg_id = msg_id
                pending.logical = topic
                pending.topic = kafka_topic
                pending.value = body
                pending.key = key
                pending.partition = partition
                pending.headers = kept
                self._sends += 1
                try:
                    client.produce(kafka_topic, body, key, partition, pending, None, 0, headers)
                except BufferError as exc:
                    self._back_off_at_send(pending, exc)
                except Exception as exc:
                    raise _produce_error(exc, topic, body, key, msg.partition) from exc
                self._kick()
                self._serve_inline(client)
                return
        record = self.prepare(msg)
        self._sends += 1
        self._send_record(record, callback, self.options.retry_times_when_send_async_failed)
        client = self._client
        if client is not None:
            self._serve_inline(client)

    def _send_record(self, record: _Record, callback: SendCallback, retries: int) -> None:
        pool = self._pool
        try:
            pending = pool.pop() if pool else _Pending(self)
        except IndexError:  # another thread took the last one
            pending = _Pending(self)
        pending.producer = self
        pending.callback = callback
        pending.retries = retries
        pending.msg_id = record.msg_id.encode()
        pending.logical = record.logical_topic
        pending.topic = record.topic
        pending.value = record.value
        pending.key = record.key
        pending.partition = ANY_PARTITION if record.partition is None else record.partition
        pending.headers = record.headers
        client = self._client
        if client is None:
            raise ClientClosedError(
                "producer is not started (call start() or use it as a context manager)"
            )
        try:
            client.produce(
                pending.topic,
                pending.value,
                pending.key,
                pending.partition,
                pending,
                None,
                0,
                record.headers,
            )
        except BufferError as exc:
            self._back_off_at_send(pending, exc)
        except Exception as exc:
            raise _produce_error(
                exc, record.logical_topic, record.value, record.key, record.partition
            ) from exc
        self._kick()

    def _back_off_at_send(self, pending: _Pending, exc: BufferError) -> None:
        """The local queue was full at the first attempt of an asynchronous send.

        Inside a send callback (on the poll thread, or on a sender serving reports inline)
        the resend is scheduled: sleeping there would stop the very delivery reports that
        drain the queue.  On the caller's own thread the caller backs off (back-pressure),
        as ``send`` does.  A queue that stays full through every retry raises
        :class:`FlowControlError` here.
        """
        resend = _Resend(pending)
        failure = _queue_full(exc, pending.logical)
        ident = threading.get_ident()
        on_poll_thread = ident in (self._poll_ident, self._inline_ident)
        while (delay := resend.next_delay(failure)) is not None:
            self.stats.retried(pending.logical, flow_control=True)
            if on_poll_thread:
                self._schedule(delay, resend)
                return
            self.options.sleep(delay)
            client = self._live
            if client is None:
                raise ClientClosedError("producer shut down while backing off from a full queue")
            try:
                client.produce(
                    pending.topic,
                    pending.value,
                    pending.key,
                    pending.partition,
                    resend.delivered,
                    None,
                    0,
                    pending.record_headers(),
                )
                return
            except BufferError as again:
                failure = _queue_full(again, pending.logical)
            except Exception as error:
                raise _produce_error(error, pending.logical, pending.value) from error
        final = exhausted(failure, resend.attempts)
        self.stats.failed(pending.logical, final)
        raise final from exc

    def send_oneway(self, msg: Message) -> None:
        """Send and forget (failures are logged, like RocketMQ's oneway)."""
        self.send_async(msg, _log_oneway_failure)


class _Report:
    """The delivery report a synchronous send waits for (a lock, not a Future: cheaper)."""

    __slots__ = ("_done", "err", "kmsg")

    def __init__(self) -> None:
        self.err: Any = None
        self.kmsg: Any = None
        self._done = threading.Lock()
        self._done.acquire()

    def __call__(self, err: Any, kmsg: Any) -> None:
        self.err, self.kmsg = err, kmsg
        self._done.release()

    def wait(self, timeout: float) -> bool:
        return self._done.acquire(timeout=max(timeout, 0.0))

    def done(self) -> bool:
        return not self._done.locked()


def _queue_full(exc: BufferError, logical: str) -> FlowControlled:
    return FlowControlled(
        f"local producer queue is full sending to {logical!r}: {exc}",
        kafka_error=KafkaError(KafkaError._QUEUE_FULL),
    )


def _produce_error(
    exc: Exception,
    logical: str,
    value: bytes | None,
    key: Any = None,
    partition: Any = ANY_PARTITION,
) -> Exception:
    """The adapter error for ``produce()`` refusing a record at once."""
    if isinstance(exc, AdapterError):
        return exc
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            return MessageTooLargeError(
                f"message too large for topic {logical!r} "
                f"(value {len(value or b'')} bytes, message.max.bytes exceeded)",
                kafka_error=err,
            )
        return client_error(exc, what=f"producing to {logical!r}")
    if isinstance(exc, TypeError | ValueError):  # what confluent-kafka's argument parsing says
        if not isinstance(partition, int):
            return InvalidInputError("partition", partition, f"must be an int: {exc}")
        if key is not None and not isinstance(key, str | bytes):
            return InvalidInputError("sharding_key", key, f"must be bytes or str: {exc}")
        return InvalidInputError("msg", logical, f"cannot be produced: {exc}")
    return KafkaClientError(f"producing to {logical!r}: {exc!r}")


def _timed_out(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError._TIMED_OUT


def _classify(err: Any, kmsg: Any, logical: str) -> SendError:
    """The error for a failed delivery report: internal ones are resent by the policy."""
    if err.code() in AUTH_CODES:
        return SendError(f"not authorized: {err.str()}", kafka_error=err, raw_message=kmsg)
    if is_flow_control(err):
        return FlowControlled(f"throttled: {err.str()}", kafka_error=err, raw_message=kmsg)
    if not is_possibly_persisted(err) and err.retriable():
        return RetriableSendFailure(
            f"{err.str()} (topic {logical!r})", kafka_error=err, raw_message=kmsg
        )
    return send_error(err, kmsg, topic=logical)


def _log_oneway_failure(_: SendResult | None, exc: Exception | None) -> None:
    if exc is not None:
        log.warning("oneway send failed: %s", exc)


def _future_callback(fut: Future[SendResult]) -> SendCallback:
    def done(result: SendResult | None, exc: Exception | None) -> None:
        if exc is not None:
            fut.set_exception(exc)
        else:
            assert result is not None
            fut.set_result(result)

    return done


def _safe_call(
    callback: SendCallback | None, result: SendResult | None, exc: Exception | None
) -> None:
    if callback is None:  # a pooled record's: cannot happen
        return
    try:
        callback(result, exc)
    except Exception:
        log.exception("send callback raised")
