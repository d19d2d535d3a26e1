"""``Producer`` over a scripted stand-in for ``confluent_kafka.Producer`` (no broker).

The stand-in (``ProducerSettings.client_factory``) decides, per ``produce()`` call, whether
the local queue is full (``BufferError``) and what the delivery report says; its ``poll``
runs the reports on whichever thread polls (the producer's poll thread).  That makes the
retry paths deterministic: resends at once after a definite failure, back-off after flow
control, no resend of what may be persisted, the public errors when retries run out, the
metadata wait for a topic that is not visible yet, and the threads all this runs on.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st

import adapter.errors
from adapter.clients.producer import Producer, SendResult, SendStatus
from adapter.constants import PROPERTY_UNIQ_KEY
from adapter.core.backoff import ExponentialBackoff
from adapter.core.codec import encode_message_headers
from adapter.core.message import Message
from adapter.embedded import EmbeddedKafkaError
from adapter.errors import (
    AdapterError,
    AuthenticationError,
    FlowControlError,
    PossiblyPersistedError,
    RetriesExhaustedError,
    SendError,
    SendTimeoutError,
    UnknownTopicError,
)

pytestmark = pytest.mark.unit

RETRIABLE = KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, retriable=True)
THROTTLED = KafkaError(KafkaError.THROTTLING_QUOTA_EXCEEDED)
TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT)
HOLD = "hold"  # a delivery report that never comes
FAST_BACKOFF = ExponentialBackoff(initial_s=0.05, multiplier=2.0, jitter=0.0, max_s=0.2)


# --------------------------------------------------------------------------------------------
# the stand-in client
# --------------------------------------------------------------------------------------------


class FakeRecord:
    """What a delivery report carries (``confluent_kafka.Message``'s accessors)."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes, key: Any) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._value, self._key = value, key

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> Any:
        return self._key


@dataclass
class Produced:
    topic: str
    value: bytes
    key: Any
    partition: int
    headers: list[tuple[str, bytes | None]]
    thread: threading.Thread
    threads_alive: int
    at: float


@dataclass
class TopicMeta:
    error: Any = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta]


@dataclass
class FakeKafka:
    """Scripted ``confluent_kafka.Producer``: ``full`` says which ``produce()`` calls (0-based,
    counting every call) raise ``BufferError``; ``reports`` what the n-th accepted record's
    delivery report says (``None``: success, a ``KafkaError``, or ``HOLD``: never)."""

    full: Callable[[int], bool] = lambda call: False
    reports: list[Any] = field(default_factory=list)
    #: topic -> how many lookups find nothing before it shows (absent: always there)
    visible_after: dict[str, int] = field(default_factory=dict)
    #: topic -> the error every lookup returns
    topic_errors: dict[str, KafkaError] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    produced: list[Produced] = field(default_factory=list)
    lookups: dict[str, int] = field(default_factory=dict)
    delivered_on: list[threading.Thread] = field(default_factory=list)
    delivered_at: list[float] = field(default_factory=list)
    calls: int = 0
    #: reports wait in ``deferred`` until ``release()`` (the broker has not answered yet)
    defer: bool = False
    deferred: list[tuple[Any, Any, FakeRecord]] = field(default_factory=list)
    _ready: list[tuple[Any, Any, FakeRecord]] = field(default_factory=list)
    _held: int = 0
    _offsets: dict[int, int] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, config: dict[str, Any]) -> FakeKafka:  # the client_factory
        self.config = config
        return self

    def produce(  # noqa: PLR0917 - confluent-kafka's positional signature
        self,
        topic: str,
        value: bytes,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if not isinstance(partition, int):  # what confluent-kafka's argument parsing refuses
            raise TypeError(f"'{type(partition).__name__}' object cannot be interpreted as an int")
        if key is not None and not isinstance(key, str | bytes):
            raise TypeError(f"a bytes-like object is required, not '{type(key).__name__}'")
        with self._cond:
            call = self.calls
            self.calls += 1
            if self.full(call):
                raise BufferError("Local: Queue full")
            n = len(self.produced)
            self.produced.append(
                Produced(
                    topic,
                    value,
                    key,
                    partition,
                    list(headers or []),
                    threading.current_thread(),
                    threading.active_count(),
                    time.monotonic(),
                )
            )
            report = self.reports[n] if n < len(self.reports) else None
            if isinstance(report, str):  # HOLD
                self._held += 1
                return
            part = max(partition, 0)
            offset = self._offsets.get(part, 0)
            self._offsets[part] = offset + 1
            record = FakeRecord(topic, part, offset, value, key)
            if self.defer:
                self.deferred.append((callback or on_delivery, report, record))
                return
            self._ready.append((callback or on_delivery, report, record))
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._ready.extend(self.deferred)
            self.deferred.clear()
            self._cond.notify_all()

    def poll(self, timeout: float | None = None) -> int:
        with self._cond:
            if not self._ready and timeout:
                self._cond.wait(timeout)
            batch, self._ready = self._ready, []
        for cb, err, record in batch:
            self.delivered_on.append(threading.current_thread())
            self.delivered_at.append(time.monotonic())
            cb(err, record)
        return len(batch)

    def flush(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 60)
        while self._ready and time.monotonic() < deadline:
            self.poll(0.01)
        return len(self)

    def __len__(self) -> int:
        return len(self._ready) + len(self.deferred) + self._held

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Metadata:
        assert topic is not None
        seen = self.lookups[topic] = self.lookups.get(topic, 0) + 1
        if topic in self.topic_errors:
            return Metadata({topic: TopicMeta(self.topic_errors[topic])})
        if seen <= self.visible_after.get(topic, 0):
            return Metadata({topic: TopicMeta(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))})
        return Metadata({topic: TopicMeta()})


