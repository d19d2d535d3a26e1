"""The calls both SimpleConsumer backends make the same way: the ``*_async`` forms of
``ack`` and ``change_invisible_duration`` (completed futures) and the check of
``await_duration``.  Plain functions, so neither backend inherits the other's state."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from adapter.clients.simple.message_view import MessageView, PullFuture, settled
from adapter.clients.simple.simple_options import MAX_AWAIT_DURATION_S
from adapter.core.engine.pull import seconds_of

__all__ = ["ack_settled", "await_seconds", "change_settled"]


def ack_settled(ack: Callable[[MessageView], None], message: MessageView) -> PullFuture[None]:
    """``ack(message)`` as a (completed) awaitable future: its error, or ``None``."""
    try:
        ack(message)
    except Exception as exc:
        return settled(error=exc)
    return settled(None)


def change_settled(
    change: Callable[[MessageView, float | timedelta], str],
    message: MessageView,
    invisible_duration: float | timedelta,
) -> PullFuture[str]:
    """``change(message, invisible_duration)`` as a (completed) awaitable future."""
    try:
        return settled(change(message, invisible_duration))
    except Exception as exc:
        return settled(error=exc)


def await_seconds(value: float | timedelta) -> float:
    """A new ``await_duration`` in seconds (0 to :data:`MAX_AWAIT_DURATION_S`)."""
    return seconds_of("await_duration", value, minimum=0, maximum=MAX_AWAIT_DURATION_S)
