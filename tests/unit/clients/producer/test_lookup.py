"""The producer's topic lookup (``adapter.clients.producer.lookup``) over a stand-in client:
the metadata slices, the wait for a topic to become visible, and the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from adapter.clients.producer.lookup import (
    DEFAULT_PROPAGATION_MS,
    LOOKUP_SLICE_S,
    MIN_SLICE_S,
    TRANSPORT_TRIES,
    TopicLookup,
    lookup_slice,
    propagation_s,
)
from adapter.core import naming
from adapter.core.delay import DelayLevels
from adapter.errors import (
    AdapterError,
    AuthenticationError,
    BrokerUnavailableError,
    UnknownTopicError,
)
from tests.unit.kafka_fakes import FakeClock

pytestmark = pytest.mark.unit


@dataclass
class TopicMeta:
    error: Any = None


@dataclass
class Metadata:
    topics: dict[str, TopicMeta]


@dataclass
class FakeClient:
    """``list_topics`` as librdkafka answers it: ``answers`` are used in turn (then the
    topic is there); an exception among them is raised."""

    answers: list[Any] = field(default_factory=list)
    asked: list[tuple[str, float]] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Metadata:
        assert topic is not None
        self.asked.append((topic, timeout))
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, str):  # "absent"
            return Metadata({})
        return Metadata({topic: TopicMeta(answer)})


def lookup(
    client: FakeClient,
    propagation_ms: int = 5_000,
    raise_fatal: Any = None,
    clock: FakeClock | None = None,
) -> TopicLookup:
    if clock is None:
        return TopicLookup(
            {"topic.metadata.propagation.max.ms": propagation_ms},
            send_msg_timeout_ms=30_000,
            client=lambda: client,
            raise_fatal=raise_fatal or (lambda: None),
        )
    return TopicLookup(
        {"topic.metadata.propagation.max.ms": propagation_ms},
        send_msg_timeout_ms=30_000,
        client=lambda: client,
        raise_fatal=raise_fatal or (lambda: None),
        clock=clock,
    )


@dataclass
class SlowClient(FakeClient):
    """A :class:`FakeClient` whose every metadata request takes ``step_s`` on ``clock``."""

    clock: FakeClock = field(default_factory=FakeClock)
    step_s: float = 0.0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Metadata:
        self.clock.advance(self.step_s)
        return super().list_topics(topic, timeout)


UNKNOWN = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)


@pytest.mark.parametrize(
    ("bound", "elapsed", "expected"),
    [
        (30.0, 0.0, LOOKUP_SLICE_S),
        (30.0, 29.5, 0.5),
        (30.0, 30.0, MIN_SLICE_S),
        (30.0, 45.0, MIN_SLICE_S),
        (0.2, 0.0, 0.2),
    ],
)
def test_a_lookup_asks_in_slices_of_at_most_a_second_within_its_bound(
    bound: float, elapsed: float, expected: float
) -> None:
    assert lookup_slice(bound, elapsed) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, DEFAULT_PROPAGATION_MS / 1000),
        ({"topic.metadata.propagation.max.ms": 2500}, 2.5),
        ({"topic.metadata.propagation.max.ms": "700"}, 0.7),
        ({"topic.metadata.propagation.max.ms": -5}, 0.0),
        ({"topic.metadata.propagation.max.ms": "soon"}, DEFAULT_PROPAGATION_MS / 1000),
    ],
)
def test_propagation_bound_from_the_config(config: dict[str, Any], expected: float) -> None:
    assert propagation_s(config) == pytest.approx(expected)


def test_a_visible_topic_is_looked_up_once_then_cached() -> None:
    client = FakeClient()
    topics = lookup(client)
    assert topics.kafka_topic("orders") == naming.to_kafka("orders")
    assert topics.kafka_topic("orders") == naming.to_kafka("orders")
    assert client.asked == [(naming.to_kafka("orders"), LOOKUP_SLICE_S)]
    assert topics.topics == {"orders": naming.to_kafka("orders")}


def test_a_topic_not_visible_yet_is_looked_up_again_until_it_shows() -> None:
    client = FakeClient(answers=[UNKNOWN, "absent", UNKNOWN])
    topics = lookup(client)
    assert topics.kafka_topic("late") == naming.to_kafka("late")
    assert len(client.asked) == 4


def test_a_leader_being_elected_counts_as_there() -> None:
    client = FakeClient(answers=[KafkaError(KafkaError.LEADER_NOT_AVAILABLE)])
    assert lookup(client).kafka_topic("orders") == naming.to_kafka("orders")
    assert len(client.asked) == 1


def test_a_topic_never_visible_is_unknown_after_the_propagation_bound() -> None:
    client = FakeClient(answers=[UNKNOWN] * 1000)
    topics = lookup(client, propagation_ms=0)
    with pytest.raises(UnknownTopicError, match=r"topic\.metadata\.propagation\.max\.ms=0"):
        topics.kafka_topic("missing")
    assert len(client.asked) == 1
    assert "missing" not in topics.topics


def test_the_propagation_bound_is_measured_on_the_producers_clock() -> None:
    """Every request takes 4 s on the injected clock (no real time): the third ends past the
    10 s bound, and the lookup gives up then, saying how long it looked."""
    clock = FakeClock()
    client = SlowClient(answers=[UNKNOWN] * 1000, clock=clock, step_s=4.0)
    topics = lookup(client, propagation_ms=10_000, clock=clock)
    with pytest.raises(UnknownTopicError, match=r"metadata 12\.0s after its first use"):
        topics.kafka_topic("missing")
    assert len(client.asked) == 3


def test_a_lookup_slice_shrinks_with_the_time_its_lookup_took_on_the_clock() -> None:
    """Slices that ran out (14.75 s each on the clock) leave less of the request's 30 s bound:
    the last one asks for no more than what is left."""
    clock = FakeClock()
    timeout = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    client = SlowClient(answers=[timeout] * 1000, clock=clock, step_s=29.5 / 2)
    with pytest.raises(AdapterError):
        lookup(client, clock=clock).kafka_topic("slow")
    assert [round(s, 2) for _, s in client.asked] == [LOOKUP_SLICE_S, LOOKUP_SLICE_S, 0.5]


def test_a_timed_out_slice_is_asked_again() -> None:
    client = FakeClient(answers=[KafkaException(KafkaError(KafkaError._TIMED_OUT))] * 2)
    assert lookup(client).kafka_topic("orders") == naming.to_kafka("orders")
    assert len(client.asked) == 3


def test_a_fatal_error_ends_the_lookup_at_once() -> None:
    refused = AuthenticationError("credentials refused")
    client = FakeClient(answers=[KafkaException(KafkaError(KafkaError._TIMED_OUT))] * 50)

    def raise_fatal() -> None:
        raise refused

    with pytest.raises(AuthenticationError) as info:
        lookup(client, raise_fatal=raise_fatal).kafka_topic("orders")
    assert info.value is refused
    assert len(client.asked) == 1


def test_a_transport_failure_waits_for_the_authentication_error_reported_after_it() -> None:
    """Wrong credentials: librdkafka fails the metadata request with ``_TRANSPORT`` and
    reports the authentication error to ``error_cb`` on the producer's poll thread, which may
    come a moment later.  The lookup asks again briefly and raises that error, not an
    outage."""
    refused = AuthenticationError("credentials refused")
    reported: list[Exception] = []
    transport = KafkaException(KafkaError(KafkaError._TRANSPORT))
    client = FakeClient(answers=[transport] * 50)

    def raise_fatal() -> None:
        if reported:
            raise reported[0]
        if client.asked:  # the poll thread serves the error after the first failure
            reported.append(refused)

    with pytest.raises(AuthenticationError) as info:
        lookup(client, raise_fatal=raise_fatal).kafka_topic("orders")
    assert info.value is refused


def test_slices_that_ran_out_first_do_not_use_up_the_transport_tries() -> None:
    """Two slices time out, then the transport fails (refused credentials, reported on the
    poll thread a moment later): the lookup still asks again and raises that error."""
    refused = AuthenticationError("credentials refused")
    timeout = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    transport = KafkaException(KafkaError(KafkaError._TRANSPORT))
    client = FakeClient(answers=[timeout, timeout] + [transport] * 50)
    reported: list[Exception] = []

    def raise_fatal() -> None:
        if reported:
            raise reported[0]
        if len(client.asked) >= 3:  # served after the first transport failure
            reported.append(refused)

    with pytest.raises(AuthenticationError) as info:
        lookup(client, raise_fatal=raise_fatal).kafka_topic("orders")
    assert info.value is refused


def test_a_transport_failure_with_no_error_reported_is_an_outage_after_a_few_tries() -> None:
    client = FakeClient(answers=[KafkaException(KafkaError(KafkaError._TRANSPORT))] * 50)
    with pytest.raises(BrokerUnavailableError):
        lookup(client).kafka_topic("orders")
    assert 1 < len(client.asked) <= TRANSPORT_TRIES


def test_schedule_topics_are_mapped_without_a_lookup() -> None:
    client = FakeClient()
    topics = lookup(client)
    logical = naming.schedule_topic(1, DelayLevels.DEFAULT)
    assert topics.schedule_topic(logical) == naming.to_kafka(logical)
    assert client.asked == []