class Outcomes:
    """A send callback that remembers every call and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[SendResult | None, Exception | None]] = []
        self.threads: list[threading.Thread] = []
        self._cond = threading.Condition()

    def __call__(self, result: SendResult | None, exc: Exception | None) -> None:
        with self._cond:
            self.calls.append((result, exc))
            self.threads.append(threading.current_thread())
            self._cond.notify_all()

    def wait(self, count: int = 1, timeout: float = 10.0) -> list[tuple[Any, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.calls) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{len(self.calls)} of {count} callbacks in {timeout}s"
                self._cond.wait(left)
            return list(self.calls)


class Sleeps:
    """An injected ``sleep`` that records how long and on which thread (and does not sleep)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, threading.Thread]] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append((seconds, threading.current_thread()))


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def producer(fake: FakeKafka, config: dict[str, Any] | None = None, **options: Any) -> Producer:
    return Producer(
        {"bootstrap.servers": "fake:9092", **(config or {})}, client_factory=fake, **options
    )


def _public(exc: BaseException) -> bool:
    """Raised by the adapter, public, documented: an AdapterError from adapter.errors."""
    cls = type(exc)
    return (
        isinstance(exc, AdapterError)
        and cls.__module__ == "adapter.errors"
        and not cls.__name__.startswith("_")
        and getattr(adapter.errors, cls.__name__) is cls
        and bool(cls.__doc__)
    )


# --------------------------------------------------------------------------------------------
# resends
# --------------------------------------------------------------------------------------------


def test_definite_failure_is_resent_at_once_from_the_callback_thread(sleeps: Sleeps) -> None:
    fake = FakeKafka(reports=[RETRIABLE, RETRIABLE])
    got = Outcomes()
    with producer(fake, sleep=sleeps) as p:
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(result, exc)] = got.wait()
    assert exc is None and result is not None and result.status is SendStatus.SEND_OK
    assert len(fake.produced) == 3
    first, *resends = fake.produced
    assert all(r.headers == first.headers for r in resends), "a resend keeps its UNIQ_KEY"
    assert dict(first.headers)[PROPERTY_UNIQ_KEY] == result.msg_id.encode()
    # each resend is produced by the thread that served the failed report (the poll thread,
    # or the sending thread serving reports inline), at once
    assert [r.thread for r in resends] == fake.delivered_on[:2], "resent on the callback thread"
    assert sleeps.calls == []


def test_flow_controlled_report_is_resent_after_backoff_by_the_poll_thread(
    sleeps: Sleeps,
) -> None:
    """Broker throttling: the resend waits its back-off on the heap of due resends, served by
    the poll thread -- no timer thread per resend, no sleep."""
    fake = FakeKafka(reports=[THROTTLED, THROTTLED])
    got = Outcomes()
    with producer(fake, sleep=sleeps, backoff=FAST_BACKOFF) as p:
        alive = threading.active_count()
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(result, exc)] = got.wait()
    assert exc is None and result is not None
    assert len(fake.produced) == 3
    poll_thread = got.threads[0]
    for n, (waited, resend) in enumerate(zip((0.05, 0.1), fake.produced[1:], strict=True)):
        assert resend.thread is poll_thread
        assert resend.threads_alive <= alive, "a resend started a thread"
        assert resend.at - fake.delivered_at[n] >= waited - 0.01, "resent before its back-off"
    assert sleeps.calls == []


