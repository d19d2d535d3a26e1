"""The topic lookup of a producer: the Kafka topic of a user topic, checked to exist once.

A topic that is not visible yet is looked up again until ``topic.metadata.propagation.max.ms``
(librdkafka's bound, 30 s by default) has passed since the producer first met it, and only
then is an :class:`UnknownTopicError` (Kafka's metadata lags topic creation).  Each lookup
asks for metadata in slices of a second, so that a fatal error (refused credentials) ends
the wait at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException

from adapter.constants import MAX_BLOCK_MS
from adapter.core import naming
from adapter.core.clock import Clock
from adapter.errors import AdapterError, BrokerUnavailableError, UnknownTopicError
from adapter.io.clock import SYSTEM_CLOCK
from adapter.io.errors import client_error, permission_hint

#: librdkafka's default ``topic.metadata.propagation.max.ms``.
DEFAULT_PROPAGATION_MS = 30_000
#: A topic lookup asks for metadata in slices this long (see :meth:`TopicLookup.lookup`).
LOOKUP_SLICE_S = 1.0
#: The shortest slice (a lookup whose bound is all but spent still asks once).
MIN_SLICE_S = 0.01
#: A metadata request that failed on the transport is made this many times in all: refused
#: credentials fail it so, and librdkafka reports why to ``error_cb`` on the producer's poll
#: thread, which may come a moment after the failure (then the next try raises that error).
TRANSPORT_TRIES = 3
#: The wait before asking again after a transport failure.
TRANSPORT_WAIT_S = 0.2
UNKNOWN_TOPIC_CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)


class NotYetVisible(AdapterError):
    """A topic lookup to repeat (never escapes :meth:`TopicLookup.kafka_topic`)."""

    def __init__(self, kafka_error: Any) -> None:
        super().__init__(str(kafka_error))
        self.kafka_error = kafka_error


def propagation_s(config: Mapping[str, Any]) -> float:
    """``topic.metadata.propagation.max.ms`` of a client config, in seconds (librdkafka's
    default when it is missing or not a number)."""
    value = config.get("topic.metadata.propagation.max.ms", DEFAULT_PROPAGATION_MS)
    try:
        return max(int(value), 0) / 1000
    except (TypeError, ValueError):
        return DEFAULT_PROPAGATION_MS / 1000


def lookup_slice(bound_s: float, elapsed_s: float) -> float:
    """How long the next metadata request of a lookup may take: a slice of at most
    :data:`LOOKUP_SLICE_S`, never past the lookup's bound (but at least :data:`MIN_SLICE_S`)."""
    return min(LOOKUP_SLICE_S, max(bound_s - elapsed_s, MIN_SLICE_S))


def _code(exc: BaseException | None) -> int | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def timed_out(exc: BaseException) -> bool:
    """Whether a metadata request ran out of its slice (asked again while the bound lasts)."""
    return _code(exc) == KafkaError._TIMED_OUT


def ask_again(transport_failures: int, exc: BaseException | None) -> bool:
    """Whether a failed metadata request is made again: a slice that ran out, while the
    bound lasts; a transport failure until :data:`TRANSPORT_TRIES` of them (slices that
    ran out before do not count)."""
    code = _code(exc)
    if code == KafkaError._TIMED_OUT:
        return True
    return code == KafkaError._TRANSPORT and transport_failures < TRANSPORT_TRIES


def wait_to_ask(state: tenacity.RetryCallState) -> float:
    """No wait after a slice that ran out (it waited already); a short one after a
    transport failure, for the error behind it to be reported."""
    exc = state.outcome.exception() if state.outcome is not None else None
    return TRANSPORT_WAIT_S if _code(exc) == KafkaError._TRANSPORT else 0.0


