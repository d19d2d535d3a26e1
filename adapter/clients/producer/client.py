"""``Producer``: the RocketMQ-style facade over one confluent-kafka producer -- its
lifecycle, ``send`` (synchronous, retried on this thread), ``send_batch``, ``send_async``
and ``send_oneway``; records, topic lookups, in-flight sends and the poll thread are the
other modules' jobs (see the package docstring)."""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Unpack

from adapter.clients.producer.inflight import InFlight, Pending, ResendHeap
from adapter.clients.producer.lookup import TopicLookup
from adapter.clients.producer.options import ProducerOptions, ProducerSettings
from adapter.clients.producer.poller import Poller
from adapter.clients.producer.produce import classify, produce, produce_error, queue_full
from adapter.clients.producer.records import (
    Record,
    check_deliver_time,
    check_message,
    delay_warning,
    is_scheduled,
    message_headers,
    placement,
    plain_record,
    scheduled_record,
)
from adapter.clients.producer.results import SendCallback, SendResult, send_ok
from adapter.clients.producer.retrying import RETRIED, FlowControlled, retry_after, send_retrying
from adapter.constants import ANY_PARTITION, PROPERTY_UNIQ_KEY
from adapter.core.codec import encode_message_headers
from adapter.core.ids import MessageIdGenerator
from adapter.core.message import Message
from adapter.core.stats import ProducerStats
from adapter.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    SendError,
    SendTimeoutError,
    TlsError,
)
from adapter.io.config import (
    build_options,
    check_kafka_config,
    producer_config,
    require_setting,
)
from adapter.io.errors import FatalErrorWatch, make_client
from adapter.io.signals import StartsInWith, TerminateAsInterrupt
from adapter.io.topics import ensure_topics, plan_topics
from adapter.telemetry import state as telemetry

log = logging.getLogger("adapter.producer")


def process_id_prefix() -> bytes:
    """The 10 bytes every message id of a producer starts with: the process id and 48
    random bits (unique across the processes and producers that write a topic)."""
    return os.getpid().to_bytes(4, "big") + random.getrandbits(48).to_bytes(6, "big")