def test_resend_into_a_full_queue_is_scheduled_never_slept_on_the_callback_thread(
    sleeps: Sleeps,
) -> None:
    """The resend after a definite failure runs on the callback thread; when the local queue
    is full there it goes on the heap: sleeping would stop the reports that drain the queue."""
    fake = FakeKafka(reports=[RETRIABLE], full=lambda call: call in (1, 2))
    got = Outcomes()
    with producer(
        fake, sleep=sleeps, backoff=FAST_BACKOFF, retry_times_when_send_async_failed=4
    ) as p:
        alive = threading.active_count()
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(result, exc)] = got.wait()
    assert exc is None and result is not None
    assert fake.calls == 4 and len(fake.produced) == 2
    assert fake.produced[1].thread is got.threads[0]
    assert fake.produced[1].threads_alive <= alive
    assert [thread for _, thread in sleeps.calls] == [], "slept on the callback thread"


def test_send_async_inside_a_callback_never_sleeps_on_a_full_queue(sleeps: Sleeps) -> None:
    fake = FakeKafka(full=lambda call: call in (1, 2, 3))
    got = Outcomes()
    with producer(
        fake, sleep=sleeps, backoff=FAST_BACKOFF, retry_times_when_send_async_failed=5
    ) as p:

        def chain(result: SendResult | None, exc: Exception | None) -> None:
            got(result, exc)
            p.send_async(Message(topic="orders", body=b"second"), got)  # queue full here

        p.send_async(Message(topic="orders", body=b"first"), chain)
        calls = got.wait(2)
    assert [exc for _, exc in calls] == [None, None]
    assert [r.value for r in fake.produced] == [b"first", b"second"]
    assert sleeps.calls == []


def test_full_queue_at_send_backs_off_on_the_callers_thread(sleeps: Sleeps) -> None:
    fake = FakeKafka(full=lambda call: call in (0, 1))
    got = Outcomes()
    with producer(fake, sleep=sleeps, retry_times_when_send_async_failed=3) as p:
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(result, exc)] = got.wait()
    assert exc is None and result is not None
    assert [thread for _, thread in sleeps.calls] == [threading.current_thread()] * 2
    assert [round(s, 6) for s, _ in sleeps.calls] == pytest.approx([1.0, 1.6], rel=0.2)


def test_possibly_persisted_is_never_resent(sleeps: Sleeps) -> None:
    fake = FakeKafka(reports=[TIMED_OUT, TIMED_OUT])
    got = Outcomes()
    with producer(fake, sleep=sleeps) as p:
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(_, exc)] = got.wait()
        with pytest.raises(PossiblyPersistedError):
            p.send(Message(topic="orders", body=b"y"))
    assert isinstance(exc, PossiblyPersistedError)
    assert len(fake.produced) == 2  # one attempt each
    assert sleeps.calls == []


# --------------------------------------------------------------------------------------------
# errors when retries run out
# --------------------------------------------------------------------------------------------


def test_async_retries_run_out_with_a_public_retries_exhausted_error() -> None:
    fake = FakeKafka(reports=[RETRIABLE] * 3)
    got = Outcomes()
    with producer(fake, retry_times_when_send_async_failed=2) as p:
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(result, exc)] = got.wait()
    assert result is None
    assert isinstance(exc, RetriesExhaustedError) and not isinstance(exc, FlowControlError)
    assert _public(exc) and isinstance(exc, SendError)
    assert exc.attempts == 3 and len(fake.produced) == 3
    assert exc.kafka_error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert exc.raw_message is not None and exc.raw_message.value() == b"x"
    assert "orders" in str(exc)


def test_sync_retries_run_out_with_a_public_retries_exhausted_error() -> None:
    fake = FakeKafka(reports=[RETRIABLE] * 3)
    with (
        producer(fake, retry_times_when_send_failed=2) as p,
        pytest.raises(RetriesExhaustedError) as err,
    ):
        p.send(Message(topic="orders", body=b"x"))
    assert _public(err.value)
    assert err.value.attempts == 3 and len(fake.produced) == 3
    assert err.value.kafka_error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert err.value.raw_message is not None


