"""What a :class:`~adapter.clients.simple.simple_consumer.SimpleConsumer` hands to the application:
the received message (``MessageView``, which is its own receipt handle), the futures of the
``*_async`` calls (``PullFuture``) and the subscription filter (``FilterExpression``).

Kept apart from the consumer so every backend (:mod:`adapter.clients.share.share_backend`) hands
out the same types.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from adapter.constants import PROPERTY_KEYS, PROPERTY_TAGS, SYSTEM_HEADERS
from adapter.core.engine.pull import ReceiptHandle
from adapter.core.filter import TagFilter
from adapter.core.message import MessageExt
from adapter.errors import InvalidInputError

__all__ = [
    "ClassicMessageView",
    "FilterExpression",
    "MessageView",
    "PullFuture",
    "handle_of",
    "settled",
    "tag_filter_of",
]

T = TypeVar("T")
#: What a user property is not: RocketMQ's system properties and the adapter's own headers.
_NOT_USER = SYSTEM_HEADERS | {PROPERTY_TAGS, PROPERTY_KEYS}


class PullFuture(concurrent.futures.Future[T], Generic[T]):
    """The result of an ``*_async`` call: a ``concurrent.futures.Future`` (``result()``,
    callbacks; what RocketMQ's Python client returns) that asyncio code can ``await``."""

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.wrap_future(self).__await__()


def settled(value: T | None = None, error: BaseException | None = None) -> PullFuture[T]:
    """A future already done: with ``value``, or raising ``error`` (the ``*_async`` calls
    that complete at once)."""
    fut: PullFuture[T] = PullFuture()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)  # type: ignore[arg-type]
    return fut


@dataclass(frozen=True, slots=True)
class FilterExpression:
    """A subscription's filter (RocketMQ's ``FilterExpression``): a tag expression
    (``*``, ``TagA || TagB``).  ``SQL92`` is refused: Kafka has no broker-side filter."""

    expression: str = "*"
    filter_type: str = "TAG"


class MessageView:
    """A received message (RocketMQ's ``MessageView``) and its receipt handle.

    ``topic`` is the topic the message was sent to (also when it comes back through the
    retry topic); ``delivery_attempt`` is 1 on the first delivery; ``born_timestamp`` is
    epoch milliseconds; ``properties`` are the user properties.  Everything else the
    adapter knows is on ``message`` (a :class:`~adapter.core.message.MessageExt`: Kafka
    topic, partition and offset, all headers, ...).

    Each backend hands out its own subclass, which is also the message's receipt handle
    (one object per received message): :class:`ClassicMessageView` here,
    :class:`~adapter.clients.share.share_view.ShareMessageView` on a share group.
    """

    __slots__ = ()

    @property
    def message(self) -> MessageExt:
        raise NotImplementedError

    @property
    def message_id(self) -> str:
        return self.message.msg_id

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def tag(self) -> str | None:
        return self.message.tags

    @property
    def keys(self) -> set[str]:
        keys = self.message.keys
        return set(keys.split()) if keys else set()

    @property
    def properties(self) -> dict[str, str]:
        return {
            k: v
            for k, v in self.message.properties.items()
            if k not in _NOT_USER and not k.startswith("RMQ_")
        }

    @property
    def delivery_attempt(self) -> int:
        return self.message.reconsume_times + 1

    @property
    def born_timestamp(self) -> int | None:
        return self.message.born_timestamp

    @property
    def message_group(self) -> None:
        """Always ``None``: FIFO message groups are not part of this consumer."""
        return None

    @property
    def receipt_handle(self) -> str:
        """The current receipt handle (opaque text; ``change_invisible_duration`` replaces
        it)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"MessageView(message_id={self.message_id!r}, topic={self.topic!r}, "
            f"delivery_attempt={self.delivery_attempt}, receipt_handle={self.receipt_handle!r})"
        )

    __str__ = __repr__


class ClassicMessageView(ReceiptHandle, MessageView):
    """The classic backend's :class:`MessageView`: the pull engine issues it as the
    receipt handle itself (``PullEngine(handle_type=ClassicMessageView)``), so a received
    message costs one object, not a handle and a view.  ``change_invisible_duration``
    renews it in place (:meth:`~adapter.core.engine.pull.PullEngine.renew`): the
    application keeps acknowledging the object it received."""

    __slots__ = ()

    @property
    def message(self) -> MessageExt:
        msg: MessageExt = self.msg
        return msg

    @property
    def receipt_handle(self) -> str:
        return self.handle_text()

    __repr__ = MessageView.__repr__
    __str__ = MessageView.__repr__


def handle_of(message: object) -> ClassicMessageView:
    """``message`` as the classic backend's view (its own receipt handle), or
    :class:`InvalidInputError` when it is not a :class:`MessageView` of that backend."""
    if not isinstance(message, ClassicMessageView):
        raise InvalidInputError("message", message, "expected a MessageView from receive()")
    return message


def tag_filter_of(expression: str | FilterExpression | None) -> TagFilter:
    """The tag filter of a subscription's expression (text or a :class:`FilterExpression`,
    RocketMQ's or this one); anything but a tag expression is refused."""
    if isinstance(expression, FilterExpression) or (
        expression is not None and not isinstance(expression, str)
    ):
        kind = str(getattr(expression, "filter_type", "TAG")).upper()
        if kind not in ("TAG", "1", "FILTERTYPE.TAG"):
            raise InvalidInputError(
                "filter_expression",
                expression,
                "only tag expressions are supported (Kafka has no broker-side SQL92 filter)",
            )
        text = getattr(expression, "expression", None)
        return TagFilter.parse(text if text is None else str(text))
    return TagFilter.parse(expression)
