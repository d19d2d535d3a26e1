"""The one call into confluent-kafka's ``produce()``, and what its failures mean: the
adapter error for a record it refuses at once, for a full local queue, and for a failed
delivery report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from adapter.clients.producer.retrying import FlowControlled, RetriableSendFailure
from adapter.constants import ANY_PARTITION
from adapter.errors import (
    AdapterError,
    InvalidInputError,
    KafkaClientError,
    MessageTooLargeError,
    SendError,
)
from adapter.io.errors import (
    AUTH_CODES,
    client_error,
    is_flow_control,
    is_possibly_persisted,
    send_error,
)

Headers = list[tuple[str, bytes | None]]


def produce(
    client: Any,
    topic: str,
    *,
    value: bytes | None,
    key: bytes | str | None,
    partition: int,
    on_delivery: Callable[[Any, Any], None],
    headers: Headers,
) -> None:
    """Hand one record to ``client``: every send of the producer goes through here.

    ``partition`` is :data:`ANY_PARTITION` for librdkafka's partitioner.  Raises what
    ``produce()`` raises: ``BufferError`` when the local queue is full, ``KafkaException``
    or ``TypeError``/``ValueError`` for a record it refuses (see :func:`produce_error`).

    Callers name the parts; this one call passes them by position (topic, value, key,
    partition, on_delivery, callback, timestamp, headers), because confluent-kafka's
    keyword parsing costs almost as much again as the ``produce()`` itself.
    """
    client.produce(topic, value, key, partition, on_delivery, None, 0, headers)


def queue_full(exc: BufferError, logical: str) -> FlowControlled:
    """The retriable error for a full local queue (``BufferError`` from ``produce()``)."""
    return FlowControlled(
        f"local producer queue is full sending to {logical!r}: {exc}",
        kafka_error=KafkaError(KafkaError._QUEUE_FULL),
    )


def produce_error(
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


def classify(err: Any, kmsg: Any, logical: str) -> SendError:
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