def test_throttling_that_outlasts_the_retries_is_a_flow_control_error() -> None:
    fake = FakeKafka(reports=[THROTTLED] * 3)
    got = Outcomes()
    with producer(fake, backoff=FAST_BACKOFF, retry_times_when_send_async_failed=2) as p:
        p.send_async(Message(topic="orders", body=b"x"), got)
        [(_, exc)] = got.wait()
    assert isinstance(exc, FlowControlError) and _public(exc)
    assert exc.attempts == 3
    assert exc.kafka_error.code() == KafkaError.THROTTLING_QUOTA_EXCEEDED


@pytest.mark.parametrize("how", ["send", "send_async", "send_batch"])
def test_a_queue_that_stays_full_is_a_flow_control_error(sleeps: Sleeps, how: str) -> None:
    fake = FakeKafka(full=lambda call: True)
    with producer(fake, sleep=sleeps, retry_times_when_send_failed=2) as p:
        msg = Message(topic="orders", body=b"x")
        with pytest.raises(FlowControlError) as err:
            if how == "send":
                p.send(msg)
            elif how == "send_async":
                p.send_async(msg, Outcomes())
            else:
                p.send_batch([msg])
    assert _public(err.value)
    assert err.value.kafka_error.code() == KafkaError._QUEUE_FULL
    assert err.value.attempts == 3 and fake.calls == 3 and fake.produced == []
    assert [thread for _, thread in sleeps.calls] == [threading.current_thread()] * 2


@pytest.mark.parametrize("how", ["send", "send_batch"])
def test_send_timeout_is_a_public_possibly_persisted_timeout_error(how: str) -> None:
    fake = FakeKafka(reports=[HOLD])
    with producer(fake) as p:
        started = time.monotonic()
        with pytest.raises(SendTimeoutError) as err:
            if how == "send":
                p.send(Message(topic="orders", body=b"x"), timeout=0.2)
            else:
                p.send_batch([Message(topic="orders", body=b"x")], timeout=0.1)
        assert time.monotonic() - started < 5
        assert p.shutdown(0.1) == 1
    exc = err.value
    assert _public(exc)
    assert isinstance(exc, TimeoutError)  # still a builtin TimeoutError for old callers
    assert isinstance(exc, PossiblyPersistedError) and isinstance(exc, SendError)
    assert "orders" in str(exc)
    assert len(fake.produced) == 1, "a send that may be persisted is not resent"


def test_shutdown_fails_the_resends_still_waiting_for_their_backoff() -> None:
    fake = FakeKafka(reports=[THROTTLED])
    got = Outcomes()
    p = producer(fake, backoff=ExponentialBackoff(initial_s=30.0, jitter=0.0)).start()
    p.send_async(Message(topic="orders", body=b"x"), got)
    deadline = time.monotonic() + 5
    while not fake.delivered_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.shutdown(0.2) == 1
    [(result, exc)] = got.wait()
    assert result is None and isinstance(exc, SendError) and _public(exc)
    assert "shut down" in str(exc)
    assert len(fake.produced) == 1


def test_embedded_kafka_error_is_an_adapter_error() -> None:
    assert issubclass(EmbeddedKafkaError, AdapterError)
    assert issubclass(EmbeddedKafkaError, RuntimeError)


def test_new_send_errors_are_documented_public_classes() -> None:
    for cls in (RetriesExhaustedError, FlowControlError, SendTimeoutError):
        assert issubclass(cls, SendError) and issubclass(cls, AdapterError)
        assert cls.__module__ == "adapter.errors" and cls.__doc__
    assert issubclass(SendTimeoutError, TimeoutError)
    assert issubclass(SendTimeoutError, PossiblyPersistedError)
    assert issubclass(FlowControlError, RetriesExhaustedError)


# --------------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------------


def test_callbacks_run_on_the_poll_thread_also_during_flush() -> None:
    """Reports are served by the poll thread, or inline by the thread that keeps calling
    ``send_async``; never by a thread that only waits in ``flush``."""
    fake = FakeKafka()
    got = Outcomes()
    with producer(fake) as p:
        sender = threading.Thread(
            target=lambda: [
                p.send_async(Message(topic="orders", body=b"%d" % i), got) for i in range(50)
            ]
        )
        sender.start()
        sender.join()
        assert p.flush(5) == 0
        assert len(got.calls) == 50
    caller = threading.current_thread()
    assert caller not in got.threads
    assert set(got.threads) <= {sender, *[t for t in got.threads if t.name == "rmq-producer-poll"]}
    assert set(fake.delivered_on) == set(got.threads)


