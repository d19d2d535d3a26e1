"""asyncio: ``async def`` PushConsumer listeners and an async SimpleConsumer.

* :class:`AsyncRunner` (:mod:`adapter.clients.push.async_runner`, re-exported here) runs a
  PushConsumer listener written as ``async def listener(msgs, ctx)`` on an event loop, at
  most ``consume_thread_max`` batches at a time; the PushConsumer picks it by itself when
  the registered listener is a coroutine function.
* :class:`AsyncPushConsumer` starts and stops a PushConsumer from an application's event
  loop without blocking it; its ``async def`` listeners run on that loop.
* :class:`AsyncSimpleConsumer`: ``await receive(...)`` / ``ack`` /
  ``change_invisible_duration`` from an application's event loop.

Why not ``confluent_kafka.aio``: its ``AIOConsumer`` makes every consumer call an awaitable
that runs on a thread-pool executor.  The adapter's consumers already run librdkafka on a
loop thread of their own, which fetches in batches and must keep polling whatever the
application does; moving that loop onto the application's event loop would let a slow
coroutine stall fetching and rebalances, and would add an executor hop per call.  What an
application awaits here never calls librdkafka: a receive waits for the loop thread to hand
it messages (a future completed by that thread, :func:`asyncio.wrap_future`), and ``ack``
is a short in-memory step, so no executor thread is involved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, Unpack

from adapter.clients.push.async_runner import AsyncRunner, is_async_listener
from adapter.clients.push.push_consumer import PushConsumer, PushConsumerOptions
from adapter.clients.simple.simple_consumer import (
    FilterExpression,
    MessageView,
    SimpleConsumer,
    SimpleConsumerOptions,
)
from adapter.io.signals import TerminateAsInterrupt

__all__ = [
    "AsyncPushConsumer",
    "AsyncRunner",
    "AsyncSimpleConsumer",
    "is_async_listener",
]


class AsyncPushConsumer:
    """A :class:`~adapter.clients.push.push_consumer.PushConsumer` for asyncio applications:
    ``await start()`` / ``await shutdown()`` (or ``async with``) never block the event
    loop, and ``async def`` listeners run on the loop that started it (unless the
    ``event_loop`` option names another)."""

    def __init__(self, config: Mapping[str, Any], **options: Unpack[PushConsumerOptions]) -> None:
        self.consumer: PushConsumer = PushConsumer(config, **options)
        self._signals = TerminateAsInterrupt()

    def subscribe(self, topic: str, expression: str | None = "*") -> None:
        self.consumer.subscribe(topic, expression)

    def register_message_listener(self, listener: Any) -> None:
        self.consumer.register_message_listener(listener)

    async def start(self) -> AsyncPushConsumer:
        consumer = self.consumer
        if consumer.options.event_loop is None:
            consumer.options = replace(consumer.options, event_loop=asyncio.get_running_loop())
        await asyncio.to_thread(consumer.start)
        return self

    async def shutdown(self, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.consumer.shutdown, timeout)

    async def __aenter__(self) -> AsyncPushConsumer:
        started = await self.start()
        self._signals.enter()  # SIGTERM leaves the block as Ctrl-C does
        return started

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.shutdown()
        finally:
            self._signals.exit()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)  # stats(), running_info(), check_alive(), ...


class AsyncSimpleConsumer:
    """:class:`~adapter.clients.simple.simple_consumer.SimpleConsumer` with ``async`` methods, for
    an application's event loop: nothing here blocks it."""

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        **options: Unpack[SimpleConsumerOptions],
    ) -> None:
        self.consumer = SimpleConsumer(config, consumer_group, subscription, **options)
        self._signals = TerminateAsInterrupt()

    @property
    def consumer_group(self) -> str:
        return self.consumer.consumer_group

    def subscribe(self, topic: str, filter_expression: str | FilterExpression | None = "*") -> None:
        self.consumer.subscribe(topic, filter_expression)

    def unsubscribe(self, topic: str) -> None:
        self.consumer.unsubscribe(topic)

    async def startup(self) -> AsyncSimpleConsumer:
        """Join the group (the clients are created on a worker thread)."""
        await asyncio.to_thread(self.consumer.start)
        return self

    start = startup

    async def shutdown(self, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.consumer.shutdown, timeout)

    async def receive(
        self, max_message_num: int, invisible_duration: float | timedelta
    ) -> list[MessageView]:
        """See :meth:`SimpleConsumer.receive`; waits without blocking the event loop."""
        return await self.consumer.receive_async(max_message_num, invisible_duration)

    async def ack(self, message: MessageView) -> None:
        self.consumer.ack(message)

    async def change_invisible_duration(
        self, message: MessageView, invisible_duration: float | timedelta
    ) -> str:
        return self.consumer.change_invisible_duration(message, invisible_duration)

    async def __aenter__(self) -> AsyncSimpleConsumer:
        started = await self.startup()
        self._signals.enter()  # SIGTERM leaves the block as Ctrl-C does
        return started

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.shutdown()
        finally:
            self._signals.exit()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)  # assignment, stats(), running_info(), ...
