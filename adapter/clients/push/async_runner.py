"""Runs ``async def`` PushConsumer listeners on an event loop (:class:`AsyncRunner`).

:class:`AsyncRunner` runs a PushConsumer listener written as ``async def listener(msgs,
ctx)`` on an event loop, at most ``consume_thread_max`` batches at a time (a semaphore
instead of a pool of threads).  Results come back through the same queue a worker pool
uses, so the rules (``ack_index``, the retry ladder, consume timeouts, revokes) are the
engine's, unchanged.  :class:`~adapter.clients.push.push_consumer.PushConsumer` picks it by
itself when the registered listener is a coroutine function (:func:`is_async_listener`);
the loop is the consumer's ``event_loop`` option, else one event-loop thread of its own.

It lives beside the other runners, below the consumer that picks it, so the consumer does
not import :mod:`adapter.aio` (which wraps the consumer for asyncio applications).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import TYPE_CHECKING, Any

from adapter.clients.member.contracts import Call
from adapter.clients.push.concurrent_runner import SKIPPED, ConcurrentRunner
from adapter.core.engine import ConcurrentEngine, Work
from adapter.core.listener import ConsumeConcurrentlyContext, ListenerMode
from adapter.core.message import start_consuming

if TYPE_CHECKING:
    from adapter.clients.member.group_consumer import GroupConsumer

log = logging.getLogger("adapter.consumer")

__all__ = ["AsyncRunner", "is_async_listener"]


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
            if self._stopping:
                self._done.put((work, index, SKIPPED, None, 0.0))
                return
            batch = work.batch(index)
            start_consuming(batch, self._clock.now_ms(), shared=False)
            ctx = ConsumeConcurrentlyContext(self._queue(work.tp))
            begin = self._clock.monotonic()
            key = self._calls.begin(
                Call(work.tp, batch[0].queue_offset, batch[-1].queue_offset, begin)
            )
            if work.started is not None:
                work.started[index] = begin  # waiting for the semaphore does not count
            try:
                result: Any = self._listener(batch, ctx)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                result = exc
            except BaseException:  # cancelled at close: no result, no longer under way
                self._calls.end(key)
                raise
            self._done.put((work, index, result, ctx, self._clock.monotonic() - begin))
            self._calls.end(key)  # after the result is handed over

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