def test_a_sender_serves_reports_inline_and_the_poll_thread_serves_what_is_left() -> None:
    """While a thread keeps sending, the reports ready at each ``send_async`` are served
    there; reports that come after the last send are served by the poll thread."""
    fake = FakeKafka(defer=True)
    got = Outcomes()
    caller = threading.current_thread()
    with producer(fake) as p:
        p.send_async(Message(topic="orders", body=b"a"), got)
        fake.release()  # the report is ready before the next send: that send serves it
        p.send_async(Message(topic="orders", body=b"b"), got)
        [(result, _)] = got.wait(1)
        assert got.threads == [caller] and result is not None
        fake.release()  # the sender has stopped: the poll thread serves this one
        got.wait(2)
    assert got.threads[1].name == "rmq-producer-poll"


# --------------------------------------------------------------------------------------------
# records: ids and headers
# --------------------------------------------------------------------------------------------

_ID = re.compile(r"^[0-9A-F]{32}$")
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=40, deadline=None)
@given(
    properties=st.dictionaries(_text.filter(bool), _text, max_size=3),
    tags=st.none() | _text,
    keys=st.none() | _text | st.lists(_text, max_size=3),
)
def test_headers_are_what_the_codec_encodes(
    properties: dict[str, str], tags: str | None, keys: Any
) -> None:
    fake = FakeKafka()
    got = Outcomes()
    msg = Message(topic="orders", body=b"x", properties=properties, tags=tags, keys=keys)
    with producer(fake) as p:
        p.send_async(msg, got)
        [(result, _)] = got.wait()
        sync = p.send(msg)
    assert result is not None
    assert fake.produced[0].headers == encode_message_headers(msg, result.msg_id)
    assert fake.produced[1].headers == encode_message_headers(msg, sync.msg_id)


def test_message_ids_are_unique_upper_hex_with_one_process_prefix() -> None:
    fake = FakeKafka()
    got = Outcomes()
    with producer(fake) as p:
        for i in range(20):
            p.send_async(Message(topic="orders", body=b"%d" % i), got)
        got.wait(20)
        ids = [r.msg_id for r, _ in got.calls if r is not None] + [
            p.send(Message(topic="orders", body=b"s")).msg_id
        ]
    assert all(_ID.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert len({i[:20] for i in ids}) == 1
    counters = sorted(int(i[20:], 16) for i in ids)
    assert counters == list(range(counters[0], counters[0] + len(ids)))


def test_result_carries_partition_offset_and_logical_topic() -> None:
    fake = FakeKafka()
    got = Outcomes()
    with producer(fake) as p:
        p.send_async(Message(topic="orders", body=b"a", partition=2), got)
        p.send_async(Message(topic="orders", body=b"b", partition=2), got)
        got.wait(2)
    results = [r for r, _ in got.calls]
    assert results == [
        SendResult(SendStatus.SEND_OK, results[0].msg_id, "orders", 2, 0),  # type: ignore[union-attr]
        SendResult(SendStatus.SEND_OK, results[1].msg_id, "orders", 2, 1),  # type: ignore[union-attr]
    ]
    assert [r.partition for r in fake.produced] == [2, 2]


def test_bad_partition_or_key_is_invalid_input() -> None:
    fake = FakeKafka()
    with producer(fake) as p:
        p.send(Message(topic="orders", body=b"warm-up"))
        for bad in (
            Message(topic="orders", body=b"x", partition="1"),  # type: ignore[arg-type]
            Message(topic="orders", body=b"x", sharding_key=5),  # type: ignore[arg-type]
        ):
            with pytest.raises(adapter.errors.InvalidInputError):
                p.send_async(bad, Outcomes())
            with pytest.raises(adapter.errors.InvalidInputError):
                p.send(bad)


# --------------------------------------------------------------------------------------------
# topics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["send", "send_async"])
def test_topic_that_shows_up_late_in_metadata_is_found(how: str) -> None:
    """Kafka's metadata lags topic creation: not found at first is not yet "unknown"."""
    fake = FakeKafka(visible_after={"fresh": 2})
    got = Outcomes()
    with producer(fake) as p:
        if how == "send":
            assert p.send(Message(topic="fresh", body=b"x")).status is SendStatus.SEND_OK
        else:
            p.send_async(Message(topic="fresh", body=b"x"), got)
            [(_, exc)] = got.wait()
            assert exc is None
    assert fake.lookups["fresh"] == 3


def test_leader_not_available_means_the_topic_exists() -> None:
    fake = FakeKafka(topic_errors={"electing": KafkaError(KafkaError.LEADER_NOT_AVAILABLE)})
    with producer(fake) as p:
        assert p.send(Message(topic="electing", body=b"x")).status is SendStatus.SEND_OK
    assert fake.lookups["electing"] == 1


def test_missing_topic_is_unknown_once_the_propagation_bound_has_passed() -> None:
    bound_ms = 400
    fake = FakeKafka(visible_after={"missing": 10**9})
    with producer(fake, {"topic.metadata.propagation.max.ms": bound_ms}) as p:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError) as err:
            p.send(Message(topic="missing", body=b"x"))
        waited = time.monotonic() - started
        assert bound_ms / 1000 <= waited < bound_ms / 1000 + 2
        assert fake.lookups["missing"] >= 3
        assert "missing" in str(err.value) and str(bound_ms) in str(err.value)
        assert err.value.kafka_error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        # the bound runs from the first use, as librdkafka's does: later sends look once
        looked = fake.lookups["missing"]
        started = time.monotonic()
        with pytest.raises(UnknownTopicError):
            p.send_async(Message(topic="missing", body=b"x"), Outcomes())
        assert time.monotonic() - started < 0.3
        assert fake.lookups["missing"] == looked + 1
    assert fake.produced == []


