"""The records of the confluent-kafka drop-in (:class:`adapter.kafka.Consumer`): a retry-topic
record as the application sees it (:class:`RetriedMessage`) and a copy on its way back to the
delay ladder or the DLQ (:class:`SendBackCopy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import confluent_kafka

from adapter.core.codec import Failure
from adapter.core.message import MessageExt
from adapter.core.routing import DeadLetter, RetryLater, RetryNow
from adapter.core.types import TP

__all__ = ["RetriedMessage", "SendBackCopy"]


class RetriedMessage(confluent_kafka.Message):
    """A record of the group's retry topic as the application sees it: ``topic()`` is the
    original topic, ``partition()``/``offset()`` its place in the retry topic, the rest as
    read.  ``record`` is the record itself (its ``topic()`` is the retry topic)."""

    __slots__ = ("record",)

    record: Any

    @classmethod
    def of(cls, record: confluent_kafka.Message, topic: str) -> RetriedMessage:
        """``record`` (read from the retry topic) shown as a record of ``topic``."""
        kwargs: dict[str, Any] = {
            "topic": topic,
            "partition": record.partition(),
            "offset": record.offset(),
            "key": record.key(),
            "value": record.value(),
            "headers": record.headers(),
            "timestamp": record.timestamp(),
        }
        epoch = record.leader_epoch()
        if epoch is not None:
            kwargs["leader_epoch"] = epoch
        out = cls(**kwargs)
        out.record = record
        return out


@dataclass(slots=True, eq=False)
class SendBackCopy:
    """A copy on its way: the message, where it goes, and how it was last sent."""

    tp: TP
    offset: int
    msg: MessageExt
    dest: RetryLater | DeadLetter | RetryNow
    failure: Failure
    alone: bool = False
    omit_body: bool = False