class Producer(StartsInWith):
    """A RocketMQ-style producer over a confluent-kafka config dict.

    >>> with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as p:   # doctest: +SKIP
    ...     p.send(Message(topic="orders", body=b"hi", tags="TagA"))
    """

    def __init__(self, config: Mapping[str, Any], **options: Unpack[ProducerOptions]) -> None:
        self.options = build_options(ProducerSettings, options, "Producer")
        self._async_retries = self.options.retry_times_when_send_async_failed
        conf = producer_config(check_kafka_config(config, "producer"))
        require_setting(conf, "enable.idempotence", True, "sends must not create duplicates")
        conf.setdefault("message.timeout.ms", self.options.send_msg_timeout_ms)
        # librdkafka's and Kafka's own default: asynchronous sends go in batches (at
        # linger.ms=0 each record of a steady stream became a request of its own: at
        # 2000/s the broker's load and pauses made forwarded messages 200+ ms late, p99);
        # a synchronous send waives it for its record (see Poller.push)
        conf.setdefault("linger.ms", 5)
        self._errors = FatalErrorWatch(conf.get("error_cb"), config=conf)
        conf["error_cb"] = self._errors
        self._config = conf
        #: what was sent, failed and resent, per logical topic (Prometheus reads it)
        self.stats = ProducerStats()
        self._metrics: Any = None
        self._client: Any = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._lock = threading.Lock()
        # message ids: one ``next()`` per id, lock-free (see MessageIdGenerator)
        self._ids = MessageIdGenerator(process_id_prefix()).ids
        self._lookup = TopicLookup(
            conf,
            self.options.send_msg_timeout_ms,
            lambda: self.client,
            self._raise_fatal,
            self.options.clock,
        )
        #: logical topic -> Kafka topic, for topics known to exist (the lookup's)
        self._topics = self._lookup.topics
        self._delay_topics_ready = False
        self._closed = False  # shut down: never reopened
        self._signals = TerminateAsInterrupt()
        self._warned: set[str] = set()  # kinds of delay warnings logged already
        due: ResendHeap[Any] = ResendHeap(self.options.clock)
        self._poll = Poller(self._errors, due, self.options.clock)
        self._inflight = InFlight(self.options, self.stats, due, self._poll.kick)
        #: idle in-flight records for reuse (the in-flight sends')
        self._pool = self._inflight.pool

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Producer:
        """Connect (idempotent while running).  A producer that was shut down stays closed:
        :class:`ClientClosedError` (create a new one)."""
        with self._lock:
            if self._client is not None:
                return self
            if self._closed:
                raise ClientClosedError("producer was shut down; create a new Producer")
            client = make_client(self.options.client_factory, dict(self._config), what="producer")
            running = threading.Event()
            running.set()
            thread = threading.Thread(
                target=self._poll.run,
                args=(client, running),
                name="rmq-producer-poll",
                daemon=True,
            )
            self._client = self._inflight.live = client
            self._running, self._thread = running, thread
            thread.start()
            opts = self.options
            if self._metrics is None and (
                opts.metrics_port is not None
                or opts.metrics_registry is not None
                or telemetry.metered()
            ):
                from adapter.io.metrics import ProducerCollector  # on use
                from adapter.telemetry.reporting import report

                self._metrics = report(
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
            self._closed = True
            client, self._client = self._client, None
            thread, self._thread = self._thread, None
            running = self._running
            metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.close()
        if client is None:
            return 0
        limit = self.options.send_msg_timeout_ms / 1000 + 1 if timeout is None else timeout
        left = self._poll.wait_sent(client, limit)
        running.clear()
        self._poll.stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if self._inflight.live is client:
            self._inflight.live = None
        self._inflight.abandon_due()
        if left:
            log.warning("producer shut down with %d message(s) unsent", left)
        return left

    def _raise_fatal(self) -> None:
        """Raise the authentication/fatal error librdkafka reported, if any."""
        last = self._errors.current()
        # "all brokers down" is transient: it must not fail every send after the cluster is
        # back (each send reports an outage itself, naming the topic)
        # ... unless TLS failed: that does not pass by itself (a wrong CA, a plaintext port)
        if last is not None and (
            isinstance(last, TlsError) or not isinstance(last, BrokerUnavailableError)
        ):
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
        return self._poll.wait_sent(self.client, timeout)

    # -- building records ------------------------------------------------------------------
    def _ensure_delay_topics(self) -> None:
        if self._delay_topics_ready or not self.options.auto_create_delay_topics:
            return
        ensure_topics(
            self._config,
            plan_topics(delay_levels=self.options.levels, namespace=self.options.namespace),
        )
        self._delay_topics_ready = True

    def prepare(self, msg: Message) -> Record:
        """Validate ``msg`` and turn it into the Kafka record to produce."""
        check_message(msg)
        kafka_topic = self._lookup.kafka_topic(msg.topic)  # bad input is reported before this
        msg_id = next(self._ids).decode()
        headers = message_headers(msg, msg_id)
        hooks = telemetry.active
        if hooks is not None and self.options.tracing:  # a ``send`` span, its context
            headers = hooks.send(headers, msg.topic, msg_id, msg.partition)
        if not is_scheduled(msg):
            return plain_record(msg, kafka_topic, msg_id, headers)
        opts = self.options
        now_ms = opts.clock.now_ms()
        check_deliver_time(msg, now_ms)
        warning = delay_warning(msg, now_ms, opts.levels)
        if warning is not None and warning[0] not in self._warned:
            self._warned.add(warning[0])  # once per kind: the clamp itself is RocketMQ's rule
            log.warning("%s (logged once per producer)", warning[1])
        place = placement(msg, now_ms, opts.levels)
        if place is None:
            return plain_record(msg, kafka_topic, msg_id, headers)
        self._ensure_delay_topics()
        return scheduled_record(
            msg,
            msg_id,
            headers,
            place,
            now_ms=now_ms,
            levels=opts.levels,
            namespace=opts.namespace,
            kafka_topic_of=self._lookup.schedule_topic,
        )

    # -- producing -------------------------------------------------------------------------
    def _produce(self, record: Record, on_done: Report) -> None:
        client = self._client
        if client is None:
            raise ClientClosedError(
                "producer is not started (call start() or use it as a context manager)"
            )
        partition = ANY_PARTITION if record.partition is None else record.partition
        try:
            produce(
                client,
                record.topic,
                value=record.value,
                key=record.key,
                partition=partition,
                on_delivery=on_done,
                headers=record.headers,
            )
        except BufferError as exc:
            raise queue_full(exc, record.logical_topic) from exc
        except Exception as exc:
            raise produce_error(
                exc, record.logical_topic, record.value, record.key, record.partition
            ) from exc

    def _attempt(self, record: Record, timeout: float) -> SendResult:
        """One attempt of a synchronous send: produce, wait for its delivery report."""
        report = Report()
        ident = threading.get_ident()
        pushers = self._poll.pushers
        pushers.add(ident)  # before producing: the poll thread keeps out of the way
        try:
            self._produce(record, report)
            self._poll.push(self._client, report.done, timeout)
        finally:
            pushers.discard(ident)
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
            return send_ok(record.msg_id, record.logical_topic, kmsg.partition(), kmsg.offset())
        raise classify(report.err, kmsg, record.logical_topic)

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

        def again(record: Record, wait: float) -> SendResult:
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
                and telemetry.active is None  # traced sends take the general path
            ):
                msg_id = next(self._ids)  # bytes
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
                inflight = self._inflight
                try:
                    pending = pool.pop() if pool else Pending(inflight)
                except IndexError:  # another thread took the last one
                    pending = Pending(inflight)
                pending.owner = inflight
                pending.callback = callback
                pending.retries = self._async_retries
                pending.msg_id = msg_id
                pending.logical = topic
                pending.topic = kafka_topic
                pending.value = body
                pending.key = key
                pending.partition = partition
                pending.headers = kept
                poll = self._poll
                poll.sends += 1
                try:
                    produce(
                        client,
                        kafka_topic,
                        value=body,
                        key=key,
                        partition=partition,
                        on_delivery=pending,
                        headers=headers,
                    )
                except BufferError as exc:
                    inflight.back_off(pending, exc, poll.on_poll_thread())
                except Exception as exc:
                    raise produce_error(exc, topic, body, key, msg.partition) from exc
                poll.kick()
                poll.serve_inline(client)
                return
        record = self.prepare(msg)
        self._poll.sends += 1
        self._send_record(record, callback, self.options.retry_times_when_send_async_failed)
        client = self._client
        if client is not None:
            self._poll.serve_inline(client)

    def _send_record(self, record: Record, callback: SendCallback, retries: int) -> None:
        pool = self._pool
        inflight = self._inflight
        try:
            pending = pool.pop() if pool else Pending(inflight)
        except IndexError:  # another thread took the last one
            pending = Pending(inflight)
        pending.owner = inflight
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
            produce(
                client,
                pending.topic,
                value=pending.value,
                key=pending.key,
                partition=pending.partition,
                on_delivery=pending,
                headers=record.headers,
            )
        except BufferError as exc:
            inflight.back_off(pending, exc, self._poll.on_poll_thread())
        except Exception as exc:
            raise produce_error(
                exc, record.logical_topic, record.value, record.key, record.partition
            ) from exc
        self._poll.kick()

    def send_oneway(self, msg: Message) -> None:
        """Send and forget (failures are logged, like RocketMQ's oneway)."""
        self.send_async(msg, _log_oneway_failure)


class Report:
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
