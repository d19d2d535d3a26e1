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


class MessageTooLargeError(SendError):
    """The message is larger than the broker or topic allows."""


class UnknownTopicError(SendError):
    """The topic does not exist (and the broker does not create topics automatically)."""


class BrokerUnavailableError(KafkaClientError):
    """No broker could be reached at ``bootstrap.servers``."""


class AuthenticationError(KafkaClientError):
    """The broker rejected the credentials (SASL/SSL) or the principal lacks an ACL."""


class ClientClosedError(AdapterError, RuntimeError):
    """The client was used after ``shutdown()`` or before ``start()``."""


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
