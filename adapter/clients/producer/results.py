"""What a send reports: :class:`SendStatus`, :class:`SendResult`, the callback type, and
the cheap way the delivery-report hot path builds a successful result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum


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

_RESULT_FIELDS = ("status", "msg_id", "topic", "queue_id", "queue_offset")

# ``SendResult(SEND_OK, ...)`` on the delivery-report hot path: the same frozen object, built
# through its slots instead of the frozen dataclass ``__init__`` (half the cost).  The
# setters are public so that the in-flight send can inline :func:`send_ok`.
assert tuple(f.name for f in fields(SendResult)) == _RESULT_FIELDS, "SendResult changed"
set_status, set_msg_id, set_topic, set_queue_id, set_queue_offset = (
    SendResult.__dict__[name].__set__ for name in _RESULT_FIELDS
)
new_object = object.__new__
SEND_OK = SendStatus.SEND_OK


def send_ok(msg_id: str, topic: str, queue_id: int, queue_offset: int) -> SendResult:
    """``SendResult(SEND_OK, msg_id, topic, queue_id, queue_offset)``, built through its slots."""
    result: SendResult = new_object(SendResult)
    set_status(result, SEND_OK)
    set_msg_id(result, msg_id)
    set_topic(result, topic)
    set_queue_id(result, queue_id)
    set_queue_offset(result, queue_offset)
    return result