class TopicLookup:
    """Logical topic -> Kafka topic, each checked to exist before its first send.

    ``client()`` is the confluent-kafka client to ask (started on first use) and
    ``raise_fatal()`` raises the fatal error the client reported, if any.  Every wait and
    bound is measured on ``clock`` (the producer's).
    """

    __slots__ = (
        "_client",
        "_clock",
        "_config",
        "_first_lookup",
        "_raise_fatal",
        "_request_s",
        "topics",
    )

    def __init__(
        self,
        config: Mapping[str, Any],
        send_msg_timeout_ms: int,
        client: Callable[[], Any],
        raise_fatal: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config
        self._clock = clock
        #: one metadata request at most this long in all (``send_msg_timeout_ms``, bounded)
        self._request_s = min(send_msg_timeout_ms, MAX_BLOCK_MS) / 1000
        self._client = client
        self._raise_fatal = raise_fatal
        #: logical topic -> Kafka topic, for topics known to exist (the send hot path reads it)
        self.topics: dict[str, str] = {}
        #: Kafka topic -> when this producer first looked it up without finding it
        self._first_lookup: dict[str, float] = {}

    def kafka_topic(self, logical: str) -> str:
        """The Kafka topic of a user topic, checked to exist (once per producer)."""
        kafka_topic = self.topics.get(logical) if type(logical) is str else None
        if kafka_topic is None:
            kafka_topic = naming.to_kafka(logical)  # bad names fail before any broker call
            self._check_topic(kafka_topic, logical)
            self.topics[logical] = kafka_topic
        return kafka_topic

    def schedule_topic(self, logical: str) -> str:
        """The Kafka topic of a delay-level topic (not looked up: the producer creates
        those, or they are the ScheduleService's)."""
        kafka_topic = self.topics.get(logical)
        if kafka_topic is None:
            kafka_topic = self.topics[logical] = naming.to_kafka(logical)
        return kafka_topic

    def _check_topic(self, kafka_topic: str, logical: str) -> None:
        """Look the topic up, again and again (back-off) while it is not visible, until
        ``topic.metadata.propagation.max.ms`` after this producer first looked for it."""
        monotonic = self._clock.monotonic
        now = monotonic()
        first = self._first_lookup.setdefault(kafka_topic, now)
        bound = propagation_s(self._config)
        deadline = first + bound
        backoff = tenacity.wait_exponential(multiplier=0.05, max=1.0)

        def wait(state: tenacity.RetryCallState) -> float:
            return min(backoff(state), max(deadline - monotonic(), 0.0))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(NotYetVisible),
            stop=lambda _state: monotonic() >= deadline,
            wait=wait,
            reraise=True,
        )
        try:
            retrying(self.lookup, kafka_topic, logical)
        except NotYetVisible as exc:
            err = exc.kafka_error
            if err is not None and err.code() not in UNKNOWN_TOPIC_CODES:
                raise client_error(KafkaException(err), what=f"topic {logical!r}") from None
            raise UnknownTopicError(
                f"topic {logical!r} does not exist (Kafka topic {kafka_topic!r}; not in the "
                f"cluster's metadata {monotonic() - first:.1f}s after its first use, "
                f"topic.metadata.propagation.max.ms={round(bound * 1000)}); create it or "
                "enable auto-creation on the broker",
                kafka_error=err,
            ) from None
        self._first_lookup.pop(kafka_topic, None)

    def lookup(self, kafka_topic: str, logical: str) -> None:
        """One lookup: returns when the topic exists, raises :class:`NotYetVisible` when it
        is not there (yet), and the adapter's error for anything else."""
        bound = self._request_s
        monotonic = self._clock.monotonic
        started = monotonic()

        tries = transport_failures = 0

        def ask() -> Any:
            nonlocal tries, transport_failures
            if tries:
                self._raise_fatal()  # reported since the last try (refused credentials)
            tries += 1
            try:
                slice_s = lookup_slice(bound, monotonic() - started)
                return self._client().list_topics(topic=kafka_topic, timeout=slice_s)
            except KafkaException as exc:
                if _code(exc) == KafkaError._TRANSPORT:
                    transport_failures += 1
                self._raise_fatal()
                raise

        def again(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            return ask_again(transport_failures, None if outcome is None else outcome.exception())

        try:
            md = tenacity.Retrying(
                retry=again,
                wait=wait_to_ask,
                stop=lambda _state: monotonic() - started >= bound,
                reraise=True,
            )(ask)
        except KafkaException as exc:
            error = client_error(exc, what=f"metadata for topic {logical!r}")
            if isinstance(error, BrokerUnavailableError):  # say where it looked, as the rest do
                where = self._config.get("bootstrap.servers")
                error = BrokerUnavailableError(
                    f"cannot reach any broker at {where} ({error})", kafka_error=error.kafka_error
                )
            raise error from exc
        tmd = md.topics.get(kafka_topic)
        err = None if tmd is None else tmd.error
        if tmd is not None and (err is None or err.code() == KafkaError.LEADER_NOT_AVAILABLE):
            return  # it exists (librdkafka waits for a leader being elected)
        if err is None or err.code() in UNKNOWN_TOPIC_CODES or err.retriable():
            raise NotYetVisible(err)
        what = f"topic {logical!r}"
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            what += permission_hint(err.code(), kafka_topic, "WRITE")
        raise client_error(KafkaException(err), what=what)
