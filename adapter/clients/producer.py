"""``Producer``: RocketMQ-style sends on confluent-kafka.

* idempotent producer always on; librdkafka retries what is safe inside
  ``send_msg_timeout_ms`` (``message.timeout.ms``);
* the adapter resends only after a *definite* failure (``retry_times_when_send_failed``),
  at once, or after a gRPC-style back-off when it hit flow control (queue full, throttling);
* an outcome Kafka reports as possibly persisted raises :class:`PossiblyPersistedError`
  and is never resent (``UNIQ_KEY`` lets consumers de-duplicate).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _KafkaProducer

from adapter.clients.retrying import FlowControlled, RetriableSendFailure, send_retrying
from adapter.constants import (
    DEFAULT_RETRY_TIMES_WHEN_SEND_ASYNC_FAILED,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_MSG_TIMEOUT_MS,
)
from adapter.core import naming
from adapter.core.backoff import ExponentialBackoff
from adapter.core.clock import Clock
from adapter.core.codec import encode_message_headers, schedule_headers
from adapter.core.delay import DelayLevels
from adapter.core.ids import MessageIdGenerator
from adapter.core.message import Message
from adapter.core.schedule import place_delay_level, place_deliver_time
from adapter.errors import (
    BrokerUnavailableError,
    ClientClosedError,
    InvalidDelayLevelError,
    InvalidInputError,
    MessageTooLargeError,
    SendError,
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


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    """DefaultMQProducer settings, snake_case."""

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


@lru_cache(maxsize=4096)
def _kafka_name(logical: str) -> str:
    return naming.to_kafka(logical)


class Producer:
    """A RocketMQ-style producer over a confluent-kafka config dict.

    >>> with Producer({"bootstrap.servers": "127.0.0.1:9092"}) as p:   # doctest: +SKIP
    ...     p.send(Message(topic="orders", body=b"hi", tags="TagA"))
    """

    def __init__(self, config: Mapping[str, Any], **options: Any) -> None:
        self.options = build_options(ProducerOptions, options, "Producer")
        conf = producer_config(check_kafka_config(config, "producer"))
        require_setting(conf, "enable.idempotence", True, "sends must not create duplicates")
        conf.setdefault("message.timeout.ms", self.options.send_msg_timeout_ms)
        # a sync send waits for its own acknowledgement: do not add linger to it (librdkafka
        # still batches whatever queues up while a request is in flight)
        conf.setdefault("linger.ms", 0)
        self._errors = FatalErrorWatch(conf.get("error_cb"))
        conf["error_cb"] = self._errors
        self._config = conf
        self._client: Any = None
        self._poller: threading.Thread | None = None
        self._running = threading.Event()
        self._lock = threading.Lock()
        self._ids = MessageIdGenerator(
            os.getpid().to_bytes(4, "big") + random.getrandbits(48).to_bytes(6, "big")
        )
        self._known_topics: set[str] = set()
        self._delay_topics_ready = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Producer:
        with self._lock:
            if self._client is not None:
                return self
            self._client = make_client(_KafkaProducer, dict(self._config), what="producer")
            self._running.set()
            self._poller = threading.Thread(
                target=self._poll_loop, name="rmq-producer-poll", daemon=True
            )
            self._poller.start()
        return self

    def shutdown(self, timeout: float | None = None) -> int:
        """Flush what is queued and stop; returns how many messages were left unsent."""
        with self._lock:
            client, self._client = self._client, None
        if client is None:
            return 0
        left = int(
            client.flush(
                self.options.send_msg_timeout_ms / 1000 + 1 if timeout is None else timeout
            )
        )
        self._running.clear()
        if self._poller is not None:
            self._poller.join(timeout=5)
        if left:
            log.warning("producer shut down with %d message(s) unsent", left)
        return left

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _poll_loop(self) -> None:
        while self._running.is_set():
            client = self._client
            if client is None:
                break
            try:
                client.poll(0.1)
            except KafkaException as exc:  # fatal: surfaced by the next send
                self._errors(exc.args[0])
                log.error("producer error: %s", exc)

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
        return int(self.client.flush(timeout))

    # -- building records ------------------------------------------------------------------
    def _check_topic(self, kafka_topic: str, logical: str) -> None:
        if kafka_topic in self._known_topics:
            return
        try:
            md = self.client.list_topics(
                topic=kafka_topic, timeout=self.options.send_msg_timeout_ms / 1000
            )
        except KafkaException as exc:
            self._raise_fatal()
            raise client_error(exc, what=f"metadata for topic {logical!r}") from exc
        tmd = md.topics.get(kafka_topic)
        if tmd is None or tmd.error is not None:
            err = None if tmd is None else tmd.error
            if err is not None and err.code() not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
            ):
                raise client_error(KafkaException(err), what=f"topic {logical!r}")
            raise UnknownTopicError(
                f"topic {logical!r} does not exist (Kafka topic {kafka_topic!r}); create it or "
                "enable auto-creation on the broker",
                kafka_error=err,
            )
        self._known_topics.add(kafka_topic)

    def _ensure_delay_topics(self) -> None:
        if self._delay_topics_ready or not self.options.auto_create_delay_topics:
            return
        ensure_topics(
            self._config,
            plan_topics(delay_levels=self.options.levels, namespace=self.options.namespace),
        )
        self._delay_topics_ready = True

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
        kafka_topic = _kafka_name(msg.topic)  # bad input is reported before any broker call
        self._check_topic(kafka_topic, msg.topic)
        msg_id = self._ids.next_id()
        headers = encode_message_headers(msg, msg_id)
        now = self.options.clock.now_ms()
        placement = None
        if msg.deliver_time_ms is not None:
            if level:
                raise InvalidInputError(
                    "deliver_time_ms",
                    msg.deliver_time_ms,
                    "cannot be combined with delay_time_level",
                )
            placement = place_deliver_time(
                check_int("deliver_time_ms", msg.deliver_time_ms, minimum=0),
                now,
                self.options.levels,
            )
        elif level > 0:
            placement = place_delay_level(level, now, self.options.levels)
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
        )
        logical = naming.schedule_topic(
            placement.level, self.options.levels, self.options.namespace
        )
        return _Record(
            _kafka_name(logical), logical, bytes(msg.body), msg.sharding_key, headers, None, msg_id
        )

    # -- producing -------------------------------------------------------------------------
    def _produce(self, record: _Record, on_done: Callable[[Any, Any], None]) -> None:
        kwargs: dict[str, Any] = {
            "value": record.value,
            "key": record.key,
            "headers": record.headers,
            "on_delivery": on_done,
        }
        if record.partition is not None:
            kwargs["partition"] = record.partition
        client = self._client
        if client is None:
            raise ClientClosedError(
                "producer is not started (call start() or use it as a context manager)"
            )
        try:
            client.produce(record.topic, **kwargs)
        except BufferError as exc:
            raise FlowControlled(f"local producer queue is full: {exc}") from exc
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in (KafkaError.MSG_SIZE_TOO_LARGE,):
                raise MessageTooLargeError(
                    f"message too large for topic {record.logical_topic!r} "
                    f"(value {len(record.value)} bytes, message.max.bytes exceeded)",
                    kafka_error=err,
                ) from exc
            raise client_error(exc, what=f"producing to {record.logical_topic!r}") from exc

    def _result(self, record: _Record, kmsg: Any) -> SendResult:
        return SendResult(
            SendStatus.SEND_OK, record.msg_id, record.logical_topic, kmsg.partition(), kmsg.offset()
        )

    @staticmethod
    def _classify(err: Any, kmsg: Any, record: _Record) -> SendError:
        if err.code() in AUTH_CODES:
            return SendError(f"not authorized: {err.str()}", kafka_error=err, raw_message=kmsg)
        if is_flow_control(err):
            return FlowControlled(f"throttled: {err.str()}", kafka_error=err, raw_message=kmsg)
        if not is_possibly_persisted(err) and err.retriable():
            return RetriableSendFailure(err.str(), kafka_error=err, raw_message=kmsg)
        return send_error(err, kmsg, topic=record.logical_topic)

    def _attempt(self, record: _Record, timeout: float) -> SendResult:
        future: Future[SendResult] = Future()

        def on_done(err: Any, kmsg: Any) -> None:
            if err is None:
                future.set_result(self._result(record, kmsg))
            else:
                future.set_exception(self._classify(err, kmsg, record))

        self._produce(record, on_done)
        return future.result(timeout=timeout)

    def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's acknowledgement."""
        self.client  # noqa: B018 - start lazily
        self._raise_fatal()
        record = self.prepare(msg)
        wait = timeout if timeout is not None else self.options.send_msg_timeout_ms / 1000 + 5
        retrying = send_retrying(
            retries=self.options.retry_times_when_send_failed,
            backoff=self.options.backoff,
            sleep=self.options.sleep,
            uniform=self.options.uniform,
        )
        return retrying(self._attempt, record, wait)

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> list[SendResult]:
        """Send several messages and wait for all (each keeps its own retries)."""
        self.client  # noqa: B018
        records = [self.prepare(m) for m in msgs]
        futures: list[Future[SendResult]] = []
        for record in records:
            fut: Future[SendResult] = Future()
            self._send_async_record(
                record, _future_callback(fut), self.options.retry_times_when_send_failed
            )
            futures.append(fut)
        wait = timeout if timeout is not None else self.options.send_msg_timeout_ms / 1000 + 5
        return [
            f.result(timeout=wait * (1 + self.options.retry_times_when_send_failed))
            for f in futures
        ]

    def send_async(self, msg: Message, callback: SendCallback) -> None:
        """Send without waiting; ``callback(result, None)`` or ``callback(None, error)`` runs later
        on the producer's poll thread.  Errors in building the record raise here.
        """
        self.client  # noqa: B018
        record = self.prepare(msg)
        self._send_async_record(record, callback, self.options.retry_times_when_send_async_failed)

    def _send_async_record(
        self, record: _Record, callback: SendCallback, retries_left: int
    ) -> None:
        def on_done(err: Any, kmsg: Any) -> None:
            if err is None:
                _safe_call(callback, self._result(record, kmsg), None)
                return
            failure = self._classify(err, kmsg, record)
            if retries_left > 0 and isinstance(failure, FlowControlled | RetriableSendFailure):
                delay = 0.0
                if isinstance(failure, FlowControlled):
                    attempt = 1 + self.options.retry_times_when_send_async_failed - retries_left
                    delay = self.options.backoff.delay(attempt, self.options.uniform)
                self._resend_later(record, callback, retries_left - 1, delay)
                return
            _safe_call(callback, None, failure)

        try:
            self._produce(record, on_done)
        except FlowControlled:  # local queue full: back off (blocking the caller), retry
            retrying = send_retrying(
                retries=retries_left,
                backoff=self.options.backoff,
                sleep=self.options.sleep,
                uniform=self.options.uniform,
            )
            retrying(self._produce, record, on_done)

    def _resend_later(
        self, record: _Record, callback: SendCallback, retries_left: int, delay: float
    ) -> None:
        def again() -> None:
            try:
                self._send_async_record(record, callback, retries_left)
            except Exception as exc:  # delivered to the callback, never lost silently
                _safe_call(callback, None, exc)

        if delay <= 0:
            again()
        else:
            timer = threading.Timer(delay, again)
            timer.daemon = True
            timer.start()

    def send_oneway(self, msg: Message) -> None:
        """Send and forget (failures are logged, like RocketMQ's oneway)."""

        def log_failure(_: SendResult | None, exc: Exception | None) -> None:
            if exc is not None:
                log.warning("oneway send to %s failed: %s", msg.topic, exc)

        self.send_async(msg, log_failure)


def _future_callback(fut: Future[SendResult]) -> SendCallback:
    def done(result: SendResult | None, exc: Exception | None) -> None:
        if exc is not None:
            fut.set_exception(exc)
        else:
            assert result is not None
            fut.set_result(result)

    return done


def _safe_call(callback: SendCallback, result: SendResult | None, exc: Exception | None) -> None:
    try:
        callback(result, exc)
    except Exception:
        log.exception("send callback raised")
