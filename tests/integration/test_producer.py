"""``Producer`` against a real broker, plus its retry policy (no broker)."""

from __future__ import annotations

import logging
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from adapter.clients.producer import Producer, SendResult, SendStatus
from adapter.clients.producer.retrying import FlowControlled, RetriableSendFailure, send_retrying
from adapter.constants import (
    HEADER_DUE_MS,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from adapter.core.backoff import ExponentialBackoff
from adapter.core.message import Message
from adapter.errors import (
    AdapterError,
    BrokerUnavailableError,
    FlowControlError,
    InvalidDelayLevelError,
    KafkaClientError,
    MessageTooLargeError,
    PossiblyPersistedError,
    RetriesExhaustedError,
    UnknownTopicError,
)
from adapter.testing import TopicFactory

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture
def producer(kafka_bootstrap_servers: str) -> Iterator[Producer]:
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as p:
        yield p


def _read(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    count: int = 1,
    *,
    timeout: float = 15.0,
    until: bytes | None = None,
) -> list[KafkaMessage]:
    """``count`` records of ``topic`` from the beginning (bounded wait); with ``until``, the
    records up to the first whose value is ``until``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"qa-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[KafkaMessage] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until is None and len(got) >= count:
                break
            if until is not None and got and got[-1].value() == until:
                count = len(got)
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            got.append(msg)
        assert len(got) == count, f"read {len(got)} of {count} records of {topic} in {timeout}s"
        return got
    finally:
        consumer.close()


def _headers(msg: KafkaMessage) -> dict[str, str]:
    return {k: (v or b"").decode("utf-8") for k, v in msg.headers() or []}


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _broker_auto_creates(bootstrap: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker = next(iter(admin.list_topics(timeout=10).brokers))
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    configs = admin.describe_configs([res])[res].result(timeout=10)
    return str(configs["auto.create.topics.enable"].value).lower() == "true"


# --------------------------------------------------------------------------------------------
# sends that reach Kafka
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_sync_send_returns_result_and_record_carries_properties(
    producer: Producer, kafka_topic_factory: TopicFactory, kafka_bootstrap_servers: str
) -> None:
    topic = kafka_topic_factory("qa-prod", partitions=2)
    body = b"\x00\xffnot utf-8 \xc3\x28 body"
    msg = Message(
        topic=topic,
        body=body,
        tags="TagA",
        keys=["order-1", "order-2"],
        properties={"color": "red", "unicode": "grüße"},
        partition=1,
        sharding_key=b"shard-7",
    )
    result = producer.send(msg)

    assert isinstance(result, SendResult)
    assert result.status is SendStatus.SEND_OK
    assert result.topic == topic
    assert result.queue_id == 1
    assert result.queue_offset == 0
    assert re.fullmatch(r"[0-9A-F]{32}", result.msg_id), result.msg_id

    [record] = _read(kafka_bootstrap_servers, topic, partitions=2)
    assert (record.partition(), record.offset()) == (result.queue_id, result.queue_offset)
    assert record.value() == body  # untouched
    assert record.key() == b"shard-7"
    headers = _headers(record)
    assert headers[PROPERTY_UNIQ_KEY] == result.msg_id
    assert headers[PROPERTY_KEYS] == "order-1 order-2"
    assert headers[PROPERTY_TAGS] == "TagA"
    assert headers["color"] == "red"
    assert headers["unicode"] == "grüße"
    # a plain send is not a scheduled message
    for system in (PROPERTY_REAL_TOPIC, PROPERTY_DELAY_TIME_LEVEL, HEADER_DUE_MS):
        assert system not in headers
    # one header per key
    keys = [k for k, _ in record.headers() or []]
    assert len(keys) == len(set(keys))


@pytest.mark.timeout(60)
def test_send_async_callbacks_get_every_result(
    producer: Producer, kafka_topic: str, kafka_bootstrap_servers: str
) -> None:
    n = 300
    results: dict[int, tuple[SendResult | None, Exception | None]] = {}
    lock = threading.Lock()
    done = threading.Event()

    def callback_for(i: int):  # type: ignore[no-untyped-def]
        def cb(result: SendResult | None, exc: Exception | None) -> None:
            with lock:
                results[i] = (result, exc)
                if len(results) == n:
                    done.set()

        return cb

    for i in range(n):
        producer.send_async(Message(topic=kafka_topic, body=f"m{i}".encode()), callback_for(i))
    assert done.wait(20), f"{len(results)} of {n} callbacks ran"

    errors = {i: exc for i, (_, exc) in results.items() if exc is not None}
    assert errors == {}
    sent = [results[i][0] for i in range(n)]
    assert all(r is not None and r.status is SendStatus.SEND_OK for r in sent)
    offsets = [r.queue_offset for r in sent if r is not None]
    assert offsets == list(range(n)), "one partition, idempotent producer: offsets in send order"
    assert len({r.msg_id for r in sent if r is not None}) == n

    records = _read(kafka_bootstrap_servers, kafka_topic, count=n)
    assert [r.value() for r in records] == [f"m{i}".encode() for i in range(n)]


@pytest.mark.timeout(60)
def test_send_batch_returns_results_in_input_order(
    producer: Producer, kafka_topic_factory: TopicFactory, kafka_bootstrap_servers: str
) -> None:
    topic = kafka_topic_factory("qa-batch", partitions=3)
    msgs = [
        Message(topic=topic, body=f"b{i}".encode(), sharding_key=f"k{i % 5}") for i in range(60)
    ]
    results = producer.send_batch(msgs)

    assert len(results) == len(msgs)
    assert all(r.status is SendStatus.SEND_OK and r.topic == topic for r in results)
    assert len({(r.queue_id, r.queue_offset) for r in results}) == len(msgs)
    assert len({r.msg_id for r in results}) == len(msgs)
    # per partition, offsets follow the input order
    by_partition: dict[int, list[int]] = {}
    for r in results:
        by_partition.setdefault(r.queue_id, []).append(r.queue_offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)

    records = _read(kafka_bootstrap_servers, topic, partitions=3, count=len(msgs))
    where = {(r.partition(), r.offset()): r for r in records}
    for msg, result in zip(msgs, results, strict=True):
        record = where[(result.queue_id, result.queue_offset)]
        assert record.value() == msg.body
        assert _headers(record)[PROPERTY_UNIQ_KEY] == result.msg_id


@pytest.mark.timeout(60)
def test_send_oneway_reaches_kafka(kafka_bootstrap_servers: str, kafka_topic: str) -> None:
    with Producer({"bootstrap.servers": kafka_bootstrap_servers}) as p:
        for i in range(20):
            assert p.send_oneway(Message(topic=kafka_topic, body=f"o{i}".encode())) is None
        assert p.flush(10) == 0
    records = _read(kafka_bootstrap_servers, kafka_topic, count=20)
    assert sorted(r.value() for r in records) == sorted(f"o{i}".encode() for i in range(20))
    assert all(_headers(r).get(PROPERTY_UNIQ_KEY) for r in records)


# --------------------------------------------------------------------------------------------
# sends that fail
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_unknown_topic_raises_unknown_topic_error_naming_it(
    kafka_topic_factory: TopicFactory, kafka_bootstrap_servers: str
) -> None:
    """The session broker may auto-create topics (the embedded one does: Kafka's default), and
    a producer's metadata request then creates any name it asks about.  A name that collides
    with an existing topic under Kafka's ``.``/``_`` rule is one the broker refuses to create,
    so it stays unknown whatever ``auto.create.topics.enable`` says."""
    existing = kafka_topic_factory("qa.unknown")
    missing = existing.replace(".", "_")
    names = [missing]
    if not _broker_auto_creates(kafka_bootstrap_servers):
        names.append(f"qa-unknown-{uuid.uuid4().hex}")

    # the wait for metadata to show the topic is bounded by topic.metadata.propagation.max.ms
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap_servers, "topic.metadata.propagation.max.ms": 1000}
    ).start()
    for name in names:
        with pytest.raises(UnknownTopicError) as sync_err:
            producer.send(Message(topic=name, body=b"x"))
        assert name in str(sync_err.value)
        # send_async validates before queueing: the error is raised to the caller
        with pytest.raises(UnknownTopicError) as async_err:
            producer.send_async(Message(topic=name, body=b"x"), lambda r, e: None)
        assert name in str(async_err.value)
        with pytest.raises(UnknownTopicError):
            producer.send_batch([Message(topic=name, body=b"x")])
    producer.shutdown()

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    assert missing not in admin.list_topics(timeout=10).topics


@pytest.mark.timeout(60)
def test_message_larger_than_topic_max_raises_message_too_large(
    producer: Producer, kafka_topic_factory: TopicFactory
) -> None:
    topic = kafka_topic_factory("qa-small", config={"max.message.bytes": "1024"})
    big = Message(topic=topic, body=b"x" * 10_000)

    started = time.monotonic()
    with pytest.raises(MessageTooLargeError) as err:
        producer.send(big)
    assert time.monotonic() - started < 5
    assert topic in str(err.value)
    assert "10000" in str(err.value)

    got: list[tuple[SendResult | None, Exception | None]] = []
    done = threading.Event()
    producer.send_async(big, lambda r, e: (got.append((r, e)), done.set()))
    assert done.wait(10)
    assert got[0][0] is None and isinstance(got[0][1], MessageTooLargeError)

    # the producer is still usable: a permanent error is not fatal to the idempotent producer
    ok = producer.send(Message(topic=topic, body=b"small"))
    assert ok.status is SendStatus.SEND_OK


@pytest.mark.timeout(60)
def test_negative_delay_level_names_delay_time_level(
    producer: Producer, kafka_topic: str, kafka_bootstrap_servers: str
) -> None:
    for bad in (-1, -18):
        with pytest.raises(InvalidDelayLevelError) as err:
            producer.send(Message(topic=kafka_topic, body=b"x", delay_time_level=bad))
        assert err.value.field == "delay_time_level"
        assert "delay_time_level" in str(err.value) and str(bad) in str(err.value)
    with pytest.raises(InvalidDelayLevelError) as err:
        producer.send(Message(topic=kafka_topic, body=b"x", delay_time_level="3"))  # type: ignore[arg-type]
    assert err.value.field == "delay_time_level"
    # nothing reached the topic
    producer.send(Message(topic=kafka_topic, body=b"marker"))
    [first] = _read(kafka_bootstrap_servers, kafka_topic)
    assert first.value() == b"marker"


@pytest.mark.timeout(30)
def test_negative_delay_level_is_reported_without_a_broker() -> None:
    """Input validation does not wait for metadata: no broker is needed to reject it."""
    with Producer(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, send_msg_timeout_ms=5000
    ) as p:
        started = time.monotonic()
        with pytest.raises(InvalidDelayLevelError):
            p.send(Message(topic="qa-anything", body=b"x", delay_time_level=-1))
        assert time.monotonic() - started < 1.0
        p.shutdown(1)


@pytest.mark.timeout(30)
def test_unreachable_broker_fails_within_send_timeout() -> None:
    timeout_ms = 1500
    p = Producer(
        {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, send_msg_timeout_ms=timeout_ms
    ).start()
    try:
        started = time.monotonic()
        with pytest.raises(KafkaClientError) as err:
            p.send(Message(topic="qa-unreachable", body=b"x"))
        elapsed = time.monotonic() - started
        assert isinstance(err.value, BrokerUnavailableError), repr(err.value)
        assert "qa-unreachable" in str(err.value)
        assert elapsed < timeout_ms / 1000 + 2.0, f"took {elapsed:.1f}s"
    finally:
        started = time.monotonic()
        assert p.shutdown(2) == 0
        assert time.monotonic() - started < 5


@pytest.mark.timeout(60)
def test_local_queue_full_backs_off_and_then_delivers(
    kafka_bootstrap_servers: str, kafka_topic: str
) -> None:
    """A full local queue is flow control: the async send backs off (injected sleep) and
    retries instead of failing."""
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(0.3 if seconds > 0 else 0)  # long enough for the queue to drain

    with Producer(
        {"bootstrap.servers": kafka_bootstrap_servers, "queue.buffering.max.messages": 2},
        sleep=sleep,
        retry_times_when_send_async_failed=5,
    ) as p:
        results: list[tuple[SendResult | None, Exception | None]] = []
        for i in range(10):
            p.send_async(
                Message(topic=kafka_topic, body=f"q{i}".encode()),
                lambda r, e: results.append((r, e)),
            )
        assert p.flush(10) == 0
    deadline = time.monotonic() + 10
    while len(results) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(results) == 10
    assert all(exc is None for _, exc in results), results
    backoffs = [s for s in sleeps if s > 0]
    assert backoffs, "the queue never filled: no flow-control back-off happened"
    for s in backoffs:
        assert 0.8 <= s <= 120 * 1.2


@pytest.mark.timeout(90)
def test_flow_control_resends_start_no_thread_and_never_sleep_on_the_callback_thread(
    kafka_bootstrap_servers: str, kafka_topic: str
) -> None:
    """A one-message local queue: every message sent from a send callback meets a full queue
    (the message whose report is being served still counts).  That resend is scheduled on the
    poll thread's heap -- no thread per resend, no sleep on the callback thread, which would
    stop the very reports that drain the queue.  Only the sending thread backs off."""
    sleeps: list[tuple[float, threading.Thread]] = []

    def sleep(seconds: float) -> None:
        sleeps.append((seconds, threading.current_thread()))
        time.sleep(min(seconds, 0.05))

    n = 15
    outcomes: dict[bytes, Exception | None] = {}
    callback_threads: set[threading.Thread] = set()
    threads_alive: list[int] = []
    lock = threading.Lock()
    done = threading.Event()
    with Producer(
        {"bootstrap.servers": kafka_bootstrap_servers, "queue.buffering.max.messages": 1},
        sleep=sleep,
        backoff=ExponentialBackoff(initial_s=0.02, multiplier=1.5, max_s=0.2),
        retry_times_when_send_async_failed=40,
    ) as p:
        p.send(Message(topic=kafka_topic, body=b"warm-up"))
        baseline = threading.active_count()

        def record(body: bytes, exc: Exception | None) -> None:
            with lock:
                outcomes[body] = exc
                callback_threads.add(threading.current_thread())
                threads_alive.append(threading.active_count())
                if len(outcomes) == 2 * n:
                    done.set()

        def then_send(i: int):  # type: ignore[no-untyped-def]
            def cb(result: SendResult | None, exc: Exception | None) -> None:
                record(b"a%d" % i, exc)
                p.send_async(  # the queue is full here: its own message still counts
                    Message(topic=kafka_topic, body=b"b%d" % i),
                    lambda r, e: record(b"b%d" % i, e),
                )

            return cb

        for i in range(n):
            p.send_async(Message(topic=kafka_topic, body=b"a%d" % i), then_send(i))
        assert done.wait(60), f"{len(outcomes)} of {2 * n} callbacks ran"

    assert {body: exc for body, exc in outcomes.items() if exc is not None} == {}
    assert max(threads_alive) <= baseline, "a resend started a thread"
    slept_on = {thread for _, thread in sleeps}
    assert not slept_on & callback_threads, "slept on the callback thread"
    values = {r.value() for r in _read(kafka_bootstrap_servers, kafka_topic, count=2 * n + 1)}
    assert values == {b"warm-up"} | {b"%s%d" % (x, i) for x in (b"a", b"b") for i in range(n)}


@pytest.mark.timeout(60)
def test_send_finds_a_topic_created_just_before(kafka_bootstrap_servers: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    names = [f"qa-fresh-{uuid.uuid4().hex}" for _ in range(3)]
    try:
        with Producer(
            {"bootstrap.servers": kafka_bootstrap_servers, "allow.auto.create.topics": False}
        ) as p:
            for name in names:
                admin.create_topics([NewTopic(name, 1, -1)])[name].result(timeout=30)
                result = p.send(Message(topic=name, body=b"x"))  # no wait for the metadata
                assert result.status is SendStatus.SEND_OK and result.topic == name
    finally:
        admin.delete_topics(names, operation_timeout=10)


@pytest.mark.timeout(90)
def test_send_finds_a_topic_that_appears_while_it_looks(kafka_bootstrap_servers: str) -> None:
    """The topic is created only after the producer's first lookup came back empty (its
    ``metadata`` debug log says so): the send keeps looking instead of calling it unknown."""
    name = f"qa-late-{uuid.uuid4().hex}"
    looked = threading.Event()

    class SeeLookups(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if name in text and "Unknown topic" in text:
                looked.set()

    logger = logging.getLogger(f"qa.producer.{name}")
    logger.addHandler(SeeLookups())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap_servers})
    outcome: dict[str, Any] = {}
    try:
        with Producer(
            {
                "bootstrap.servers": kafka_bootstrap_servers,
                "allow.auto.create.topics": False,  # the lookup must not create it
                "topic.metadata.propagation.max.ms": 30_000,
                "debug": "metadata",
                "logger": logger,
            }
        ) as p:

            def send() -> None:
                try:
                    outcome["result"] = p.send(Message(topic=name, body=b"late"))
                except Exception as exc:
                    outcome["error"] = exc

            sender = threading.Thread(target=send)
            sender.start()
            assert looked.wait(20), "the producer never looked the topic up"
            admin.create_topics([NewTopic(name, 1, -1)])[name].result(timeout=30)
            sender.join(45)
            assert not sender.is_alive()
        assert "error" not in outcome, repr(outcome.get("error"))
        assert outcome["result"].status is SendStatus.SEND_OK
        [record] = _read(kafka_bootstrap_servers, name)
        assert record.value() == b"late"
    finally:
        admin.delete_topics([name], operation_timeout=10)


@pytest.mark.timeout(60)
def test_missing_topic_raises_unknown_topic_error_within_the_bound(
    kafka_bootstrap_servers: str,
) -> None:
    bound_ms = 2000
    name = f"qa-missing-{uuid.uuid4().hex}"
    with Producer(
        {
            "bootstrap.servers": kafka_bootstrap_servers,
            "allow.auto.create.topics": False,
            "topic.metadata.propagation.max.ms": bound_ms,
        }
    ) as p:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError) as err:
            p.send(Message(topic=name, body=b"x"))
        waited = time.monotonic() - started
    assert bound_ms / 1000 <= waited < bound_ms / 1000 + 5, f"{waited:.2f}s"
    assert name in str(err.value) and "topic.metadata.propagation.max.ms" in str(err.value)


# --------------------------------------------------------------------------------------------
# retry policy (no broker)
# --------------------------------------------------------------------------------------------


class _Script:
    """A send attempt that raises the scripted exceptions, then returns ``"ok"``."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


@pytest.mark.unit
def test_flow_control_backs_off_exponentially_with_jitter() -> None:
    sleeps: list[float] = []
    draws: list[tuple[float, float]] = []

    def high(a: float, b: float) -> float:
        draws.append((a, b))
        return b

    attempt = _Script(FlowControlled("queue full"), FlowControlled("queue full"))
    retrying = send_retrying(
        retries=2, backoff=ExponentialBackoff(), sleep=sleeps.append, uniform=high
    )
    assert retrying(attempt) == "ok"
    assert attempt.calls == 3
    assert sleeps == pytest.approx([1.2, 1.92])  # 1 and 1.6, each +20 %
    assert draws == [pytest.approx((-0.2, 0.2)), pytest.approx((-0.32, 0.32))]

    # with real randomness: within ±20 % of 1, 1.6, 2.56, 4.096
    rng = random.Random(7)
    for _ in range(50):
        sleeps.clear()
        attempt = _Script(*(FlowControlled("throttled") for _ in range(4)))
        retrying = send_retrying(
            retries=4, backoff=ExponentialBackoff(), sleep=sleeps.append, uniform=rng.uniform
        )
        assert retrying(attempt) == "ok"
        assert len(sleeps) == 4
        for got, base in zip(sleeps, (1.0, 1.6, 2.56, 4.096), strict=True):
            assert base * 0.8 - 1e-9 <= got <= base * 1.2 + 1e-9


@pytest.mark.unit
def test_flow_control_backoff_is_capped_at_max() -> None:
    backoff = ExponentialBackoff()
    assert backoff.delay(50, lambda a, b: 0.0) == pytest.approx(120.0)
    assert backoff.delay(50, lambda a, b: b) == pytest.approx(144.0)


@pytest.mark.unit
def test_ordinary_retriable_failures_retry_at_once() -> None:
    sleeps: list[float] = []
    attempt = _Script(RetriableSendFailure("leader moved"), RetriableSendFailure("leader moved"))
    retrying = send_retrying(retries=2, backoff=ExponentialBackoff(), sleep=sleeps.append)
    assert retrying(attempt) == "ok"
    assert attempt.calls == 3
    assert all(s == 0 for s in sleeps), sleeps


@pytest.mark.unit
def test_retries_stop_after_retry_times() -> None:
    sleeps: list[float] = []
    attempt = _Script(*(RetriableSendFailure(f"fail {i}") for i in range(5)))
    retrying = send_retrying(retries=2, backoff=ExponentialBackoff(), sleep=sleeps.append)
    with pytest.raises(RetriesExhaustedError, match="fail 2") as err:
        retrying(attempt)
    assert attempt.calls == 3  # 1 + retry_times_when_send_failed
    # the internal failure does not escape: the public error says how many attempts ran
    assert type(err.value) is RetriesExhaustedError and err.value.attempts == 3
    assert isinstance(err.value, AdapterError)


@pytest.mark.unit
def test_flow_control_that_outlasts_the_retries_raises_flow_control_error() -> None:
    sleeps: list[float] = []
    attempt = _Script(*(FlowControlled("queue full") for _ in range(5)))
    retrying = send_retrying(retries=2, backoff=ExponentialBackoff(), sleep=sleeps.append)
    with pytest.raises(FlowControlError, match="queue full") as err:
        retrying(attempt)
    assert type(err.value) is FlowControlError and err.value.attempts == 3
    assert len(sleeps) == 2


@pytest.mark.unit
@pytest.mark.parametrize(
    "failure",
    [
        PossiblyPersistedError("possibly persisted, not resent: Local: Message timed out"),
        MessageTooLargeError("too large"),
        UnknownTopicError("no such topic"),
    ],
    ids=["possibly-persisted", "too-large", "unknown-topic"],
)
def test_non_retriable_failures_are_never_retried(failure: Exception) -> None:
    sleeps: list[float] = []
    attempt = _Script(failure)
    retrying = send_retrying(retries=5, backoff=ExponentialBackoff(), sleep=sleeps.append)
    with pytest.raises(type(failure)):
        retrying(attempt)
    assert attempt.calls == 1
    assert sleeps == []


@pytest.mark.reliability
@pytest.mark.timeout(120)
def test_producer_recovers_when_the_broker_comes_back(
    embedded_kafka: Any, kafka_bootstrap_servers: str, kafka_topic: str
) -> None:
    """An outage is reported while it lasts, and sends work again once the broker is back:
    "no broker reachable" is not a permanent state of the producer."""
    with Producer(
        {"bootstrap.servers": kafka_bootstrap_servers, "reconnect.backoff.max.ms": 500},
        send_msg_timeout_ms=2000,
    ) as p:
        assert p.send(Message(topic=kafka_topic, body=b"before")).status is SendStatus.SEND_OK
        embedded_kafka.kill()
        with pytest.raises(KafkaClientError):
            p.send(Message(topic=kafka_topic, body=b"during"))
        embedded_kafka.restart()

        deadline = time.monotonic() + 40
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = p.send(Message(topic=kafka_topic, body=b"after"))
                break
            except KafkaClientError as exc:
                last = exc
                time.sleep(0.5)
        else:
            raise AssertionError(f"sends still fail after the broker is back: {last!r}")
        assert result.status is SendStatus.SEND_OK
    # "during" may or may not be there: its outcome was reported as possibly persisted
    values = [r.value() for r in _read(kafka_bootstrap_servers, kafka_topic, until=b"after")]
    assert values[0] == b"before" and values[-1] == b"after"