def test_unauthorized_topic_fails_at_once() -> None:
    fake = FakeKafka(topic_errors={"secret": KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)})
    with producer(fake) as p, pytest.raises(AuthenticationError):
        p.send(Message(topic="secret", body=b"x"))
    assert fake.lookups["secret"] == 1


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    """Every producer these tests start is shut down with its poll thread."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stray = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not stray:
            return
        time.sleep(0.01)
    raise AssertionError(f"threads left running: {stray}")


def test_sends_linger_5_ms_unless_configured_and_a_sync_send_flushes_its_record() -> None:
    """``linger.ms`` is librdkafka's and Kafka's default (at 0 a steady stream was a request
    per record); a synchronous send does not wait it out: it flushes its own record."""
    fake = FakeKafka(defer=True)  # the report comes only once the record is flushed
    flushed_on: list[threading.Thread] = []
    real_flush = fake.flush

    def flush(timeout: float | None = None) -> int:
        flushed_on.append(threading.current_thread())
        fake.release()
        return real_flush(timeout)

    fake.flush = flush  # type: ignore[method-assign]
    with producer(fake) as p:
        assert fake.config["linger.ms"] == 5
        result = p.send(Message(topic="orders", body=b"x"), timeout=5)
    assert result.status is SendStatus.SEND_OK
    assert flushed_on and flushed_on[0] is threading.current_thread()
    with producer(FakeKafka(), {"linger.ms": 0}) as p:
        assert p.client.config["linger.ms"] == 0


class _FixedClock:
    """A wall clock that stands still (the delay warnings compare against ``now_ms``)."""

    def __init__(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return time.monotonic()


def test_a_clamped_level_and_a_past_delivery_time_are_logged_once_per_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``delay_time_level=99`` became 2 h without a word; a warning per send would flood a
    loop that sends many such messages, so each kind is logged once per producer."""
    now = 1_800_000_000_000
    fake = FakeKafka()
    with (
        caplog.at_level(logging.WARNING, "adapter.producer"),
        producer(fake, clock=_FixedClock(now), auto_create_delay_topics=False) as p,
    ):
        for _ in range(3):
            p.send(Message(topic="orders", body=b"x", delay_time_level=99))
            p.send(Message(topic="orders", body=b"x", deliver_time_ms=now - 1500))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [line for line in lines if "delay_time_level=99" in line] == [
        "delay_time_level=99 is above the highest level 18 (2h); clamped to 18 "
        "(logged once per producer)"
    ]
    assert [line for line in lines if "in the past" in line] == [
        "deliver_time_ms=1799999998500 is 1500 ms in the past; delivered at once "
        "(logged once per producer)"
    ]
    assert len(fake.produced) == 6  # kept, as RocketMQ keeps them
    assert fake.produced[0].topic.endswith("L18-2h")
