"""``SimpleConsumer``: RocketMQ 5's pull-style consumer, on a Kafka consumer group or share group.

The application asks for messages (``receive``), each received message is invisible to
every other receiver of the group until its deadline, and it is acknowledged (``ack``) or
given more time (``change_invisible_duration``).  A message not acknowledged in time is
delivered again, to this or another member, with ``delivery_attempt + 1``; after
``max_delivery_attempts`` it goes to ``%DLQ%<group>``.  Names follow Apache RocketMQ's own
Python client (``rocketmq.SimpleConsumer``).

``SimpleConsumer`` is a facade: ``backend`` picks the class doing the work, both satisfying
:class:`~adapter.clients.simple.backend.Backend`: ``"classic"``
(:class:`~adapter.clients.simple.classic_backend.ClassicBackend`, a classic consumer group)
or ``"share"`` (:class:`~adapter.clients.share.share_backend.ShareBackend`, a share group,
imported only when asked for).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Unpack

from adapter.clients.simple.backend import Backend
from adapter.clients.simple.message_view import (
    FilterExpression,
    MessageView,
    PullFuture,
    tag_filter_of,
)
from adapter.clients.simple.simple_options import (
    DEFAULT_AWAIT_DURATION_S,
    MAX_AWAIT_DURATION_S,
    SimpleConsumerBackend,
    SimpleConsumerOptions,
    SimpleOptions,
)
from adapter.core.types import TP
from adapter.errors import ConfigError
from adapter.io.signals import StartsInWith, TerminateAsInterrupt

#: The options and message view live in :mod:`.simple_options` and :mod:`.message_view`;
#: they stay importable from here.
__all__ = [
    "DEFAULT_AWAIT_DURATION_S",
    "MAX_AWAIT_DURATION_S",
    "FilterExpression",
    "MessageView",
    "PullFuture",
    "SimpleConsumer",
    "SimpleConsumerBackend",
    "SimpleConsumerOptions",
    "SimpleOptions",
    "tag_filter_of",
]


def _backend_of(backend: SimpleConsumerBackend | str) -> SimpleConsumerBackend:
    try:
        return SimpleConsumerBackend(backend)
    except ValueError:
        raise ConfigError(
            "backend", backend, f"expected one of {[b.value for b in SimpleConsumerBackend]}"
        ) from None


class SimpleConsumer(StartsInWith):
    """RocketMQ 5 ``SimpleConsumer`` semantics over a confluent-kafka config dict.

    ``consumer_group`` (or ``config["group.id"]``) names the group; ``subscription`` maps
    topics to filter expressions (or subscribe later).  ``startup()`` (or ``start()``, or
    the ``with`` block) joins the group; ``shutdown()`` leaves it.  Thread-safe: any number
    of threads may receive and acknowledge.

    ``backend="share"`` runs it on a Kafka share group instead (KIP-932, broker 4.2+:
    :mod:`adapter.clients.share.share_backend`, docs/semantics.md §4.13.1).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        *,
        backend: SimpleConsumerBackend | str = "classic",
        **options: Unpack[SimpleConsumerOptions],
    ) -> None:
        kind = _backend_of(backend)
        impl: Backend
        if kind is SimpleConsumerBackend.SHARE:
            from adapter.clients.share.share_backend import ShareBackend

            impl = ShareBackend(config, consumer_group, subscription, **options)
        else:
            from adapter.clients.simple.classic_backend import ClassicBackend

            impl = ClassicBackend(config, consumer_group, subscription, **options)
        self._backend = impl
        self._signals = TerminateAsInterrupt()
        #: which backend this consumer runs on
        self.backend = kind
        # the hot calls go to the backend's bound methods directly (no facade frame in
        # between); the methods below document them and serve type checkers
        setattr(self, "receive", impl.receive)  # noqa: B010
        setattr(self, "ack", impl.ack)  # noqa: B010

    # -- what the backend names ------------------------------------------------------------
    @property
    def consumer_group(self) -> str:
        return self._backend.consumer_group

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def retry_topic(self) -> str:
        return self._backend.retry_topic

    @property
    def dlq_topic(self) -> str:
        return self._backend.dlq_topic

    def __getattr__(self, name: str) -> Any:
        """The backend's own public attributes (``options`` on the classic backend;
        ``share_options``, ``max_delivery_attempts``, ``delivery_limit`` on the share one)."""
        if name.startswith("_"):
            raise AttributeError(name)
        backend = self.__dict__.get("_backend")
        if backend is None:
            raise AttributeError(name)
        return getattr(backend, name)

    @property
    def lock_duration(self) -> float | None:
        """The share group's record lock in seconds (share backend only: the classic
        backend has no record lock and raises ``AttributeError``)."""
        return self._share_only().lock_duration  # type: ignore[no-any-return]

    @lock_duration.setter
    def lock_duration(self, value: float | None) -> None:
        self._share_only().lock_duration = value

    def _share_only(self) -> Any:
        if self.backend is not SimpleConsumerBackend.SHARE:
            raise AttributeError(
                f"lock_duration: {self.name} runs on the classic backend, which has no "
                "record lock (it exists with backend='share')"
            )
        return self._backend

    # -- subscriptions ---------------------------------------------------------------------
    def subscribe(self, topic: str, filter_expression: str | FilterExpression | None = "*") -> None:
        """Subscribe to a topic with a tag expression (``*``, ``TagA || TagB`` or a
        :class:`FilterExpression`), before or after ``startup()``."""
        self._backend.subscribe(topic, filter_expression)

    def unsubscribe(self, topic: str) -> None:
        """Stop reading ``topic`` (its received messages' handles become invalid)."""
        self._backend.unsubscribe(topic)

    @property
    def subscriptions(self) -> dict[str, str]:
        return self._backend.subscriptions

    # -- lifecycle -------------------------------------------------------------------------
    def startup(self) -> SimpleConsumer:
        """Create the clients and join the group (RocketMQ's name for :meth:`start`)."""
        return self.start()

    def start(self) -> SimpleConsumer:
        """Create the clients and join the group on a background thread (idempotent)."""
        self._backend.start()
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the group; received messages not acknowledged are delivered again."""
        self._backend.shutdown(timeout)

    close = shutdown

    def check_alive(self) -> None:
        """Raise what stopped the consumer; :class:`ClientClosedError` when not running."""
        self._backend.check_alive()

    # -- receiving -------------------------------------------------------------------------
    @property
    def await_duration(self) -> float:
        """Seconds ``receive`` waits for the first message."""
        return self._backend.await_duration

    @await_duration.setter
    def await_duration(self, value: float | timedelta) -> None:
        self._backend.await_duration = value

    def receive(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> list[MessageView]:
        """Up to ``max_message_num`` (at most 32) messages, each invisible to every other
        receiver for ``invisible_duration`` (seconds or a ``timedelta``, 1 s to 12 h) and
        to be acknowledged within it.  Waits up to ``await_duration`` for the first
        message; an empty list when none came."""
        return self._backend.receive(max_message_num, invisible_duration)

    def receive_async(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> PullFuture[list[MessageView]]:
        """:meth:`receive` without blocking: a future of the messages (awaitable)."""
        return self._backend.receive_async(max_message_num, invisible_duration)

    def ack(self, message: MessageView) -> None:
        """Acknowledge ``message`` (within its invisible duration)."""
        self._backend.ack(message)

    def ack_async(self, message: MessageView) -> PullFuture[None]:
        """:meth:`ack` as a (completed) awaitable future."""
        return self._backend.ack_async(message)

    def change_invisible_duration(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> str:
        """Make ``message`` invisible for ``invisible_duration`` from now (0 s to 12 h);
        returns its new receipt handle (the old one is no longer valid)."""
        return self._backend.change_invisible_duration(message, invisible_duration)

    def change_invisible_duration_async(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> PullFuture[str]:
        """:meth:`change_invisible_duration` as a (completed) awaitable future."""
        return self._backend.change_invisible_duration_async(message, invisible_duration)

    # -- figures ---------------------------------------------------------------------------
    @property
    def assignment(self) -> set[TP]:
        """The partitions this member holds now, as ``(Kafka topic, partition)``."""
        return self._backend.assignment

    def stats(self) -> dict[str, Any]:
        """Per logical topic: copies sent to the retry topic and dead letters."""
        return self._backend.stats()

    def running_info(self) -> dict[str, Any]:
        """A snapshot for diagnostics (messages waiting, received, in flight)."""
        return self._backend.running_info()
