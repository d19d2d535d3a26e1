"""The share backend's :class:`MessageView`, which is also its receipt handle.

One object per record a share group hands out: the record, the broker's delivery count and
the hold (deadline, token, state); the record's :class:`MessageExt` is made when first
read.  Keeping the handle in the view itself, and the message lazy, means one allocation
per record on the receive path instead of three.
"""

from __future__ import annotations

from typing import Any

from adapter.clients.simple_view import MessageView
from adapter.core.engine.pull import HandleState
from adapter.core.message import MessageExt, view_of
from adapter.errors import InvalidInputError

__all__ = ["ShareMessageView", "share_view_of"]


class ShareMessageView(MessageView):
    """A :class:`MessageView` of the share backend (same attributes) and its receipt handle.

    ``owner`` is the id of the consumer that acquired the record (only it may acknowledge);
    ``count`` is the broker's delivery count; ``acquired_at`` (monotonic seconds) is when
    the poll that brought it returned, which starts the group's lock; ``token`` changes
    with each ``change_invisible_duration`` (the text form is the receipt handle)."""

    __slots__ = (
        "acquired_at",
        "count",
        "deadline",
        "duration",
        "msg",
        "owner",
        "record",
        "state",
        "token",
        "user_topic",
    )

    def __init__(self, owner: str, record: Any, user_topic: str, count: int, now: float) -> None:
        self.owner = owner
        self.record = record
        self.user_topic = user_topic
        self.msg: MessageExt | None = None
        self.count = count
        self.acquired_at = now
        self.deadline = 0.0
        self.duration = 0.0
        self.token = 0
        self.state = HandleState.INVISIBLE

    @property
    def message(self) -> MessageExt:
        """The record's :class:`MessageExt`, made on first use (a receive that nobody
        reads costs no decoding)."""
        msg: MessageExt | None = getattr(self, "msg", None)  # unset until first read
        if msg is None:
            msg = self.msg = view_of(self.record, self.user_topic, False, [None])
            for _ in range(self.count - 1):
                msg = self.msg = msg.redelivered()
        return msg

    @property
    def handle(self) -> ShareMessageView:
        """The receipt handle: the view itself."""
        return self

    @property
    def receipt_handle(self) -> str:
        """The current receipt handle (opaque text; ``change_invisible_duration`` replaces
        it)."""
        return self.handle_text()

    def handle_text(self) -> str:
        rec = self.record
        return (
            f"{self.owner}:{rec.topic()}:{rec.partition()}:{rec.offset()}:{self.count}:"
            f"{getattr(self, 'token', 0)}"  # unset: a delivery's first handle
        )


def share_view_of(message: object) -> ShareMessageView:
    """``message`` as a share view, or :class:`InvalidInputError`."""
    if type(message) is ShareMessageView or isinstance(message, ShareMessageView):
        return message
    raise InvalidInputError(
        "message", message, "expected a MessageView from receive() of this consumer"
    )
