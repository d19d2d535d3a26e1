"""The listener shapes :class:`~adapter.clients.push.push_consumer.PushConsumer` accepts: RocketMQ's
listener interfaces (an object with ``consume_message``) and the plain callable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from adapter.core.listener import (
    ConsumeConcurrentlyContext,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from adapter.core.message import MessageExt
from adapter.core.routing import ConsumeConcurrentlyStatus

__all__ = ["Listener", "MessageListenerConcurrently", "MessageListenerOrderly"]


class MessageListenerConcurrently(Protocol):
    def consume_message(
        self, msgs: list[MessageExt], context: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus: ...


Listener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]


class MessageListenerOrderly(Protocol):
    def consume_message(
        self, msgs: list[MessageExt], context: ConsumeOrderlyContext
    ) -> ConsumeOrderlyStatus: ...
