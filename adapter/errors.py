"""One error root for the whole project.

Every exception the adapter raises on purpose derives from :class:`AdapterError`.  Errors
about bad input carry ``field`` and ``value`` so the message always names both; errors
from Kafka keep the original ``KafkaError`` (``kafka_error``) and, where there is one,
the raw message that failed (``raw_message``), in the manner of confluent-kafka's
``KafkaException``.
"""

from __future__ import annotations

from typing import Any


class AdapterError(Exception):
    """Root of every error raised by the adapter."""


class InvalidInputError(AdapterError, ValueError):
    """A value given to the adapter is not acceptable.  Names the field and the value."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class ConfigError(InvalidInputError):
    """A configuration key or option is unknown or has a bad value."""


class InvalidDelayLevelError(InvalidInputError):
    """A delay level or a ``messageDelayLevel`` token is not valid."""


class TopicNameError(InvalidInputError):
    """A topic or group name cannot be mapped to a legal Kafka topic name (or back)."""


class MalformedHeaderError(InvalidInputError):
    """A header value cannot be decoded; raised only where the caller asked for strictness."""


class ListenerResultError(InvalidInputError):
    """A message listener returned something that is not a ``ConsumeConcurrentlyStatus``."""


class KafkaClientError(AdapterError):
    """An operation against Kafka failed.

    ``kafka_error`` is the original ``confluent_kafka.KafkaError`` (or ``None``),
    ``raw_message`` the ``confluent_kafka.Message`` involved, if any.
    """

    def __init__(self, message: str, *, kafka_error: Any = None, raw_message: Any = None) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error
        self.raw_message = raw_message

    @property
    def retriable(self) -> bool:
        err = self.kafka_error
        return bool(err is not None and hasattr(err, "retriable") and err.retriable())


class SendError(KafkaClientError):
    """A send failed definitely: the message is not in Kafka."""


class PossiblyPersistedError(SendError):
    """The outcome of a send is unknown: Kafka reported it as possibly persisted.

    It is never resent automatically; consumers can de-duplicate on ``UNIQ_KEY``.
    """


class RetriesExhaustedError(SendError):
    """A send failed definitely on every attempt it was allowed: the message is not in Kafka.

    Raised (or passed to the send callback) once ``1 + retry_times_when_send_failed``
    attempts (``retry_times_when_send_async_failed`` for ``send_async``) all failed with an
    error that is safe to resend.  ``attempts`` says how many were made; ``kafka_error``
    and ``raw_message`` are those of the last attempt.
    """

    def __init__(
        self, message: str, *, attempts: int = 1, kafka_error: Any = None, raw_message: Any = None
    ) -> None:
        super().__init__(message, kafka_error=kafka_error, raw_message=raw_message)
        self.attempts = attempts


class FlowControlError(RetriesExhaustedError):
    """The last attempt hit flow control and the back-off ran out of retries.

    Flow control is a full local producer queue (``queue.buffering.max.messages`` /
    ``queue.buffering.max.kbytes``; ``kafka_error`` is ``_QUEUE_FULL``) or a broker that
    throttles the client.  The message is not in Kafka.
    """


class SendTimeoutError(PossiblyPersistedError, TimeoutError):
    """``send`` / ``send_batch`` gave up waiting for the broker's answer (its ``timeout``).

    The message was handed to the client and may still be written, so it is never resent
    (a :class:`PossiblyPersistedError`); it is also a builtin ``TimeoutError``.
    """


class MessageTooLargeError(SendError):
    """The message is larger than the broker or topic allows."""


class UnknownTopicError(SendError):
    """The topic does not exist (and the broker does not create topics automatically)."""


class BrokerUnavailableError(KafkaClientError):
    """No broker could be reached at ``bootstrap.servers``."""


class TlsError(BrokerUnavailableError):
    """A TLS connection to a broker failed: the handshake was refused, the broker's
    certificate was not verified against ``ssl.ca.location`` (another CA, expired, another
    host), or a TLS client met a listener that does not speak TLS.  The message names the
    cause and the settings to check; ``kafka_error`` is librdkafka's report."""


class AuthenticationError(KafkaClientError):
    """The broker rejected the credentials (SASL/SSL) or the principal lacks an ACL."""


class ClientClosedError(AdapterError, RuntimeError):
    """The client was used after ``shutdown()`` or before ``start()``."""


class InvalidReceiptHandleError(AdapterError):
    """A SimpleConsumer receipt handle that cannot be used (RocketMQ's
    ``INVALID_RECEIPT_HANDLE``): expired, already acknowledged (for a change), of a
    partition that was revoked, or issued by another consumer.  Nothing was changed.
    ``handle`` is the handle's text form."""

    def __init__(self, handle: str, reason: str) -> None:
        super().__init__(f"invalid receipt handle {handle}: {reason}")
        self.handle = handle
        self.reason = reason


class UnackedLimitError(AdapterError):
    """``receive()`` was called while the consumer already holds ``limit`` received
    messages that are neither acknowledged nor expired (``max_unacked_messages``)."""

    def __init__(self, limit: int, unacked: int) -> None:
        super().__init__(
            f"max_unacked_messages={limit}: {unacked} received message(s) are neither "
            "acknowledged nor expired; ack them (or let them expire) before receiving more"
        )
        self.limit = limit
        self.unacked = unacked


class DeadLetterBodyError(AdapterError):
    """Dead letters sent without their body (too large) whose body cannot be fetched back.

    ``missing`` holds ``(msg_id, where the body was, why it cannot be read)`` per entry.
    Raised before anything is redriven.
    """

    def __init__(self, missing: list[tuple[str, str, str]]) -> None:
        shown = "; ".join(f"{m} (body at {w}): {why}" for m, w, why in missing[:5])
        more = f"; and {len(missing) - 5} more" if len(missing) > 5 else ""
        super().__init__(
            f"{len(missing)} dead letter(s) left out their body and it cannot be fetched back, "
            f"so nothing was redriven: {shown}{more}"
        )
        self.missing = missing


class ClientLoopError(AdapterError, RuntimeError):
    """A client's loop stopped because of an error; ``cause`` is that error.

    Raised from ``check_alive()`` and ``shutdown()``; the client's ``on_error`` callback
    receives the cause when it happens.
    """

    def __init__(self, client: str, cause: BaseException) -> None:
        super().__init__(f"{client}: the loop stopped: {type(cause).__name__}: {cause}")
        self.client = client
        self.cause = cause


class ShutdownTimeoutError(AdapterError, TimeoutError):
    """``shutdown()`` waited ``timeout`` seconds and the client had still not closed (it
    goes on closing in the background; what it had not settled is not committed)."""

    def __init__(self, client: str, timeout: float) -> None:
        super().__init__(f"{client} had not closed after {timeout:.1f}s; it goes on closing")
        self.client = client
        self.timeout = timeout
