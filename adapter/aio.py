"""asyncio: ``async def`` PushConsumer listeners and an async SimpleConsumer.

* :class:`AsyncRunner` runs a PushConsumer listener written as ``async def listener(msgs,
  ctx)`` on an event loop, at most ``consume_thread_max`` batches at a time (a semaphore
  instead of a pool of threads).  Results come back through the same queue a worker pool
  uses, so the rules (``ack_index``, the retry ladder, consume timeouts, revokes) are the
  engine's, unchanged.  :class:`~adapter.clients.push_consumer.PushConsumer` picks it by
  itself when the registered listener is a coroutine function; the loop is the consumer's
  ``event_loop`` option, else one event-loop thread of its own.
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
import inspect
import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

from adapter.clients.listeners import ConcurrentRunner
from adapter.clients.simple_consumer import (
    FilterExpression,
    MessageView,
    SimpleConsumer,
    SimpleConsumerOptions,
)
from adapter.core.engine import ConcurrentEngine, Work
from adapter.core.listener import ConsumeConcurrentlyContext, ListenerMode
from adapter.core.message import start_consuming

if TYPE_CHECKING:
    from adapter.clients.consuming import GroupConsumer
    from adapter.clients.push_consumer import PushConsumer, PushConsumerOptions

log = logging.getLogger("adapter.consumer")

__all__ = [
    "AsyncPushConsumer",
    "AsyncRunner",
    "AsyncSimpleConsumer",
    "is_async_listener",
]


def is_async_listener(listener: Any) -> bool:
    """Whether ``listener`` (a callable, or an object with ``consume_message``) is written
    as ``async def``."""
    target = getattr(listener, "consume_message", listener)
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


class AsyncRunner(ConcurrentRunner):
    """Runs a coroutine listener's batches on an event loop (see the module docstring).

    ``loop``: the event loop to run them on; ``None`` starts one on a thread of its own.
    """

    def __init__(
        self,
        listener: Any,
        group: GroupConsumer,
        engine: ConcurrentEngine,
        *,
        threads: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(listener, group, engine, mode=ListenerMode.POOL, threads=threads)
        self._loop = loop
        self._own_thread: threading.Thread | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def inline(self) -> bool:
        return False

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"rmq-aio-{self._group.group}", daemon=True
            )
            thread.start()
            self._loop, self._own_thread = loop, thread
        return self._loop

    def _submit(self, work: Work) -> None:
        for index in range(work.nbatches):
            self._backlog += work.batch_len(index)
        self._event_loop().call_soon_threadsafe(self._spawn, work)

    def _spawn(self, work: Work) -> None:
        """On the event loop: one task per batch."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._threads)
        for index in range(work.nbatches):
            task = asyncio.ensure_future(self._batch(work, index))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _batch(self, work: Work, index: int) -> None:
        assert self._semaphore is not None
        async with self._semaphore:
            batch = work.batch(index)
            start_consuming(batch, self._clock.now_ms(), shared=False)
            ctx = ConsumeConcurrentlyContext(self._queue(work.tp))
            begin = self._clock.monotonic()
            if work.started is not None:
                work.started[index] = begin  # waiting for the semaphore does not count
            try:
                result: Any = self._listener(batch, ctx)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                result = exc
            self._done.put((work, index, result, ctx, self._clock.monotonic() - begin))

    def close(self) -> None:
        """Cancel what still runs (its offsets stay uncommitted); stop an own loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if self._own_thread is None:
            loop.call_soon_threadsafe(self._cancel_all)  # the application's loop: no wait
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_and_wait(), loop).result(5)
        except Exception as exc:  # a listener that ignores cancellation
            log.warning("%s: async listeners still running at close: %s", self._group.name, exc)
        loop.call_soon_threadsafe(loop.stop)
        self._own_thread.join(5)
        if not self._own_thread.is_alive():
            loop.close()

    def _cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _cancel_and_wait(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class AsyncPushConsumer:
    """A :class:`~adapter.clients.push_consumer.PushConsumer` for asyncio applications:
    ``await start()`` / ``await shutdown()`` (or ``async with``) never block the event
    loop, and ``async def`` listeners run on the loop that started it (unless the
    ``event_loop`` option names another)."""

    def __init__(self, config: Mapping[str, Any], **options: Unpack[PushConsumerOptions]) -> None:
        from adapter.clients.push_consumer import PushConsumer

        self.consumer: PushConsumer = PushConsumer(config, **options)

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
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)  # stats(), running_info(), check_alive(), ...


class AsyncSimpleConsumer:
    """:class:`~adapter.clients.simple_consumer.SimpleConsumer` with ``async`` methods, for
    an application's event loop: nothing here blocks it."""

    def __init__(
        self,
        config: Mapping[str, Any],
        consumer_group: str | None = None,
        subscription: Mapping[str, str | FilterExpression | None] | None = None,
        **options: Unpack[SimpleConsumerOptions],
    ) -> None:
        self.consumer = SimpleConsumer(config, consumer_group, subscription, **options)

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
        return await self.startup()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)  # assignment, stats(), running_info(), ...
