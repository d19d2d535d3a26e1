"""The share backend's :class:`MessageView`, which is also its receipt handle.

One object per record a share group hands out: the record, the broker's delivery count, its
state and the hold it shares with the other records of its receive (:class:`ShareHold`:
owner, lock start, deadline); the record's :class:`MessageExt` is made when first read.
Keeping the handle in the view itself, what a receive shares once, and the message lazy,
means one allocation and five stores per record on the receive path.
"""

from __future__ import annotations

from typing import Any

from adapter.clients.simple.message_view import MessageView
from adapter.core.engine.pull import HandleState
from adapter.core.message import MessageExt, view_of
from adapter.errors import InvalidInputError

__all__ = ["ShareHold", "ShareMessageView", "share_view_of"]


class ShareHold:
    """What every view of one receive shares, kept once per receive instead of once per
    record: the consumer that acquired the records (``owner``: only it may acknowledge),
    when the poll that brought them returned (``acquired_at``, monotonic seconds: it
    starts the group's lock), and the hold's end (``deadline``) and length
    (``duration``).  ``change_invisible_duration`` gives its view a hold of its own, so
    a hold is never changed once made."""

    __slots__ = ("acquired_at", "deadline", "duration", "owner")

    def __init__(self, owner: str, acquired_at: float, deadline: float, duration: float) -> None:
        self.owner = owner
        self.acquired_at = acquired_at
        self.deadline = deadline
        self.duration = duration


class ShareMessageView(MessageView):
    """A :class:`MessageView` of the share backend (same attributes) and its receipt handle.

    ``hold`` is what the records of its receive share (:class:`ShareHold`: owner, lock
    start, deadline, duration; read through the properties of the same names); ``count``
    is the broker's delivery count; ``token`` changes with each
    ``change_invisible_duration`` (the text form is the receipt handle)."""

    __slots__ = (
        "count",
        "hold",
        "msg",
        "record",
        "state",
        "token",
        "user_topic",
    )

    def __init__(self, owner: str, record: Any, user_topic: str, count: int, now: float) -> None:
        self.hold = ShareHold(owner, now, 0.0, 0.0)
        self.record = record
        self.user_topic = user_topic
        self.msg: MessageExt | None = None
        self.count = count
        self.token = 0
        self.state = HandleState.INVISIBLE

    @property
    def owner(self) -> str:
        """The id of the consumer that acquired the record."""
        return self.hold.owner

    @property
    def acquired_at(self) -> float:
        """When the poll that brought the record returned (its lock started then)."""
        return self.hold.acquired_at

    @property
    def deadline(self) -> float:
        """When the hold ends (monotonic seconds)."""
        return self.hold.deadline

    @property
    def duration(self) -> float:
        """The hold's invisible duration (seconds)."""
        return self.hold.duration

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
